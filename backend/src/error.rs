//! masqd's one error, from a system call up to the control socket: who
//! must act (its variant), the errno a tenant's app sees (`errno()`, what
//! goes on the wire) and the text an operator reads in the log, masqctl's
//! output or an HTTP answer (`Display`). Every layer's API answers with it.
//! Codecs keep errors of their own whose cases their callers tell apart
//! (masq-proto's, the peer link's framing in `peer::wire`, a netlink
//! transaction's `kernel::nft_set::SetError`); they become text where they
//! meet this one.

use std::fmt;
use std::io;

/// A result of masqd's layers.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug)]
pub enum Error {
    /// A tenant's request refused: the errno its app sees, and why (for
    /// the log). Sessions, the QP pipeline and the CM answer with it.
    Refused { errno: i32, why: String },
    /// What the operator gave masqd is wrong (the config, a policy, a
    /// control request, a file it names): the text names the field and
    /// where.
    Invalid(String),
    /// A file the operator wrote is wrong: which, where in it when the
    /// parser knows (1-based line and column), and what.
    InFile {
        file: String,
        position: Option<(usize, usize)>,
        why: String,
    },
    /// Another host's masqd sent what this one cannot take, or the link to
    /// it failed.
    Peer(String),
    /// A system call or the kernel's answer failed: what masqd was doing
    /// (empty when the call's own text says it all), and the OS's error.
    Os { what: String, source: io::Error },
    /// A service or library masqd relies on failed (etcd, TLS, nft's
    /// answer), as it told.
    Failed(String),
}

impl Error {
    pub fn invalid(why: impl Into<String>) -> Error {
        Error::Invalid(why.into())
    }

    pub fn peer(why: impl Into<String>) -> Error {
        Error::Peer(why.into())
    }

    pub fn failed(why: impl Into<String>) -> Error {
        Error::Failed(why.into())
    }

    /// A failed system call while doing `what`.
    pub fn os(what: impl Into<String>, source: io::Error) -> Error {
        Error::Os {
            what: what.into(),
            source,
        }
    }

    /// The positive errno a tenant's app sees: a refusal's own, a system
    /// call's, EINVAL for bad input, EPROTO for a peer, EIO otherwise.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Refused { errno, .. } => *errno,
            Error::Os { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Error::Invalid(_) | Error::InFile { .. } => libc::EINVAL,
            Error::Peer(_) => libc::EPROTO,
            Error::Failed(_) => libc::EIO,
        }
    }

    /// Why, without the errno: a refusal's reason, the text of bad input,
    /// a peer's or a service's failure; for a system call, what was being
    /// done.
    pub fn why(&self) -> &str {
        match self {
            Error::Refused { why, .. } => why,
            Error::Invalid(s) | Error::Peer(s) | Error::Failed(s) => s,
            Error::InFile { why, .. } => why,
            Error::Os { what, .. } => what,
        }
    }

    /// The OS's error, for a failed system call.
    pub fn io(&self) -> Option<&io::Error> {
        match self {
            Error::Os { source, .. } => Some(source),
            _ => None,
        }
    }

    /// Where in its file bad input is (line, column), when the parser
    /// said.
    pub fn position(&self) -> Option<(usize, usize)> {
        match self {
            Error::InFile { position, .. } => *position,
            _ => None,
        }
    }

    /// The OS's errno, for a failed system call (as `io::Error`'s).
    pub fn raw_os_error(&self) -> Option<i32> {
        self.io().and_then(io::Error::raw_os_error)
    }

    /// The kind of a failed system call's error (as `io::Error`'s);
    /// `Other` for the rest.
    pub fn kind(&self) -> io::ErrorKind {
        self.io().map_or(io::ErrorKind::Other, io::Error::kind)
    }

    /// The same error with `what` said before it (`what: error`), as the
    /// text of its kind: a system call's keeps its OS error.
    pub fn context(self, what: impl fmt::Display) -> Error {
        match self {
            Error::Refused { errno, why } => Error::Refused {
                errno,
                why: format!("{what}: {why}"),
            },
            Error::Invalid(s) => Error::Invalid(format!("{what}: {s}")),
            Error::Peer(s) => Error::Peer(format!("{what}: {s}")),
            Error::Failed(s) => Error::Failed(format!("{what}: {s}")),
            Error::InFile {
                file,
                position,
                why,
            } => Error::InFile {
                file,
                position,
                why: format!("{what}: {why}"),
            },
            Error::Os { what: w, source } if w.is_empty() => Error::os(what.to_string(), source),
            Error::Os { what: w, source } => Error::os(format!("{what}: {w}"), source),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Refused { errno, why } => write!(f, "{why} (errno {errno})"),
            Error::Invalid(s) | Error::Peer(s) | Error::Failed(s) => f.write_str(s),
            Error::InFile {
                file,
                position: Some((line, col)),
                why,
            } => write!(f, "{file}:{line}:{col}: {why}"),
            Error::InFile { file, why, .. } => write!(f, "{file}: {why}"),
            Error::Os { what, source } if what.is_empty() => write!(f, "{source}"),
            Error::Os { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// In an answer (the control socket's JSON), an error is its text.
impl serde::Serialize for Error {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A system call's error as it is: its text, its errno.
impl From<io::Error> for Error {
    fn from(source: io::Error) -> Error {
        Error::os(String::new(), source)
    }
}

/// Errors compare by kind, errno and text (the fakes' and tests'
/// question).
impl PartialEq for Error {
    fn eq(&self, other: &Error) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.errno() == other.errno()
            && self.to_string() == other.to_string()
    }
}

impl Eq for Error {}

/// A tenant's request refused with `errno`, and why.
pub fn refuse(errno: i32, why: impl Into<String>) -> Error {
    Error::Refused {
        errno,
        why: why.into(),
    }
}

/// A tenant's request refused because a system call failed, named by
/// `what`: the app sees the call's errno.
pub fn from_io(e: impl Into<Error>, what: &str) -> Error {
    let e = e.into();
    refuse(e.errno(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_says_its_errno_and_text() {
        let r = refuse(libc::EPERM, "not yours");
        assert_eq!(
            (r.errno(), r.to_string()),
            (libc::EPERM, "not yours (errno 1)".into())
        );
        let e = Error::os("open /x", io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(e.errno(), libc::ENOENT);
        assert!(e.to_string().starts_with("open /x: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        let bare = Error::from(io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(
            bare.to_string(),
            io::Error::from_raw_os_error(libc::EACCES).to_string()
        );
        assert_eq!(Error::invalid("endpoints[0].vni: 0").errno(), libc::EINVAL);
        assert_eq!(Error::peer("bad").errno(), libc::EPROTO);
        let at = |position| Error::InFile {
            file: "t.yaml".into(),
            position,
            why: "vni: 0".into(),
        };
        assert_eq!(at(Some((4, 7))).to_string(), "t.yaml:4:7: vni: 0");
        assert_eq!(at(None).to_string(), "t.yaml: vni: 0");
        assert_eq!(Error::failed("etcd: down").to_string(), "etcd: down");
        assert_eq!(
            Error::failed("down").context("etcd").to_string(),
            "etcd: down"
        );
        assert_eq!(bare.context("read x").why(), "read x");
    }
}
