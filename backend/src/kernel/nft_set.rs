//! Set elements added and deleted by nf_tables netlink messages, without
//! libnftables: a text command costs libnftables a parse, an evaluation
//! and a rebuild of its cache of the host's whole ruleset (every commit
//! changes the generation), milliseconds under emulation, where one batch
//! of element messages costs the kernel's work and one system call.
//!
//! libnftnl (through mullvad's `nftnl` binding) writes the messages: the
//! batch's NFNL_MSG_BATCH_BEGIN and BATCH_END and each element's
//! NEWSETELEM or DELSETELEM with its attributes; this module writes only
//! the key's value, in nftables' own encoding, and reads the acks
//! (netlink-sys, netlink-packet-core). The kernel applies a batch whole or
//! not at all, as `nft -f` does.

use crate::error::Result;
use crate::kernel::netlink::{kernel_socket, set_option};
use netlink_packet_core::{
    DecodeError, NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};
use nftnl::nftnl_sys::{self as sys, libc};
use nftnl::{Batch, MsgType, NlMsg};
use std::ffi::{c_void, CString};
use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::os::raw::c_char;
use std::ptr::NonNull;
use std::sync::Mutex;

/// One field of a set's key, as the set's `typeof` declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// `ip saddr`, `ip daddr`, `ipv4_addr`.
    Ipv4(Ipv4Addr),
    /// A raw 24-bit payload field (`@th,104,24`: the BTH's QPN).
    Bits24(u32),
}

impl Field {
    /// The field's value as the kernel compares it: packet bytes, so
    /// network byte order.
    fn bytes(&self) -> Result<Vec<u8>, String> {
        match *self {
            Field::Ipv4(a) => Ok(a.octets().to_vec()),
            Field::Bits24(v) if v <= 0xff_ffff => Ok(v.to_be_bytes()[1..].to_vec()),
            Field::Bits24(v) => Err(format!("{v} does not fit in 24 bits")),
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Ipv4(a) => write!(f, "{a}"),
            Field::Bits24(v) => write!(f, "{v}"),
        }
    }
}

/// One element of a named set of the table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Element {
    pub set: String,
    pub key: Vec<Field>,
}

impl Element {
    pub fn new(set: impl Into<String>, key: &[Field]) -> Element {
        Element {
            set: set.into(),
            key: key.to_vec(),
        }
    }

    /// The key's value: a concatenation's fields each padded to 32 bits
    /// (nftables' registers), a single field as long as it is.
    fn key_bytes(&self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        for f in &self.key {
            let mut b = f.bytes()?;
            if self.key.len() > 1 {
                b.resize(b.len().next_multiple_of(4), 0);
            }
            out.extend(b);
        }
        Ok(out)
    }
}

/// `eg_acme_a { 10.0.0.2 . 17 }`, as nft writes it.
impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {{ ", self.set)?;
        for (i, k) in self.key.iter().enumerate() {
            if i > 0 {
                write!(f, " . ")?;
            }
            write!(f, "{k}")?;
        }
        write!(f, " }}")
    }
}

/// Adding or deleting one element.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Change {
    Add(Element),
    Delete(Element),
}

impl Change {
    pub fn element(&self) -> &Element {
        match self {
            Change::Add(e) | Change::Delete(e) => e,
        }
    }

    /// The same change as an nft command of table `table` (`inet NAME`),
    /// for a transaction that libnftables runs with other commands.
    pub fn nft_command(&self, table: &str) -> String {
        match self {
            Change::Add(e) => format!("add element {table} {e}\n"),
            Change::Delete(e) => format!("delete element {table} {e}\n"),
        }
    }
}

/// A transaction that failed: nothing of it was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetError {
    /// `inet NAME`.
    pub table: String,
    /// The kernel's errno, when it refused.
    pub errno: Option<i32>,
    /// The change it refused, when it named one.
    pub change: Option<Box<Change>>,
    /// How many changes the transaction held.
    pub changes: usize,
    pub reason: String,
}

