//! One Xvfb process, in its own process group, killed and reaped on drop, with stale
//! lock files of dead servers cleaned up.
//!
//! Display numbers: letting many `Xvfb -displayfd` probe for a free display at once is
//! racy (without a display number Xvfb takes no lock file, and a probe that fails
//! half-way closes, and so unlinks, the socket path of the live server it collided
//! with). So we choose the number (skipping any with a lock file or a socket, and any
//! this process holds; each process starts its search at its own offset so that two
//! deskgym processes rarely race for one number) and pass it explicitly; a server that
//! loses a race anyway exits and we try the next number. `-displayfd` tells us when the
//! server accepts connections (with it, Xvfb writes no lock file).
//!
//! Authorization: each server reads a fresh MIT-MAGIC-COOKIE-1 from an Xauthority file
//! only this process can read (`-auth`), so no other user of the host, and no other
//! env's sandbox, opens the display. The worker's own connections present the cookie
//! explicitly ([`connect`]: one process serves many displays, so `$XAUTHORITY` cannot
//! name the right one); programs started on the display get `XAUTHORITY`.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use x11rb::rust_connection::{DefaultStream, RustConnection};

use crate::error::{DesktopError, Result};

/// How long Xvfb may take to announce its display number.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How much of Xvfb's stderr is kept for error messages.
const STDERR_TAIL: usize = 4096;

/// A running Xvfb server. Dropping it kills the whole process group and reaps it.
#[derive(Debug)]
pub struct Xvfb {
    child: Child,
    display: u32,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    /// Inode of the display socket our server created: on drop we remove that file
    /// only, never a socket a newer Xvfb created at the same path.
    socket_ino: Option<u64>,
    /// The Xauthority file the server reads its cookie from (removed on drop).
    auth_file: PathBuf,
}

