//! The kernel's conntrack entries of tenant flows, over ctnetlink
//! (`kernel::ctnetlink`).
//!
//! A vNIC's ruleset accepts `ct state established,related` before it looks
//! at any rule, so a tcp/udp flow that a policy change no longer allows
//! would live on through its entry. After such a change masqd deletes the
//! entries of those flows: their next packet is new again and meets the new
//! rules. (RoCE itself is never tracked: the backstop marks UDP/4791
//! `notrack`, so a torn-down RDMA connection leaves no entry behind.)

use crate::config::EndpointConfig;
use crate::error::{Error, Result};
use crate::kernel::ctnetlink::{Ctnetlink, Entry};
use masq_policy::{ct_zone, L4Proto, Policy};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use tracing::{info, warn};

/// A flow as its first packet went (the entry's original direction).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    pub proto: L4Proto,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
}

fn proto_name(p: L4Proto) -> &'static str {
    match p {
        L4Proto::Tcp => "tcp",
        L4Proto::Udp => "udp",
    }
}

fn proto_number(p: L4Proto) -> u8 {
    match p {
        L4Proto::Tcp => libc::IPPROTO_TCP as u8,
        L4Proto::Udp => libc::IPPROTO_UDP as u8,
    }
}

fn open() -> Result<Ctnetlink> {
    Ctnetlink::open().map_err(|e| Error::Failed(format!("cannot open ctnetlink: {e}")))
}

/// The IPv4 flows of `proto` in conntrack zone `zone`.
pub fn list(zone: u16, proto: L4Proto) -> Result<Vec<Flow>> {
    let entries = open()?
        .dump_ipv4()
        .map_err(|e| Error::Failed(format!("cannot list conntrack entries: {e}")))?;
    Ok(flows_of(&entries, zone, proto))
}

fn flows_of(entries: &[Entry], zone: u16, proto: L4Proto) -> Vec<Flow> {
    entries
        .iter()
        .filter(|e| e.zone == zone && e.proto == proto_number(proto))
        .map(|e| Flow {
            proto,
            src: e.src,
            dst: e.dst,
            sport: e.sport,
            dport: e.dport,
        })
        .collect()
}

/// Delete the entry of `flow` in `zone` (no error if it is already gone).
pub fn delete(zone: u16, flow: &Flow) -> Result<()> {
    let e = Entry {
        zone,
        proto: proto_number(flow.proto),
        src: flow.src,
        dst: flow.dst,
        sport: flow.sport,
        dport: flow.dport,
    };
    gone_is_fine(open()?.delete(&e)).map_err(|err| {
        Error::Failed(format!(
            "cannot delete the conntrack entry {} {}:{} -> {}:{} in zone {zone}: {err}",
            proto_name(flow.proto),
            flow.src,
            flow.sport,
            flow.dst,
            flow.dport
        ))
    })
}

/// The entry expired meanwhile: what was wanted.
fn gone_is_fine(r: crate::error::Result<()>) -> crate::error::Result<()> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// Delete the entries of every flow to or from a local endpoint that
/// `policy` denies; returns how many. Errors are logged, not fatal: the
/// policy is in force for new flows either way.
pub fn drop_denied(policy: &Policy, endpoints: &[EndpointConfig]) -> usize {
    // Endpoints of one VNI share its zone: list each zone once.
    let mut zones: BTreeMap<u16, Vec<&EndpointConfig>> = BTreeMap::new();
    for ep in endpoints.iter().filter(|e| e.host_if.is_some()) {
        zones.entry(ct_zone(ep.vni)).or_default().push(ep);
    }
    let mut dropped = 0;
    for (zone, eps) in zones {
        for proto in [L4Proto::Tcp, L4Proto::Udp] {
            let flows = match list(zone, proto) {
                Ok(f) => f,
                Err(e) => {
                    warn!(zone, "cannot list kernel conntrack entries: {e}");
                    continue;
                }
            };
            for f in &flows {
                let Some(ep) = eps.iter().find(|e| f.src == e.vip || f.dst == e.vip) else {
                    continue;
                };
                let v = policy.flow_allowed(&ep.tenant, ep.vni, f.src, f.dst, f.proto, f.dport);
                if v.allowed {
                    continue;
                }
                match delete(zone, f) {
                    Ok(()) => {
                        dropped += 1;
                        info!(endpoint = %ep.name, proto = proto_name(f.proto),
                              "kernel conntrack entry deleted: {}:{} -> {}:{} is no longer allowed",
                              f.src, f.sport, f.dst, f.dport);
                    }
                    Err(e) => warn!(endpoint = %ep.name, "{e}"),
                }
            }
        }
    }
    dropped
}

