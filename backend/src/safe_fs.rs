//! File operations in a directory a tenant can write, which never follow
//! a path the tenant laid.
//!
//! An endpoint's socket directory is mounted in its containers (read-only
//! in masq's CDI spec, but an operator's own mount may be read-write), so
//! what lies below it may change under masqd while it works there as root:
//! a symbolic link planted where masqd expects a directory would take a
//! path-based operation anywhere on the host. Below such a directory masqd
//! goes through directory descriptors only: each component is opened
//! relative to the one before with `O_NOFOLLOW | O_DIRECTORY` (what
//! `openat2`'s `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` would do, on every
//! kernel), and entries are created, removed, renamed and chmodded by
//! name relative to their directory's descriptor. A link where a directory
//! must be is refused with an error naming it; a link being removed or
//! replaced is removed itself; a file is only ever created new
//! (`O_EXCL`), so a planted link or FIFO is never written through.
//!
//! The directory a `Dir` starts from (`Dir::open`) is masqd's own: its
//! path goes through no directory a tenant can write (an endpoint's socket
//! directory, whose parent is masqd's).

use crate::error::{Error, Result};
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{symlinkat, unlinkat, UnlinkatFlags};
use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// How deep `remove` and `clear` go: masqd's own trees (the sysfs view's)
/// are 7 deep; a deeper one is a tenant's, refused rather than recursed
/// into without bound.
const MAX_DEPTH: usize = 16;

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// An open directory, and its path for messages.
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What a directory entry is, its link not followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    Symlink,
    Socket,
    File,
    Other,
}

fn at(path: &Path, e: Errno) -> io::Error {
    io::Error::new(
        io::Error::from(e).kind(),
        format!("{}: {e}", path.display()),
    )
}

/// `rel` as the names it is made of: relative, without `.` or `..`.
fn names_of(rel: &Path) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a path below a directory", rel.display()),
            )),
        })
        .collect()
}

impl Dir {
    /// Open `path`, a directory of masqd's own, followed as given.
    pub fn open(path: &Path) -> Result<Dir> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let fd = nix::fcntl::open(path, flags, Mode::empty()).map_err(|e| at(path, e))?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory `rel` below this one, each of its components opened
    /// without following a link.
    pub fn open_dir(&self, rel: impl AsRef<Path>) -> Result<Dir> {
        self.walk(rel.as_ref(), false)
    }

    /// As `open_dir`, making the directories that are missing (0755).
    pub fn create_dir_all(&self, rel: impl AsRef<Path>) -> Result<Dir> {
        self.walk(rel.as_ref(), true)
    }

    fn walk(&self, rel: &Path, create: bool) -> Result<Dir> {
        let names = names_of(rel)?;
        let Some((first, rest)) = names.split_first() else {
            return Dir::open(&self.path);
        };
        let mut dir = self.child(first, create)?;
        for n in rest {
            dir = dir.child(n, create)?;
        }
        Ok(dir)
    }

