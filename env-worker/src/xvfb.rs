//! One Xvfb process: started with `-displayfd` (the server picks a free display, like
//! binding port 0), in its own process group, killed and reaped on drop, with stale
//! lock files of dead servers cleaned up.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
}

impl Xvfb {
    /// Starts Xvfb at `width`x`height`x24 and waits until it accepts connections.
    pub fn start(width: u32, height: u32) -> Result<Self> {
        clean_stale_locks();
        let (mut reader, writer) = io::pipe()?;
        let wfd = writer.as_raw_fd();
        let mut cmd = Command::new(xvfb_binary()?);
        cmd.arg("-displayfd")
            .arg(wfd.to_string())
            .args(["-screen", "0", &format!("{width}x{height}x24")])
            .args(["-nolisten", "tcp", "-noreset"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        // SAFETY: only async-signal-safe calls (fcntl, prctl) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // The pipe is close-on-exec; Xvfb must inherit its write end.
                if libc::fcntl(wfd, libc::F_SETFD, 0) == -1 {
                    return Err(io::Error::last_os_error());
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
        let mut xvfb = Self {
            child,
            display: u32::MAX,
            stderr_tail,
        };
        match read_display(&mut reader) {
            Ok(d) => xvfb.display = d,
            Err(e) => {
                let _ = xvfb.child.kill();
                let _ = xvfb.child.wait();
                return Err(DesktopError::XvfbStart(format!(
                    "{e}; Xvfb said: {}",
                    xvfb.stderr()
                )));
            }
        }
        Ok(xvfb)
    }

    /// The display number (5 for `:5`).
    pub fn display(&self) -> u32 {
        self.display
    }

    /// The display name for `DISPLAY`, e.g. `":5"`.
    pub fn display_name(&self) -> String {
        format!(":{}", self.display)
    }

    /// Process id of the Xvfb server (also its process group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// False once the server process has exited.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
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
        // A server that had to be SIGKILLed leaves its socket behind.
        if self.display != u32::MAX {
            remove_if_stale(&PathBuf::from(format!("/tmp/.X11-unix/X{}", self.display)));
        }
    }
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

/// Removes a display socket nobody listens on any more.
fn remove_if_stale(path: &std::path::Path) {
    if path.exists()
        && let Err(e) = std::os::unix::net::UnixStream::connect(path)
        && e.kind() == io::ErrorKind::ConnectionRefused
    {
        let _ = std::fs::remove_file(path);
    }
}

/// Removes `/tmp/.X<n>-lock` files whose owning process is gone and display sockets that
/// nobody listens on, so a crashed earlier run (or another X server's) does not make
/// display allocation skip or fail. (With `-displayfd`, Xvfb itself writes no lock.)
pub fn clean_stale_locks() {
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
            remove_if_stale(&PathBuf::from(format!("/tmp/.X11-unix/X{n}")));
        }
    }
}
