//! The kernel's conntrack entries of tenant flows, through conntrack-tools.
//!
//! A vNIC's ruleset accepts `ct state established,related` before it looks
//! at any rule, so a tcp/udp flow that a policy change no longer allows
//! would live on through its entry. After such a change masqd deletes the
//! entries of those flows: their next packet is new again and meets the new
//! rules. (RoCE itself is never tracked: the backstop marks UDP/4791
//! `notrack`, so a torn-down RDMA connection leaves no entry behind.)

use crate::config::EndpointConfig;
use masq_policy::{ct_zone, L4Proto, Policy};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::process::Command;
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

/// One line of `conntrack -L`: the first src/dst/sport/dport are the
/// original direction, the second set the reply.
fn parse_line(proto: L4Proto, line: &str) -> Option<Flow> {
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|t| t.strip_prefix(key)?.strip_prefix('='))
    };
    Some(Flow {
        proto,
        src: field("src")?.parse().ok()?,
        dst: field("dst")?.parse().ok()?,
        sport: field("sport")?.parse().ok()?,
        dport: field("dport")?.parse().ok()?,
    })
}

fn conntrack(args: &[String]) -> Result<String, String> {
    let out = Command::new("conntrack")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run conntrack: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // -D exits 1 when nothing matched: the entry expired meanwhile.
    if out.status.success() || stderr.contains("0 flow entries") {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("conntrack {}: {}", args.join(" "), stderr.trim()))
    }
}

/// The IPv4 flows of `proto` in conntrack zone `zone`.
pub fn list(zone: u16, proto: L4Proto) -> Result<Vec<Flow>, String> {
    let args = [
        "-L",
        "-f",
        "ipv4",
        "-w",
        &zone.to_string(),
        "-p",
        proto_name(proto),
    ];
    let out = conntrack(&args.map(String::from))?;
    Ok(out.lines().filter_map(|l| parse_line(proto, l)).collect())
}

/// Delete the entry of `flow` in `zone` (no error if it is already gone).
pub fn delete(zone: u16, flow: &Flow) -> Result<(), String> {
    let args = [
        "-D".into(),
        "-w".into(),
        zone.to_string(),
        "-p".into(),
        proto_name(flow.proto).into(),
        "--orig-src".into(),
        flow.src.to_string(),
        "--orig-dst".into(),
        flow.dst.to_string(),
        "--sport".into(),
        flow.sport.to_string(),
        "--dport".into(),
        flow.dport.to_string(),
    ];
    conntrack(&args).map(|_| ())
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

/// Remove RoCE entries made before the backstop marked UDP/4791 `notrack`.
pub fn forget_roce() {
    let args = ["-D", "-p", "udp", "--dport", "4791"].map(String::from);
    if let Err(e) = conntrack(&args) {
        warn!("cannot delete old RoCE conntrack entries: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_original_direction_is_the_first_tuple() {
        let l = "tcp      6 431999 ESTABLISHED src=10.0.0.1 dst=10.0.0.2 sport=40000 \
                 dport=18515 src=10.0.0.2 dst=10.0.0.1 sport=18515 dport=40000 [ASSURED] \
                 mark=0 zone=101 use=1";
        let f = parse_line(L4Proto::Tcp, l).expect("a flow");
        assert_eq!(f.src, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(f.dst, Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!((f.sport, f.dport), (40000, 18515));
    }

    #[test]
    fn lines_without_a_tuple_are_skipped() {
        assert_eq!(parse_line(L4Proto::Udp, ""), None);
        assert_eq!(
            parse_line(
                L4Proto::Udp,
                "udp 17 29 src=fe80::1 dst=fe80::2 sport=1 dport=2"
            ),
            None
        );
    }
}