    fn child(&self, name: &OsStr, create: bool) -> Result<Dir> {
        let path = self.path.join(name);
        if create {
            match mkdirat(&self.fd, name, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(at(&path, e).into()),
            }
        }
        match openat(&self.fd, name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Dir { fd, path }),
            Err(e @ (Errno::ELOOP | Errno::ENOTDIR)) => {
                let what = match self.kind(name) {
                    Ok(Some(Kind::Symlink)) => {
                        "a symbolic link where a directory must be (not followed)"
                    }
                    _ => "not a directory",
                };
                Err(io::Error::new(
                    io::Error::from(e).kind(),
                    format!("{}: {what}", path.display()),
                )
                .into())
            }
            Err(e) => Err(at(&path, e).into()),
        }
    }

    /// What entry `name` is, if there is one (a link is not followed).
    pub fn kind(&self, name: impl AsRef<OsStr>) -> Result<Option<Kind>> {
        let name = name.as_ref();
        let st = match fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(at(&self.path.join(name), e).into()),
        };
        let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        Ok(Some(match kind {
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFLNK => Kind::Symlink,
            SFlag::S_IFSOCK => Kind::Socket,
            SFlag::S_IFREG => Kind::File,
            _ => Kind::Other,
        }))
    }

    /// The names of the entries in this directory.
    pub fn names(&self) -> Result<Vec<OsString>> {
        use std::os::unix::ffi::OsStrExt;
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut d = nix::dir::Dir::openat(&self.fd, ".", flags, Mode::empty())
            .map_err(|e| at(&self.path, e))?;
        let mut out = Vec::new();
        for entry in d.iter() {
            let entry = entry.map_err(|e| at(&self.path, e))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                out.push(OsStr::from_bytes(name).to_os_string());
            }
        }
        Ok(out)
    }

    /// Remove entry `name`: a file or link itself, a directory with all it
    /// holds (to `MAX_DEPTH`); none is fine.
    pub fn remove(&self, name: impl AsRef<OsStr>) -> Result<()> {
        self.remove_at(name.as_ref(), 0)
    }

    /// Remove everything in this directory, keeping it.
    pub fn clear(&self) -> Result<()> {
        self.clear_at(0)
    }

    fn clear_at(&self, depth: usize) -> Result<()> {
        self.names()?
            .iter()
            .try_for_each(|n| self.remove_at(n, depth))
    }

    fn remove_at(&self, name: &OsStr, depth: usize) -> Result<()> {
        let path = self.path.join(name);
        match unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => return Ok(()),
            Err(Errno::EISDIR) => {}
            Err(e) => return Err(at(&path, e).into()),
        }
        if depth >= MAX_DEPTH {
            return Err(io::Error::other(format!(
                "{}: more than {MAX_DEPTH} levels deep: not removed",
                path.display()
            ))
            .into());
        }
        self.child(name, false)?.clear_at(depth + 1)?;
        match unlinkat(&self.fd, name, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(at(&path, e).into()),
        }
    }

    /// Remove directory `name` if it is one and empty (never a link's
    /// target); anything else stays, and is not an error.
    pub fn remove_empty_dir(&self, name: impl AsRef<OsStr>) {
        let _ = unlinkat(&self.fd, name.as_ref(), UnlinkatFlags::RemoveDir);
    }

    /// Write file `name` anew, replacing whatever file or link has that
    /// name (the link itself): the file is created with `O_EXCL`, so
    /// nothing planted there is opened.
    pub fn write(&self, name: impl AsRef<OsStr>, contents: &str) -> Result<()> {
        let name = name.as_ref();
        let path = self.path.join(name);
        match unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(at(&path, e).into()),
        }
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&self.fd, name, flags, Mode::from_bits_truncate(0o644))
            .map_err(|e| at(&path, e))?;
        std::fs::File::from(fd)
            .write_all(contents.as_bytes())
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(())
    }

    /// Write file `name` through a temporary file and a rename: a reader
    /// sees the old contents or the new.
    pub fn write_atomic(&self, name: impl AsRef<OsStr>, contents: &str) -> Result<()> {
        let name = name.as_ref();
        let mut tmp = name.to_os_string();
        tmp.push(".tmp");
        self.write(&tmp, contents)?;
        self.rename(&tmp, name)
    }

    /// A symbolic link `name` to `target` (which masqd never follows).
    pub fn symlink(&self, target: impl AsRef<OsStr>, name: impl AsRef<OsStr>) -> Result<()> {
        let name = name.as_ref();
        symlinkat(target.as_ref(), &self.fd, name).map_err(|e| at(&self.path.join(name), e))?;
        Ok(())
    }

    /// Rename entry `from` to `to` in this directory; an entry `to` that is
    /// a file or link is replaced itself.
    pub fn rename(&self, from: impl AsRef<OsStr>, to: impl AsRef<OsStr>) -> Result<()> {
        let to = to.as_ref();
        renameat(&self.fd, from.as_ref(), &self.fd, to).map_err(|e| at(&self.path.join(to), e))?;
        Ok(())
    }

    /// Bind listening socket `name` here with `mode` from its first
    /// moment, the process's umask untouched (masqd is multi-threaded):
    /// `bind`, given the path to bind at, makes the socket and listens in
    /// a fresh 0700 directory beside `name` (a random name, reached through
    /// its descriptor, not by path), where only root can reach it; there
    /// its mode is set, and it is renamed to `name`, replacing a stale
    /// socket. Anything else at `name` is refused.
    pub fn bind_socket<T, E: Into<Error>>(
        &self,
        name: impl AsRef<OsStr>,
        mode: u32,
        bind: impl FnOnce(&Path) -> Result<T, E>,
    ) -> Result<T> {
        self.bind_socket_then(name.as_ref(), mode, bind, |_| {})
    }

    /// `bind_socket`, running `between` with the private directory's path
    /// once the socket is bound there and before its mode is set (the
    /// tests look there).
    pub(crate) fn bind_socket_then<T, E: Into<Error>>(
        &self,
        name: &OsStr,
        mode: u32,
        bind: impl FnOnce(&Path) -> Result<T, E>,
        between: impl FnOnce(&Path),
    ) -> Result<T> {
        let path = self.path.join(name);
        match self.kind(name)? {
            None | Some(Kind::Socket) => {}
            Some(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                )
                .into())
            }
        }
        let (tmp, private) = self.private_dir(name)?;
        let made = (|| {
            let at_fd = Path::new("/proc/self/fd")
                .join(private.fd.as_raw_fd().to_string())
                .join(name);
            let made = bind(&at_fd).map_err(|e| {
                let e = e.into();
                io::Error::new(e.kind(), format!("{}: {e}", path.display()))
            })?;
            between(&private.path);
            private.chmod_socket(name, mode)?;
            renameat(&private.fd, name, &self.fd, name).map_err(|e| at(&path, e))?;
            Ok(made)
        })();
        if made.is_err() {
            let _ = private.remove(name);
        }
        // By descriptor, whatever name it has now; then its (empty) entry.
        self.remove_empty_dir(&tmp);
        made
    }

    /// A new directory here, mode 0700, under a name no one can foresee,
    /// opened without following a link: its name and the directory.
    fn private_dir(&self, name: &OsStr) -> Result<(OsString, Dir)> {
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let mut tmp = OsString::from(".");
        tmp.push(name);
        tmp.push(format!(".bind-{random:016x}"));
        let path = self.path.join(&tmp);
        mkdirat(&self.fd, tmp.as_os_str(), Mode::from_bits_truncate(0o700))
            .map_err(|e| at(&path, e))?;
        let dir = self.child(&tmp, false)?;
        Ok((tmp, dir))
    }

    /// Set the mode of socket `name` (a listener's, bound by path): the
    /// entry is opened without following a link and must be a socket, and
    /// its mode is set through that descriptor.
    pub fn chmod_socket(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let name = name.as_ref();
        let path = self.path.join(name);
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(&self.fd, name, flags, Mode::empty()).map_err(|e| at(&path, e))?;
        let st = fstat(&fd).map_err(|e| at(&path, e))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a socket (replaced?): mode not set", path.display()),
            )
            .into());
        }
        // fchmod does not take an O_PATH descriptor; its /proc link names
        // the very inode opened.
        let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
        std::fs::set_permissions(&proc, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(())
    }
}

#[cfg(test)]
#[path = "safe_fs_tests.rs"]
mod tests;