impl SetError {
    fn whole(table: &str, changes: usize, reason: impl Into<String>) -> SetError {
        SetError {
            table: table.into(),
            errno: None,
            change: None,
            changes,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.table;
        match self.change.as_deref() {
            Some(Change::Add(e)) => write!(f, "{t}: cannot add element {e}: ")?,
            Some(Change::Delete(e)) => write!(f, "{t}: cannot delete element {e}: ")?,
            None => write!(f, "{t}: ")?,
        }
        write!(
            f,
            "{}; none of the transaction's {} change(s) was made",
            self.reason, self.changes
        )
    }
}

impl std::error::Error for SetError {}

/// A netlink socket to nf_tables for one table's set elements.
pub struct NftSets {
    table: CString,
    /// `inet <table>`, for errors.
    name: String,
    sock: Mutex<Conn>,
}

struct Conn {
    sock: Socket,
    /// The receive buffer's size as last set.
    rcvbuf: usize,
    /// Where acks are read: made once, as zeroing 64 KiB per transaction
    /// is not free under emulation.
    buf: Vec<u8>,
}

/// Every ack the kernel queues takes about this much of the socket's
/// receive buffer (an skb's truesize); a batch's acks must all fit, or the
/// kernel drops some and the outcome cannot be read.
const ACK_TRUESIZE: usize = 1024;

impl NftSets {
    /// A socket for the elements of table `inet <table>`.
    pub fn open(table: &str) -> Result<NftSets> {
        let table = CString::new(table)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "table name with NUL"))?;
        let sock = kernel_socket(NETLINK_NETFILTER)?;
        // An error's ack then carries the failed message's header only,
        // which is all that is read of it (its sequence number).
        sock.set_cap_ack(true)?;
        let rcvbuf = 1 << 20;
        set_rcvbuf(&sock, rcvbuf)?;
        Ok(NftSets {
            name: format!("inet {}", table.to_string_lossy()),
            table,
            sock: Mutex::new(Conn {
                sock,
                rcvbuf,
                buf: vec![0u8; 64 * 1024],
            }),
        })
    }

    /// Apply `changes` in one transaction: every one, or none. Adding an
    /// element that is there and deleting one that is not are as `nft add
    /// element` and `nft delete element`: the first changes nothing, the
    /// second fails (ENOENT) and with it the transaction.
    pub fn apply(&self, changes: &[Change]) -> Result<(), SetError> {
        if changes.is_empty() {
            return Ok(());
        }
        let n = changes.len();
        let msgs = self.messages(changes)?;
        let (bytes, first) = batch(&msgs);
        let mut conn = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        let want = (n + 2) * ACK_TRUESIZE;
        if want > conn.rcvbuf {
            set_rcvbuf(&conn.sock, want).map_err(|e| {
                SetError::whole(&self.name, n, format!("a receive buffer for the acks: {e}"))
            })?;
            conn.rcvbuf = want;
        }
        let Conn { sock, buf, .. } = &mut *conn;
        sock.send(&bytes, 0)
            .map_err(|e| SetError::whole(&self.name, n, format!("sending to nf_tables: {e}")))?;
        let acks = self.read_acks(sock, buf, n, first)?;
        drop(conn);
        self.outcome(changes, acks)
    }

    /// A message per change; a change that cannot be one fails them all.
    fn messages(&self, changes: &[Change]) -> Result<Vec<ElemMsg>, SetError> {
        let n = changes.len();
        let mut msgs = Vec::with_capacity(n);
        for c in changes {
            let msg = ElemMsg::new(&self.table, c).map_err(|reason| SetError {
                table: self.name.clone(),
                errno: Some(libc::EINVAL),
                change: Some(Box::new(c.clone())),
                changes: n,
                reason,
            })?;
            msgs.push(msg);
        }
        Ok(msgs)
    }

    /// nf_tables' acks of the `n` changes sent, the first numbered
    /// `first`. nfnetlink runs the batch within the send: every ack is
    /// queued by now, and reading stops when the socket is empty.
    fn read_acks(
        &self,
        sock: &Socket,
        buf: &mut [u8],
        n: usize,
        first: u32,
    ) -> Result<Acks, SetError> {
        let mut got = Acks {
            acked: vec![false; n],
            refused: None,
            other: None,
        };
        loop {
            let len = match sock.recv(&mut &mut *buf, libc::MSG_DONTWAIT) {
                Ok(len) => len,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    return Err(SetError::whole(
                        &self.name,
                        n,
                        format!("reading nf_tables' acks: {e}"),
                    ))
                }
            };
            for (seq, code) in acks(&buf[..len.min(buf.len())])
                .map_err(|e| SetError::whole(&self.name, n, format!("nf_tables' ack: {e}")))?
            {
                match seq.checked_sub(first).map(|i| i as usize) {
                    Some(i) if i < n => {
                        got.acked[i] = true;
                        if code != 0 && got.refused.is_none() {
                            got.refused = Some((i, code));
                        }
                    }
                    _ if code != 0 => got.other = Some(code),
                    _ => {}
                }
            }
        }
        Ok(got)
    }

    /// The transaction's outcome by its acks: the first change refused, an
    /// error that names none, or a change not acked fails it.
    fn outcome(&self, changes: &[Change], acks: Acks) -> Result<(), SetError> {
        let n = changes.len();
        if let Some((i, code)) = acks.refused {
            return Err(SetError {
                table: self.name.clone(),
                errno: Some(code),
                change: Some(Box::new(changes[i].clone())),
                changes: n,
                reason: format!("{}", io::Error::from_raw_os_error(code)),
            });
        }
        if let Some(code) = acks.other {
            return Err(SetError {
                table: self.name.clone(),
                errno: Some(code),
                change: None,
                changes: n,
                reason: format!("{}", io::Error::from_raw_os_error(code)),
            });
        }
        match acks.acked.iter().filter(|a| !**a).count() {
            0 => Ok(()),
            missing => Err(SetError::whole(
                &self.name,
                n,
                format!("nf_tables acked {} of {n} changes", n - missing),
            )),
        }
    }
}

