//! What admission is asked and answers, in the words every layer that
//! asks uses (the verbs pipelines, the CM, the cluster's sources): a
//! connection between a local and a remote endpoint (`Ask`, `Conn`), why
//! one is refused (`Denied`), which Kubernetes pod is at a vIP (`Pods`,
//! the registry answers) and what masq-netpol's mirror changed
//! (`Mirrored`). `enforce::admission` decides.

use masq_policy::netpol::{Change, Namespace, NetworkPolicy, Pod, PortSpace};
use rconntrack::Entry;
use std::net::Ipv4Addr;

/// Which Kubernetes pod (namespace, name) is at a vIP of a VNI.
pub trait Pods {
    fn pod_at(&self, vni: u32, vip: Ipv4Addr) -> Option<(String, String)>;
}

/// What is being admitted, seen from the local endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conn {
    /// A verbs RC/UC QP at RTR: no port, either end may have begun.
    Qp,
    /// A UD address handle.
    Ud,
    /// An RDMA CM connection: the local end connects to the remote's
    /// `port` (`outbound`), or the remote end to the local's.
    Cm {
        outbound: bool,
        space: PortSpace,
        port: u16,
    },
}

impl Conn {
    /// A tracked connection's kind: the CM's connection (TCP port space,
    /// as every connected QP the CM makes) to the listener's port, else a
    /// QP or a UD address handle.
    pub fn of(e: &Entry) -> Conn {
        match e.cm {
            Some(cm) => Conn::cm_side(cm),
            None if e.qp_type == rconntrack::QpType::Ud => Conn::Ud,
            None => Conn::Qp,
        }
    }

    /// The CM's side of a connected QP: the listener's port is the
    /// remote's when this side connected.
    pub fn cm_side(cm: rconntrack::CmSide) -> Conn {
        Conn::Cm {
            outbound: cm.active,
            space: PortSpace::Tcp,
            port: if cm.active {
                cm.remote_port
            } else {
                cm.local_port
            },
        }
    }
}

/// What is being admitted: `local` (this host's endpoint) and `remote`
/// in `tenant`'s VNI.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    pub tenant: &'a str,
    pub vni: u32,
    pub local: Ipv4Addr,
    pub remote: Ipv4Addr,
    pub conn: Conn,
}

impl Ask<'_> {
    /// `ep` (this host's endpoint) with `remote` in its VNI.
    pub fn from_endpoint(
        ep: &crate::config::EndpointConfig,
        remote: Ipv4Addr,
        conn: Conn,
    ) -> Ask<'_> {
        Ask {
            tenant: &ep.tenant,
            vni: ep.vni,
            local: ep.vip,
            remote,
            conn,
        }
    }

    /// A tracked connection's question.
    pub fn of(e: &Entry) -> Ask<'_> {
        Ask {
            tenant: &e.tenant,
            vni: e.vni,
            local: e.local_vip,
            remote: e.remote_vip,
            conn: Conn::of(e),
        }
    }
}

/// Why a connection is not admitted: `by` what (`security groups`,
/// `Kubernetes NetworkPolicy`) and the rules consulted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denied {
    pub by: &'static str,
    pub why: String,
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// One mirrored object put or deleted.
#[derive(Clone, Debug)]
pub enum Mirrored {
    Namespace(Namespace),
    NamespaceGone(String),
    Pod(Pod),
    PodGone { namespace: String, name: String },
    Policy(NetworkPolicy),
    PolicyGone { namespace: String, name: String },
}

impl Mirrored {
    /// Which connections' verdicts it may change.
    pub fn change(&self) -> Change<'_> {
        match self {
            Mirrored::Namespace(ns) => Change::Namespace(&ns.name),
            Mirrored::NamespaceGone(ns) => Change::Namespace(ns),
            Mirrored::Pod(p) => Change::Pod {
                namespace: &p.namespace,
                name: &p.name,
            },
            Mirrored::PodGone { namespace, name } => Change::Pod { namespace, name },
            Mirrored::Policy(p) => Change::Namespace(&p.namespace),
            Mirrored::PolicyGone { namespace, .. } => Change::Namespace(namespace),
        }
    }

    /// For logs: `pod team/srv`, `networkpolicy team/allow gone`.
    pub fn describe(&self) -> String {
        match self {
            Mirrored::Namespace(ns) => format!("namespace {}", ns.name),
            Mirrored::NamespaceGone(ns) => format!("namespace {ns} gone"),
            Mirrored::Pod(p) => format!("pod {}/{}", p.namespace, p.name),
            Mirrored::PodGone { namespace, name } => format!("pod {namespace}/{name} gone"),
            Mirrored::Policy(p) => format!("networkpolicy {}/{}", p.namespace, p.name),
            Mirrored::PolicyGone { namespace, name } => {
                format!("networkpolicy {namespace}/{name} gone")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rconntrack::{CmSide, QpType};

    /// A connection the CM made is decided as the CM's connect to the
    /// listener's port, seen from either side; others have no port.
    #[test]
    fn a_tracked_connection_asks_what_made_it() {
        let side = |active| CmSide {
            active,
            local_port: 40001,
            remote_port: 7471,
        };
        let cm = |active| Entry {
            cm: Some(side(active)),
            ..Default::default()
        };
        assert_eq!(
            Conn::of(&cm(true)),
            Conn::Cm {
                outbound: true,
                space: PortSpace::Tcp,
                port: 7471
            }
        );
        // The accepting side listens on its own port.
        assert_eq!(
            Conn::of(&cm(false)),
            Conn::Cm {
                outbound: false,
                space: PortSpace::Tcp,
                port: 40001
            }
        );
        let ud = Entry {
            qp_type: QpType::Ud,
            ..Default::default()
        };
        assert_eq!(Conn::of(&ud), Conn::Ud);
        assert_eq!(Conn::of(&Entry::default()), Conn::Qp);
    }
}
