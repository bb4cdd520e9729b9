//! The masqd-to-masqd stream as a hostile peer host writes it, into the
//! CM of host1 (`cm::fakes`) with a listener and a connect in flight in
//! each of two tenants.
//!
//! The input is a run of frames, each `[ctl] [len: u16 LE] [len bytes]`:
//! the bytes are one message on the wire (`peer::wire::decode`), sent by
//! host2 or host3 (ctl bit 0); ctl bits 1..=3 pick what the app then does
//! with the id of the last event it got (accept, establish, disconnect,
//! reject, destroy), so that the states past a REQ or a REP are reached.
//!
//! Checked on every input: no panic; the frames that decode are read the
//! same by `peer::wire::read` off a stream; nothing is sent to a host
//! outside the VPC map; an event caused by a peer's message goes to an
//! endpoint of the VNI the message names, for a connection with the
//! sender's host; the ids each endpoint holds stay within its
//! `tenantLimits.cmIds` and match its count; once the CM is gone, every
//! id and channel is given back.

use crate::cm::fakes::{self, App, FakeCmHost, Outbox, HOST2, HOST3, VIP_B, VIP_C};
use crate::cm::Cm;
use crate::config::TenantLimits;
use crate::endpoints::usage::What;
use crate::peer::wire;
use masq_proto::{self as proto, PeerBody};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::Duration;

/// Ids per endpoint: the set-up takes four of acme-a's and two of
/// globex-a's, so a flood meets the limit within a few frames.
pub const CM_IDS: u32 = 8;
/// The port every listener listens on and every connect goes to.
pub const PORT: u16 = 7471;

thread_local! {
    static HOST: FakeCmHost = FakeCmHost::new(TenantLimits {
        cm_ids: CM_IDS,
        ..Default::default()
    });
}

/// What the set-up made: the ids are numbered from 1 in this order.
pub struct Setup {
    pub acme: App,
    pub globex: App,
}

/// acme-a (session 1, channel 1): a listener (id 1) and a UD listener
/// (2), a connect to acme-b on host2 (3) and a UD query to it (4);
/// globex-a (session 2, channel 2): a listener (5) and a connect to
/// globex-c on host3 (6).
pub fn set_up(cm: &Cm, h: &FakeCmHost) -> Setup {
    let acme = App::open(cm, h, 1, "acme-a").unwrap_or_else(|e| panic!("{e}"));
    let globex = App::open(cm, h, 2, "globex-a").unwrap_or_else(|e| panic!("{e}"));
    let steps = [
        acme.listen(cm, h, false, PORT),
        acme.listen(cm, h, true, PORT),
        acme.connect(cm, h, false, 5000, (VIP_B, PORT), 0x31),
        acme.connect(cm, h, true, 5001, (VIP_B, PORT), 0x32),
        globex.listen(cm, h, false, PORT),
        globex.connect(cm, h, false, 5000, (VIP_C, PORT), 0x61),
    ];
    for (n, step) in steps.into_iter().enumerate() {
        assert_eq!(step.unwrap_or_else(|e| panic!("{e}")), n as u32 + 1);
    }
    Setup { acme, globex }
}

/// Split `data` into (ctl, bytes) frames.
pub fn frames(mut data: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    while let [ctl, a, b, rest @ ..] = data {
        let len = usize::from(u16::from_le_bytes([*a, *b])).min(rest.len());
        out.push((*ctl, &rest[..len]));
        data = &rest[len..];
    }
    out
}

/// One frame as the harness takes it (for the seed corpus).
pub fn frame(ctl: u8, msg: &PeerBody) -> Vec<u8> {
    let bytes = wire::encode(msg).unwrap_or_else(|e| panic!("{e}"));
    let mut out = vec![ctl];
    out.extend(u16::try_from(bytes.len()).unwrap_or(0).to_le_bytes());
    out.extend(bytes);
    out
}

/// What the app does after a frame with the id of its last event.
pub const ACCEPT: u8 = 1 << 1;
pub const ESTABLISH: u8 = 2 << 1;
pub const DISCONNECT: u8 = 3 << 1;
pub const REJECT: u8 = 4 << 1;
pub const DESTROY: u8 = 5 << 1;

pub fn peer_stream(data: &[u8]) {
    HOST.with(|h| run(h, data));
}

/// What an input reached: the events the apps got (by kind) and the
/// messages the CM sent (by kind; a REJ by its reason too).
#[derive(Default)]
pub struct Reached {
    pub events: BTreeSet<u32>,
    pub sent: BTreeSet<String>,
}

/// `peer_stream`, saying what it reached.
pub fn reached(data: &[u8]) -> Reached {
    HOST.with(|h| run(h, data))
}

