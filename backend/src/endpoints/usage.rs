//! What one endpoint's apps make masqd hold, against its `tenantLimits`
//! (issue 51: one tenant's sessions and channels took every descriptor
//! masqd had, and the other endpoints' accepts, etcd and nftables failed).
//!
//! Sessions, event channels, CM ids and address handles are counted here
//! by `Slot`s: the object masqd keeps holds its slot, and the count drops
//! when it goes, however it goes. RConntrack entries are counted by the
//! table itself (`Conntrack::held`); a refusal there is counted here too.
//! Descriptors are bounded for all endpoints at once by `fd_room`.

use crate::error::{refuse, Error, Result};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// What a tenant makes masqd hold, as the metric's `what` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// App connections (a thread and up to three descriptors each).
    Sessions,
    EventChannels,
    CmIds,
    AddressHandles,
    /// RConntrack entries (counted by the table).
    Connections,
    /// Descriptors past masqd's reserve (see `fd_room`).
    Descriptors,
    /// CM events an app left unread until its channel was full (dropped).
    CmEvents,
}

const KINDS: usize = 7;
const ALL: [What; KINDS] = [
    What::Sessions,
    What::EventChannels,
    What::CmIds,
    What::AddressHandles,
    What::Connections,
    What::Descriptors,
    What::CmEvents,
];

impl What {
    pub fn name(self) -> &'static str {
        match self {
            What::Sessions => "sessions",
            What::EventChannels => "event_channels",
            What::CmIds => "cm_ids",
            What::AddressHandles => "address_handles",
            What::Connections => "connections",
            What::Descriptors => "descriptors",
            What::CmEvents => "cm_events",
        }
    }

    /// The errno a kernel gives when it runs out of the same: a process's
    /// descriptors (EMFILE), room in a table (ENOSPC), a quota (EDQUOT),
    /// a full socket buffer (ENOBUFS).
    pub fn errno(self) -> i32 {
        match self {
            What::Sessions | What::EventChannels | What::Descriptors => libc::EMFILE,
            What::CmIds => libc::ENOSPC,
            What::AddressHandles | What::Connections => libc::EDQUOT,
            What::CmEvents => libc::ENOBUFS,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One endpoint's counts, and its refusals by kind (the metric
/// `masq_tenant_limit_refusals_total`).
pub struct Usage {
    /// The endpoint's name, for the refusals' reasons.
    name: String,
    held: [AtomicUsize; KINDS],
    refused: [AtomicU64; KINDS],
}

impl Usage {
    pub fn new(endpoint: &str) -> Usage {
        Usage {
            name: endpoint.to_string(),
            held: Default::default(),
            refused: Default::default(),
        }
    }

    /// How many of `what` the endpoint holds now (slot-counted kinds).
    pub fn held(&self, what: What) -> usize {
        self.held[what.index()].load(Ordering::Relaxed)
    }

    /// Count a refusal of `what` and make it: the kind's errno, and why.
    pub fn refuse(&self, what: What, why: impl std::fmt::Display) -> Error {
        self.count(what);
        refuse(what.errno(), format!("endpoint {}: {why}", self.name))
    }

    /// Count a refusal of `what` that no request gets (a CM event dropped).
    pub fn count(&self, what: What) {
        self.refused[what.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Refusals so far, by kind, for the metrics.
    pub fn refusals(&self) -> Vec<(&'static str, u64)> {
        ALL.iter()
            .map(|w| (w.name(), self.refused[w.index()].load(Ordering::Relaxed)))
            .collect()
    }
}

/// One of `what` held for an endpoint (its `Usage`): counted until dropped.
pub struct Slot {
    usage: Arc<Usage>,
    what: What,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slot({}, {})", self.usage.name, self.what.name())
    }
}

impl Slot {
    /// One more of `what` for the endpoint whose `usage` it is, if it
    /// holds fewer than `max`; else the refusal (counted).
    pub fn take(usage: &Arc<Usage>, what: What, max: u32) -> Result<Slot> {
        let n = &usage.held[what.index()];
        let max = max as usize;
        let mut cur = n.load(Ordering::Relaxed);
        loop {
            if cur >= max {
                return Err(usage.refuse(
                    what,
                    format_args!("{} limit reached ({cur} of {max})", what.name()),
                ));
            }
            match n.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    return Ok(Slot {
                        usage: usage.clone(),
                        what,
                    })
                }
                Err(now) => cur = now,
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.usage.held[self.what.index()].fetch_sub(1, Ordering::AcqRel);
    }
}

/// masqd's soft `RLIMIT_NOFILE`, read once (after `raise_nofile`).
fn nofile() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
            return 1024;
        }
        usize::try_from(r.rlim_cur).unwrap_or(usize::MAX)
    })
}

