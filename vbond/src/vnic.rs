//! Reading an endpoint's vNIC over rtnetlink inside its network namespace,
//! and following it as it changes.

use crate::gid::{guid_from_mac, virtual_gid_table, VirtualGid};
use crate::nic::{IfAddr, Vnic};
use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use nix::libc;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sched::CloneFlags;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn invalid(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Run `f` on a short-lived thread that has joined `netns`, so the caller's
/// thread keeps its own namespace. Sockets created by `f` stay bound to
/// `netns` and can be used from any thread afterwards.
fn in_netns<T: Send>(netns: &Path, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    let ns = File::open(netns)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", netns.display())))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(&ns, CloneFlags::CLONE_NEWNET).map_err(|e| {
                io::Error::new(
                    io::Error::from(e).kind(),
                    format!("setns({}): {e}", netns.display()),
                )
            })?;
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("netns thread panicked")))
    })
}

/// A request/response rtnetlink socket.
struct Rtnl {
    sock: Socket,
    seq: u32,
    buf: Vec<u8>,
}

const NLMSG_HDRLEN: usize = 16;

impl Rtnl {
    fn new() -> io::Result<Rtnl> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        Ok(Rtnl {
            sock,
            seq: 0,
            buf: vec![0; 64 * 1024],
        })
    }

    fn dump(&mut self, req: RouteNetlinkMessage) -> io::Result<Vec<RouteNetlinkMessage>> {
        // A dump that raced with a change is flagged NLM_F_DUMP_INTR and
        // may be inconsistent: ask again.
        for _ in 0..8 {
            if let Some(v) = self.dump_once(req.clone())? {
                return Ok(v);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::Interrupted,
            "netlink dump kept being interrupted",
        ))
    }

    fn dump_once(
        &mut self,
        req: RouteNetlinkMessage,
    ) -> io::Result<Option<Vec<RouteNetlinkMessage>>> {
        self.seq = self.seq.wrapping_add(1);
        let mut msg = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(req));
        msg.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        msg.header.sequence_number = self.seq;
        msg.finalize();
        let mut out = vec![0; msg.buffer_len()];
        msg.serialize(&mut out);
        self.sock.send(&out, 0)?;

        let mut got = Vec::new();
        let mut interrupted = false;
        loop {
            let n = self.sock.recv(&mut &mut self.buf[..], libc::MSG_TRUNC)?;
            if n > self.buf.len() {
                return Err(invalid(format!("netlink datagram of {n} bytes truncated")));
            }
            let mut off = 0;
            while off + NLMSG_HDRLEN <= n {
                let len = u32::from_ne_bytes([
                    self.buf[off],
                    self.buf[off + 1],
                    self.buf[off + 2],
                    self.buf[off + 3],
                ]) as usize;
                if len < NLMSG_HDRLEN || off + len > n {
                    return Err(invalid(format!("bad netlink message length {len}")));
                }
                let m =
                    NetlinkMessage::<RouteNetlinkMessage>::deserialize(&self.buf[off..off + len])
                        .map_err(|e| invalid(format!("netlink: {e}")))?;
                off += (len + 3) & !3;
                if m.header.sequence_number != self.seq {
                    continue; // a late answer to an earlier request
                }
                interrupted |= m.header.flags & NLM_F_DUMP_INTR != 0;
                match m.payload {
                    NetlinkPayload::Done(_) => return Ok((!interrupted).then_some(got)),
                    NetlinkPayload::Error(e) => {
                        if let Some(code) = e.code {
                            return Err(io::Error::from_raw_os_error(-code.get()));
                        }
                    }
                    NetlinkPayload::InnerMessage(x) => got.push(x),
                    _ => {}
                }
            }
        }
    }

    fn read(&mut self, ifname: &str) -> io::Result<Vnic> {
        let links = self.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        let mut nic = parse_link(ifname, &links)?;
        let addrs = self.dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()))?;
        nic.addrs = parse_addrs(nic.ifindex, &addrs);
        Ok(nic)
    }
}

/// The link named `ifname` in a GETLINK dump (addresses left empty).
fn parse_link(ifname: &str, msgs: &[RouteNetlinkMessage]) -> io::Result<Vnic> {
    for m in msgs {
        let RouteNetlinkMessage::NewLink(l) = m else {
            continue;
        };
        let named = l
            .attributes
            .iter()
            .any(|a| matches!(a, LinkAttribute::IfName(n) if n == ifname));
        if !named {
            continue;
        }
        let mut mac = None;
        let mut mtu = 0;
        for a in &l.attributes {
            match a {
                LinkAttribute::Address(b) => mac = <[u8; 6]>::try_from(b.as_slice()).ok(),
                LinkAttribute::Mtu(m) => mtu = *m,
                _ => {}
            }
        }
        let mac =
            mac.ok_or_else(|| invalid(format!("{ifname} has no Ethernet (6-byte) address")))?;
        let flags = l.header.flags;
        return Ok(Vnic {
            ifname: ifname.to_string(),
            ifindex: l.header.index,
            mac,
            mtu,
            up: flags.contains(LinkFlags::Up) && flags.contains(LinkFlags::Running),
            addrs: Vec::new(),
        });
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no interface {ifname}"),
    ))
}

