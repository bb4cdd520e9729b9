//! The core: the verbs pipelines masqd runs for tenants (`qp`: QP
//! changes; `resync`: QPs named again after a restart; `ah`: UD address
//! handles; `cm_step`: the RDMA CM's QP steps), the records of a session
//! they keep (`session`), and the traits they are written against
//! (`ports`), which the parts above implement. Nothing here knows the
//! daemon's state.

pub mod ah;
pub mod cm_step;
pub mod ports;
pub mod qp;
pub mod resync;
pub mod session;

#[cfg(test)]
mod fakes;
