//! Listing filters, after `conntrack -L -s ADDR -d ADDR -p PROTO ...`.

use crate::entry::{Entry, QpType, State};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 prefix; a bare address means /32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: u32,
    len: u8,
}

impl Cidr {
    /// `None` if `len` > 32. Host bits are cleared.
    pub fn new(addr: Ipv4Addr, len: u8) -> Option<Cidr> {
        (len <= 32).then(|| Cidr {
            addr: u32::from(addr) & Self::mask(len),
            len,
        })
    }

    pub fn host(addr: Ipv4Addr) -> Cidr {
        Cidr {
            addr: addr.into(),
            len: 32,
        }
    }

    fn mask(len: u8) -> u32 {
        // checked_shl: a shift by 32 would overflow for /0.
        u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & Self::mask(self.len) == self.addr
    }

    pub fn addr(&self) -> Ipv4Addr {
        self.addr.into()
    }

    pub fn prefix_len(&self) -> u8 {
        self.len
    }
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Cidr, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("{s:?}: not an IPv4 address"))?;
        let len = match l {
            None => 32,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|n| *n <= 32)
                .ok_or_else(|| format!("{s:?}: prefix length must be 0..=32"))?,
        };
        Cidr::new(addr, len).ok_or_else(|| format!("{s:?}: bad prefix"))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr(), self.len)
    }
}

/// All set fields must match (AND), as with conntrack's options. `src` and
/// `sqpn` are the local side of the QP, `dst` and `dqpn` the remote side;
/// `qpn` matches either side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub tenant: Option<String>,
    pub vni: Option<u32>,
    pub src: Option<Cidr>,
    pub dst: Option<Cidr>,
    pub sqpn: Option<u32>,
    pub dqpn: Option<u32>,
    pub qpn: Option<u32>,
    pub qp_type: Option<QpType>,
    pub state: Option<State>,
    pub session: Option<u64>,
    pub peer_host: Option<Cidr>,
}

impl Filter {
    pub fn new() -> Filter {
        Filter::default()
    }

    pub fn tenant(mut self, t: impl Into<String>) -> Filter {
        self.tenant = Some(t.into());
        self
    }

    pub fn vni(mut self, v: u32) -> Filter {
        self.vni = Some(v);
        self
    }

    pub fn src(mut self, c: Cidr) -> Filter {
        self.src = Some(c);
        self
    }

    pub fn dst(mut self, c: Cidr) -> Filter {
        self.dst = Some(c);
        self
    }

    pub fn sqpn(mut self, q: u32) -> Filter {
        self.sqpn = Some(q);
        self
    }

    pub fn dqpn(mut self, q: u32) -> Filter {
        self.dqpn = Some(q);
        self
    }

    pub fn qpn(mut self, q: u32) -> Filter {
        self.qpn = Some(q);
        self
    }

    pub fn qp_type(mut self, t: QpType) -> Filter {
        self.qp_type = Some(t);
        self
    }

    pub fn state(mut self, s: State) -> Filter {
        self.state = Some(s);
        self
    }

    pub fn session(mut self, s: u64) -> Filter {
        self.session = Some(s);
        self
    }

    pub fn peer_host(mut self, c: Cidr) -> Filter {
        self.peer_host = Some(c);
        self
    }

    pub fn matches(&self, e: &Entry) -> bool {
        fn ok<T>(want: &Option<T>, f: impl FnOnce(&T) -> bool) -> bool {
            want.as_ref().is_none_or(f)
        }
        ok(&self.tenant, |t| *t == *e.tenant)
            && ok(&self.vni, |v| *v == e.vni)
            && ok(&self.src, |c| c.contains(e.local_vip))
            && ok(&self.dst, |c| c.contains(e.remote_vip))
            && ok(&self.sqpn, |q| *q == e.local_qpn)
            && ok(&self.dqpn, |q| *q == e.remote_qpn)
            && ok(&self.qpn, |q| *q == e.local_qpn || *q == e.remote_qpn)
            && ok(&self.qp_type, |t| *t == e.qp_type)
            && ok(&self.state, |s| *s == e.state)
            && ok(&self.session, |s| *s == e.session)
            && ok(&self.peer_host, |c| c.contains(e.peer_host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_parse_and_contains() {
        let c: Cidr = "10.0.0.0/24".parse().unwrap();
        assert!(c.contains(ip("10.0.0.255")));
        assert!(!c.contains(ip("10.0.1.0")));
        let h: Cidr = "10.0.0.7".parse().unwrap();
        assert_eq!(h, Cidr::host(ip("10.0.0.7")));
        assert!(h.contains(ip("10.0.0.7")) && !h.contains(ip("10.0.0.8")));
        let all: Cidr = "1.2.3.4/0".parse().unwrap();
        assert!(all.contains(ip("255.255.255.255")));
        assert_eq!(all.to_string(), "0.0.0.0/0");
        // Host bits are cleared, as `ip route` does.
        assert_eq!(
            "10.1.2.3/8".parse::<Cidr>().unwrap().to_string(),
            "10.0.0.0/8"
        );
        for bad in [
            "",
            "10.0.0.0/33",
            "10.0.0/8",
            "10.0.0.0/",
            "x/8",
            "10.0.0.0/-1",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        assert!(Cidr::new(ip("1.1.1.1"), 33).is_none());
    }

    #[test]
    fn each_field_filters() {
        let e = Entry {
            session: 9,
            tenant: "acme".into(),
            vni: 100,
            local_vip: ip("10.0.0.1"),
            local_qpn: 17,
            remote_vip: ip("10.0.0.2"),
            remote_qpn: 18,
            peer_host: ip("192.168.1.2"),
            qp_type: QpType::Uc,
            state: State::Established,
            ..Entry::default()
        };
        let net = |s: &str| s.parse::<Cidr>().unwrap();
        let yes = [
            Filter::new(),
            Filter::new().tenant("acme"),
            Filter::new().vni(100),
            Filter::new().src(net("10.0.0.0/30")),
            Filter::new().dst(net("10.0.0.2")),
            Filter::new().sqpn(17),
            Filter::new().dqpn(18),
            Filter::new().qpn(17),
            Filter::new().qpn(18),
            Filter::new().qp_type(QpType::Uc),
            Filter::new().state(State::Established),
            Filter::new().session(9),
            Filter::new().peer_host(net("192.168.0.0/16")),
            Filter::new().tenant("acme").vni(100).sqpn(17),
        ];
        for f in &yes {
            assert!(f.matches(&e), "{f:?}");
        }
        let no = [
            Filter::new().tenant("acm"),
            Filter::new().vni(101),
            Filter::new().src(net("10.0.0.2")),
            Filter::new().dst(net("10.0.0.1")),
            Filter::new().sqpn(18),
            Filter::new().dqpn(17),
            Filter::new().qpn(19),
            Filter::new().qp_type(QpType::Rc),
            Filter::new().state(State::Admitted),
            Filter::new().session(8),
            Filter::new().peer_host(net("192.168.1.3")),
            Filter::new().tenant("acme").vni(101),
        ];
        for f in &no {
            assert!(!f.matches(&e), "{f:?}");
        }
    }
}
