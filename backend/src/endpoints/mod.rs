//! What this host serves and where every endpoint is, whatever placed it:
//! one endpoint (`endpoint`), the registry of this host's endpoints and the
//! VPC map (`registry`), an endpoint's place as a source states it
//! (`placement`), and what each endpoint's apps make masqd hold, against
//! its limits (`usage`). The core uses them on a single host; `cluster/`
//! feeds the registry.

pub mod endpoint;
pub mod placement;
pub mod registry;
pub mod usage;
