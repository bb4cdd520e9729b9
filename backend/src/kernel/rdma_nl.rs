//! The kernel's view of the device's QPs, through rdma netlink
//! (NETLINK_RDMA, the nldev client: what `rdma res show qp` reads).
//!
//! uverbs cannot say which QPN a handle is, nor who owns a QPN; the
//! kernel's resource tracker can: for every QP its number, type, state,
//! the task that created it, its PD and, for RC/UC, the remote QPN; for
//! every PD its creating task and user context; for every context its
//! creating task. masqd uses it to check the QPN an app claims
//! (`kernel::ownership`) and to audit the device (`enforce::audit`, which
//! follows a QP whose creating task has exited to its PD and context).
//! Layouts follow include/uapi/rdma/rdma_netlink.h; messages carry no
//! family header, only attributes after the netlink header.

use crate::error::Result;
use netlink_packet_core::{
    DecodeError, DefaultNla, Emitable, NetlinkDeserializable, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, NetlinkSerializable, NlaBuffer, NlasIterator, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_sys::{protocols::NETLINK_RDMA, Socket, SocketAddr};
use std::io;

const RDMA_NL_NLDEV: u16 = 5;
const CMD_GET: u16 = 1;
const CMD_RES_QP_GET: u16 = 10;
const CMD_RES_PD_GET: u16 = 14;
/// Newer than the QP and PD dumps (`rdma res show ctx`; 6.1 has it).
const CMD_RES_CTX_GET: u16 = 22;

const ATTR_DEV_INDEX: u16 = 1;
const ATTR_DEV_NAME: u16 = 2;
const ATTR_PORT_INDEX: u16 = 3;
const ATTR_RES_QP: u16 = 19;
const ATTR_RES_QP_ENTRY: u16 = 20;
const ATTR_RES_LQPN: u16 = 21;
const ATTR_RES_RQPN: u16 = 22;
const ATTR_RES_TYPE: u16 = 26;
const ATTR_RES_STATE: u16 = 27;
const ATTR_RES_PID: u16 = 28;
const ATTR_RES_KERN_NAME: u16 = 29;
const ATTR_RES_PD: u16 = 46;
const ATTR_RES_PD_ENTRY: u16 = 47;
const ATTR_RES_PDN: u16 = 60;
const ATTR_RES_CTXN: u16 = 64;
const ATTR_RES_CTX: u16 = 86;
const ATTR_RES_CTX_ENTRY: u16 = 87;

/// The kernel's `enum ib_qp_state` (the same numbers as `ibv_qp_state`).
pub const QPS_RTR: u8 = 2;
pub const QPS_SQE: u8 = 5;

/// One QP as the kernel reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QpInfo {
    pub lqpn: u32,
    /// Set once a modify gave the QP a port (not in RESET).
    pub port: Option<u32>,
    /// `enum ib_qp_type`: the same numbers as `ibv_qp_type`.
    pub qp_type: u8,
    pub state: u8,
    /// The creating task, in masqd's pid namespace; a thread id when a
    /// thread other than the main one created it; absent once that task
    /// has exited, and for kernel QPs.
    pub pid: Option<u32>,
    /// Set for QPs the kernel itself created (GSI, IPoIB, ...).
    pub kern_name: Option<String>,
    /// Remote QPN (RC and UC only).
    pub rqpn: Option<u32>,
    /// The QP's protection domain (user QPs only): its creating task is
    /// reported even when the QP's has exited.
    pub pdn: Option<u32>,
}

/// One PD or user context as the kernel reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResInfo {
    /// The PD's or context's number (RES_PDN, RES_CTXN).
    pub id: u32,
    /// The creating task, as for `QpInfo::pid`: absent once it exited.
    pub pid: Option<u32>,
    /// A user PD's context.
    pub ctxn: Option<u32>,
    /// The kernel's own object.
    pub kern: bool,
}

impl QpInfo {
    /// RTR, RTS, SQD or SQE: the QP has a destination and can move data.
    pub fn connected(&self) -> bool {
        (QPS_RTR..=QPS_SQE).contains(&self.state)
    }
}

/// An nldev message: a command and its attributes, as bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NldevMsg {
    pub cmd: u16,
    pub attrs: Vec<u8>,
}

