//! What masqd records of one app context's session: its QPs and its UD
//! address handles. Plain data, shared by the verbs pipelines, the session
//! loop and the control socket's view; it uses none of them.

use crate::endpoints::endpoint::Endpoint;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::ops::Deref;
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
    pub qps: QpRecords,
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
            qps: QpRecords::default(),
            ahs: BTreeMap::new(),
            ah_pending: BTreeMap::new(),
            next_ah_id: 0,
            touched: Vec::new(),
        }
    }

    /// The app's name as HELLO gave it, made printable: it goes to the
    /// log, `masqctl session list`'s table and the JSON beside it.
    pub fn set_app(&mut self, name: &str) {
        self.app = printable(name);
    }

    /// Whether OPEN_DEVICE gave the session its uverbs file.
    pub(crate) fn has_device(&self) -> bool {
        self.uverbs.is_some()
    }
}

/// A session's QP records by handle, and which handle has which QPN: a
/// QPN's first notice asks whether another handle has it, and a scan of
/// every record made that cost grow with the app's QPs (half a
/// millisecond per QP under emulation at a thousand). Read as the map;
/// changed only here, so the index stays right.
#[derive(Default)]
pub struct QpRecords {
    by_handle: BTreeMap<u32, QpRecord>,
    by_qpn: HashMap<u32, u32>,
}

impl Deref for QpRecords {
    type Target = BTreeMap<u32, QpRecord>;
    fn deref(&self) -> &Self::Target {
        &self.by_handle
    }
}

impl QpRecords {
    /// The record of `handle`, `new()` if there is none (the caller
    /// checked that a known handle keeps its QPN).
    pub fn entry(&mut self, handle: u32, new: impl FnOnce() -> QpRecord) -> &mut QpRecord {
        let by_qpn = &mut self.by_qpn;
        self.by_handle.entry(handle).or_insert_with(|| {
            let rec = new();
            by_qpn.insert(rec.qpn, handle);
            rec
        })
    }

    pub fn insert(&mut self, rec: QpRecord) {
        self.by_qpn.insert(rec.qpn, rec.handle);
        if let Some(old) = self.by_handle.insert(rec.handle, rec) {
            self.forget_qpn(&old);
        }
    }

    pub fn remove(&mut self, handle: u32) -> Option<QpRecord> {
        let rec = self.by_handle.remove(&handle)?;
        self.forget_qpn(&rec);
        Some(rec)
    }

    /// A record's fields but its handle and QPN, which key it.
    pub fn get_mut(&mut self, handle: u32) -> Option<&mut QpRecord> {
        self.by_handle.get_mut(&handle)
    }

    /// The handle recorded with QPN `qpn`.
    pub fn handle_of(&self, qpn: u32) -> Option<u32> {
        self.by_qpn.get(&qpn).copied()
    }

    fn forget_qpn(&mut self, old: &QpRecord) {
        if self.by_qpn.get(&old.qpn) == Some(&old.handle) {
            self.by_qpn.remove(&old.qpn);
        }
    }
}

/// A tenant's string as masqd shows it: control characters (C0, DEL, C1)
/// and the Unicode marks that reorder or break a line (bidi overrides and
/// isolates, line and paragraph separators) escaped as `\n`, `\u{1b}`, so
/// that a name cannot forge a log line, move a terminal's cursor or turn
/// the columns of a table. Everything else is kept as it is.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let reorders = matches!(c, '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() {
            out.extend(c.escape_default());
        } else if reorders {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
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
    /// A QP as masqd first hears of it: in RESET, unchecked, unguarded.
    pub fn new(handle: u32, qpn: u32, qp_type: &'static str) -> QpRecord {
        QpRecord {
            handle,
            qpn,
            qp_type,
            state: "RESET",
            remote_vip: None,
            remote_qpn: None,
            peer_host: None,
            virt_sgid_index: 0,
            owner_checked: false,
            guarded: false,
        }
    }

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
#[derive(Debug)]
pub struct AhRecord {
    pub remote_vip: Ipv4Addr,
    pub peer_host: Ipv4Addr,
    /// Its place in its endpoint's `tenantLimits.addressHandles`.
    pub(crate) _slot: crate::endpoints::usage::Slot,
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

    #[test]
    fn the_qpn_index_follows_every_change_of_the_records() {
        let rec = |handle, qpn| QpRecord::new(handle, qpn, "RC");
        let mut qps = QpRecords::default();
        qps.entry(1, || rec(1, 0x11)).state = "INIT";
        qps.entry(1, || rec(1, 0x99)).state = "RTR";
        assert_eq!(qps[&1].qpn, 0x11, "a known handle keeps its record");
        assert_eq!((qps.handle_of(0x11), qps.handle_of(0x99)), (Some(1), None));
        // A record replaced under its handle with another QPN.
        qps.insert(rec(1, 0x12));
        assert_eq!((qps.handle_of(0x11), qps.handle_of(0x12)), (None, Some(1)));
        qps.insert(rec(2, 0x13));
        assert_eq!(qps.remove(1).map(|r| r.qpn), Some(0x12));
        assert_eq!(qps.remove(1).map(|r| r.qpn), None);
        assert_eq!((qps.handle_of(0x12), qps.handle_of(0x13)), (None, Some(2)));
        assert_eq!(qps.len(), 1);
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

    /// HELLO's app_name with a forged log line, a terminal escape and a
    /// bidi override: each escaped, so one line in the log and one cell in
    /// the table; an ordinary name (UTF-8 included) is kept.
    #[test]
    fn an_app_name_with_control_characters_is_escaped() {
        let (_, mut sess) = crate::pipeline::fakes::setup(None);
        sess.set_app("x\nINFO session opened app=root\u{1b}[2J\t\u{202e}gpj.exe\u{7f}\u{85}");
        assert_eq!(
            sess.app,
            "x\\nINFO session opened app=root\\u{1b}[2J\\t\\u{202e}gpj.exe\\u{7f}\\u{85}"
        );
        assert!(!sess.app.chars().any(|c| c.is_control()));
        sess.set_app("ib_write_bw-é_1.2");
        assert_eq!(sess.app, "ib_write_bw-é_1.2");
    }
}
