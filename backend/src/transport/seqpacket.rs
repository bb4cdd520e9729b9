//! SOCK_SEQPACKET Unix sockets: one protocol message per datagram, file
//! descriptors riding along as SCM_RIGHTS.

use crate::error::Result;
use nix::sys::socket::{
    self, sockopt, AddressFamily, Backlog, ControlMessageOwned, MsgFlags, SockFlag, SockType,
    UnixAddr,
};
use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

pub struct Listener(OwnedFd);

pub struct Conn(OwnedFd);

/// The process at the other end of a connection (`Conn::peer`).
pub struct PeerProcess {
    pub pid: i32,
    /// None on a kernel without SO_PEERPIDFD.
    pidfd: Option<OwnedFd>,
}

impl PeerProcess {
    /// Whether the process that connected still runs. While it does, its
    /// pid is not anyone else's, so what `/proc/<pid>` said before this
    /// call was about it. Without a pidfd (an older kernel) this cannot be
    /// told and the answer is yes: the race stays open there.
    pub fn still_running(&self) -> bool {
        let Some(fd) = &self.pidfd else {
            return true;
        };
        // Signal 0: only the checks, no signal sent. ESRCH once it exited.
        // SAFETY: pidfd_send_signal(2) on a pidfd we own, no siginfo.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                0,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        r == 0
    }
}

/// One received datagram.
pub struct Datagram {
    /// Bytes of the message (at most the buffer size).
    pub len: usize,
    /// The sender's message was longer than the buffer (and was cut).
    pub truncated: bool,
    /// Descriptors passed with it; closed when dropped.
    pub fds: Vec<OwnedFd>,
}

fn nix_io(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl Listener {
    /// Bind a listening socket at `path` with `mode` from its first
    /// moment, replacing a stale socket file (`safe_fs::Dir::bind_socket`).
    /// The directory may be a tenant's to write (an endpoint's socket
    /// directory): nothing there is followed by path.
    pub fn bind(path: &Path, mode: u32) -> Result<Listener> {
        Listener::bind_then(path, mode, |_| {})
    }

    /// `bind`, running `between` with the private directory the socket is
    /// bound in, before its mode is set (the tests look there).
    fn bind_then(path: &Path, mode: u32, between: impl FnOnce(&Path)) -> Result<Listener> {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a socket path", path.display()),
            )
            .into());
        };
        let dir = crate::safe_fs::Dir::open(dir)?;
        dir.bind_socket_then(name, mode, bind_seqpacket, between)
    }

    pub fn accept(&self) -> Result<Conn> {
        loop {
            match socket::accept4(self.0.as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
                // SAFETY: accept4 returned a new descriptor that we now own.
                Ok(fd) => return Ok(Conn(unsafe { OwnedFd::from_raw_fd(fd) })),
                Err(nix::Error::EINTR) | Err(nix::Error::ECONNABORTED) => continue,
                Err(e) => return Err(nix_io(e).into()),
            }
        }
    }

    /// Wake a thread blocked in `accept` (it gets EINVAL) and refuse new
    /// connections: the endpoint is going.
    pub fn shutdown(&self) {
        let _ = socket::shutdown(self.0.as_raw_fd(), socket::Shutdown::Both);
    }
}

/// A new AF_UNIX SOCK_SEQPACKET socket, close-on-exec.
fn seqpacket() -> io::Result<OwnedFd> {
    socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(nix_io)
}

/// A SOCK_SEQPACKET socket bound at `at` and listening.
fn bind_seqpacket(at: &Path) -> io::Result<Listener> {
    let fd = seqpacket()?;
    socket::bind(fd.as_raw_fd(), &UnixAddr::new(at).map_err(nix_io)?).map_err(nix_io)?;
    socket::listen(&fd, Backlog::new(128).map_err(nix_io)?).map_err(nix_io)?;
    Ok(Listener(fd))
}

impl Conn {
    pub fn connect(path: &Path) -> Result<Conn> {
        let fd = seqpacket()?;
        socket::connect(fd.as_raw_fd(), &UnixAddr::new(path).map_err(nix_io)?).map_err(nix_io)?;
        Ok(Conn(fd))
    }