impl NldevMsg {
    fn new(cmd: u16, attrs: &[DefaultNla]) -> NldevMsg {
        let mut b = vec![0; attrs.buffer_len()];
        attrs.emit(&mut b);
        NldevMsg { cmd, attrs: b }
    }
}

impl NetlinkSerializable for NldevMsg {
    fn message_type(&self) -> u16 {
        // RDMA_NL_GET_TYPE(client, op)
        (RDMA_NL_NLDEV << 10) | self.cmd
    }
    fn buffer_len(&self) -> usize {
        self.attrs.len()
    }
    fn serialize(&self, buffer: &mut [u8]) {
        buffer.copy_from_slice(&self.attrs)
    }
}

impl NetlinkDeserializable for NldevMsg {
    type Error = DecodeError;
    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, DecodeError> {
        if header.message_type >> 10 != RDMA_NL_NLDEV {
            return Err(DecodeError::from(format!(
                "not an nldev message (type {:#x})",
                header.message_type
            )));
        }
        // Checked here so that a malformed reply fails as one.
        each_attr(payload, |_, _| Ok(()))?;
        Ok(NldevMsg {
            cmd: header.message_type & 0x3ff,
            attrs: payload.to_vec(),
        })
    }
}

fn u32_attr(kind: u16, v: u32) -> DefaultNla {
    DefaultNla::new(kind, v.to_ne_bytes().to_vec())
}

/// Walks the attributes of `bytes`, calling `f(kind, value)`.
fn each_attr(
    bytes: &[u8],
    mut f: impl FnMut(u16, &[u8]) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    for nla in NlasIterator::new(bytes) {
        let nla: NlaBuffer<&[u8]> = nla?;
        f(nla.kind(), nla.value())?;
    }
    Ok(())
}

fn get_u32(v: &[u8]) -> Result<u32, DecodeError> {
    let b: [u8; 4] = v
        .get(..4)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| DecodeError::from("u32 attribute shorter than 4 bytes"))?;
    Ok(u32::from_ne_bytes(b))
}

fn get_u8(v: &[u8]) -> Result<u8, DecodeError> {
    v.first()
        .copied()
        .ok_or_else(|| DecodeError::from("empty u8 attribute"))
}

fn get_string(v: &[u8]) -> String {
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

/// One QP's attributes (a dump's entry, or a doit reply's top level).
fn parse_qp(bytes: &[u8]) -> Result<Option<QpInfo>, DecodeError> {
    let mut q = QpInfo::default();
    let mut has_lqpn = false;
    each_attr(bytes, |kind, v| {
        match kind {
            ATTR_RES_LQPN => {
                q.lqpn = get_u32(v)?;
                has_lqpn = true;
            }
            ATTR_PORT_INDEX => q.port = Some(get_u32(v)?),
            ATTR_RES_TYPE => q.qp_type = get_u8(v)?,
            ATTR_RES_STATE => q.state = get_u8(v)?,
            ATTR_RES_PID => q.pid = Some(get_u32(v)?),
            ATTR_RES_KERN_NAME => q.kern_name = Some(get_string(v)),
            ATTR_RES_RQPN => q.rqpn = Some(get_u32(v)?),
            ATTR_RES_PDN => q.pdn = Some(get_u32(v)?),
            _ => {}
        }
        Ok(())
    })?;
    Ok(has_lqpn.then_some(q))
}

/// The QPs in one RES_QP_GET reply's attributes: a dump nests them in
/// RES_QP / RES_QP_ENTRY; a single-QP reply has them at the top level.
pub fn parse_qp_reply(attrs: &[u8]) -> Result<Vec<QpInfo>, DecodeError> {
    let mut out = Vec::new();
    each_attr(attrs, |kind, v| {
        if kind == ATTR_RES_QP {
            each_attr(v, |k, e| {
                if k == ATTR_RES_QP_ENTRY {
                    if let Some(q) = parse_qp(e)? {
                        out.push(q);
                    }
                }
                Ok(())
            })?;
        }
        Ok(())
    })?;
    if out.is_empty() {
        if let Some(q) = parse_qp(attrs)? {
            out.push(q);
        }
    }
    Ok(out)
}

/// One PD or context entry: `id_attr` names its number.
fn parse_res(bytes: &[u8], id_attr: u16) -> Result<Option<ResInfo>, DecodeError> {
    let mut r = ResInfo::default();
    let mut has_id = false;
    each_attr(bytes, |kind, v| {
        match kind {
            k if k == id_attr => {
                r.id = get_u32(v)?;
                has_id = true;
            }
            ATTR_RES_CTXN => r.ctxn = Some(get_u32(v)?),
            ATTR_RES_PID => r.pid = Some(get_u32(v)?),
            ATTR_RES_KERN_NAME => r.kern = true,
            _ => {}
        }
        Ok(())
    })?;
    Ok(has_id.then_some(r))
}

/// The PDs (`table` RES_PD) or contexts (RES_CTX) of one dump reply.
fn parse_res_reply(attrs: &[u8], table: u16) -> Result<Vec<ResInfo>, DecodeError> {
    let (entry, id_attr) = if table == ATTR_RES_PD {
        (ATTR_RES_PD_ENTRY, ATTR_RES_PDN)
    } else {
        (ATTR_RES_CTX_ENTRY, ATTR_RES_CTXN)
    };
    let mut out = Vec::new();
    each_attr(attrs, |kind, v| {
        if kind == table {
            each_attr(v, |k, e| {
                if k == entry {
                    out.extend(parse_res(e, id_attr)?);
                }
                Ok(())
            })?;
        }
        Ok(())
    })?;
    Ok(out)
}

/// A netlink socket on the nldev interface, bound to one device and port.
pub struct RdmaNl {
    device: String,
    sock: Socket,
    seq: u32,
    dev_index: u32,
    port: u32,
    buf: Vec<u8>,
}

/// What the kernel says of one QPN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Found(QpInfo),
    /// No QP of that number on the device.
    Missing,
    /// The QP exists but has no port yet (RESET: the kernel answers a
    /// port-scoped query for it with EAGAIN).
    NoPort,
}

