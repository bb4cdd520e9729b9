//! The command lines of masqd and masqctl as data (clap definitions), so
//! that the binaries parse them and `masq-cli-gen` makes the shell
//! completions, the man pages and the docs' CLI reference from the same
//! definitions: `masqctl` (its grammar and what each command sends),
//! `masqd`, `output` (masqctl's table, wide, JSON and YAML renderings),
//! `table` (the table and wide text, one renderer) and `generate`
//! (completions, man pages, Markdown reference).

pub mod generate;
pub mod masqctl;
pub mod masqd;
pub mod output;
pub mod table;
