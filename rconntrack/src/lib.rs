//! rconntrack: the RDMA connection tracking table of masq.
//!
//! One [`Entry`] per connected QP, created when masqd admits the QP at its
//! RTR transition. Listings ([`Table::list`] with a [`Filter`]), events
//! ([`Table::subscribe`]) and the one-line text form follow conntrack-tools
//! (`conntrack -L`, `conntrack -E`); every type is serde-serializable for
//! `-o json`. After a policy change, [`Table::reevaluate`] finds the
//! connections the new policy no longer allows.

mod entry;
mod filter;
mod slab;
mod table;

pub use entry::{now_ms, CmSide, Entry, LocalKey, QpKey, QpType, State};
pub use filter::{Cidr, Filter};
pub use table::{Decision, Event, EventKind, Table, TableFull, Upsert, DEFAULT_MAX};