    /// The process that connected, as the kernel recorded it at connect
    /// time: its pid (SO_PEERCRED, in masqd's pid namespace) and a pidfd
    /// for it (SO_PEERPIDFD, `libc::SO_PEERPIDFD`, 77 in the kernel's
    /// asm-generic/socket.h; Linux 6.5 and later). A pid alone names
    /// whichever process has it now: the app may have exited and its pid
    /// gone to another process before masqd reads `/proc/<pid>`. The pidfd
    /// names the connecting process itself, so `PeerProcess::still_running`
    /// after those reads tells whether they were of it.
    pub fn peer(&self) -> Result<PeerProcess> {
        let cred = socket::getsockopt(&self.0, sockopt::PeerCredentials).map_err(nix_io)?;
        let pidfd = match socket::getsockopt(&self.0, sockopt::PeerPidfd) {
            Ok(fd) => Some(fd),
            // A kernel before 6.5: the pid alone, and the race it leaves
            // (a pid reused between connect and the /proc reads).
            Err(nix::Error::ENOPROTOOPT) => None,
            // The connecting process is gone and reaped (EINVAL before
            // Linux 6.9, ESRCH since): nothing of it left to identify.
            Err(nix::Error::ESRCH | nix::Error::EINVAL) => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("pid {}: the connecting process has exited", cred.pid()),
                )
                .into())
            }
            Err(e) => return Err(nix_io(e).into()),
        };
        Ok(PeerProcess {
            pid: cred.pid(),
            pidfd,
        })
    }

    /// Receive one datagram into `buf`; `Ok(None)` at end of stream.
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<Datagram>> {
        let mut cmsg = nix::cmsg_space!([RawFd; 4]);
        loop {
            let mut iov = [IoSliceMut::new(buf)];
            match socket::recvmsg::<()>(
                self.0.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(msg) => {
                    let mut fds = Vec::new();
                    if let Ok(cmsgs) = msg.cmsgs() {
                        for c in cmsgs {
                            if let ControlMessageOwned::ScmRights(raw) = c {
                                // SAFETY: the kernel installed these descriptors for us.
                                fds.extend(
                                    raw.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }),
                                );
                            }
                        }
                    }
                    let truncated = msg.flags.contains(MsgFlags::MSG_TRUNC)
                        || msg.flags.contains(MsgFlags::MSG_CTRUNC);
                    if msg.bytes == 0 && !truncated && fds.is_empty() {
                        return Ok(None);
                    }
                    return Ok(Some(Datagram {
                        len: msg.bytes,
                        truncated,
                        fds,
                    }));
                }
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(nix_io(e).into()),
            }
        }
    }

    /// Send one datagram, optionally with a descriptor.
    pub fn send(&self, data: &[u8], fd: Option<RawFd>) -> Result<()> {
        let iov = [io::IoSlice::new(data)];
        let fds;
        let cmsgs: Vec<socket::ControlMessage> = match fd {
            Some(f) => {
                fds = [f];
                vec![socket::ControlMessage::ScmRights(&fds)]
            }
            None => Vec::new(),
        };
        loop {
            match socket::sendmsg::<()>(
                self.0.as_raw_fd(),
                &iov,
                &cmsgs,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Ok(_) => return Ok(()),
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(nix_io(e).into()),
            }
        }
    }

    /// A connected pair: ours, and the other end to hand to an app.
    pub fn pair() -> Result<(Conn, OwnedFd)> {
        let (a, b) = socket::socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(nix_io)?;
        Ok((Conn(a), b))
    }

    /// Send one datagram without waiting for room (EAGAIN if the reader
    /// has fallen behind).
    pub fn send_nowait(&self, data: &[u8]) -> Result<()> {
        let iov = [io::IoSlice::new(data)];
        loop {
            match socket::sendmsg::<()>(
                self.0.as_raw_fd(),
                &iov,
                &[],
                MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
                None,
            ) {
                Ok(_) => return Ok(()),
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(nix_io(e).into()),
            }
        }
    }

    /// Whether the peer closed its end (its process exited), without
    /// reading: a thread blocked in `recv` may not have seen it yet.
    pub fn peer_closed(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no waiting.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & (libc::POLLHUP | libc::POLLRDHUP) != 0
    }

    /// Whether a datagram (or the end) is there to read within `wait`.
    pub fn readable(&self, wait: std::time::Duration) -> bool {
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        n == 1 && p.revents != 0
    }

    /// Wake a thread blocked in `recv` on this connection (it sees EOF).
    pub fn shutdown(&self) {
        let _ = socket::shutdown(self.0.as_raw_fd(), socket::Shutdown::Both);
    }

    pub fn try_clone(&self) -> Result<Conn> {
        Ok(Conn(self.0.as_fd().try_clone_to_owned()?))
    }
}

/// The other end of `Conn::pair`, used as a connection itself.
impl From<OwnedFd> for Conn {
    fn from(fd: OwnedFd) -> Conn {
        Conn(fd)
    }
}

/// Its number, for masqd's descriptor ceiling (`endpoints::usage::fd_room`).
impl AsRawFd for Conn {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagrams_keep_boundaries_and_carry_descriptors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sock");
        let l = Listener::bind(&path, 0o600).expect("bind");
        let c = Conn::connect(&path).expect("connect");
        let s = l.accept().expect("accept");
        let peer = s.peer().expect("peer");
        assert_eq!(peer.pid, std::process::id() as i32);
        assert!(peer.still_running());

