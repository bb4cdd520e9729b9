//! One error for everything a tenant's request can run into: the errno the
//! app will see and why (for the log). Sessions, the QP pipeline and the
//! CM answer with it; `errno()` is what goes on the wire.

use std::fmt;
use std::io;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    errno: i32,
    why: String,
}

impl Refusal {
    pub fn new(errno: i32, why: impl Into<String>) -> Refusal {
        Refusal {
            errno,
            why: why.into(),
        }
    }

    /// The positive errno the app sees.
    pub fn errno(&self) -> i32 {
        self.errno
    }

    pub fn why(&self) -> &str {
        &self.why
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (errno {})", self.why, self.errno)
    }
}

impl std::error::Error for Refusal {}

pub fn refuse(errno: i32, why: impl Into<String>) -> Refusal {
    Refusal::new(errno, why)
}

/// A failed system call, named by `what`.
pub fn from_io(e: io::Error, what: &str) -> Refusal {
    refuse(
        e.raw_os_error().unwrap_or(libc::EIO),
        format!("{what}: {e}"),
    )
}