impl Xvfb {
    /// Starts Xvfb at `width`x`height`x24 and waits until it accepts connections.
    pub fn start(width: u32, height: u32) -> Result<Self> {
        // Once per process, before our own servers exist.
        static SWEEP: std::sync::Once = std::sync::Once::new();
        SWEEP.call_once(clean_stale_locks);
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            let display = claim_display()?;
            match Self::start_on(display, width, height) {
                Ok(x) => return Ok(x),
                Err(e) => {
                    release_display(display);
                    let text = e.to_string();
                    // Another process's server got this number first: try the next one.
                    if !(text.contains("already active") || text.contains("listening sockets")) {
                        return Err(e);
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| DesktopError::XvfbStart("no free display".into())))
    }

    fn start_on(display: u32, width: u32, height: u32) -> Result<Self> {
        let cookie = Cookie::generate()?;
        let auth_file = write_auth_file(display, &cookie)?;
        let xvfb = Self::spawn(display, width, height, &auth_file);
        if let Ok(x) = &xvfb {
            register(display, cookie);
            if let Some(ns) = own_ipc_namespace(x.pid()) {
                IPC.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((display, Arc::new(ns)));
            }
        } else {
            let _ = std::fs::remove_file(&auth_file);
        }
        xvfb
    }

    fn spawn(display: u32, width: u32, height: u32, auth_file: &Path) -> Result<Self> {
        let (mut reader, writer) = io::pipe()?;
        let wfd = writer.as_raw_fd();
        let mut cmd = Command::new(xvfb_binary()?);
        cmd.arg(format!(":{display}"))
            .arg("-auth")
            .arg(auth_file)
            .arg("-displayfd")
            .arg(wfd.to_string())
            .args(["-screen", "0", &format!("{width}x{height}x24")])
            .args(["-nolisten", "tcp", "-noreset"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: a plain syscall without arguments.
        let root = unsafe { libc::geteuid() } == 0;
        // SAFETY: only async-signal-safe calls (fcntl, unshare, prctl) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // The pipe is close-on-exec; Xvfb must inherit its write end.
                if libc::fcntl(wfd, libc::F_SETFD, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
                // An IPC namespace of its own, which the env's sandbox joins: its
                // programs' MIT-SHM segments (System V) then reach this server and no
                // other env's processes. Chromium presents a frame through them only
                // once the server has drawn it; over the socket it calls a frame
                // presented as soon as it is written (decision 219). Without root
                // (EPERM) the server stays in ours and the sandbox has its own.
                if root {
                    let _ = libc::unshare(libc::CLONE_NEWIPC);
                }
                // If the server dies without cleaning up, its displays die with it.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| DesktopError::XvfbStart(format!("spawn: {e}")))?;
        drop(writer);
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        if let Some(mut err) = child.stderr.take() {
            let tail = Arc::clone(&stderr_tail);
            std::thread::Builder::new()
                .name("xvfb-stderr".into())
                .spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = err.read(&mut buf) {
                        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                        t.extend_from_slice(&buf[..n]);
                        let excess = t.len().saturating_sub(STDERR_TAIL);
                        t.drain(..excess);
                    }
                })?;
        }
        let announced = read_display(&mut reader);
        let mut xvfb = Self {
            child,
            display,
            stderr_tail,
            socket_ino: None,
            auth_file: auth_file.to_path_buf(),
        };
        match announced {
            Ok(d) if d == display => {
                xvfb.socket_ino = std::fs::metadata(socket_path(d)).ok().map(|m| m.ino());
                Ok(xvfb)
            }
            other => {
                let _ = xvfb.child.kill();
                let _ = xvfb.child.wait();
                // Wait for the stderr reader to see EOF, so the message is complete.
                std::thread::sleep(Duration::from_millis(20));
                let why = match other {
                    Ok(d) => format!("announced display {d}, expected {display}"),
                    Err(e) => e,
                };
                xvfb.display = u32::MAX; // nothing of ours to clean up on drop
                Err(DesktopError::XvfbStart(format!(
                    "{why}; Xvfb said: {}",
                    xvfb.stderr()
                )))
            }
        }
    }

    /// The display number (5 for `:5`).
    pub fn display(&self) -> u32 {
        self.display
    }

    /// Process id of the Xvfb server (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// False once the server process has exited.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The Xauthority file holding the display's cookie (readable by this process's
    /// user only): what a program of the operator's sets `XAUTHORITY` to.
    pub fn auth_file(&self) -> &Path {
        &self.auth_file
    }

    /// The last lines Xvfb wrote to stderr.
    pub fn stderr(&self) -> String {
        let t = self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&t).trim().to_string()
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let pgid = self.child.id() as libc::pid_t;
        // SAFETY: plain syscall; the group is ours (process_group(0) at spawn).
        unsafe { libc::killpg(pgid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_millis(1000);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: as above; SIGKILL of an already-dead group is harmless.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.auth_file);
        if self.display == u32::MAX {
            return;
        }
        // A SIGKILLed server leaves its lock and socket behind. Remove that very lock
        // (our pid) and socket (same inode) only: the display number may already serve
        // a newer server.
        let lock = format!("/tmp/.X{}-lock", self.display);
        if std::fs::read_to_string(&lock)
            .is_ok_and(|t| t.trim().parse::<u32>().ok() == Some(self.child.id()))
        {
            let _ = std::fs::remove_file(&lock);
        }
        if let Some(ino) = self.socket_ino {
            let path = socket_path(self.display);
            if std::fs::metadata(&path).is_ok_and(|m| m.ino() == ino) {
                let _ = std::fs::remove_file(&path);
            }
        }
        release_display(self.display);
    }
}

/// First display number we use: low numbers belong to real X servers and xvfb-run.
const FIRST_DISPLAY: u32 = 20;
/// Tries before giving up when other processes keep taking the chosen numbers.
const START_ATTEMPTS: usize = 8;

/// Display numbers held by Xvfbs of this process.
static CLAIMED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Picks a display number that no server of ours holds and that has no lock file or
/// socket on disk.
fn claim_display() -> Result<u32> {
    let mut claimed = CLAIMED.lock().unwrap_or_else(|p| p.into_inner());
    let offset = (std::process::id() % 100) * 20;
    let free = (0..10_000)
        .map(|i| FIRST_DISPLAY + (offset + i) % 10_000)
        .find(|&n| {
            !claimed.contains(&n)
                && !std::path::Path::new(&format!("/tmp/.X{n}-lock")).exists()
                && !socket_path(n).exists()
        });
    let n = free.ok_or_else(|| DesktopError::XvfbStart("no free display number".into()))?;
    claimed.push(n);
    Ok(n)
}

fn release_display(n: u32) {
    CLAIMED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|&d| d != n);
    LIVE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|(d, _)| *d != n);
    IPC.lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|(d, _)| *d != n);
}

fn socket_path(display: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/.X11-unix/X{display}"))
}

fn xvfb_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("DESKGYM_XVFB") {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("Xvfb"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            DesktopError::XvfbStart(
                "Xvfb not found on PATH; install the Debian package `xvfb` (apt-get install xvfb)"
                    .into(),
            )
        })
}