        let f = std::fs::File::open("/dev/null").expect("open");
        c.send(b"hello", Some(f.as_raw_fd())).expect("send");
        c.send(&[7u8; 100], None).expect("send");
        let mut buf = [0u8; 64];
        let d = s.recv(&mut buf).expect("recv").expect("datagram");
        assert_eq!(
            (&buf[..d.len], d.truncated, d.fds.len()),
            (&b"hello"[..], false, 1)
        );
        let d = s.recv(&mut buf).expect("recv").expect("datagram");
        assert!(d.truncated, "a 100-byte datagram does not fit 64 bytes");
        drop(c);
        assert!(s.recv(&mut buf).expect("recv").is_none());
    }

    #[test]
    fn peer_closed_shows_a_hang_up_before_anyone_reads_it() {
        let (ours, theirs) = Conn::pair().expect("pair");
        let theirs = Conn(theirs);
        theirs.send(b"unread", None).expect("send");
        assert!(!ours.peer_closed());
        drop(theirs);
        assert!(ours.peer_closed(), "even with a datagram still queued");
    }

    #[test]
    fn bind_replaces_a_stale_socket_but_not_a_regular_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sock");
        drop(Listener::bind(&path, 0o600).expect("bind"));
        Listener::bind(&path, 0o600).expect("rebind over a stale socket");
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").expect("write");
        assert!(Listener::bind(&file, 0o600).is_err());
    }

    /// Issue 51: the socket was bound at its path with the umask's mode
    /// and chmodded after, so for a moment anyone could connect. Now it
    /// is bound in a private directory (0700) and shows at its path only
    /// with its final mode.
    #[test]
    fn the_socket_appears_at_its_path_only_with_its_final_mode() {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("masq.sock");
        let mut before: Option<u32> = None;
        for mode in [0o600, 0o666] {
            let _l = Listener::bind_then(&path, mode, |private| {
                // Nothing there yet, or the stale socket it replaces.
                let there = std::fs::symlink_metadata(&path).ok();
                let there = there.map(|m| m.permissions().mode() & 0o777);
                assert_eq!(there, before, "at its path before its mode is set");
                let m = std::fs::metadata(private).expect("private dir");
                assert_eq!(m.permissions().mode() & 0o777, 0o700);
                assert!(private.starts_with(dir.path()), "beside it, for the rename");
                let bound = std::fs::metadata(private.join("masq.sock")).expect("bound");
                assert!(bound.file_type().is_socket());
            })
            .expect("bind");
            let m = std::fs::symlink_metadata(&path).expect("stat");
            assert!(m.file_type().is_socket());
            assert_eq!(m.permissions().mode() & 0o777, mode);
            before = Some(mode);
            Conn::connect(&path).expect("it listens at its path");
            let left: Vec<_> = std::fs::read_dir(dir.path()).expect("ls").collect();
            assert_eq!(left.len(), 1, "the private directory is gone: {left:?}");
        }
    }

    /// A tenant that can write the socket's directory plants a link to a
    /// host file at the socket's path while it is being bound: the link
    /// itself is replaced by the socket, its target keeps its mode.
    #[test]
    fn a_link_planted_at_the_socket_path_is_not_chmodded() {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("shadow");
        std::fs::write(&target, b"secret").expect("write");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let path = dir.path().join("masq.sock");
        let _l = Listener::bind_then(&path, 0o666, |_| {
            std::os::unix::fs::symlink(&target, &path).expect("plant the link");
        })
        .expect("bound");
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&target), 0o600, "the link's target keeps its mode");
        let m = std::fs::symlink_metadata(&path).expect("stat");
        assert!(m.file_type().is_socket(), "the link replaced");
        // Planted before the bind: refused, the target untouched.
        std::fs::remove_file(&path).expect("unlink");
        std::os::unix::fs::symlink(&target, &path).expect("plant the link");
        let e = Listener::bind(&path, 0o666).err().expect("refused");
        assert!(e.to_string().contains("is not a socket"), "{e}");
        assert_eq!(mode(&target), 0o600);
    }

    /// An app that connects and exits before masqd looks at it: its pid
    /// may be another process's by the time `/proc/<pid>` is read. With a
    /// pidfd masqd sees that the process it would identify is not the one
    /// that connected (SO_PEERCRED's pid alone reads as a live peer).
    #[test]
    fn a_peer_that_exited_after_connecting_is_not_taken_for_a_running_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sock");
        let l = Listener::bind(&path, 0o600).expect("bind");
        let addr = UnixAddr::new(&path).expect("addr");
        // SAFETY: the child makes only raw system calls, then _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork");
        if child == 0 {
            unsafe {
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
                let sa = nix::sys::socket::SockaddrLike::as_ptr(&addr);
                let len = nix::sys::socket::SockaddrLike::len(&addr);
                let ok = libc::connect(fd, sa, len) == 0;
                libc::_exit(if ok { 0 } else { 1 });
            }
        }
        let s = l.accept().expect("accept");
        let mut status = 0;
        // SAFETY: reap our own child.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        let kernel_has_pidfd = {
            let (a, _b) = Conn::pair().expect("pair");
            socket::getsockopt(&a.0, sockopt::PeerPidfd).is_ok()
        };
        match s.peer() {
            Ok(p) => {
                assert_eq!(p.pid, child);
                assert!(
                    !kernel_has_pidfd || !p.still_running(),
                    "the exited app was taken for a running one"
                );
            }
            Err(e) => assert!(e.to_string().contains("has exited"), "{e}"),
        }
    }
}