/// Remove RoCE entries made before the backstop marked UDP/4791 `notrack`:
/// IPv4 UDP entries to port 4791, in any zone.
pub fn forget_roce() {
    if let Err(e) = delete_roce() {
        warn!("cannot delete old RoCE conntrack entries: {e}");
    }
}

fn delete_roce() -> Result<usize> {
    let mut ct = open()?;
    let entries = ct.dump_ipv4().map_err(|e| Error::Failed(e.to_string()))?;
    let udp = proto_number(L4Proto::Udp);
    let mut n = 0;
    for e in entries.iter().filter(|e| e.proto == udp && e.dport == 4791) {
        gone_is_fine(ct.delete(e)).map_err(|err| Error::Failed(err.to_string()))?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(zone: u16, proto: u8, sport: u16) -> Entry {
        Entry {
            zone,
            proto,
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            sport,
            dport: 18515,
        }
    }

    #[test]
    fn a_zones_flows_are_its_entries_of_the_protocol_in_their_original_direction() {
        let entries = [
            entry(101, 6, 40000),
            entry(102, 6, 40001),
            entry(101, 17, 40002),
        ];
        let f = flows_of(&entries, 101, L4Proto::Tcp);
        assert_eq!(
            f,
            vec![Flow {
                proto: L4Proto::Tcp,
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                sport: 40000,
                dport: 18515,
            }]
        );
        assert_eq!(flows_of(&entries, 101, L4Proto::Udp)[0].sport, 40002);
        assert!(flows_of(&entries, 7, L4Proto::Tcp).is_empty());
    }

    const CHILD: &str = "MASQ_TEST_KCONNTRACK_CHILD";

    fn conntrack(args: &str) {
        let out = std::process::Command::new("conntrack")
            .args(args.split_whitespace())
            .output()
            .expect("conntrack (conntrack-tools, scripts/install-deps) runs");
        assert!(out.status.success(), "conntrack {args}: {out:?}");
    }

    /// Run by the test below inside a network namespace of its own
    /// (`unshare -rn`), whose conntrack table only this test fills: the
    /// entries conntrack(8) inserts are read, deleted and forgotten over
    /// ctnetlink. Does nothing when run on its own.
    #[test]
    fn kconntrack_child() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        let ip = |s: &str| s.parse::<Ipv4Addr>().expect("address");
        let ins = "-I -s 10.0.0.1 -d 10.0.0.2 -t 100";
        conntrack(&format!(
            "{ins} -p tcp --sport 40000 --dport 18515 --state ESTABLISHED -u ASSURED -w 101"
        ));
        conntrack(&format!(
            "{ins} -p tcp --sport 40001 --dport 22 --state ESTABLISHED -w 102"
        ));
        conntrack(&format!("{ins} -p udp --sport 5001 --dport 53 -w 101"));
        conntrack("-I -s 10.0.0.1 -d 10.0.0.9 -t 100 -p udp --sport 5000 --dport 4791 -w 7");
        conntrack("-I -s 10.0.0.3 -d 10.0.0.9 -t 100 -p udp --sport 5002 --dport 4791");

        let tcp = list(101, L4Proto::Tcp).expect("list");
        let want = Flow {
            proto: L4Proto::Tcp,
            src: ip("10.0.0.1"),
            dst: ip("10.0.0.2"),
            sport: 40000,
            dport: 18515,
        };
        assert_eq!(tcp, vec![want.clone()]);
        let udp = list(101, L4Proto::Udp).expect("list");
        assert_eq!((udp.len(), udp[0].dport), (1, 53));
        assert_eq!(list(102, L4Proto::Tcp).expect("list")[0].dport, 22);

        delete(101, &want).expect("delete");
        assert!(list(101, L4Proto::Tcp).expect("list").is_empty());
        delete(101, &want).expect("an entry already gone is no error");
        assert_eq!(
            list(102, L4Proto::Tcp).expect("list").len(),
            1,
            "another zone's entry stays"
        );

        assert_eq!(delete_roce(), Ok(2));
        assert!(list(7, L4Proto::Udp).expect("list").is_empty());
        assert!(list(0, L4Proto::Udp).expect("list").is_empty());
        assert_eq!(
            list(101, L4Proto::Udp).expect("list").len(),
            1,
            "udp/53 stays"
        );
    }

    #[test]
    fn entries_made_by_conntrack_are_listed_and_deleted_over_ctnetlink() {
        crate::kernel::netlink::run_test_in_own_netns(
            "enforce::kconntrack::tests::kconntrack_child",
            CHILD,
        );
    }
}