/// What nf_tables acked of a transaction: each change, the first change
/// it refused (index, errno), and an error for no change of it.
struct Acks {
    acked: Vec<bool>,
    refused: Option<(usize, i32)>,
    other: Option<i32>,
}

/// The messages as one batch, and the sequence number of the first
/// change's.
fn batch(msgs: &[ElemMsg]) -> (Vec<u8>, u32) {
    let n = msgs.len();
    // Small pages: the default (128 KiB) is an mmap per transaction.
    let mut batch = Batch::with_page_size(16 * 1024);
    for m in msgs {
        batch.add(m, m.kind);
    }
    let batch = batch.finalize();
    // The begin and end messages take a sequence number each when the
    // kernel acks them (6.10 on); the elements' are in between.
    let seqs = batch.sequence_numbers();
    let first = seqs.start + (seqs.len() as u32 - n as u32) / 2;
    (batch.iter().flatten().copied().collect(), first)
}

fn set_rcvbuf(sock: &Socket, size: usize) -> Result<()> {
    let size = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
    set_option(sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &size)
}

/// Anything but an ack: nf_tables sends none in answer to a batch.
#[derive(Debug)]
struct Other;

impl NetlinkDeserializable for Other {
    type Error = DecodeError;
    fn deserialize(_: &NetlinkHeader, _: &[u8]) -> Result<Self, DecodeError> {
        Ok(Other)
    }
}

/// The acks in one datagram: (sequence number, 0 or the errno).
fn acks(mut bytes: &[u8]) -> Result<Vec<(u32, i32)>, DecodeError> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let m = NetlinkMessage::<Other>::deserialize(bytes)?;
        let len = m.header.length as usize;
        if len == 0 {
            return Err(DecodeError::from("zero-length netlink message"));
        }
        if let NetlinkPayload::Error(e) = m.payload {
            out.push((m.header.sequence_number, e.code.map_or(0, |c| -c.get())));
        }
        bytes = bytes.get(len.next_multiple_of(4)..).unwrap_or(&[]);
    }
    Ok(out)
}

/// One NEWSETELEM or DELSETELEM, as libnftnl writes it.
struct ElemMsg {
    set: NonNull<sys::nftnl_set>,
    kind: MsgType,
}

