//! The command lines of masqd and masqctl as data (clap definitions):
//! `masqctl` (its grammar and what each command sends), `masqd`, and
//! `output` (masqctl's table, wide, JSON and YAML renderings).

pub mod masqctl;
pub mod masqd;
pub mod output;
