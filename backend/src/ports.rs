//! What the verbs pipelines ask of the rest of masqd, and the limits they
//! share with the CM.

use std::time::Duration;

/// How long an admission waits for the backstop to let its packets through.
pub(crate) const BACKSTOP_WAIT: Duration = Duration::from_secs(5);
