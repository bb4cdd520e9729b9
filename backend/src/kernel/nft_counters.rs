//! A table's named counters, read by one nf_tables netlink dump of its
//! counter objects (NFT_MSG_GETOBJ). `nft list counters` would first have
//! libnftables fetch and parse the table's every set element: with
//! thousands of tracked connections that cost the backstop's 2-second
//! counter poll about half a second of CPU under emulation, taken from the
//! connections being set up. The dump carries the counters and nothing
//! else.
//!
//! libnftnl (through `nftnl-sys`) writes the request and parses each
//! object; netlink-packet-core frames the answer.

use crate::error::Result;
use crate::kernel::netlink::{kernel_socket, set_option};
use netlink_packet_core::{ErrorBuffer, NetlinkBuffer, NLMSG_DONE, NLMSG_ERROR};
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};
use nftnl::nftnl_sys::{self as sys, libc};
use std::ffi::{CStr, CString};
use std::io;
use std::os::raw::c_char;
use std::sync::Mutex;
use std::time::Duration;

/// nf_tables' message types and object type (linux/netfilter/nf_tables.h).
const NFT_MSG_NEWOBJ: u16 = 18;
const NFT_MSG_GETOBJ: u16 = 19;
const NFT_OBJECT_COUNTER: u32 = 1;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
/// An answer that takes longer than this is an error, not a hang.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// One named counter: its name, packets and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    pub name: String,
    pub packets: u64,
    pub bytes: u64,
}

/// A netlink socket to nf_tables for the counters of table `inet <table>`.
pub struct NftCounters {
    table: CString,
    sock: Mutex<(Socket, u32)>,
}

impl NftCounters {
    pub fn open(table: &str) -> Result<NftCounters> {
        let table = CString::new(table)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "table name with NUL"))?;
        let sock = kernel_socket(NETLINK_NETFILTER)?;
        set_timeout(&sock, ANSWER_TIMEOUT)?;
        Ok(NftCounters {
            table,
            sock: Mutex::new((sock, 0)),
        })
    }

    /// Every named counter of the table, in the kernel's order; none if
    /// there is no such table (the kernel filters the dump by name).
    pub fn read(&self) -> Result<Vec<Counter>> {
        let mut guard = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        let (sock, seq) = &mut *guard;
        *seq = seq.wrapping_add(1);
        let seq = *seq;
        sock.send(&self.request(seq)?, 0)?;
        // The answer is one datagram of objects after another, then DONE;
        // a u32 buffer keeps each message 4-aligned for libnftnl.
        let mut buf = vec![0u32; 16 * 1024];
        let mut out = Vec::new();
        loop {
            let bytes = as_bytes_mut(&mut buf);
            let len = sock.recv(&mut &mut bytes[..], 0)?.min(bytes.len());
            let mut at = 0;
            while at < len {
                let msg = NetlinkBuffer::new_checked(&bytes[at..len]).map_err(invalid)?;
                let msg_len = msg.length() as usize;
                if msg.sequence_number() == seq {
                    match msg.message_type() {
                        NLMSG_DONE => return Ok(out),
                        NLMSG_ERROR => {
                            let e = ErrorBuffer::new_checked(msg.payload()).map_err(invalid)?;
                            if let Some(code) = e.code() {
                                return Err(io::Error::from_raw_os_error(-code.get()).into());
                            }
                        }
                        t if t == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWOBJ => {
                            out.push(parse(&bytes[at..at + msg_len])?);
                        }
                        _ => {}
                    }
                }
                at += msg_len.next_multiple_of(4).max(4);
            }
        }
    }

    /// GETOBJ, dumped, of the table's counters.
    fn request(&self, seq: u32) -> Result<Vec<u8>> {
        let mut buf = vec![0u32; 1024];
        // SAFETY: libnftnl writes a header and the object's attributes
        // into a buffer of 4 KiB, far more than a table name and a type
        // take; the object is freed on every path.
        let len = unsafe {
            let nlh = sys::nftnl_nlmsg_build_hdr(
                buf.as_mut_ptr().cast::<c_char>(),
                NFT_MSG_GETOBJ,
                libc::NFPROTO_INET as u16,
                libc::NLM_F_DUMP as u16,
                seq,
            );
            let obj = sys::nftnl_obj_alloc();
            if obj.is_null() {
                return Err(io::Error::other("libnftnl: out of memory").into());
            }
            sys::nftnl_obj_set_str(obj, sys::NFTNL_OBJ_TABLE as u16, self.table.as_ptr());
            sys::nftnl_obj_set_u32(obj, sys::NFTNL_OBJ_TYPE as u16, NFT_OBJECT_COUNTER);
            sys::nftnl_obj_nlmsg_build_payload(nlh, obj);
            sys::nftnl_obj_free(obj);
            (*nlh).nlmsg_len as usize
        };
        Ok(as_bytes_mut(&mut buf)[..len].to_vec())
    }
}

