//! libibverbs' numbering (`infiniband/verbs.h`) of the QP states and
//! types, the QP attribute mask and access flags, as MODIFY_QP and the
//! CM's INIT_QP_ATTR carry them.

pub const IBV_QPS_RESET: u8 = 0;
pub const IBV_QPS_INIT: u8 = 1;
pub const IBV_QPS_RTR: u8 = 2;
pub const IBV_QPS_RTS: u8 = 3;
pub const IBV_QPS_SQE: u8 = 5;
pub const IBV_QPS_ERR: u8 = 6;
pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPT_UC: u32 = 3;
pub const IBV_QPT_UD: u32 = 4;

pub const IBV_QP_STATE: u32 = 1 << 0;
pub const IBV_QP_ACCESS_FLAGS: u32 = 1 << 3;
pub const IBV_QP_PKEY_INDEX: u32 = 1 << 4;
pub const IBV_QP_PORT: u32 = 1 << 5;
pub const IBV_QP_QKEY: u32 = 1 << 6;
pub const IBV_QP_AV: u32 = 1 << 7;
pub const IBV_QP_PATH_MTU: u32 = 1 << 8;
pub const IBV_QP_TIMEOUT: u32 = 1 << 9;
pub const IBV_QP_RETRY_CNT: u32 = 1 << 10;
pub const IBV_QP_RNR_RETRY: u32 = 1 << 11;
pub const IBV_QP_RQ_PSN: u32 = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: u32 = 1 << 13;
pub const IBV_QP_ALT_PATH: u32 = 1 << 14;
pub const IBV_QP_MIN_RNR_TIMER: u32 = 1 << 15;
pub const IBV_QP_SQ_PSN: u32 = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
pub const IBV_QP_DEST_QPN: u32 = 1 << 20;

pub const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: u32 = 1 << 3;

pub fn qp_type_name(t: u32) -> &'static str {
    match t {
        2 => "RC",
        3 => "UC",
        4 => "UD",
        _ => "other",
    }
}

/// The ib_qp_type names `rdma res` uses.
pub fn type_name(t: u8) -> &'static str {
    match t {
        0 => "SMI",
        1 => "GSI",
        2 => "RC",
        3 => "UC",
        4 => "UD",
        8 => "RAW_PACKET",
        9 => "XRC_INI",
        10 => "XRC_TGT",
        _ => "other",
    }
}

pub fn state_name(s: u8) -> &'static str {
    ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERROR"]
        .get(s as usize)
        .copied()
        .unwrap_or("UNKNOWN")
}
