//! Traffic control as the kernel reports it over rtnetlink (RTM_GETQDISC,
//! RTM_GETTCLASS): a device's root qdisc and its classes' counters, which
//! `tc -s` would print as text (and iproute2 6.1, Debian 12's, prints
//! classes only as text, even with `-j`).

use crate::error::Result;
use crate::kernel::netlink::Netlink;
use netlink_packet_core::NLM_F_DUMP;
use netlink_packet_route::tc::{TcAttribute, TcHandle, TcMessage, TcStats2};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::protocols::NETLINK_ROUTE;
use std::io;

/// A qdisc or class: its kind (`htb`, ...), handle and parent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub kind: String,
    pub handle: (u16, u16),
    pub parent: (u16, u16),
}

/// A class's counters since it was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassStats {
    pub node: Node,
    pub bytes: u64,
    pub packets: u64,
    /// Times the class held a packet back over its rate.
    pub overlimits: u64,
}

fn ifindex(dev: &str) -> Result<i32> {
    let name = std::ffi::CString::new(dev)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a device name holds a NUL"))?;
    // SAFETY: name is a valid NUL-terminated string for the call's length.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if i == 0 {
        return Err(
            io::Error::new(io::ErrorKind::NotFound, format!("no network device {dev}")).into(),
        );
    }
    Ok(i32::try_from(i)
        .map_err(|_| io::Error::other(format!("{dev}'s ifindex {i} is too large")))?)
}

fn dump(dev: &str, req: fn(TcMessage) -> RouteNetlinkMessage) -> Result<Vec<TcMessage>> {
    let index = ifindex(dev)?;
    let mut nl = Netlink::open(NETLINK_ROUTE, "rtnetlink (tc)")?;
    Ok(nl
        .request(req(TcMessage::with_index(index)), NLM_F_DUMP)?
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewQueueDiscipline(t)
            | RouteNetlinkMessage::NewTrafficClass(t) => Some(t),
            _ => None,
        })
        // A dump may hold other devices' entries on older kernels.
        .filter(|t| t.header.index == index)
        .collect())
}

fn node(t: &TcMessage) -> Node {
    let h = |h: TcHandle| (h.major, h.minor);
    Node {
        kind: t
            .attributes
            .iter()
            .find_map(|a| match a {
                TcAttribute::Kind(k) => Some(k.clone()),
                _ => None,
            })
            .unwrap_or_default(),
        handle: h(t.header.handle),
        parent: h(t.header.parent),
    }
}

/// The device's root qdisc, if it has one of its own (not the default).
pub fn root_qdisc(dev: &str) -> Result<Option<Node>> {
    Ok(dump(dev, RouteNetlinkMessage::GetQueueDiscipline)?
        .iter()
        .map(node)
        .find(|n| n.parent == (TcHandle::ROOT.major, TcHandle::ROOT.minor)))
}

/// The device's classes and their counters.
pub fn class_stats(dev: &str) -> Result<Vec<ClassStats>> {
    Ok(dump(dev, RouteNetlinkMessage::GetTrafficClass)?
        .iter()
        .map(stats)
        .collect())
}

/// TCA_STATS2's basic and queue counters; the older TCA_STATS where a
/// kernel sends only that.
fn stats(t: &TcMessage) -> ClassStats {
    let mut s = ClassStats {
        node: node(t),
        bytes: 0,
        packets: 0,
        overlimits: 0,
    };
    let mut modern = false;
    for a in &t.attributes {
        if let TcAttribute::Stats2(v) = a {
            for x in v {
                match x {
                    TcStats2::Basic(b) => {
                        modern = true;
                        s.bytes = b.bytes;
                        s.packets = u64::from(b.packets);
                    }
                    TcStats2::Queue(q) => s.overlimits = u64::from(q.overlimits),
                    _ => {}
                }
            }
        }
    }
    if !modern {
        if let Some(c) = t.attributes.iter().find_map(|a| match a {
            TcAttribute::Stats(c) => Some(c),
            _ => None,
        }) {
            s.bytes = c.bytes;
            s.packets = u64::from(c.packets);
            s.overlimits = u64::from(c.overlimits);
        }
    }
    s
}