/// The authorization protocol every display of ours checks.
const MIT_MAGIC_COOKIE_1: &[u8] = b"MIT-MAGIC-COOKIE-1";
/// Xauthority families: a local (Unix socket) connection to the host named by the
/// address, and any connection at all.
const FAMILY_LOCAL: u16 = 256;
const FAMILY_WILD: u16 = 65535;
/// Prefix of the host directories (mode 0700) where each process keeps its displays'
/// Xauthority files.
pub(crate) const AUTH_DIR_PREFIX: &str = "deskgym-displays-";

/// A display's secret: 16 random bytes, as xauth's `generate` makes them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cookie([u8; 16]);

impl std::fmt::Debug for Cookie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cookie(..)")
    }
}

impl Cookie {
    fn generate() -> Result<Self> {
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        Ok(Self(bytes))
    }

    /// An Xauthority file's bytes for `:number` on a host named `host`: a FamilyLocal
    /// entry for that host and display (python-xlib, under pyautogui, takes nothing
    /// else), then a FamilyWild entry with no display number, which libXau and x11rb
    /// match whatever the host is called. The server takes every cookie in its file.
    pub(crate) fn xauthority(&self, host: &[u8], number: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        for (family, address, number) in [
            (FAMILY_LOCAL, host, number.as_bytes()),
            (FAMILY_WILD, &b""[..], &b""[..]),
        ] {
            out.extend_from_slice(&family.to_be_bytes());
            for field in [address, number, MIT_MAGIC_COOKIE_1, &self.0] {
                out.extend_from_slice(&(field.len() as u16).to_be_bytes());
                out.extend_from_slice(field);
            }
        }
        out
    }
}

/// Cookies of the live servers of this process, by display number.
static LIVE: Mutex<Vec<(u32, Cookie)>> = Mutex::new(Vec::new());

fn register(display: u32, cookie: Cookie) {
    LIVE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((display, cookie));
}

/// The IPC namespace of each of our servers that has one of its own: (display, an open
/// `/proc/<pid>/ns/ipc`).
static IPC: Mutex<Vec<(u32, Arc<OwnedFd>)>> = Mutex::new(Vec::new());

/// The IPC namespace `:display`'s server runs in, when it is one of ours with a
/// namespace of its own (the server runs as root): the env's sandbox joins it, so its
/// programs share System V memory with their display and no one else (decision 219).
pub(crate) fn ipc_namespace_of(display: u32) -> Option<Arc<OwnedFd>> {
    IPC.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(d, _)| *d == display)
        .map(|(_, ns)| Arc::clone(ns))
}

/// `pid`'s IPC namespace, when it differs from this process's.
fn own_ipc_namespace(pid: u32) -> Option<OwnedFd> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/ipc")).ok()?;
    let ours = std::fs::metadata("/proc/self/ns/ipc").ok()?;
    let theirs = ns.metadata().ok()?;
    (theirs.ino() != ours.ino() || theirs.dev() != ours.dev()).then(|| ns.into())
}

/// The cookie of `:display`, a server this process started and still runs.
pub(crate) fn cookie_of(display: u32) -> Result<Cookie> {
    LIVE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(d, _)| *d == display)
        .map(|(_, c)| *c)
        .ok_or_else(|| DesktopError::DisplayGone {
            display,
            reason: "not a display this process runs (no cookie for it)".into(),
        })
}

/// Connects to `:display` (one of ours) with its cookie; screen 0.
pub(crate) fn connect(display: u32) -> Result<RustConnection> {
    let gone = |reason: String| DesktopError::DisplayGone { display, reason };
    let cookie = cookie_of(display)?;
    let stream = std::os::unix::net::UnixStream::connect(socket_path(display))
        .map_err(|e| gone(format!("connect: {e}")))?;
    let (stream, _) =
        DefaultStream::from_unix_stream(stream).map_err(|e| gone(format!("connect: {e}")))?;
    RustConnection::connect_to_stream_with_auth_info(
        stream,
        0,
        MIT_MAGIC_COOKIE_1.to_vec(),
        cookie.0.to_vec(),
    )
    .map_err(|e| gone(format!("connect: {e}")))
}

/// This host's name, as `gethostname` gives it (the address of FamilyLocal entries).
fn hostname() -> Vec<u8> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer and its length; the kernel NUL-terminates within it.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return Vec::new();
    }
    buf.iter().take_while(|&&b| b != 0).copied().collect()
}