impl ElemMsg {
    fn new(table: &CString, change: &Change) -> Result<ElemMsg, String> {
        let e = change.element();
        let key = e.key_bytes()?;
        let name = CString::new(e.set.as_str()).map_err(|_| "a set name with NUL")?;
        // SAFETY: libnftnl's constructors; null means out of memory.
        let set =
            NonNull::new(unsafe { sys::nftnl_set_alloc() }).ok_or("libnftnl: out of memory")?;
        let msg = ElemMsg {
            set,
            kind: match change {
                Change::Add(_) => MsgType::Add,
                Change::Delete(_) => MsgType::Del,
            },
        };
        // SAFETY: `set` is valid; libnftnl copies the strings and the key,
        // and owns `elem` once added to the set.
        unsafe {
            let s = set.as_ptr();
            sys::nftnl_set_set_u32(s, sys::NFTNL_SET_FAMILY as u16, libc::NFPROTO_INET as u32);
            sys::nftnl_set_set_str(s, sys::NFTNL_SET_TABLE as u16, table.as_ptr());
            sys::nftnl_set_set_str(s, sys::NFTNL_SET_NAME as u16, name.as_ptr());
            let elem = sys::nftnl_set_elem_alloc();
            if elem.is_null() {
                return Err("libnftnl: out of memory".into());
            }
            sys::nftnl_set_elem_set(
                elem,
                sys::NFTNL_SET_ELEM_KEY as u16,
                key.as_ptr().cast::<c_void>(),
                key.len() as u32,
            );
            sys::nftnl_set_elem_add(s, elem);
        }
        Ok(msg)
    }
}

// SAFETY: writes one message of at most a few hundred bytes, well within
// the nft_nlmsg_maxsize() the batch guarantees.
unsafe impl NlMsg for ElemMsg {
    unsafe fn write(&self, buf: *mut c_void, seq: u32, msg_type: MsgType) {
        // NLM_F_CREATE without NLM_F_EXCL: an element that is there already
        // is no error, as with `nft add element`.
        let (kind, flags) = match msg_type {
            MsgType::Add => (
                libc::NFT_MSG_NEWSETELEM,
                libc::NLM_F_CREATE | libc::NLM_F_ACK,
            ),
            MsgType::Del => (libc::NFT_MSG_DELSETELEM, libc::NLM_F_ACK),
        };
        // SAFETY: `buf` has room (the caller's contract); `set` is valid.
        unsafe {
            let nlh = sys::nftnl_nlmsg_build_hdr(
                buf.cast::<c_char>(),
                kind as u16,
                libc::NFPROTO_INET as u16,
                flags as u16,
                seq,
            );
            sys::nftnl_set_elems_nlmsg_build_payload(nlh, self.set.as_ptr());
        }
    }
}

impl Drop for ElemMsg {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once, with its element.
        unsafe { sys::nftnl_set_free(self.set.as_ptr()) }
    }
}

