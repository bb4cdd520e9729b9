//! The control socket's server: what it answers a request that is not
//! one, and the requests it answers without the kernel.
use super::*;
use crate::operator::control::{CtFilter, MAX_REQUEST};
use crate::tenants::fakes::{endpoint, FakeParts};
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;

/// masqd's reply on one control connection to `request`, sent as is.
fn raw(f: &FakeParts, request: Vec<u8>) -> Value {
    let (mut client, server) = UnixStream::pair().expect("socketpair");
    let parts = f.parts.clone();
    let server = thread::spawn(move || control_conn(&parts, server));
    // A reader that stops reading (a request past the limit) closes its
    // end: what it did not read is not sent.
    let _ = client.write_all(&request);
    let _ = client.shutdown(std::net::Shutdown::Write);
    let mut line = String::new();
    BufReader::new(&client)
        .read_line(&mut line)
        .expect("a reply");
    server.join().expect("answered");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

fn ask(f: &FakeParts, req: &Request) -> Value {
    let mut line = serde_json::to_vec(req).expect("json");
    line.push(b'\n');
    raw(f, line)
}

fn error(v: &Value) -> &str {
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {v}"))
}

#[test]
fn a_request_that_is_not_one_is_answered_with_an_error() {
    let f = FakeParts::host1();
    assert_eq!(error(&raw(&f, vec![])), "empty request");
    let e = raw(&f, b"status\n".to_vec());
    assert!(error(&e).starts_with("bad request: "), "{e}");
    let e = raw(&f, b"{\"cmd\": \"reboot\"}\n".to_vec());
    assert!(
        error(&e).starts_with("bad request: unknown variant `reboot`"),
        "{e}"
    );
    let e = raw(&f, b"{\"cmd\": \"endpoint_del\"}\n".to_vec());
    assert!(
        error(&e).starts_with("bad request: missing field `name`"),
        "{e}"
    );
    let e = raw(&f, vec![b' '; MAX_REQUEST + 1]);
    assert_eq!(
        error(&e),
        format!("request longer than {MAX_REQUEST} bytes")
    );
}

/// A conntrack filter that does not parse is an error, for the events
/// stream too (none starts).
#[test]
fn a_bad_conntrack_filter_is_refused_naming_it() {
    let f = FakeParts::host1();
    let bad = CtFilter {
        src: Some("10.0.0.300".into()),
        ..Default::default()
    };
    for req in [
        Request::ConntrackList {
            filter: bad.clone(),
        },
        Request::ConntrackDelete {
            filter: bad.clone(),
        },
        Request::ConntrackEvents {
            filter: bad.clone(),
        },
    ] {
        let e = ask(&f, &req);
        assert!(
            error(&e).starts_with("source \"10.0.0.300\""),
            "{req:?}: {e}"
        );
    }
    let udp = CtFilter {
        proto: Some("udp".into()),
        ..Default::default()
    };
    let e = ask(&f, &Request::ConntrackList { filter: udp });
    assert_eq!(error(&e), "protocol \"udp\": expected rc, uc or ud");
    let e = ask(
        &f,
        &Request::ConntrackList {
            filter: CtFilter::default(),
        },
    );
    assert_eq!(e, json!({ "lines": [], "entries": [] }));
}

#[test]
fn status_and_endpoints_say_what_is_served() {
    let f = FakeParts::host1();
    let v = ask(&f, &Request::Status);
    assert_eq!(v["host"], "198.18.0.1");
    assert_eq!(v["device"], "rxe0");
    assert_eq!(v["endpoints"], 2);
    assert_eq!(v["sessions"], 0);
    assert_eq!(v["backstop"], Value::Null);
    assert_eq!(v["cluster"], Value::Null);
    let v = ask(&f, &Request::Endpoints);
    let names: Vec<_> = v["endpoints"]
        .as_array()
        .expect("endpoints")
        .iter()
        .map(|e| e["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"acme-a".to_string()), "{names:?}");
}

/// The operator's changes through the socket: a refused one says that
/// nothing changed.
#[test]
fn an_endpoint_add_refused_says_nothing_changed() {
    let f = FakeParts::host1();
    let add = Request::EndpointAdd {
        endpoint: endpoint(json!({ "name": "acme-a", "vip": "10.0.0.9" })),
    };
    assert_eq!(
        error(&ask(&f, &add)),
        "endpoint acme-a: an endpoint of that name exists on this host\nnothing changed"
    );
    let del = Request::EndpointDel {
        name: "acme-z".into(),
        owner: None,
    };
    assert_eq!(error(&ask(&f, &del)), "no endpoint \"acme-z\" on this host");
}

#[test]
fn a_policy_past_its_size_or_that_does_not_check_is_refused() {
    let f = FakeParts::host1();
    let big = "#".repeat(crate::operator::control::MAX_POLICY_TEXT + 1);
    for req in [
        Request::PolicyCheck {
            file: "big.yaml".into(),
            text: big.clone(),
        },
        Request::PolicyApply {
            file: "big.yaml".into(),
            text: big.clone(),
        },
    ] {
        let e = ask(&f, &req);
        assert!(error(&e).contains("big.yaml"), "{e}");
    }
    let check = Request::PolicyCheck {
        file: "bad.yaml".into(),
        text: "version: 2\n".into(),
    };
    assert!(error(&ask(&f, &check)).contains("bad.yaml"));
    let show = ask(&f, &Request::PolicyShow);
    assert_eq!(show["version"], Value::Null);
}

fn entry(vni: u32, qpn: u32) -> rconntrack::Entry {
    rconntrack::Entry {
        session: 1,
        qp_handle: qpn,
        tenant: Arc::from(if vni == 100 { "acme" } else { "globex" }),
        vni,
        local_vip: std::net::Ipv4Addr::new(10, 0, 0, 1),
        local_qpn: qpn,
        remote_vip: std::net::Ipv4Addr::new(10, 0, 0, 2),
        remote_qpn: qpn + 1,
        ..Default::default()
    }
}

/// `conntrack -E`: the stream carries the filter's matches only, and ends
/// once masqctl has gone.
#[test]
fn conntrack_events_stream_the_filters_matches_only() {
    let f = FakeParts::host1();
    let (mut client, server) = UnixStream::pair().expect("socketpair");
    let parts = f.parts.clone();
    let streamer = thread::spawn(move || control_conn(&parts, server));
    let acme = CtFilter {
        vni: Some(100),
        ..Default::default()
    };
    let mut line = serde_json::to_vec(&Request::ConntrackEvents { filter: acme }).expect("json");
    line.push(b'\n');
    client.write_all(&line).expect("request");
    let table = || f.parts.admission().table();
    for _ in 0..500 {
        if table().subscriber_count() == 1 {
            break;
        }
        thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(table().subscriber_count(), 1, "the stream subscribed");
    table().upsert(entry(200, 0x20)).expect("room");
    table().upsert(entry(100, 0x10)).expect("room");
    let mut reader = BufReader::new(&client);
    let mut event = String::new();
    reader.read_line(&mut event).expect("an event");
    let v: Value = serde_json::from_str(&event).expect("json");
    assert_eq!(
        (v["data"]["vni"].clone(), v["data"]["local_qpn"].clone()),
        (json!(100), json!(0x10))
    );
    drop(reader);
    drop(client);
    // The next match finds masqctl gone: the stream ends.
    table().upsert(entry(100, 0x11)).expect("room");
    streamer.join().expect("the stream ends");
}