/// The host directory holding this process's Xauthority files (made 0700 on first use).
pub fn displays_root() -> PathBuf {
    std::env::temp_dir().join(format!("{AUTH_DIR_PREFIX}{}", std::process::id()))
}

/// Where `:display`'s Xauthority file is, for a display of this process.
pub(crate) fn auth_file(display: u32) -> PathBuf {
    displays_root().join(format!("X{display}"))
}

/// Writes `:display`'s Xauthority file (mode 0600, in a 0700 directory of ours) for
/// the server and the operator's programs on this host.
fn write_auth_file(display: u32, cookie: &Cookie) -> Result<PathBuf> {
    crate::owner::claim();
    let dir = displays_root();
    let path = auth_file(display);
    let failed = |what: &str, e: io::Error| {
        DesktopError::XvfbStart(format!("{what} {}: {e}", path.display()))
    };
    // The directory is made again if something removed it since the last display (a
    // sweeper that took this process for dead): its files are ours to recreate.
    let mut tries = 0;
    let mut f = loop {
        tries += 1;
        std::fs::create_dir_all(&dir).map_err(|e| failed("make the directory of", e))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| failed("restrict the directory of", e))?;
        let owner = std::fs::metadata(&dir)
            .map_err(|e| failed("read the directory of", e))?
            .uid();
        // SAFETY: plain syscall without arguments.
        if owner != unsafe { libc::geteuid() } {
            return Err(DesktopError::XvfbStart(format!(
                "{} belongs to another user",
                dir.display()
            )));
        }
        let _ = std::fs::remove_file(&path);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(f) => break f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 3 => continue,
            Err(e) => return Err(failed("create the Xauthority file", e)),
        }
    };
    f.write_all(&cookie.xauthority(&hostname(), &display.to_string()))
        .map_err(|e| failed("write the Xauthority file", e))?;
    Ok(path)
}

/// Reads the display number Xvfb writes to `-displayfd` once it accepts connections.
fn read_display(reader: &mut io::PipeReader) -> Result<u32, String> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut buf = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no display number after {START_TIMEOUT:?}"));
        }
        let mut pfd = libc::pollfd {
            fd: reader.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("poll: {e}"));
        }
        if r == 0 {
            continue;
        }
        let mut chunk = [0u8; 32];
        let n = reader
            .read(&mut chunk)
            .map_err(|e| format!("read displayfd: {e}"))?;
        if n == 0 {
            return Err("Xvfb exited before announcing a display".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.contains(&b'\n') {
            let s = String::from_utf8_lossy(&buf);
            return s
                .trim()
                .parse()
                .map_err(|_| format!("bad display number {s:?}"));
        }
    }
}

/// How old a refused socket must be before it counts as stale: a server of another
/// process between bind and listen refuses connections for a moment too.
const STALE_AFTER: Duration = Duration::from_secs(30);

/// Removes a display socket nobody listens on any more.
fn remove_if_stale(path: &std::path::Path) {
    let old = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > STALE_AFTER));
    if old
        && std::os::unix::net::UnixStream::connect(path)
            .is_err_and(|e| e.kind() == io::ErrorKind::ConnectionRefused)
    {
        let _ = std::fs::remove_file(path);
    }
}

/// Removes `/tmp/.X<n>-lock` files whose owning process is gone and display sockets that
/// nobody listens on, so a crashed earlier run (or another X server's) does not make
/// display allocation skip or fail. (With `-displayfd`, Xvfb itself writes no lock.)
/// Runs once per process, before its first Xvfb starts.
pub(crate) fn clean_stale_locks() {
    if let Ok(dir) = std::fs::read_dir("/tmp/.X11-unix") {
        for entry in dir.flatten() {
            remove_if_stale(&entry.path());
        }
    }
    let Ok(dir) = std::fs::read_dir("/tmp") else {
        return;
    };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(n) = name
            .to_str()
            .and_then(|s| s.strip_prefix(".X"))
            .and_then(|s| s.strip_suffix("-lock"))
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let Ok(pid) = text.trim().parse::<libc::pid_t>() else {
            continue;
        };
        // SAFETY: signal 0 only checks for existence.
        let gone = unsafe { libc::kill(pid, 0) } == -1
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            tracing::info!(display = n, pid, "removing stale X lock");
            let _ = std::fs::remove_file(entry.path());
            remove_if_stale(&socket_path(n));
        }
    }
}
