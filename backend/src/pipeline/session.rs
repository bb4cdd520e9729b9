//! What masqd records of one app context's session: its QPs and its UD
//! address handles. Plain data, shared by the verbs pipelines, the session
//! loop and the control socket's view; it uses none of them.

use crate::cluster::endpoint::Endpoint;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// One app context's session, as masqd records it.
pub struct Session {
    pub id: u64,
    pub pid: i32,
    pub ep: Arc<Endpoint>,
    pub app: String,
    pub requests: u64,
    pub(crate) hello: bool,
    pub(crate) uverbs: Option<Arc<OwnedFd>>,
    pub qps: BTreeMap<u32, QpRecord>,
    /// UD address handles by kernel handle, and admissions not yet bound.
    pub(crate) ahs: BTreeMap<u32, AhRecord>,
    pub(crate) ah_pending: BTreeMap<u32, PendingAh>,
    pub(crate) next_ah_id: u32,
    /// QP handles changed by the request being handled (for `publish`).
    pub(crate) touched: Vec<u32>,
}

impl Session {
    pub fn new(id: u64, pid: i32, ep: Arc<Endpoint>) -> Session {
        Session {
            id,
            pid,
            ep,
            app: String::new(),
            requests: 0,
            hello: false,
            uverbs: None,
            qps: BTreeMap::new(),
            ahs: BTreeMap::new(),
            ah_pending: BTreeMap::new(),
            next_ah_id: 0,
            touched: Vec::new(),
        }
    }

    /// Whether OPEN_DEVICE gave the session its uverbs file.
    pub(crate) fn has_device(&self) -> bool {
        self.uverbs.is_some()
    }
}

/// What masqd knows of one of the session's QPs.
#[derive(Debug, Clone, Serialize)]
pub struct QpRecord {
    pub handle: u32,
    pub qpn: u32,
    pub qp_type: &'static str,
    pub state: &'static str,
    pub remote_vip: Option<Ipv4Addr>,
    pub remote_qpn: Option<u32>,
    pub peer_host: Option<Ipv4Addr>,
    #[serde(skip)]
    pub virt_sgid_index: u8,
    /// The kernel confirmed `qpn` is this app's, of this type
    /// (`ownership.rs`); false only while the QP is in RESET.
    #[serde(skip)]
    pub owner_checked: bool,
    /// The backstop guards its QPN (`Backstop::qp_seen`): from its move
    /// to RTR on, the first state in which it can receive.
    #[serde(skip)]
    pub guarded: bool,
}

impl QpRecord {
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| json!({}))
    }
}

/// A CREATE_AH admission waiting for its BIND_AH.
#[derive(Clone, Debug)]
pub struct PendingAh {
    pub remote_vip: Ipv4Addr,
    pub peer_host: Ipv4Addr,
    pub dscp: u8,
}

/// A bound AH, by kernel handle.
#[derive(Clone, Debug)]
pub struct AhRecord {
    pub remote_vip: Ipv4Addr,
    pub peer_host: Ipv4Addr,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_session_has_no_device_and_holds_nothing() {
        let (_, sess) = crate::pipeline::fakes::setup(None);
        assert!(!sess.has_device());
        assert!(sess.qps.is_empty() && sess.ahs.is_empty() && sess.ah_pending.is_empty());
        assert!(!sess.hello);
    }

    /// What the control socket shows of a QP: its identity and where it
    /// goes, not masqd's own bookkeeping.
    #[test]
    fn a_qp_record_shows_its_connection_but_not_masqds_bookkeeping() {
        let qp = QpRecord {
            handle: 3,
            qpn: 0x11,
            qp_type: "RC",
            state: "RTS",
            remote_vip: Some(Ipv4Addr::new(10, 0, 0, 2)),
            remote_qpn: Some(0x12),
            peer_host: Some(Ipv4Addr::new(198, 18, 0, 2)),
            virt_sgid_index: 1,
            owner_checked: true,
            guarded: true,
        };
        assert_eq!(
            qp.to_json(),
            json!({ "handle": 3, "qpn": 0x11, "qp_type": "RC", "state": "RTS",
                    "remote_vip": "10.0.0.2", "remote_qpn": 0x12, "peer_host": "198.18.0.2" })
        );
    }
}