/// Addresses of interface `ifindex` in a GETADDR dump.
fn parse_addrs(ifindex: u32, msgs: &[RouteNetlinkMessage]) -> Vec<IfAddr> {
    msgs.iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewAddress(a) if a.header.index == ifindex => Some(a),
            _ => None,
        })
        .filter_map(|a| {
            // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the
            // peer's on point-to-point links, and the same value otherwise.
            let mut local = None;
            let mut address = None;
            for attr in &a.attributes {
                match attr {
                    AddressAttribute::Local(ip) => local = Some(*ip),
                    AddressAttribute::Address(ip) => address = Some(*ip),
                    _ => {}
                }
            }
            local.or(address).map(|ip| IfAddr {
                ip,
                prefix_len: a.header.prefix_len,
            })
        })
        .collect()
}

/// Read `ifname` in the network namespace at `netns` (e.g.
/// `/run/netns/NAME` or `/proc/PID/ns/net`).
pub fn read_vnic(netns: impl AsRef<Path>, ifname: &str) -> io::Result<Vnic> {
    let netns = netns.as_ref();
    let mut rtnl = in_netns(netns, Rtnl::new)?;
    rtnl.read(ifname)
        .map_err(|e| io::Error::new(e.kind(), format!("{} in {}: {e}", ifname, netns.display())))
}

/// A socket on the namespace's link and address notifications.
struct Watch {
    sock: Socket,
}

impl Watch {
    fn new() -> io::Result<Watch> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        let groups = libc::RTMGRP_LINK | libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR;
        sock.bind(&SocketAddr::new(0, groups as u32))?;
        sock.set_non_blocking(true)?;
        Ok(Watch { sock })
    }

    /// Wait up to `timeout` (forever if `None`) for notifications; drain
    /// them. True if any arrived (or some were lost to overflow).
    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let t = match timeout {
            None => PollTimeout::NONE,
            Some(d) => PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX),
        };
        let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, t) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => return Ok(false),
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        let mut any = false;
        let mut buf = [0u8; 8192];
        loop {
            match self.sock.recv(&mut &mut buf[..], 0) {
                Ok(_) => any = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(any),
                // Overflow: some notifications were lost; a re-read covers them.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => any = true,
                Err(e) => return Err(e),
            }
        }
    }
}

impl AsFd for Watch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd is owned by `self.sock` and outlives the borrow.
        unsafe { BorrowedFd::borrow_raw(self.sock.as_raw_fd()) }
    }
}

/// A virtual device bound to its vNIC: the current view of the vNIC and
/// the virtual GID table built from it, kept up to date with `refresh` or
/// `wait_change`.
pub struct Binding {
    netns: PathBuf,
    rtnl: Rtnl,
    watch: Watch,
    vnic: Vnic,
    gids: Vec<VirtualGid>,
}

impl Binding {
    pub fn open(netns: impl AsRef<Path>, ifname: &str) -> io::Result<Binding> {
        let netns = netns.as_ref().to_path_buf();
        // Subscribe before the first read so no change falls in between.
        let (mut rtnl, watch) = in_netns(&netns, || Ok((Rtnl::new()?, Watch::new()?)))?;
        let vnic = rtnl.read(ifname).map_err(|e| {
            io::Error::new(e.kind(), format!("{} in {}: {e}", ifname, netns.display()))
        })?;
        let gids = virtual_gid_table(&vnic);
        Ok(Binding {
            netns,
            rtnl,
            watch,
            vnic,
            gids,
        })
    }

    pub fn netns(&self) -> &Path {
        &self.netns
    }

    pub fn vnic(&self) -> &Vnic {
        &self.vnic
    }

    pub fn gids(&self) -> &[VirtualGid] {
        &self.gids
    }

    pub fn node_guid(&self) -> u64 {
        guid_from_mac(self.vnic.mac)
    }

    /// Re-read the vNIC; true if anything changed. On error (e.g. the
    /// interface is gone) the previous view is kept.
    pub fn refresh(&mut self) -> io::Result<bool> {
        let nic = self.rtnl.read(&self.vnic.ifname)?;
        if nic == self.vnic {
            return Ok(false);
        }
        self.gids = virtual_gid_table(&nic);
        self.vnic = nic;
        Ok(true)
    }