/// One NEWOBJ message, as libnftnl parses it (in place: the message must
/// be 4-aligned, as every message in `read`'s u32 buffer is).
fn parse(msg: &[u8]) -> Result<Counter> {
    if msg.as_ptr().align_offset(4) != 0 {
        return Err(invalid("a message not 4-aligned").into());
    }
    // SAFETY: `msg` is one whole, aligned netlink message, checked by
    // NetlinkBuffer; libnftnl copies what it keeps, and the object is
    // freed on every path.
    unsafe {
        let obj = sys::nftnl_obj_alloc();
        if obj.is_null() {
            return Err(io::Error::other("libnftnl: out of memory").into());
        }
        let parsed = sys::nftnl_obj_nlmsg_parse(msg.as_ptr().cast(), obj);
        let name = sys::nftnl_obj_get_str(obj, sys::NFTNL_OBJ_NAME as u16);
        let c = (parsed >= 0 && !name.is_null()).then(|| Counter {
            name: CStr::from_ptr(name).to_string_lossy().into_owned(),
            packets: sys::nftnl_obj_get_u64(obj, sys::NFTNL_OBJ_CTR_PKTS as u16),
            bytes: sys::nftnl_obj_get_u64(obj, sys::NFTNL_OBJ_CTR_BYTES as u16),
        });
        sys::nftnl_obj_free(obj);
        Ok(c.ok_or_else(|| invalid("a counter object libnftnl cannot parse"))?)
    }
}

fn as_bytes_mut(buf: &mut [u32]) -> &mut [u8] {
    // SAFETY: u8 has no alignment or validity requirement; same memory.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), buf.len() * 4) }
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("nf_tables' answer: {e}"),
    )
}

fn set_timeout(sock: &Socket, t: Duration) -> Result<()> {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    set_option(sock, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::nft::Nft;
    use crate::kernel::nft_set::in_new_netns;

    /// What `nft -j list counters` says: (name, packets, bytes), sorted.
    fn listed(table: &str) -> Vec<(String, u64, u64)> {
        let o = std::process::Command::new("nft")
            .args(["-j", "list", "counters", "table", "inet", table])
            .output()
            .expect("nft runs");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("nft -j prints JSON");
        let mut out: Vec<_> = v["nftables"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| {
                let c = &i["counter"];
                Some((
                    c["name"].as_str()?.to_string(),
                    c["packets"].as_u64()?,
                    c["bytes"].as_u64()?,
                ))
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn the_dump_reads_the_counters_nft_lists_and_no_other_tables() {
        in_new_netns(|| {
            let nft = Nft::new().expect("libnftables");
            nft.run(
                "add table inet t
add counter inet t drops { packets 7 bytes 700 }
add counter inet t other { packets 0 bytes 0 }
add set inet t qpns { typeof @th,104,24; elements = { 1, 2, 3 } }
add table inet u
add counter inet u drops { packets 9 bytes 900 }
",
            )
            .expect("the tables");
            let c = NftCounters::open("t").expect("socket");
            let mut read: Vec<_> = c
                .read()
                .expect("dump")
                .into_iter()
                .map(|c| (c.name, c.packets, c.bytes))
                .collect();
            read.sort();
            assert_eq!(read, listed("t"));
            assert_eq!(read[0], ("drops".into(), 7, 700));
            // Read again on the same socket: the next dump starts afresh.
            assert_eq!(c.read().expect("dump").len(), 2);
        })
    }

    #[test]
    fn a_missing_table_has_no_counters() {
        in_new_netns(|| {
            let c = NftCounters::open("absent").expect("socket");
            assert_eq!(c.read().expect("dump"), []);
        })
    }
}
