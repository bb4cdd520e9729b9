//! Other hosts' UD QPs as their masqds announced them, bounded per
//! announcing host: what a peer says is a claim (checked against the VPC
//! map when it is read), and a compromised host that announces QPNs in a
//! loop must not grow masqd's memory without end.

use std::collections::HashMap;
use std::net::Ipv4Addr;

/// Announcements one peer host may have in force at once. rxe has at most
/// 65536 QPs per device; a host whose endpoints keep more UD QPs than that
/// announced is far past any workload seen.
pub const MAX_PER_PEER: usize = 65536;

#[derive(Default)]
pub struct UdPeers {
    /// (the address the QP sends from, QPN) -> (VNI, vIP, the host that
    /// announced it).
    by_qp: HashMap<(Ipv4Addr, u32), (u32, Ipv4Addr, Ipv4Addr)>,
    /// Entries of `by_qp` per announcing host.
    per_peer: HashMap<Ipv4Addr, usize>,
    /// Announcements refused per host, for the log (not every one logged).
    refused: HashMap<Ipv4Addr, u64>,
    max_per_peer: usize,
}

/// What an announcement did.
#[derive(Debug, PartialEq, Eq)]
pub enum Announced {
    /// Recorded (or the same one again).
    Kept,
    /// `from` has `MAX_PER_PEER` in force already: dropped; the how
    /// manieth of `from`'s refused.
    OverLimit(u64),
}

impl UdPeers {
    pub fn new() -> UdPeers {
        UdPeers::with_limit(MAX_PER_PEER)
    }

    pub fn with_limit(max_per_peer: usize) -> UdPeers {
        UdPeers {
            max_per_peer,
            ..Default::default()
        }
    }

    /// Host `from` announces QP `qpn`, sending from `sender`, as VNI
    /// `vni`'s `vip`. A QPN announced again replaces what was said before.
    pub fn announce(
        &mut self,
        from: Ipv4Addr,
        sender: Ipv4Addr,
        qpn: u32,
        vni: u32,
        vip: Ipv4Addr,
    ) -> Announced {
        let key = (sender, qpn);
        let replaces_own = self.by_qp.get(&key).is_some_and(|e| e.2 == from);
        if !replaces_own && self.held(from) >= self.max_per_peer {
            let n = self.refused.entry(from).or_default();
            *n += 1;
            return Announced::OverLimit(*n);
        }
        if let Some((_, _, before)) = self.by_qp.insert(key, (vni, vip, from)) {
            self.forget_one(before);
        }
        *self.per_peer.entry(from).or_default() += 1;
        Announced::Kept
    }

    /// The QP is gone: forgotten if it is still the one announced.
    pub fn withdraw(&mut self, sender: Ipv4Addr, qpn: u32, vni: u32, vip: Ipv4Addr) {
        let key = (sender, qpn);
        if let Some(&(v, ip, from)) = self.by_qp.get(&key) {
            if (v, ip) == (vni, vip) {
                self.by_qp.remove(&key);
                self.forget_one(from);
            }
        }
    }

    /// The QP that sends from `sender` as `qpn`: its VNI and vIP.
    pub fn get(&self, sender: Ipv4Addr, qpn: u32) -> Option<(u32, Ipv4Addr)> {
        self.by_qp.get(&(sender, qpn)).map(|&(v, ip, _)| (v, ip))
    }

    /// Announcements of `from` in force.
    pub fn held(&self, from: Ipv4Addr) -> usize {
        self.per_peer.get(&from).copied().unwrap_or(0)
    }

    fn forget_one(&mut self, from: Ipv4Addr) {
        if let Some(n) = self.per_peer.get_mut(&from) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&from);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H2: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
    const H3: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
    const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    /// Issue 51: a compromised host announcing QPNs in a loop grew the
    /// table without end; now it stops at its limit and another host's
    /// announcements are still taken.
    #[test]
    fn a_host_announcing_in_a_loop_stops_at_its_limit_and_another_is_kept() {
        let mut t = UdPeers::with_limit(100);
        for qpn in 0..1000 {
            let r = t.announce(H2, H2, qpn, 100, VIP);
            let want = match qpn {
                0..100 => Announced::Kept,
                n => Announced::OverLimit(n as u64 - 99),
            };
            assert_eq!(r, want, "qpn {qpn}");
        }
        assert_eq!(t.held(H2), 100);
        assert_eq!(t.get(H2, 99), Some((100, VIP)));
        assert_eq!(t.get(H2, 100), None);
        assert_eq!(t.announce(H3, H3, 7, 100, VIP), Announced::Kept);
        // Its own QPN announced again is not a new one.
        assert_eq!(t.announce(H2, H2, 5, 200, VIP), Announced::Kept);
        assert_eq!(t.get(H2, 5), Some((200, VIP)));
        // A QP gone makes room.
        t.withdraw(H2, 5, 200, VIP);
        assert_eq!(t.held(H2), 99);
        assert_eq!(t.announce(H2, H2, 500, 100, VIP), Announced::Kept);
    }

    #[test]
    fn a_withdrawal_that_does_not_match_leaves_the_entry() {
        let mut t = UdPeers::new();
        t.announce(H2, H2, 1, 100, VIP);
        t.withdraw(H2, 1, 200, VIP);
        assert_eq!(t.get(H2, 1), Some((100, VIP)));
        t.withdraw(H2, 1, 100, VIP);
        assert_eq!(t.get(H2, 1), None);
        assert_eq!(t.held(H2), 0);
    }

    /// Another host's announcement of the same sender and QPN counts
    /// against the host that made it, not the one before.
    #[test]
    fn an_entry_taken_over_moves_to_the_new_announcers_count() {
        let mut t = UdPeers::with_limit(1);
        assert_eq!(t.announce(H2, H2, 1, 100, VIP), Announced::Kept);
        assert_eq!(t.announce(H3, H2, 1, 100, VIP), Announced::Kept);
        assert_eq!((t.held(H2), t.held(H3)), (0, 1));
        assert_eq!(t.announce(H3, H3, 2, 100, VIP), Announced::OverLimit(1));
    }
}
