//! An id's phases and the one function that moves an id between them
//! (the kernel's `cma_comp_exch`): every allowed move is a row of
//! `Phase::after`, so each can be listed and tested. Who may send what
//! (the peer an id knows, its owner) is checked where the message or
//! request is handled; this says only which phase follows which.

use super::Id;

/// Where an id is in its life, as the kernel's CM would have it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Idle,
    AddrResolved,
    RouteResolved,
    Listening,
    /// Active: REQ sent (or dropped by policy), waiting for REP.
    Connecting,
    /// Passive: CONNECT_REQUEST delivered, waiting for accept or reject.
    ReqReceived,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Active: REP received, waiting for the app's QP to reach RTS.
    RepReceived,
    Established,
    /// The peer disconnected (DISCONNECTED delivered); the app's own
    /// rdma_disconnect then succeeds, as the kernel's answers a DREQ.
    PeerClosed,
    Closed,
}

/// What moves an id: the app's requests, the peer's messages, a timeout,
/// and the restore of an id after a masqd restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// rdma_resolve_addr, answered (the destination is in the VPC map).
    ResolveAddr,
    ResolveRoute,
    Listen,
    /// rdma_connect: a REQ, or a UD id's SIDR REQ.
    Connect,
    Accept,
    Reject,
    Disconnect,
    /// rdma_establish: the active side's RTU.
    Establish,
    /// A REQ or SIDR REQ made this (new) id.
    ReqIn,
    RepIn,
    RejIn,
    RtuIn,
    DreqIn,
    /// A SIDR REP: `ok` if it gives a usable QP.
    SidrRepIn {
        ok: bool,
    },
    /// `cm.timeoutMs` passed without an answer.
    Timeout,
    /// CM_RESTORE_ID of a new id: bound (or not), listening, with a
    /// handshake that died with masqd, or connected.
    RestoreBound,
    RestoreListening,
    RestorePending,
    RestoreConnected,
}

impl Phase {
    /// The phase `ev` moves an id in this one to (`udp`: a UD id), or
    /// None if the CM does not make that move.
    pub(super) fn after(self, ev: Event, udp: bool) -> Option<Phase> {
        use Event as E;
        use Phase as P;
        Some(match (self, ev) {
            (P::Idle | P::AddrResolved, E::ResolveAddr) => P::AddrResolved,
            (P::AddrResolved | P::RouteResolved, E::ResolveRoute) => P::RouteResolved,
            (P::Idle | P::Listening, E::Listen) => P::Listening,
            (P::RouteResolved, E::Connect) => P::Connecting,
            // A UD id's accept is its SIDR REP: nothing follows it.
            (P::ReqReceived, E::Accept) if udp => P::Established,
            (P::ReqReceived, E::Accept) => P::RepSent,
            (P::ReqReceived | P::RepReceived, E::Reject) => P::Closed,
            (P::PeerClosed | P::Established | P::RepSent | P::RepReceived, E::Disconnect)
                if !udp =>
            {
                P::Closed
            }
            (P::RepReceived, E::Establish) if !udp => P::Established,
            (P::Idle, E::ReqIn) => P::ReqReceived,
            // A UD id waits for a SIDR REP, never a REP.
            (P::Connecting, E::RepIn) if !udp => P::RepReceived,
            (P::Connecting | P::RepSent | P::ReqReceived | P::RepReceived, E::RejIn) => P::Closed,
            (P::RepSent, E::RtuIn) => P::Established,
            // A UD id has no connection for a DREQ to end.
            (P::Established | P::RepSent | P::RepReceived, E::DreqIn) if !udp => P::PeerClosed,
            (P::Connecting, E::SidrRepIn { ok: true }) if udp => P::Established,
            (P::Connecting, E::SidrRepIn { ok: false }) if udp => P::Closed,
            (P::Connecting | P::RepSent, E::Timeout) => P::Closed,
            (P::Idle, E::RestoreBound) => P::Idle,
            (P::Idle, E::RestoreListening) => P::Listening,
            (P::Idle, E::RestorePending) => P::Closed,
            (P::Idle, E::RestoreConnected) => P::Established,
            _ => return None,
        })
    }
}

/// A move `Phase::after` does not make.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Illegal {
    pub from: Phase,
    pub ev: Event,
}

impl std::fmt::Display for Illegal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a CM id {:?} does not take {:?}", self.from, self.ev)
    }
}

impl Id {
    /// The phase `ev` would move this id to; the id stays as it is.
    pub(super) fn next(&self, ev: Event) -> Result<Phase, Illegal> {
        self.phase.after(ev, self.udp).ok_or(Illegal {
            from: self.phase,
            ev,
        })
    }

    /// Whether `ev` moves this id.
    pub(super) fn may(&self, ev: Event) -> bool {
        self.next(ev).is_ok()
    }

    /// Move this id as `ev` says: the only place an id's phase changes.
    pub(super) fn step(&mut self, ev: Event) -> Result<Phase, Illegal> {
        let next = self.next(ev)?;
        self.phase = next;
        Ok(next)
    }

    /// `step` where the caller checked the move or made the id for it: a
    /// refusal is the CM's own error, logged, and the phase stays (the
    /// unit tests stop at it; masqd, debug build or not, goes on).
    pub(super) fn step_checked(&mut self, ev: Event) {
        if let Err(e) = self.step(ev) {
            #[cfg(test)]
            panic!("{e}");
            #[cfg(not(test))]
            tracing::warn!("{e}");
        }
    }
}