fn run(h: &FakeCmHost, data: &[u8]) -> Reached {
    let mut reached = Reached::default();
    h.reannounced
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
    let (cm, out) = fakes::cm(Duration::from_secs(60));
    let apps = set_up(&cm, h);
    out.take();
    apps.acme.events();
    apps.globex.events();
    let mut decoded: BTreeMap<Ipv4Addr, (Vec<u8>, Vec<PeerBody>)> = BTreeMap::new();
    for (ctl, bytes) in frames(data) {
        let from = if ctl & 1 == 0 { HOST2 } else { HOST3 };
        let Ok(msg) = wire::decode(bytes) else {
            continue;
        };
        let seen = decoded.entry(from).or_default();
        seen.0.extend_from_slice(bytes);
        seen.1.push(msg.clone());
        let named = match &msg {
            PeerBody::Req(proto::PeerReq { vni, .. })
            | PeerBody::SidrReq(proto::PeerSidrReq { vni, .. }) => Some(*vni),
            _ => None,
        };
        cm.on_peer(h, from, msg);
        check_sent(h, &out, &mut reached);
        let mut last = None;
        for app in [&apps.acme, &apps.globex] {
            for ev in app.events() {
                check_event(h, app, &ev, from, named);
                reached.events.insert(ev.event);
                last = Some((app, ev));
            }
        }
        if let Some((app, ev)) = last {
            react(&cm, h, app, &ev, ctl & 0x0e);
            reached.events.extend(app.events().iter().map(|e| e.event));
            check_sent(h, &out, &mut reached);
        }
    }
    check_ids(h, &cm);
    drop(cm);
    for name in ["acme-a", "globex-a"] {
        let ep = h.endpoint(name);
        assert_eq!(ep.usage.held(What::CmIds), 0, "{name}'s ids given back");
        assert_eq!(ep.usage.held(What::EventChannels), 0, "{name}'s channels");
    }
    for (from, (stream, msgs)) in decoded {
        let mut r = std::io::Cursor::new(stream);
        for m in msgs {
            match wire::read(&mut r) {
                Ok(Some(got)) => assert_eq!(got, m, "from {from}"),
                other => panic!("from {from}: {other:?} where decode gave {m:?}"),
            }
        }
        assert!(matches!(wire::read(&mut r), Ok(None)));
    }
    reached
}

/// Nothing goes to a host outside the VPC map.
fn check_sent(h: &FakeCmHost, out: &Outbox, reached: &mut Reached) {
    let hosts = h.registry.hosts();
    for (to, msg) in out.take() {
        assert!(hosts.contains(&to), "{msg:?} sent to {to}, not in the map");
        reached.sent.insert(match msg {
            PeerBody::Rej(proto::PeerRej { reason, .. }) => format!("Rej {reason}"),
            m => m.name().to_string(),
        });
    }
}

/// An event caused by `from`'s message (naming VNI `named`) is for an
/// endpoint of that VNI, about a connection with a vIP on `from`.
fn check_event(h: &FakeCmHost, app: &App, ev: &proto::CmEvent, from: Ipv4Addr, named: Option<u32>) {
    let vni = app.ep.cfg.vni;
    if let Some(n) = named {
        assert_eq!(
            n, vni,
            "{ev:?} on {} for a message naming VNI {n}",
            app.ep.cfg.name
        );
    }
    let peer = Ipv4Addr::from(ev.addrs.dst.addr);
    let host = h.registry.vpc().lookup(vni, peer).map(|p| p.host);
    assert_eq!(
        host,
        Some(from),
        "{ev:?} on {} caused by {from}",
        app.ep.cfg.name
    );
}

fn react(cm: &Cm, h: &FakeCmHost, app: &App, ev: &proto::CmEvent, what: u8) {
    use proto::RequestBody as R;
    let id = ev.id;
    let param = proto::CmConnParam {
        qp_num: 0x77,
        ..Default::default()
    };
    let body = match what {
        ACCEPT => R::CmAccept(proto::CmConnectReq { id, param }),
        ESTABLISH => R::CmEstablish(proto::CmId { id }),
        DISCONNECT => R::CmDisconnect(proto::CmId { id }),
        REJECT => R::CmReject(proto::CmRejectReq {
            id,
            private_data: Vec::new(),
        }),
        DESTROY => R::CmDestroyId(proto::CmId { id }),
        _ => return,
    };
    // Refused or not, as an app's request may be.
    let _ = app.request(cm, h, body);
}

/// Each endpoint holds no more ids than its limit, and its count says
/// how many it holds.
fn check_ids(h: &FakeCmHost, cm: &Cm) {
    let listed = cm.list();
    for name in ["acme-a", "globex-a"] {
        let n = listed.iter().filter(|v| v["endpoint"] == name).count();
        assert!(n <= CM_IDS as usize, "{name} holds {n} ids");
        assert_eq!(h.endpoint(name).usage.held(What::CmIds), n, "{name}");
    }
}
