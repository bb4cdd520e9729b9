//! One tracked connection and its text form.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The primary key: masqd knows a QP by the session that created it and the
/// handle the kernel gave it in that session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QpKey {
    pub session: u64,
    pub qp_handle: u32,
}

/// The secondary key: how the wire (and the kernel backstop) names a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LocalKey {
    pub vni: u32,
    pub vip: Ipv4Addr,
    pub qpn: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QpType {
    Rc,
    Uc,
    Ud,
}

impl QpType {
    pub fn as_str(self) -> &'static str {
        match self {
            QpType::Rc => "rc",
            QpType::Uc => "uc",
            QpType::Ud => "ud",
        }
    }

    /// Case-insensitive, as typed on a command line.
    pub fn parse(s: &str) -> Option<QpType> {
        match s.to_ascii_lowercase().as_str() {
            "rc" => Some(QpType::Rc),
            "uc" => Some(QpType::Uc),
            "ud" => Some(QpType::Ud),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    /// Admitted at RTR; the QP is not sending yet.
    Admitted,
    /// The QP reached RTS.
    Established,
    /// Policy no longer allows it; masqd is moving the QP to ERROR.
    ResetByPolicy,
    /// The app is tearing the QP down (ERROR/RESET/destroy in progress).
    Closing,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Admitted => "ADMITTED",
            State::Established => "ESTABLISHED",
            State::ResetByPolicy => "RESET_BY_POLICY",
            State::Closing => "CLOSING",
        }
    }

    /// Case-insensitive; accepts `RESET` for `RESET_BY_POLICY`.
    pub fn parse(s: &str) -> Option<State> {
        match s.to_ascii_uppercase().as_str() {
            "ADMITTED" => Some(State::Admitted),
            "ESTABLISHED" => Some(State::Established),
            "RESET_BY_POLICY" | "RESET" => Some(State::ResetByPolicy),
            "CLOSING" => Some(State::Closing),
            _ => None,
        }
    }
}

/// One tracked QP. Strings are `Arc<str>` so that the table can share one
/// copy of each tenant and rule name among all entries (see `Table`).
///
/// UD: one entry per admitted destination, keyed by the address handle's
/// handle (uverbs handles of all object types share one namespace per
/// context, so they never collide with QP handles).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub session: u64,
    pub qp_handle: u32,
    pub tenant: Arc<str>,
    pub vni: u32,
    pub local_vip: Ipv4Addr,
    pub local_qpn: u32,
    pub remote_vip: Ipv4Addr,
    pub remote_qpn: u32,
    /// Underlay IP of the host the peer endpoint runs on.
    pub peer_host: Ipv4Addr,
    pub qp_type: QpType,
    pub state: State,
    /// The rule that admitted it, e.g. `acme/db/ingress[0]`.
    pub rule: Arc<str>,
    /// Unix time in milliseconds; set by the table.
    pub created_ms: u64,
    pub updated_ms: u64,
    /// Set when the connection was made through the RDMA CM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cm: Option<CmSide>,
    /// The DSCP masqd programmed into the QP's traffic class at RTR (the
    /// policy's `qos`, or the app's own); unknown for resynced QPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp: Option<u8>,
    /// The rail the local QP is on, on a host with several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rail: Option<Arc<str>>,
}

/// Which side of an RDMA CM connection this QP is, and the CM ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmSide {
    /// true: this endpoint connected (rdma_connect); false: it accepted.
    pub active: bool,
    pub local_port: u16,
    pub remote_port: u16,
}

impl Default for Entry {
    fn default() -> Entry {
        Entry {
            session: 0,
            qp_handle: 0,
            tenant: Arc::from(""),
            vni: 0,
            local_vip: Ipv4Addr::UNSPECIFIED,
            local_qpn: 0,
            remote_vip: Ipv4Addr::UNSPECIFIED,
            remote_qpn: 0,
            peer_host: Ipv4Addr::UNSPECIFIED,
            qp_type: QpType::Rc,
            state: State::Admitted,
            rule: Arc::from(""),
            created_ms: 0,
            updated_ms: 0,
            cm: None,
            dscp: None,
            rail: None,
        }
    }
}

impl Entry {
    pub fn key(&self) -> QpKey {
        QpKey {
            session: self.session,
            qp_handle: self.qp_handle,
        }
    }

    pub fn local_key(&self) -> LocalKey {
        LocalKey {
            vni: self.vni,
            vip: self.local_vip,
            qpn: self.local_qpn,
        }
    }

    /// Equal apart from timestamps: an upsert of the same content is a no-op.
    pub fn same_content(&self, other: &Entry) -> bool {
        self.key() == other.key()
            && self.local_key() == other.local_key()
            && self.remote_vip == other.remote_vip
            && self.remote_qpn == other.remote_qpn
            && self.peer_host == other.peer_host
            && self.qp_type == other.qp_type
            && self.state == other.state
            && self.tenant == other.tenant
            && self.rule == other.rule
            && self.cm == other.cm
    }
}

