//! The order of a session's requests: the CM's only once the session has
//! opened its device.
use super::*;
use crate::cm::fakes;
use crate::endpoints::endpoint::Endpoint;
use crate::endpoints::usage::What;
use proto::RequestBody as R;

/// Every request the CM serves (`Cm::request`), with a body of zeroes.
fn cm_requests() -> Vec<proto::RequestBody> {
    vec![
        R::CmCreateChannel,
        R::CmDestroyChannel(Default::default()),
        R::CmCreateId(Default::default()),
        R::CmDestroyId(Default::default()),
        R::CmMigrateId(Default::default()),
        R::CmBindAddr(Default::default()),
        R::CmResolveAddr(Default::default()),
        R::CmResolveRoute(Default::default()),
        R::CmListen(Default::default()),
        R::CmConnect(Default::default()),
        R::CmAccept(Default::default()),
        R::CmReject(Default::default()),
        R::CmDisconnect(Default::default()),
        R::CmInitQpAttr(Default::default()),
        R::CmEstablish(Default::default()),
        R::CmRestoreChannel(Default::default()),
        R::CmRestoreId(Default::default()),
    ]
}

/// A session of `ep` past HELLO, its device opened or not.
fn session(ep: &Arc<Endpoint>, opened: bool) -> Session {
    let mut s = Session::new(1, 1, ep.clone());
    s.hello = true;
    if opened {
        // Any descriptor: OPEN_DEVICE checked it was the device's.
        let null = std::fs::File::open("/dev/null").expect("/dev/null");
        s.uverbs = Some(Arc::new(OwnedFd::from(null)));
    }
    s
}

/// Issue 51: CM requests were served on any session past HELLO, so a
/// process that never opened the device made masqd hold channels and ids.
#[test]
fn cm_requests_before_open_device_are_refused_eproto_naming_the_request() {
    let (host, acme, _) = fakes::setup(Default::default());
    let (cm, _out) = fakes::cm(std::time::Duration::from_secs(1));
    let sess = session(&acme, false);
    for body in cm_requests() {
        let r = cm_request(&cm, &host, &sess, &body).expect_err("refused");
        assert_eq!(r.errno(), libc::EPROTO, "{r}");
        let name = proto::request_name(body.opcode());
        assert!(name.starts_with("CM_"), "{name}");
        assert_eq!(r.why(), format!("{name} before OPEN_DEVICE"));
    }
    assert_eq!(acme.usage.held(What::EventChannels), 0);
    assert_eq!(acme.usage.held(What::CmIds), 0);
}

#[test]
fn cm_requests_after_open_device_are_served() {
    let (host, acme, _) = fakes::setup(Default::default());
    let (cm, _out) = fakes::cm(std::time::Duration::from_secs(1));
    let sess = session(&acme, true);
    let channel = match cm_request(&cm, &host, &sess, &R::CmCreateChannel) {
        Ok((proto::ReplyBody::CmCreateChannel(c), Some(_fd))) => c.channel,
        Ok((other, _)) => panic!("not a channel: {other:?}"),
        Err(r) => panic!("refused: {r}"),
    };
    let create = R::CmCreateId(proto::CmCreateIdReq {
        channel,
        port_space: proto::CM_PS_TCP,
    });
    match cm_request(&cm, &host, &sess, &create) {
        Ok((proto::ReplyBody::CmCreateId(_), None)) => {}
        other => panic!("not an id: {:?}", other.map(|r| r.0)),
    }
    assert_eq!(acme.usage.held(What::EventChannels), 1);
    assert_eq!(acme.usage.held(What::CmIds), 1);
}