/// Runs `f` in a thread of its own in a new network namespace, where
/// nftables starts empty (needs root). Child processes (`nft`) inherit it.
#[cfg(test)]
pub(crate) fn in_new_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
            .expect("a new network namespace (the nftables tests run as root)");
        f()
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// A set's or map's elements as `nft -j list` shows them, each written as
/// nft writes it (`10.0.0.2 . 17`; a verdict map's `tenants/a : jump ep_a`),
/// sorted.
#[cfg(test)]
pub(crate) fn listed(table: &str, set: &str) -> Vec<String> {
    use serde_json::Value;
    fn one(v: &Value) -> String {
        match v {
            Value::Object(o) if o.contains_key("concat") => o["concat"]
                .as_array()
                .into_iter()
                .flatten()
                .map(one)
                .collect::<Vec<_>>()
                .join(" . "),
            Value::Object(o) if o.contains_key("jump") => {
                format!("jump {}", o["jump"]["target"].as_str().unwrap_or("?"))
            }
            Value::Array(kv) => kv.iter().map(one).collect::<Vec<_>>().join(" : "),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
    let mut out = Vec::new();
    for kind in ["set", "map"] {
        let o = std::process::Command::new("nft")
            .args(["-j", "list", kind, "inet", table, set])
            .output()
            .expect("nft runs");
        if !o.status.success() {
            continue;
        }
        let v: Value = serde_json::from_slice(&o.stdout).expect("nft -j prints JSON");
        for item in v["nftables"].as_array().into_iter().flatten() {
            for e in item[kind]["elem"].as_array().into_iter().flatten() {
                out.push(one(e));
            }
        }
        out.sort();
        return out;
    }
    panic!("nft lists no set or map {set} in inet {table}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::nft::Nft;

    /// The backstop's kinds of set (their declarations in
    /// `enforce::backstop`) and a lone 24-bit field's, in a table of
    /// their own.
    const SETS: &str = "add table inet t
add set inet t triples { typeof ip saddr . ip daddr . @th,104,24; }
add set inet t pairs { typeof ip saddr . @th,104,24; }
add set inet t qpns { typeof @th,104,24; }
add set inet t hosts { type ipv4_addr; }
";

    fn ip(a: u8, b: u8, c: u8, d: u8) -> Field {
        Field::Ipv4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn elements_added_by_netlink_are_the_keys_nft_lists() {
        in_new_netns(|| {
            Nft::new().unwrap().run(SETS).expect("the table");
            let sets = NftSets::open("t").expect("a socket");
            // Every byte of each field differs, so any byte order but the
            // kernel's lists as another number or address.
            let adds = [
                Element::new("pairs", &[ip(10, 1, 2, 3), Field::Bits24(0x12_3456)]),
                Element::new("pairs", &[ip(192, 0, 2, 9), Field::Bits24(1)]),
                Element::new("qpns", &[Field::Bits24(0xab_cdef)]),
                Element::new("hosts", &[ip(10, 1, 2, 3)]),
                Element::new(
                    "triples",
                    &[ip(10, 1, 2, 3), ip(192, 0, 2, 9), Field::Bits24(0x12_3456)],
                ),
            ];
            sets.apply(&adds.clone().map(Change::Add)).expect("applied");
            assert_eq!(
                listed("t", "pairs"),
                ["10.1.2.3 . 1193046", "192.0.2.9 . 1"]
            );
            assert_eq!(listed("t", "qpns"), ["11259375"]);
            assert_eq!(listed("t", "hosts"), ["10.1.2.3"]);
            assert_eq!(listed("t", "triples"), ["10.1.2.3 . 192.0.2.9 . 1193046"]);
            // Adding what is there changes nothing and is no error.
            sets.apply(&[Change::Add(adds[2].clone())]).expect("again");
            assert_eq!(listed("t", "qpns"), ["11259375"]);

            sets.apply(&[
                Change::Delete(adds[0].clone()),
                Change::Delete(adds[2].clone()),
            ])
            .expect("deleted");
            assert_eq!(listed("t", "pairs"), ["192.0.2.9 . 1"]);
            assert!(listed("t", "qpns").is_empty());
        })
    }

    #[test]
    fn a_batch_with_one_bad_element_changes_nothing_and_names_it() {
        in_new_netns(|| {
            Nft::new().unwrap().run(SETS).expect("the table");
            let sets = NftSets::open("t").expect("a socket");
            let good = Element::new("qpns", &[Field::Bits24(5)]);
            let bad = Element::new("no_set", &[ip(10, 0, 0, 1), Field::Bits24(6)]);
            let err = sets
                .apply(&[
                    Change::Add(good.clone()),
                    Change::Add(bad.clone()),
                    Change::Add(Element::new("hosts", &[ip(10, 0, 0, 1)])),
                ])
                .expect_err("a set that is not there");
            assert_eq!(err.errno, Some(libc::ENOENT), "{err}");
            assert_eq!(err.change.as_deref(), Some(&Change::Add(bad)));
            assert!(
                err.to_string()
                    .starts_with("inet t: cannot add element no_set { 10.0.0.1 . 6 }: ")
                    && err
                        .to_string()
                        .ends_with("none of the transaction's 3 change(s) was made"),
                "{err}"
            );
            assert!(listed("t", "qpns").is_empty());
            assert!(listed("t", "hosts").is_empty());

            // A set that is not there, named as well.
            let err = sets
                .apply(&[Change::Add(Element::new("gone", &[Field::Bits24(1)]))])
                .expect_err("no such set");
            assert_eq!(err.errno, Some(libc::ENOENT), "{err}");
            assert!(err.to_string().contains("gone { 1 }"), "{err}");

            // A value too wide fails before anything is sent.
            let err = sets
                .apply(&[
                    Change::Add(good.clone()),
                    Change::Add(Element::new("qpns", &[Field::Bits24(1 << 24)])),
                ])
                .expect_err("25 bits");
            assert_eq!(err.errno, Some(libc::EINVAL), "{err}");
            assert!(listed("t", "qpns").is_empty());
        })
    }

    #[test]
    fn deleting_an_absent_element_fails_the_batch_as_nft_delete_does() {
        in_new_netns(|| {
            Nft::new().unwrap().run(SETS).expect("the table");
            let sets = NftSets::open("t").expect("a socket");
            let there = Element::new("qpns", &[Field::Bits24(7)]);
            sets.apply(&[Change::Add(there.clone())]).expect("added");
            let absent = Element::new("qpns", &[Field::Bits24(8)]);
            let err = sets
                .apply(&[
                    Change::Delete(there.clone()),
                    Change::Delete(absent.clone()),
                ])
                .expect_err("absent");
            assert_eq!(err.errno, Some(libc::ENOENT), "{err}");
            assert_eq!(err.change.as_deref(), Some(&Change::Delete(absent.clone())));
            assert_eq!(listed("t", "qpns"), ["7"]);
            // As libnftables answered the same command.
            let nft = Nft::new().unwrap();
            let text = Change::Delete(absent).nft_command("inet t");
            assert!(nft.run(&text).is_err());
            // The socket serves the next transaction as before.
            sets.apply(&[Change::Delete(there)]).expect("deleted");
            assert!(listed("t", "qpns").is_empty());
        })
    }

    #[test]
    fn a_large_batch_is_acked_whole() {
        in_new_netns(|| {
            Nft::new().unwrap().run(SETS).expect("the table");
            let sets = NftSets::open("t").expect("a socket");
            let adds: Vec<Change> = (1..=3000)
                .map(|q| Change::Add(Element::new("qpns", &[Field::Bits24(q)])))
                .collect();
            sets.apply(&adds).expect("3000 elements");
            assert_eq!(listed("t", "qpns").len(), 3000);
        })
    }

    #[test]
    fn a_concatenation_pads_each_field_to_32_bits_in_network_order() {
        let e = Element::new(
            "conn_to",
            &[
                Field::Ipv4(Ipv4Addr::new(10, 1, 2, 3)),
                Field::Ipv4(Ipv4Addr::new(192, 0, 2, 9)),
                Field::Bits24(0x12_3456),
            ],
        );
        assert_eq!(
            e.key_bytes().unwrap(),
            [10, 1, 2, 3, 192, 0, 2, 9, 0x12, 0x34, 0x56, 0]
        );
    }

    #[test]
    fn a_single_24_bit_field_is_three_bytes() {
        let e = Element::new("qpns", &[Field::Bits24(0x12_3456)]);
        assert_eq!(e.key_bytes().unwrap(), [0x12, 0x34, 0x56]);
        let e = Element::new("qpns", &[Field::Bits24(0x100_0000)]);
        assert!(e.key_bytes().unwrap_err().contains("24 bits"));
    }

    #[test]
    fn an_element_reads_as_nft_writes_it() {
        let e = Element::new(
            "eg_acme_a",
            &[Field::Ipv4(Ipv4Addr::new(192, 0, 2, 1)), Field::Bits24(17)],
        );
        assert_eq!(e.to_string(), "eg_acme_a { 192.0.2.1 . 17 }");
        assert_eq!(
            Change::Delete(Element::new("qpns", &[Field::Bits24(5)])).nft_command("inet t"),
            "delete element inet t qpns { 5 }\n"
        );
    }

    #[test]
    fn an_error_names_the_element_and_says_nothing_was_made() {
        let e = SetError {
            table: "inet t".into(),
            errno: Some(libc::ENOENT),
            change: Some(Box::new(Change::Delete(Element::new(
                "qpns",
                &[Field::Bits24(5)],
            )))),
            changes: 3,
            reason: "No such file or directory (os error 2)".into(),
        };
        assert_eq!(
            e.to_string(),
            "inet t: cannot delete element qpns { 5 }: No such file or directory (os error 2); \
             none of the transaction's 3 change(s) was made"
        );
    }
}
