//! Who answers on a sandbox's agent socket: checked by the listener's credentials, so
//! a socket of another env (or of a process outside the sandbox) is never talked to.

use std::path::{Path, PathBuf};

use crate::error::{DesktopError, Result};

/// Who may answer on a sandbox's agent socket: the process that listens on it must
/// run in the sandbox's own pid namespace (and, under a root server, as its host uid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentPeer {
    /// The agent socket's host path (in a directory only the server can write).
    pub socket: PathBuf,
    /// Inode of the sandbox's pid namespace.
    pub(super) pidns: u64,
    /// The sandbox's host uid (a root server gives each its own).
    pub(super) uid: u32,
}

impl AgentPeer {
    /// Checks the process listening on the other end of `fd` (a connected Unix
    /// socket): the sandbox's own agent, or an error that names neither side's paths.
    pub fn verify(&self, fd: std::os::fd::BorrowedFd<'_>) -> Result<()> {
        let (pid, uid) = peer_cred(fd)?;
        if uid != self.uid || pid_namespace(pid) != Some(self.pidns) {
            return Err(DesktopError::App(
                "the desktop's agent socket is answered by a process outside this desktop; \
                 call Reset to restart it"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// The pid and uid (as this process sees them) of the process that listens on the
/// other end of a connected Unix socket.
pub(super) fn peer_cred(fd: std::os::fd::BorrowedFd<'_>) -> Result<(i32, u32)> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok((cred.pid, cred.uid))
}

/// The inode of `pid`'s pid namespace.
pub(super) fn pid_namespace(pid: i32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/pid"))
        .ok()
        .map(|m| m.ino())
}

/// The parent of `pid`.
pub(super) fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// A Unix socket bound at `path`, not yet listening: the agent listens on it, so the
/// socket's peer credentials are the agent's (`SO_PEERCRED` records the listener).
pub(super) fn bound_socket(path: &Path) -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let bytes = path.as_os_str().as_encoded_bytes();
    // SAFETY: sockaddr_un is plain data; zeroed is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(DesktopError::App(
            "the sandbox directory's path is too long".into(),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket() and bind() with a valid address; the fd is owned right away.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let fd = std::os::fd::OwnedFd::from_raw_fd(fd);
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        if libc::bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            (&raw const addr).cast(),
            len,
        ) != 0
        {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(fd)
    }
}

impl AgentPeer {
    /// A TCP listener on a free port of the sandbox's own loopback, opened by its agent
    /// (`Listen`) and handed over: what the server accepts there comes from inside this
    /// sandbox only (each sandbox has its own network namespace). The agent shares its
    /// uid with the sandbox's code, so what it hands over is checked: a listening IPv4
    /// stream socket on 127.0.0.1 at the port it names.
    pub fn listen(&self, bound: std::time::Duration) -> Result<std::net::TcpListener> {
        use std::io::Write;
        use std::os::fd::AsFd;
        let mut conn = std::os::unix::net::UnixStream::connect(&self.socket)?;
        self.verify(conn.as_fd())?;
        conn.set_read_timeout(Some(bound))?;
        conn.set_write_timeout(Some(bound))?;
        let mut line =
            serde_json::to_vec(&crate::agent::Request::Listen).map_err(std::io::Error::other)?;
        line.push(b'\n');
        conn.write_all(&line)?;
        let mut buf = [0u8; 4096];
        let (n, fd) = crate::fdpass::recv(&conn, &mut buf)?;
        let untrusted = |what: &str| {
            DesktopError::App(format!("the desktop's agent answered a listen with {what}"))
        };
        let text = buf[..n].strip_suffix(b"\n").unwrap_or(&buf[..n]);
        let port = match serde_json::from_slice::<crate::agent::Reply>(text) {
            Ok(crate::agent::Reply::Listening { port }) => port,
            Ok(crate::agent::Reply::Failed { message }) => return Err(DesktopError::Exec(message)),
            Ok(crate::agent::Reply::Busy { message }) => return Err(DesktopError::Limit(message)),
            Ok(other) => return Err(untrusted(other.kind())),
            Err(_) => return Err(untrusted("a cut reply")),
        };
        let fd = fd.ok_or_else(|| untrusted("no socket"))?;
        let stream_listening = sockopt(&fd, libc::SO_TYPE) == Some(libc::SOCK_STREAM)
            && sockopt(&fd, libc::SO_ACCEPTCONN) == Some(1)
            && sockopt(&fd, libc::SO_DOMAIN) == Some(libc::AF_INET);
        if !stream_listening {
            return Err(untrusted("a socket that is no TCP listener"));
        }
        let listener = std::net::TcpListener::from(fd);
        let at = listener.local_addr()?;
        if at != std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port)) {
            return Err(untrusted("a listener on another address"));
        }
        Ok(listener)
    }
}

/// An int socket option of `fd` (`None` when it cannot be read).
fn sockopt(fd: &std::os::fd::OwnedFd, opt: libc::c_int) -> Option<libc::c_int> {
    use std::os::fd::AsRawFd;
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&raw mut v).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(v)
}
