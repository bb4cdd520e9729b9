//! The CM within the endpoints' `tenantLimits` (issue 51: acme-a held 992
//! event channels, masqd ran out of descriptors and globex-a's apps were
//! refused): event channels and ids past an endpoint's limit are refused
//! with the kernel's errno and counted; another endpoint is served; a
//! channel or id given back, or a session gone, makes room again.
use super::fakes::FakeCmHost as Host;
use super::*;
use crate::config::TenantLimits;
use crate::endpoints::usage::What;

/// The host, acme-a and globex-a: three event channels and four CM ids each.
fn setup() -> (Host, Arc<Endpoint>, Arc<Endpoint>) {
    super::fakes::setup(TenantLimits {
        event_channels: 3,
        cm_ids: 4,
        ..Default::default()
    })
}

fn channel(
    cm: &Cm,
    h: &Host,
    session: u64,
    ep: &Arc<Endpoint>,
) -> Result<u32, crate::error::Error> {
    match cm.request(h, session, ep, &proto::RequestBody::CmCreateChannel)? {
        (proto::ReplyBody::CmCreateChannel(c), Some(_fd)) => Ok(c.channel),
        other => panic!("not a channel: {:?}", other.0),
    }
}

fn id(
    cm: &Cm,
    h: &Host,
    session: u64,
    ep: &Arc<Endpoint>,
    channel: u32,
) -> Result<u32, crate::error::Error> {
    let req = proto::RequestBody::CmCreateId(proto::CmCreateIdReq {
        channel,
        port_space: proto::CM_PS_TCP,
    });
    match cm.request(h, session, ep, &req)? {
        (proto::ReplyBody::CmCreateId(i), None) => Ok(i.id),
        other => panic!("not an id: {:?}", other.0),
    }
}

fn refused(ep: &Endpoint, what: What) -> u64 {
    let r = ep.usage.refusals();
    r.iter()
        .find(|(n, _)| *n == what.name())
        .map_or(0, |(_, c)| *c)
}

#[test]
fn event_channels_past_the_endpoints_limit_get_emfile_over_all_its_sessions() {
    let (h, acme, globex) = setup();
    let (cm, _out) = super::fakes::cm(Duration::from_secs(1));
    let first = channel(&cm, &h, 1, &acme).expect("first");
    channel(&cm, &h, 1, &acme).expect("second");
    channel(&cm, &h, 2, &acme).expect("third, another session");
    let r = channel(&cm, &h, 3, &acme).expect_err("a fourth");
    assert_eq!(r.errno(), libc::EMFILE, "{r}");
    assert_eq!(refused(&acme, What::EventChannels), 1);
    // globex-a on the same host is served.
    channel(&cm, &h, 4, &globex).expect("globex-a's");
    assert_eq!(refused(&globex, What::EventChannels), 0);
    // A channel given back makes room; so does a session gone.
    let destroy = proto::RequestBody::CmDestroyChannel(proto::CmChannel { channel: first });
    cm.request(&h, 1, &acme, &destroy).expect("destroyed");
    channel(&cm, &h, 3, &acme).expect("room again");
    assert!(channel(&cm, &h, 3, &acme).is_err());
    cm.session_gone(1);
    assert_eq!(acme.usage.held(What::EventChannels), 2);
    channel(&cm, &h, 3, &acme).expect("the session's channels are free");
}

#[test]
fn cm_ids_past_the_endpoints_limit_get_enospc_and_come_back_when_destroyed() {
    let (h, acme, globex) = setup();
    let (cm, _out) = super::fakes::cm(Duration::from_secs(1));
    let ch = channel(&cm, &h, 1, &acme).expect("channel");
    let ids: Vec<u32> = (0..4)
        .map(|_| id(&cm, &h, 1, &acme, ch).expect("under the limit"))
        .collect();
    let r = id(&cm, &h, 1, &acme, ch).expect_err("a fifth");
    assert_eq!(r.errno(), libc::ENOSPC, "{r}");
    assert_eq!(refused(&acme, What::CmIds), 1);
    let gch = channel(&cm, &h, 2, &globex).expect("globex-a's channel");
    id(&cm, &h, 2, &globex, gch).expect("globex-a's id");
    let destroy = proto::RequestBody::CmDestroyId(proto::CmId { id: ids[0] });
    cm.request(&h, 1, &acme, &destroy).expect("destroyed");
    id(&cm, &h, 1, &acme, ch).expect("room again");
    // Destroying the channel takes its ids with it.
    let destroy = proto::RequestBody::CmDestroyChannel(proto::CmChannel { channel: ch });
    cm.request(&h, 1, &acme, &destroy).expect("destroyed");
    assert_eq!(acme.usage.held(What::CmIds), 0);
    assert_eq!(acme.usage.held(What::EventChannels), 0);
}