/// `conntrack -L`-like: `rdma rc tenant=acme vni=100 src=10.0.0.1 sqpn=17
/// dst=10.0.0.2 dqpn=18 state=ESTABLISHED rule=... peer=... session=3 qp=1
/// created=... updated=...` (times are Unix seconds with milliseconds).
impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rdma {} tenant={} vni={} src={} sqpn={} dst={} dqpn={} state={} rule={} \
             peer={} session={} {}={} created={}.{:03} updated={}.{:03}",
            self.qp_type.as_str(),
            self.tenant,
            self.vni,
            self.local_vip,
            self.local_qpn,
            self.remote_vip,
            self.remote_qpn,
            self.state.as_str(),
            self.rule,
            self.peer_host,
            self.session,
            // A UD entry is an address handle; its QPNs are chosen per send.
            if self.qp_type == QpType::Ud {
                "ah"
            } else {
                "qp"
            },
            self.qp_handle,
            self.created_ms / 1000,
            self.created_ms % 1000,
            self.updated_ms / 1000,
            self.updated_ms % 1000,
        )?;
        if let Some(d) = self.dscp {
            write!(f, " dscp={d}")?;
        }
        if let Some(r) = &self.rail {
            write!(f, " rail={r}")?;
        }
        if let Some(c) = self.cm {
            write!(
                f,
                " cm={} sport={} dport={}",
                if c.active { "active" } else { "passive" },
                c.local_port,
                c.remote_port
            )?;
        }
        Ok(())
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Entry {
        Entry {
            session: 3,
            qp_handle: 1,
            tenant: "acme".into(),
            vni: 100,
            local_vip: Ipv4Addr::new(10, 0, 0, 1),
            local_qpn: 17,
            remote_vip: Ipv4Addr::new(10, 0, 0, 2),
            remote_qpn: 18,
            peer_host: Ipv4Addr::new(192, 168, 1, 2),
            qp_type: QpType::Rc,
            state: State::Established,
            rule: "acme/db/ingress[0]".into(),
            created_ms: 1_700_000_000_042,
            updated_ms: 1_700_000_001_500,
            cm: None,
            dscp: None,
            rail: None,
        }
    }

    #[test]
    fn the_rail_shows_when_known() {
        let e = Entry {
            rail: Some("rail1".into()),
            ..sample()
        };
        assert!(e.to_string().ends_with(" rail=rail1"), "{e}");
        assert_eq!(serde_json::to_value(&e).unwrap()["rail"], "rail1");
        assert!(!sample().to_string().contains("rail="));
    }

    #[test]
    fn a_ud_entry_names_its_address_handle() {
        let rc = sample().to_string();
        assert!(rc.contains(" qp=1 "), "{rc}");
        let ud = Entry {
            qp_type: QpType::Ud,
            local_qpn: 0,
            remote_qpn: 0,
            ..sample()
        }
        .to_string();
        assert!(ud.starts_with("rdma ud ") && ud.contains(" ah=1 "), "{ud}");
    }

    #[test]
    fn dscp_shows_in_text_and_json_when_known() {
        let e = Entry {
            dscp: Some(46),
            ..sample()
        };
        assert!(e.to_string().contains(" dscp=46"), "{e}");
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["dscp"], 46);
        assert!(!sample().to_string().contains("dscp"));
        assert!(serde_json::to_value(sample())
            .unwrap()
            .get("dscp")
            .is_none());
    }

    #[test]
    fn cm_side_shows_in_text_and_json() {
        let e = Entry {
            cm: Some(CmSide {
                active: false,
                local_port: 7174,
                remote_port: 40001,
            }),
            ..sample()
        };
        assert!(e
            .to_string()
            .ends_with(" cm=passive sport=7174 dport=40001"));
        let back: Entry =
            serde_json::from_str(&serde_json::to_string(&e).expect("json")).expect("parse");
        assert_eq!(back, e);
        assert!(!sample().same_content(&e));
    }

    #[test]
    fn text_format() {
        assert_eq!(
            sample().to_string(),
            "rdma rc tenant=acme vni=100 src=10.0.0.1 sqpn=17 dst=10.0.0.2 dqpn=18 \
             state=ESTABLISHED rule=acme/db/ingress[0] peer=192.168.1.2 session=3 qp=1 \
             created=1700000000.042 updated=1700000001.500"
        );
    }

    #[test]
    fn json_round_trip() {
        let e = sample();
        let v: serde_json::Value = serde_json::to_value(&e).unwrap();
        assert_eq!(v["qp_type"], "rc");
        assert_eq!(v["state"], "ESTABLISHED");
        assert_eq!(v["local_vip"], "10.0.0.1");
        assert_eq!(v["rule"], "acme/db/ingress[0]");
        let back: Entry = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
        let rs: State = serde_json::from_str("\"RESET_BY_POLICY\"").unwrap();
        assert_eq!(rs, State::ResetByPolicy);
    }

    #[test]
    fn enum_parsing() {
        assert_eq!(QpType::parse("RC"), Some(QpType::Rc));
        assert_eq!(QpType::parse("ud"), Some(QpType::Ud));
        assert_eq!(QpType::parse("xrc"), None);
        assert_eq!(State::parse("established"), Some(State::Established));
        assert_eq!(State::parse("reset"), Some(State::ResetByPolicy));
        assert_eq!(State::parse(""), None);
        for s in [
            State::Admitted,
            State::Established,
            State::ResetByPolicy,
            State::Closing,
        ] {
            assert_eq!(State::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn keys_and_content() {
        let a = sample();
        let mut b = a.clone();
        b.updated_ms += 5;
        assert!(a.same_content(&b));
        b.state = State::Closing;
        assert!(!a.same_content(&b));
        assert_eq!(
            a.key(),
            QpKey {
                session: 3,
                qp_handle: 1
            }
        );
        assert_eq!(a.local_key().qpn, 17);
    }
}