/// Raise the soft descriptor limit to the hard one (the unit's
/// `LimitNOFILE`); returns the limit in force.
pub fn raise_nofile() -> usize {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write one rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
    nofile()
}

/// The descriptor numbers a tenant's objects may take: below the limit
/// less the reserve (at most half the limit, so a small limit still
/// serves).
pub fn fd_ceiling(reserve: u32, limit: usize) -> usize {
    limit - (reserve as usize).min(limit / 2)
}

/// Whether masqd may keep descriptor `fd` for a tenant. The kernel hands
/// out the lowest free number, so a new descriptor numbered `n` means
/// `0..n` are all open: refusing every tenant descriptor at or above the
/// ceiling keeps the tenants' together below it, and the reserve above it
/// is masqd's own whatever they do. `extra` more will follow (a session's
/// copy of its connection and its device).
pub fn fd_room(usage: &Usage, fd: RawFd, extra: usize, reserve: u32) -> Result<()> {
    fd_room_within(usage, fd, extra, fd_ceiling(reserve, nofile()))
}

pub(crate) fn fd_room_within(usage: &Usage, fd: RawFd, extra: usize, ceiling: usize) -> Result<()> {
    let n = usize::try_from(fd).unwrap_or(usize::MAX);
    if n.saturating_add(extra) < ceiling {
        return Ok(());
    }
    Err(usage.refuse(
        What::Descriptors,
        format_args!(
            "masqd's descriptors are near its limit (descriptor {fd}, tenants' ceiling \
             {ceiling}); the rest is kept for masqd itself"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(name: &str) -> Arc<Usage> {
        Arc::new(Usage::new(name))
    }

    fn refused(ep: &Usage, what: What) -> u64 {
        ep.refusals()
            .into_iter()
            .find(|(n, _)| *n == what.name())
            .map_or(0, |(_, c)| c)
    }

    #[test]
    fn at_its_limit_the_next_is_refused_counted_and_a_freed_slot_admits_one() {
        let ep = endpoint("acme-a");
        let mut held: Vec<Slot> = (0..3)
            .map(|_| Slot::take(&ep, What::EventChannels, 3).expect("under the limit"))
            .collect();
        let r = Slot::take(&ep, What::EventChannels, 3).expect_err("at the limit");
        assert_eq!(r.errno(), libc::EMFILE);
        assert!(
            r.why().contains("acme-a") && r.why().contains("3 of 3"),
            "{r}"
        );
        assert_eq!(refused(&ep, What::EventChannels), 1);
        held.pop();
        assert_eq!(ep.held(What::EventChannels), 2);
        held.push(Slot::take(&ep, What::EventChannels, 3).expect("a slot was freed"));
        assert_eq!(refused(&ep, What::EventChannels), 1);
    }

    #[test]
    fn each_kind_is_refused_with_the_kernels_errno() {
        let ep = endpoint("acme-a");
        for (what, errno) in [
            (What::Sessions, libc::EMFILE),
            (What::CmIds, libc::ENOSPC),
            (What::AddressHandles, libc::EDQUOT),
        ] {
            let _one = Slot::take(&ep, what, 1).expect("first");
            let r = Slot::take(&ep, what, 1).expect_err("second");
            assert_eq!(r.errno(), errno, "{what:?}");
            assert_eq!(refused(&ep, what), 1);
        }
    }

    #[test]
    fn an_endpoint_at_its_limits_leaves_another_its_own() {
        let (a, b) = (endpoint("acme-a"), endpoint("globex-a"));
        let _full: Vec<Slot> = (0..4)
            .map(|_| Slot::take(&a, What::Sessions, 4).expect("acme-a's"))
            .collect();
        assert!(Slot::take(&a, What::Sessions, 4).is_err());
        let _theirs = Slot::take(&b, What::Sessions, 4).expect("globex-a is served");
        assert_eq!(refused(&b, What::Sessions), 0);
    }

    #[test]
    fn descriptors_past_the_ceiling_are_refused_emfile() {
        let ep = endpoint("acme-a");
        assert!(fd_room_within(&ep, 100, 2, 1000).is_ok());
        let r = fd_room_within(&ep, 998, 2, 1000).expect_err("past the ceiling");
        assert_eq!(r.errno(), libc::EMFILE);
        assert_eq!(refused(&ep, What::Descriptors), 1);
        assert_eq!(fd_ceiling(1024, 65536), 64512);
        assert_eq!(fd_ceiling(1024, 1024), 512, "at most half a small limit");
    }
}
