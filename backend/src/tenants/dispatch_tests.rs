//! The order of a session's requests: HELLO first and once, the device
//! opened once with its own descriptor, the CM's requests only then.
use super::*;
use crate::cm::fakes;
use crate::endpoints::endpoint::Endpoint;
use crate::endpoints::usage::What;
use crate::tenants::fakes::FakeParts;
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

/// A session of host1's acme-a, as `tenants::fakes` builds it.
fn fake_session(f: &FakeParts, hello: bool) -> Session {
    let mut s = Session::new(1, 1, f.endpoint("acme-a"));
    s.hello = hello;
    s
}

/// The session's answer to `body`: the encoded reply, and whether the
/// session must end.
fn reply(f: &FakeParts, sess: &mut Session, body: R, fds: Vec<OwnedFd>) -> (Vec<u8>, bool) {
    let msg = proto::Request {
        request_id: 7,
        body,
    };
    let mut handler = SessionHandler {
        parts: &f.parts,
        sess,
    };
    let answer = transport::Handler::handle(&mut handler, msg, fds);
    (answer.reply, answer.close)
}

fn dev_null() -> OwnedFd {
    OwnedFd::from(std::fs::File::open("/dev/null").expect("/dev/null"))
}

/// A frontend that skips HELLO, or says it twice, is answered EPROTO, the
/// refusal counted against its endpoint, and the session goes on.
#[test]
fn requests_before_hello_and_a_second_hello_are_refused_eproto() {
    let f = FakeParts::host1();
    let mut sess = fake_session(&f, false);
    let open = R::OpenDevice.opcode();
    assert_eq!(
        reply(&f, &mut sess, R::OpenDevice, vec![dev_null()]),
        (proto::encode_error(open, 7, -libc::EPROTO), false)
    );
    let mut sess = fake_session(&f, true);
    let hello = R::Hello(Default::default());
    let op = hello.opcode();
    assert_eq!(
        reply(&f, &mut sess, hello, vec![]),
        (proto::encode_error(op, 7, -libc::EPROTO), false)
    );
    let ep = f.endpoint("acme-a");
    assert_eq!(ep.refused_requests.load(Ordering::Relaxed), 2);
    assert!(sess.uverbs.is_none());
}

/// HELLO names one of the endpoint's devices; acme-a has one.
#[test]
fn a_hello_for_a_device_the_endpoint_lacks_is_refused_enodev() {
    let f = FakeParts::host1();
    let mut sess = fake_session(&f, false);
    let h = proto::HelloReq {
        vdev: 1,
        ..Default::default()
    };
    let r = hello(&f.parts, &mut sess, &h).expect_err("refused");
    assert_eq!(r.errno(), libc::ENODEV);
    assert_eq!(r.why(), "no virtual device 1 (it has 1)");
    assert!(!sess.hello);
}

/// OPEN_DEVICE takes exactly one descriptor, the device's uverbs node,
/// once per session.
#[test]
fn open_device_takes_one_descriptor_of_the_device_once() {
    let f = FakeParts::host1();
    let mut sess = fake_session(&f, true);
    let r = open_device(&f.parts, &mut sess, None, 0).expect_err("no descriptor");
    assert_eq!(
        (r.errno(), r.why()),
        (libc::EBADF, "OPEN_DEVICE without a descriptor")
    );
    let r = open_device(&f.parts, &mut sess, Some(dev_null()), 1).expect_err("two");
    assert_eq!(
        (r.errno(), r.why()),
        (libc::EINVAL, "more than one descriptor")
    );
    let r = open_device(&f.parts, &mut sess, Some(dev_null()), 0).expect_err("not uverbs");
    assert_eq!(
        (r.errno(), r.why()),
        (libc::ENODEV, "descriptor is not rxe0's uverbs device")
    );
    assert!(sess.uverbs.is_none());
    sess.uverbs = Some(Arc::new(dev_null()));
    let r = open_device(&f.parts, &mut sess, Some(dev_null()), 0).expect_err("again");
    assert_eq!(
        (r.errno(), r.why()),
        (libc::EBUSY, "the session already has a device")
    );
}

#[test]
fn a_gid_table_of_another_port_is_refused_einval() {
    let f = FakeParts::host1();
    let sess = fake_session(&f, true);
    let q = proto::QueryGidTableReq { port: 2 };
    let r = query_gids(&f.parts, &sess, &q).expect_err("refused");
    assert_eq!((r.errno(), r.why()), (libc::EINVAL, "no port 2"));
}

/// Every step that needs the app's uverbs file, asked before OPEN_DEVICE:
/// EPROTO naming the request, and counted.
#[test]
fn kernel_steps_before_open_device_are_refused_eproto() {
    let f = FakeParts::host1();
    let mut sess = fake_session(&f, true);
    let steps = [
        R::ModifyQp(Default::default()),
        R::QpMoved(Default::default()),
        R::ResyncQp(Default::default()),
        R::QueryQp(Default::default()),
        R::CmAcceptQp(Default::default()),
        R::CmEstablishQp(Default::default()),
    ];
    let n = steps.len();
    for body in steps {
        let op = body.opcode();
        assert_eq!(
            reply(&f, &mut sess, body, vec![]),
            (proto::encode_error(op, 7, -libc::EPROTO), false),
            "{}",
            proto::request_name(op)
        );
    }
    let refused = f
        .endpoint("acme-a")
        .refused_requests
        .load(Ordering::Relaxed);
    assert_eq!(refused, n as u64);
}

/// A whole session over a socket pair: a request before HELLO is
/// answered EPROTO and the session goes on; a message whose length is not
/// its header's is answered with its errno and ends the session (the
/// stream cannot be trusted after it); both are counted against the
/// endpoint.
#[test]
fn a_session_answers_malformed_messages_and_ends_on_a_fatal_one() {
    let f = FakeParts::host1();
    let (ours, theirs) = Conn::pair().expect("socketpair");
    let app = Conn::from(theirs);
    let parts = f.parts.clone();
    let mut sess = fake_session(&f, false);
    let server = std::thread::spawn(move || serve(&parts, &mut sess, &ours));
    let gids = R::QueryGidTable(proto::QueryGidTableReq { port: 1 });
    let op = gids.opcode();
    let mut buf = vec![0u8; proto::MAX_MESSAGE];
    let mut answer = |msg: &[u8]| {
        app.send(msg, None).expect("send");
        let d = app.recv(&mut buf).expect("recv").expect("a reply");
        buf[..d.len].to_vec()
    };
    let early = proto::encode_request(5, &gids);
    assert_eq!(answer(&early), proto::encode_error(op, 5, -libc::EPROTO));
    let mut bad = proto::encode_request(6, &gids);
    bad.push(0); // longer than its header says
    let e = proto::decode_request(&bad).expect_err("malformed");
    assert!(e.is_fatal(), "{e}");
    assert_eq!(answer(&bad), proto::encode_error(op, 6, -e.errno()));
    server.join().expect("the session ends");
    let refused = f
        .endpoint("acme-a")
        .refused_requests
        .load(Ordering::Relaxed);
    assert_eq!(refused, 2);
}