impl RdmaNl {
    /// Opens the socket and finds `device`'s index.
    pub fn open(device: &str, port: u8) -> Result<RdmaNl> {
        let mut sock = Socket::new(NETLINK_RDMA)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        let mut nl = RdmaNl {
            device: device.to_string(),
            sock,
            seq: 0,
            dev_index: 0,
            port: u32::from(port),
            // Dumps arrive in datagrams of up to 32 KiB.
            buf: vec![0; 64 * 1024],
        };
        let mut found = None;
        nl.request(NldevMsg::new(CMD_GET, &[]), true, |m| {
            let (mut idx, mut name) = (None, None);
            let _ = each_attr(&m.attrs, |kind, v| {
                match kind {
                    ATTR_DEV_INDEX => idx = get_u32(v).ok(),
                    ATTR_DEV_NAME => name = Some(get_string(v)),
                    _ => {}
                }
                Ok(())
            });
            if name.as_deref() == Some(device) {
                found = idx;
            }
        })?;
        nl.dev_index = found.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("rdma netlink does not list device {device}"),
            )
        })?;
        Ok(nl)
    }

    /// One QP by number (a doit: the kernel looks it up, no dump). The
    /// kernel scopes a QP query by port, so a QP still in RESET (no port
    /// yet) answers EAGAIN.
    pub fn qp(&mut self, lqpn: u32) -> Result<Lookup> {
        let attrs = [
            u32_attr(ATTR_DEV_INDEX, self.dev_index),
            u32_attr(ATTR_PORT_INDEX, self.port),
            u32_attr(ATTR_RES_LQPN, lqpn),
        ];
        let mut found = Vec::new();
        let r = self.request(NldevMsg::new(CMD_RES_QP_GET, &attrs), false, |m| {
            found.push(m);
        });
        match r {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Lookup::Missing),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => return Ok(Lookup::NoPort),
            Err(e) => return Err(e.into()),
            Ok(()) => {}
        }
        for m in found {
            let qps = parse_qp_reply(&m.attrs).map_err(invalid)?;
            if let Some(q) = qps.into_iter().find(|q| q.lqpn == lqpn) {
                return Ok(Lookup::Found(q));
            }
        }
        Ok(Lookup::Missing)
    }

    /// The device's name.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Every QP on the device (a dump).
    pub fn qps(&mut self) -> Result<Vec<QpInfo>> {
        self.dump(CMD_RES_QP_GET, parse_qp_reply)
            .map_err(Into::into)
    }

    /// Every PD on the device (a dump).
    pub fn pds(&mut self) -> Result<Vec<ResInfo>> {
        self.dump(CMD_RES_PD_GET, |a| parse_res_reply(a, ATTR_RES_PD))
            .map_err(Into::into)
    }

    /// Every user context on the device (a dump; a kernel without the
    /// command answers an error).
    pub fn ctxs(&mut self) -> Result<Vec<ResInfo>> {
        self.dump(CMD_RES_CTX_GET, |a| parse_res_reply(a, ATTR_RES_CTX))
            .map_err(Into::into)
    }

    /// One dump of the device's objects of command `cmd`, each reply's
    /// attributes read by `parse`.
    fn dump<T>(
        &mut self,
        cmd: u16,
        parse: impl Fn(&[u8]) -> Result<Vec<T>, DecodeError>,
    ) -> io::Result<Vec<T>> {
        let attrs = [u32_attr(ATTR_DEV_INDEX, self.dev_index)];
        let mut out = Vec::new();
        let mut err = None;
        self.request(NldevMsg::new(cmd, &attrs), true, |m| {
            match parse(&m.attrs) {
                Ok(q) => out.extend(q),
                Err(e) => err = Some(e),
            }
        })?;
        match err {
            Some(e) => Err(invalid(e)),
            None => Ok(out),
        }
    }

    /// Sends one request and feeds each reply to `each` until the answer
    /// is complete (the reply of a doit; NLMSG_DONE of a dump).
    fn request(
        &mut self,
        req: NldevMsg,
        dump: bool,
        mut each: impl FnMut(NldevMsg),
    ) -> io::Result<()> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut msg =
            NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::InnerMessage(req));
        msg.header.flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { 0 };
        msg.header.sequence_number = seq;
        msg.finalize();
        let mut out = vec![0; msg.buffer_len()];
        msg.serialize(&mut out);
        self.sock.send(&out, 0)?;
        loop {
            let n = self.sock.recv(&mut &mut self.buf[..], libc::MSG_TRUNC)?;
            if n > self.buf.len() {
                return Err(io::Error::other(format!(
                    "rdma netlink reply of {n} bytes does not fit"
                )));
            }
            let mut off = 0;
            while off < n {
                let bytes = &self.buf[off..n];
                let m = NetlinkMessage::<NldevMsg>::deserialize(bytes).map_err(invalid)?;
                let len = m.header.length as usize;
                if len == 0 {
                    return Err(invalid("zero-length netlink message"));
                }
                off += (len + 3) & !3;
                if m.header.sequence_number != seq {
                    // A late answer to an earlier, abandoned request.
                    continue;
                }
                match m.payload {
                    NetlinkPayload::InnerMessage(inner) => {
                        each(inner);
                        if !dump {
                            return Ok(());
                        }
                    }
                    NetlinkPayload::Done(_) => return Ok(()),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            Some(c) => Err(io::Error::from_raw_os_error(-c.get())),
                            None => Ok(()),
                        };
                    }
                    _ => {}
                }
            }
        }
    }
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("rdma netlink: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured on the testbed (Debian 6.1, rxe0, device index 0) with
    // integration/tools/rdma_nl_capture.py: `rdma res show qp` said
    //   lqpn 18 rqpn 19 type RC state RTS pid 233
    //   lqpn 19 rqpn 18 type RC state RTS pid 232
    //   lqpn 1 type GSI state RTS comm [ib_core]
    const DUMP: &str = "080100000a14020001000000f00000000800010000000000090002007278653000000000e4001300540014000800030001000000080015001200000008003c000200000008001c00e9000000080016001300000008001700010000000800180001000000050019000000000005001a000200000005001b0003000000540014000800030001000000080015001300000008003c000300000008001c00e8000000080016001200000008001700010000000800180001000000050019000000000005001a000200000005001b000300000038001400080003000100000008001500010000000c001d0069625f636f726500080018000000000005001a000100000005001b0003000000";
    const DUMP_DONE: &str = "140000000300020001000000f000000000000000";
    // The single-QP query for lqpn 19, port 1.
    const DOIT: &str = "740000000a14000001000000f100000008000100000000000900020072786530000000000800030001000000080015001300000008003c000300000008001c00e8000000080016001200000008001700010000000800180001000000050019000000000005001a000200000005001b0003000000";
    // The same query for a QP in RESET (no port yet): EAGAIN.
    const DOIT_RESET: &str = "3c0000000200000001000000e1000000f5ffffff280000000a1401000100000000000000080001000000000008000300010000000800150011000000";
    // A dump with one RC QP in RESET (no port attribute).
    const DUMP_RESET: &str = "ac0000000a14020001000000e00000000800010000000000090002007278653000000000880013004c001400080015001100000008003c000100000008001c00dc000000080016000000000008001700000000000800180000000000050019000000000005001a000200000005001b000000000038001400080003000100000008001500010000000c001d0069625f636f726500080018000000000005001a000100000005001b0003000000";

    fn bytes(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    fn decode(hex: &str) -> NetlinkMessage<NldevMsg> {
        NetlinkMessage::<NldevMsg>::deserialize(&bytes(hex)).unwrap()
    }

    fn inner(hex: &str) -> NldevMsg {
        match decode(hex).payload {
            NetlinkPayload::InnerMessage(m) => m,
            other => panic!("not an nldev message: {other:?}"),
        }
    }

    fn rc(lqpn: u32, rqpn: u32, pid: u32, pdn: u32) -> QpInfo {
        QpInfo {
            lqpn,
            port: Some(1),
            qp_type: 2,
            state: 3,
            pid: Some(pid),
            kern_name: None,
            rqpn: Some(rqpn),
            pdn: Some(pdn),
        }
    }

    #[test]
    fn a_captured_dump_parses_into_every_qp() {
        let m = inner(DUMP);
        assert_eq!(m.cmd, CMD_RES_QP_GET);
        let qps = parse_qp_reply(&m.attrs).unwrap();
        let gsi = QpInfo {
            lqpn: 1,
            port: Some(1),
            qp_type: 1,
            state: 3,
            pid: None,
            kern_name: Some("ib_core".into()),
            rqpn: None,
            pdn: None,
        };
        // Each user QP names its PD (RES_PDN); the kernel's GSI QP none.
        assert_eq!(qps, vec![rc(18, 19, 233, 2), rc(19, 18, 232, 3), gsi]);
        assert!(qps.iter().all(|q| q.connected()));
        assert!(matches!(decode(DUMP_DONE).payload, NetlinkPayload::Done(_)));
    }

    #[test]
    fn a_captured_single_qp_reply_has_its_attributes_at_the_top_level() {
        let qps = parse_qp_reply(&inner(DOIT).attrs).unwrap();
        assert_eq!(qps, vec![rc(19, 18, 232, 3)]);
    }

    #[test]
    fn a_qp_in_reset_has_no_port_and_its_query_answers_eagain() {
        let qps = parse_qp_reply(&inner(DUMP_RESET).attrs).unwrap();
        assert_eq!(qps[0].lqpn, 17);
        assert_eq!((qps[0].port, qps[0].state, qps[0].pdn), (None, 0, Some(1)));
        assert!(!qps[0].connected());
        match decode(DOIT_RESET).payload {
            NetlinkPayload::Error(e) => assert_eq!(e.code.map(|c| c.get()), Some(-libc::EAGAIN)),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn a_request_is_laid_out_as_the_kernel_expects() {
        let attrs = [
            u32_attr(ATTR_DEV_INDEX, 0),
            u32_attr(ATTR_PORT_INDEX, 1),
            u32_attr(ATTR_RES_LQPN, 0x11),
        ];
        let mut msg = NetlinkMessage::new(
            NetlinkHeader::default(),
            NetlinkPayload::InnerMessage(NldevMsg::new(CMD_RES_QP_GET, &attrs)),
        );
        msg.header.flags = NLM_F_REQUEST;
        msg.header.sequence_number = 1;
        msg.finalize();
        let mut out = vec![0; msg.buffer_len()];
        msg.serialize(&mut out);
        // What integration/tools/rdma_nl_capture.py sends for "0 0x11 1".
        assert_eq!(
            out,
            bytes(
                "280000000a1401000100000000000000080001000000000008000300010000000800150011000000"
            )
        );
    }

    fn nest(kind: u16, inner: &[DefaultNla]) -> DefaultNla {
        let mut b = vec![0; inner.buffer_len()];
        inner.emit(&mut b);
        DefaultNla::new(kind, b)
    }

    #[test]
    fn pd_and_context_dumps_name_each_creator_and_the_pds_context() {
        // As fill_res_pd_entry lays them out: a user PD whose creator
        // lives, one whose creator has exited (no RES_PID), the kernel's.
        let pd = |pdn, ctxn: Option<u32>, pid: Option<u32>, kern: bool| {
            let mut e = vec![
                DefaultNla::new(ATTR_RES_USECNT_FOR_TEST, 5u64.to_ne_bytes().to_vec()),
                u32_attr(ATTR_RES_PDN, pdn),
            ];
            e.extend(ctxn.map(|c| u32_attr(ATTR_RES_CTXN, c)));
            e.extend(pid.map(|p| u32_attr(ATTR_RES_PID, p)));
            if kern {
                e.push(DefaultNla::new(ATTR_RES_KERN_NAME, b"ib_core\0".to_vec()));
            }
            nest(ATTR_RES_PD_ENTRY, &e)
        };
        let reply = NldevMsg::new(
            CMD_RES_PD_GET,
            &[
                u32_attr(ATTR_DEV_INDEX, 0),
                nest(
                    ATTR_RES_PD,
                    &[
                        pd(2, Some(1), Some(233), false),
                        pd(3, Some(2), None, false),
                        pd(1, None, None, true),
                    ],
                ),
            ],
        );
        let pds = parse_res_reply(&reply.attrs, ATTR_RES_PD).unwrap();
        let res = |id, pid, ctxn, kern| ResInfo {
            id,
            pid,
            ctxn,
            kern,
        };
        assert_eq!(
            pds,
            vec![
                res(2, Some(233), Some(1), false),
                res(3, None, Some(2), false),
                res(1, None, None, true),
            ]
        );
        let ctx = |n, pid: Option<u32>| {
            let mut e = vec![u32_attr(ATTR_RES_CTXN, n)];
            e.extend(pid.map(|p| u32_attr(ATTR_RES_PID, p)));
            nest(ATTR_RES_CTX_ENTRY, &e)
        };
        let reply = NldevMsg::new(
            CMD_RES_CTX_GET,
            &[nest(ATTR_RES_CTX, &[ctx(1, Some(233)), ctx(2, None)])],
        );
        assert_eq!(
            parse_res_reply(&reply.attrs, ATTR_RES_CTX).unwrap(),
            vec![res(1, Some(233), None, false), res(2, None, None, false)]
        );
        // A PD table is not read as contexts, nor an entry without its
        // number as an object.
        assert!(parse_res_reply(&reply.attrs, ATTR_RES_PD)
            .unwrap()
            .is_empty());
        let nameless = NldevMsg::new(
            CMD_RES_CTX_GET,
            &[nest(
                ATTR_RES_CTX,
                &[nest(ATTR_RES_CTX_ENTRY, &[u32_attr(ATTR_RES_PID, 9)])],
            )],
        );
        assert!(parse_res_reply(&nameless.attrs, ATTR_RES_CTX)
            .unwrap()
            .is_empty());
    }

    /// RDMA_NLDEV_ATTR_RES_USECNT (u64), which masqd does not read.
    const ATTR_RES_USECNT_FOR_TEST: u16 = 38;

    #[test]
    fn truncated_or_foreign_messages_are_errors_not_panics() {
        let full = bytes(DUMP);
        for cut in [0, 10, 17, 40, 100, full.len() - 1] {
            let _ = NetlinkMessage::<NldevMsg>::deserialize(&full[..cut]);
        }
        // An attribute whose length runs past the payload.
        assert!(parse_qp_reply(&[0x40, 0, 0x15, 0, 1, 0, 0, 0]).is_err());
        // A u32 attribute of two bytes.
        assert!(parse_qp_reply(&[6, 0, 0x15, 0, 1, 0, 0, 0]).is_err());
        // A routing message is not an nldev one.
        let mut foreign = full.clone();
        foreign[4..6].copy_from_slice(&16u16.to_ne_bytes());
        assert!(NetlinkMessage::<NldevMsg>::deserialize(&foreign).is_err());
    }
}
