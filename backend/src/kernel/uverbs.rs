//! MODIFY_QP and QUERY_QP on a tenant's own uverbs file.
//!
//! The tenant opened the uverbs file and passed it to masqd. The kernel
//! refuses `write()` commands on a file opened by another process
//! (`ib_safe_file_access`), but the ioctl path is not subject to that check:
//! `UVERBS_METHOD_INVOKE_WRITE` on `UVERBS_OBJECT_DEVICE` runs any legacy
//! write command with its request in `UVERBS_ATTR_CORE_IN` and its response
//! in `UVERBS_ATTR_CORE_OUT`. Layouts follow <rdma/ib_user_verbs.h> and
//! <rdma/rdma_user_ioctl_cmds.h>; the size asserts pin them.

use crate::error::Result;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `struct ib_uverbs_qp_dest`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpDest {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub dlid: u16,
    pub reserved: u16,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ib_uverbs_modify_qp`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModifyQp {
    pub dest: QpDest,
    pub alt_dest: QpDest,
    pub qp_handle: u32,
    pub attr_mask: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub en_sqd_async_notify: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 2],
}

/// `struct ib_uverbs_query_qp`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct QueryQpCmd {
    response: u64,
    qp_handle: u32,
    attr_mask: u32,
}

/// `struct ib_uverbs_query_qp_resp`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryQpResp {
    pub dest: QpDest,
    pub alt_dest: QpDest,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub sq_sig_all: u8,
    pub reserved: [u8; 5],
}

/// `struct ib_uverbs_attr`
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Attr {
    attr_id: u16,
    len: u16,
    flags: u16,
    attr_data: u16,
    data: u64,
}

/// `struct ib_uverbs_ioctl_hdr` followed by the three INVOKE_WRITE attributes.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InvokeWrite {
    length: u16,
    object_id: u16,
    method_id: u16,
    num_attrs: u16,
    reserved1: u64,
    driver_id: u32,
    reserved2: u32,
    attrs: [Attr; 3],
}

const _: () = assert!(size_of::<QpDest>() == 32);
const _: () = assert!(size_of::<ModifyQp>() == 112);
const _: () = assert!(size_of::<QueryQpCmd>() == 16);
const _: () = assert!(size_of::<QueryQpResp>() == 128);
const _: () = assert!(size_of::<Attr>() == 16);
const _: () = assert!(size_of::<InvokeWrite>() == 24 + 3 * 16);

const RDMA_IOCTL_MAGIC: u64 = 0x1b;
/// `_IOWR(RDMA_IOCTL_MAGIC, 1, struct ib_uverbs_ioctl_hdr)`
const RDMA_VERBS_IOCTL: u64 = (3 << 30) | (24 << 16) | (RDMA_IOCTL_MAGIC << 8) | 1;
const UVERBS_OBJECT_DEVICE: u16 = 0;
const UVERBS_METHOD_INVOKE_WRITE: u16 = 0;
const UVERBS_ATTR_CORE_IN: u16 = 0;
const UVERBS_ATTR_CORE_OUT: u16 = 1;
const UVERBS_ATTR_WRITE_CMD: u16 = 2;
const UVERBS_ATTR_F_MANDATORY: u16 = 1;
const IB_USER_VERBS_CMD_DESTROY_AH: u64 = 8;
const IB_USER_VERBS_CMD_QUERY_QP: u64 = 25;
const IB_USER_VERBS_CMD_MODIFY_QP: u64 = 26;

/// Attribute mask bits the legacy MODIFY_QP command accepts (IB_QP_* up to
/// IB_QP_DEST_QPN); anything else is refused before it reaches the kernel.
pub const LEGACY_ATTR_MASK: u32 = (1 << 21) - 1;

fn invoke_write<I: Copy, O: Copy>(
    fd: BorrowedFd<'_>,
    driver_id: u32,
    cmd: u64,
    input: &I,
    output: Option<&mut O>,
) -> io::Result<()> {
    let mut req = InvokeWrite {
        length: size_of::<InvokeWrite>() as u16,
        object_id: UVERBS_OBJECT_DEVICE,
        method_id: UVERBS_METHOD_INVOKE_WRITE,
        num_attrs: 2,
        driver_id,
        ..Default::default()
    };
    req.attrs[0] = Attr {
        attr_id: UVERBS_ATTR_WRITE_CMD,
        len: 8,
        flags: UVERBS_ATTR_F_MANDATORY,
        data: cmd,
        ..Default::default()
    };
    req.attrs[1] = Attr {
        attr_id: UVERBS_ATTR_CORE_IN,
        len: size_of::<I>() as u16,
        flags: UVERBS_ATTR_F_MANDATORY,
        data: input as *const I as u64,
        ..Default::default()
    };
    if let Some(out) = output {
        req.num_attrs = 3;
        req.attrs[2] = Attr {
            attr_id: UVERBS_ATTR_CORE_OUT,
            len: size_of::<O>() as u16,
            flags: UVERBS_ATTR_F_MANDATORY,
            data: out as *mut O as u64,
            ..Default::default()
        };
    } else {
        req.length = (size_of::<InvokeWrite>() - size_of::<Attr>()) as u16;
    }
    // SAFETY: `req` and the buffers it points to are live, correctly sized
    // #[repr(C)] values for the duration of the call; the kernel reads
    // `input` and writes at most `size_of::<O>()` bytes into `output`.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), RDMA_VERBS_IOCTL as _, &mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Execute MODIFY_QP on the tenant's uverbs file.
pub fn modify_qp(fd: BorrowedFd<'_>, driver_id: u32, cmd: &ModifyQp) -> Result<()> {
    Ok(invoke_write::<ModifyQp, ()>(
        fd,
        driver_id,
        IB_USER_VERBS_CMD_MODIFY_QP,
        cmd,
        None,
    )?)
}

/// Execute QUERY_QP on the tenant's uverbs file.
pub fn query_qp(
    fd: BorrowedFd<'_>,
    driver_id: u32,
    qp_handle: u32,
    attr_mask: u32,
) -> Result<QueryQpResp> {
    let cmd = QueryQpCmd {
        response: 0,
        qp_handle,
        attr_mask,
    };
    let mut resp = QueryQpResp::default();
    invoke_write(
        fd,
        driver_id,
        IB_USER_VERBS_CMD_QUERY_QP,
        &cmd,
        Some(&mut resp),
    )?;
    Ok(resp)
}

/// Execute DESTROY_AH on the tenant's uverbs file (`struct
/// ib_uverbs_destroy_ah` is the handle alone). On rxe a UD send names its
/// AH by the kernel's index, so the AH's sends fail from then on.
pub fn destroy_ah(fd: BorrowedFd<'_>, driver_id: u32, ah_handle: u32) -> Result<()> {
    Ok(invoke_write::<u32, ()>(
        fd,
        driver_id,
        IB_USER_VERBS_CMD_DESTROY_AH,
        &ah_handle,
        None,
    )?)
}

/// `enum rdma_driver_id` of software RoCE (rdma_rxe).
pub const RDMA_DRIVER_RXE: u32 = 14;

/// Largest `enum rdma_driver_id` value tried; the kernel has about 25.
const MAX_DRIVER_ID: u32 = 255;

/// The device's `enum rdma_driver_id`, which every ioctl header must carry
/// (the kernel answers EINVAL to any other). It is not in sysfs, so ask
/// the kernel: a MODIFY_QP whose input is too short to run fails with
/// ENOSPC once the driver id matches, and with EINVAL before.
pub fn probe_driver_id(fd: BorrowedFd<'_>) -> Result<u32> {
    let short: u32 = 0;
    for id in 0..=MAX_DRIVER_ID {
        match invoke_write::<u32, ()>(fd, id, IB_USER_VERBS_CMD_MODIFY_QP, &short, None) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return Ok(id),
            Err(e) => return Err(e.into()),
            Ok(()) => {
                return Err(io::Error::other(
                    "a MODIFY_QP without a request succeeded; refusing to guess",
                )
                .into())
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "the device accepted no RDMA driver id",
    )
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_number_matches_the_uapi_macro() {
        // _IOWR(0x1b, 1, 24-byte header) as computed by <asm-generic/ioctl.h>.
        assert_eq!(RDMA_VERBS_IOCTL, 0xC018_1B01);
    }

    #[test]
    fn a_file_that_is_not_uverbs_is_refused_by_the_kernel() {
        let f = std::fs::File::open("/dev/null").expect("open /dev/null");
        use std::os::fd::AsFd;
        let err = modify_qp(f.as_fd(), 0, &ModifyQp::default()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTTY));
    }
}
