//! The CM's state machine as one table: every move `Phase::after` makes,
//! listed, so that a move added or lost shows here; and `Id::step`, which
//! makes a move or leaves the id as it was.
use super::fakes::*;
use super::phase::{Event, Illegal, Phase};
use super::*;
use crate::config::TenantLimits;

const PHASES: [Phase; 11] = [
    Phase::Idle,
    Phase::AddrResolved,
    Phase::RouteResolved,
    Phase::Listening,
    Phase::Connecting,
    Phase::ReqReceived,
    Phase::RepSent,
    Phase::RepReceived,
    Phase::Established,
    Phase::PeerClosed,
    Phase::Closed,
];

const EVENTS: [Event; 20] = [
    Event::ResolveAddr,
    Event::ResolveRoute,
    Event::Listen,
    Event::Connect,
    Event::Accept,
    Event::Reject,
    Event::Disconnect,
    Event::Establish,
    Event::ReqIn,
    Event::RepIn,
    Event::RejIn,
    Event::RtuIn,
    Event::DreqIn,
    Event::SidrRepIn { ok: true },
    Event::SidrRepIn { ok: false },
    Event::Timeout,
    Event::RestoreBound,
    Event::RestoreListening,
    Event::RestorePending,
    Event::RestoreConnected,
];

/// Every move for one kind of id (`udp`), as (from, event, to).
fn moves(udp: bool) -> Vec<(Phase, Event, Phase)> {
    let mut out = Vec::new();
    for from in PHASES {
        for ev in EVENTS {
            if let Some(to) = from.after(ev, udp) {
                out.push((from, ev, to));
            }
        }
    }
    out
}

/// The moves both kinds of id make.
fn common() -> Vec<(Phase, Event, Phase)> {
    use Event as E;
    use Phase as P;
    vec![
        (P::Idle, E::ResolveAddr, P::AddrResolved),
        (P::Idle, E::Listen, P::Listening),
        (P::Idle, E::ReqIn, P::ReqReceived),
        (P::Idle, E::RestoreBound, P::Idle),
        (P::Idle, E::RestoreListening, P::Listening),
        (P::Idle, E::RestorePending, P::Closed),
        (P::Idle, E::RestoreConnected, P::Established),
        (P::AddrResolved, E::ResolveAddr, P::AddrResolved),
        (P::AddrResolved, E::ResolveRoute, P::RouteResolved),
        (P::RouteResolved, E::ResolveRoute, P::RouteResolved),
        (P::RouteResolved, E::Connect, P::Connecting),
        (P::Listening, E::Listen, P::Listening),
        (P::Connecting, E::RejIn, P::Closed),
        (P::Connecting, E::Timeout, P::Closed),
        (P::ReqReceived, E::Reject, P::Closed),
        (P::ReqReceived, E::RejIn, P::Closed),
        (P::RepSent, E::RejIn, P::Closed),
        (P::RepSent, E::RtuIn, P::Established),
        (P::RepSent, E::Timeout, P::Closed),
        (P::RepReceived, E::Reject, P::Closed),
        (P::RepReceived, E::RejIn, P::Closed),
    ]
}

fn sorted(mut v: Vec<(Phase, Event, Phase)>) -> Vec<String> {
    let mut s: Vec<String> = v.drain(..).map(|m| format!("{m:?}")).collect();
    s.sort();
    s
}

#[test]
fn a_connected_mode_id_makes_exactly_these_moves() {
    use Event as E;
    use Phase as P;
    let mut want = common();
    want.extend([
        (P::Connecting, E::RepIn, P::RepReceived),
        (P::RepSent, E::DreqIn, P::PeerClosed),
        (P::RepReceived, E::DreqIn, P::PeerClosed),
        (P::Established, E::DreqIn, P::PeerClosed),
        (P::ReqReceived, E::Accept, P::RepSent),
        (P::RepSent, E::Disconnect, P::Closed),
        (P::RepReceived, E::Disconnect, P::Closed),
        (P::RepReceived, E::Establish, P::Established),
        (P::Established, E::Disconnect, P::Closed),
        (P::PeerClosed, E::Disconnect, P::Closed),
    ]);
    assert_eq!(sorted(moves(false)), sorted(want));
}

#[test]
fn a_ud_id_makes_exactly_these_moves() {
    use Event as E;
    use Phase as P;
    let mut want = common();
    want.extend([
        (P::ReqReceived, E::Accept, P::Established),
        (P::Connecting, E::SidrRepIn { ok: true }, P::Established),
        (P::Connecting, E::SidrRepIn { ok: false }, P::Closed),
    ]);
    assert_eq!(sorted(moves(true)), sorted(want));
}

#[test]
fn every_phase_is_reached_from_a_new_id() {
    for udp in [false, true] {
        let mut seen = vec![Phase::Idle];
        let mut i = 0;
        while i < seen.len() {
            for (from, _, to) in moves(udp) {
                if from == seen[i] && !seen.contains(&to) {
                    seen.push(to);
                }
            }
            i += 1;
        }
        let missing: Vec<Phase> = PHASES
            .into_iter()
            .filter(|p| !seen.contains(p))
            // A UD id's connection is one SIDR exchange: no REP either way.
            .filter(|p| {
                !(udp && matches!(p, Phase::RepSent | Phase::RepReceived | Phase::PeerClosed))
            })
            .collect();
        assert!(missing.is_empty(), "udp {udp}: {missing:?}");
    }
}

#[test]
fn a_closed_id_is_left_by_nothing() {
    for udp in [false, true] {
        for ev in EVENTS {
            assert_eq!(Phase::Closed.after(ev, udp), None, "{ev:?}");
        }
    }
}

#[test]
fn step_moves_an_id_and_a_refused_move_leaves_it_as_it_was() {
    let h = FakeCmHost::new(TenantLimits::default());
    let (cm, _out) = cm(Duration::from_secs(60));
    let app = App::open(&cm, &h, 1, "acme-a").expect("acme-a");
    let id = app.create_id(&cm, &h, false).expect("id");
    let mut st = cm.lock();
    let i = st.ids.get_mut(&id).expect("the id");
    assert!(i.may(Event::Listen));
    assert_eq!(i.next(Event::Listen), Ok(Phase::Listening));
    assert_eq!(i.phase, Phase::Idle, "next only looks");
    assert_eq!(i.step(Event::Listen), Ok(Phase::Listening));
    assert_eq!(i.phase, Phase::Listening);
    let refused = i.step(Event::Accept);
    assert_eq!(
        refused,
        Err(Illegal {
            from: Phase::Listening,
            ev: Event::Accept
        })
    );
    assert_eq!(i.phase, Phase::Listening);
    assert!(!i.may(Event::Accept));
    let why = refused
        .map(|_| String::new())
        .unwrap_or_else(|e| e.to_string());
    assert_eq!(why, "a CM id Listening does not take Accept");
}
