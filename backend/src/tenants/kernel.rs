//! The served device as the sessions use it, and one session's kernel:
//! its uverbs file and the kernel's word on who owns a QPN.

use crate::error::{from_io, Result};
use crate::kernel::host::HostDevice;
use crate::kernel::rdma_nl::{Lookup, RdmaNl};
use crate::kernel::{ownership, uverbs};
use crate::pipeline::ports::QpKernel;
use crate::run::lock;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Mutex;

/// One of the host's rails: its device and underlay.
pub struct Rail {
    pub name: String,
    pub device: Device,
    pub underlay: crate::config::Underlay,
}

pub struct Device {
    pub host: HostDevice,
    /// The kernel's QP table (rdma netlink), for the sessions' ownership
    /// checks; the audit has its own socket. None only in unit tests.
    rdma: Mutex<Option<RdmaNl>>,
}

impl Device {
    pub fn new(host: HostDevice, rdma: RdmaNl) -> Device {
        Device {
            host,
            rdma: Mutex::new(Some(rdma)),
        }
    }

    /// A device without the kernel's QP table, for the unit tests of
    /// what needs no QP looked up (`tenants::fakes`).
    #[cfg(test)]
    pub fn without_netlink(host: HostDevice) -> Device {
        Device {
            host,
            rdma: Mutex::new(None),
        }
    }

    /// One QP as the kernel reports it (a single-QP query).
    pub fn qp_lookup(&self, qpn: u32) -> Result<Lookup> {
        match lock(&self.rdma).as_mut() {
            Some(nl) => nl.qp(qpn),
            None => {
                Err(io::Error::new(io::ErrorKind::Unsupported, "no rdma netlink socket").into())
            }
        }
    }
}

/// The app's uverbs file, and the kernel's QP table for ownership.
pub(crate) struct SessionKernel<'a> {
    pub(crate) device: &'a Device,
    pub(crate) fd: BorrowedFd<'a>,
    pub(crate) pid: i32,
}

impl QpKernel for SessionKernel<'_> {
    fn modify(&self, cmd: &uverbs::ModifyQp) -> Result<()> {
        uverbs::modify_qp(self.fd, self.device.host.driver_id, cmd)
    }

    fn query(&self, qp_handle: u32, attr_mask: u32) -> Result<uverbs::QueryQpResp> {
        uverbs::query_qp(self.fd, self.device.host.driver_id, qp_handle, attr_mask)
    }

    /// One single-QP netlink query, no dump.
    fn owner(&self, qpn: u32, qp_type: u32) -> Result<ownership::Verdict> {
        let lookup = self
            .device
            .qp_lookup(qpn)
            .map_err(|e| from_io(e, "rdma netlink QP query"))?;
        ownership::judge(lookup, qpn, qp_type, self.pid, ownership::tgid_of)
            .map_err(|e| e.context("claimed QPN refused"))
    }
}