    /// Block up to `timeout` (forever if `None`) until the vNIC changes;
    /// true if it did. `Some(Duration::ZERO)` polls, e.g. after the fd
    /// (`as_fd`) became readable in the caller's own event loop.
    pub fn wait_change(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if !self.watch.wait(left)? {
                if left.is_some_and(|l| l.is_zero())
                    || deadline.is_some_and(|d| Instant::now() >= d)
                {
                    return Ok(false);
                }
                continue; // EINTR
            }
            // Notifications also come for other interfaces and for
            // changes we don't track; only a different view counts.
            if self.refresh()? {
                return Ok(true);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }
}

/// The notification socket, for the caller's poll loop.
impl AsFd for Binding {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.watch.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_route::AddressFamily;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    fn link(index: u32, name: &str, mac: Option<Vec<u8>>, flags: LinkFlags) -> RouteNetlinkMessage {
        let mut l = LinkMessage::default();
        l.header.index = index;
        l.header.flags = flags;
        l.attributes.push(LinkAttribute::IfName(name.into()));
        l.attributes.push(LinkAttribute::Mtu(1450));
        if let Some(m) = mac {
            l.attributes.push(LinkAttribute::Address(m));
        }
        RouteNetlinkMessage::NewLink(l)
    }

    fn addr(index: u32, attrs: Vec<AddressAttribute>, prefix_len: u8) -> RouteNetlinkMessage {
        let mut a = AddressMessage::default();
        a.header.index = index;
        a.header.prefix_len = prefix_len;
        a.header.family = AddressFamily::Inet;
        a.attributes = attrs;
        RouteNetlinkMessage::NewAddress(a)
    }

    #[test]
    fn parse_link_picks_the_named_interface() {
        let up = LinkFlags::Up | LinkFlags::Running;
        let msgs = vec![
            link(1, "lo", Some(vec![0; 6]), up),
            link(7, "eth0", Some(vec![0x52, 0x54, 0, 1, 2, 3]), up),
            link(8, "eth1", Some(vec![2, 0, 0, 0, 0, 9]), LinkFlags::Up),
            link(9, "tun0", None, up),
            link(10, "ib0", Some(vec![0; 20]), up),
        ];
        let n = parse_link("eth0", &msgs).unwrap();
        assert_eq!(
            (n.ifindex, n.mac, n.mtu, n.up),
            (7, [0x52, 0x54, 0, 1, 2, 3], 1450, true)
        );
        assert!(!parse_link("eth1", &msgs).unwrap().up);
        assert_eq!(
            parse_link("eth9", &msgs).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            parse_link("tun0", &msgs).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        assert_eq!(
            parse_link("ib0", &msgs).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        // A prefix of a name is not the name.
        assert!(parse_link("eth", &msgs).is_err());
    }

    #[test]
    fn parse_addrs_filters_by_index_and_prefers_local() {
        let v4 = |s: &str| IpAddr::V4(s.parse::<Ipv4Addr>().unwrap());
        let v6 = |s: &str| IpAddr::V6(s.parse::<Ipv6Addr>().unwrap());
        let msgs = vec![
            addr(
                7,
                vec![
                    AddressAttribute::Address(v4("10.0.0.1")),
                    AddressAttribute::Local(v4("10.0.0.1")),
                ],
                24,
            ),
            addr(1, vec![AddressAttribute::Local(v4("127.0.0.1"))], 8),
            // Point-to-point: IFA_ADDRESS is the peer.
            addr(
                7,
                vec![
                    AddressAttribute::Address(v4("10.9.9.9")),
                    AddressAttribute::Local(v4("10.0.0.2")),
                ],
                32,
            ),
            addr(7, vec![AddressAttribute::Address(v6("2001:db8::1"))], 64),
            addr(7, vec![AddressAttribute::Label("eth0".into())], 64),
            link(7, "eth0", None, LinkFlags::Up),
        ];
        let got = parse_addrs(7, &msgs);
        assert_eq!(
            got,
            vec![
                IfAddr {
                    ip: v4("10.0.0.1"),
                    prefix_len: 24
                },
                IfAddr {
                    ip: v4("10.0.0.2"),
                    prefix_len: 32
                },
                IfAddr {
                    ip: v6("2001:db8::1"),
                    prefix_len: 64
                },
            ]
        );
        assert!(parse_addrs(3, &msgs).is_empty());
    }

    #[test]
    fn missing_netns_is_an_error_naming_the_path() {
        let e = read_vnic("/nonexistent/netns", "eth0").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("/nonexistent/netns"));
    }

    #[test]
    fn a_file_that_is_not_a_netns_is_refused() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = read_vnic(f.path(), "eth0").unwrap_err();
        assert!(e.to_string().contains("setns"), "{e}");
    }
}
