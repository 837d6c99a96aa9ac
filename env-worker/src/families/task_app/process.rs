//! The worker's side of the bundled task app: spawn it on a display, talk to it over a
//! socket pair, stop it on drop.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{DesktopError, Result};
use crate::runner::AppState;

/// The file descriptor number the app finds its control socket on.
pub(crate) const CTL_FD: i32 = 3;
/// Name of the task app binary.
pub(crate) const APP_BINARY: &str = "deskgym-task-app";
/// How long the app may take to answer one request.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A running task app process.
#[derive(Debug)]
pub(crate) struct TaskApp {
    child: Child,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

/// Finds the task app: `$DESKGYM_TASK_APP`, else next to the running executable (or one
/// level up, where cargo puts binaries relative to test executables in `deps/`).
pub(crate) fn app_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("DESKGYM_TASK_APP") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join(APP_BINARY))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            DesktopError::App(format!(
                "{APP_BINARY} not found next to {}; build it with `cargo build -p deskgym-worker` \
                 or set DESKGYM_TASK_APP",
                exe.display()
            ))
        })
}

impl TaskApp {
    /// Starts the app for `task` on `display` and waits until its window is up.
    pub(crate) fn spawn(display: u32, task: &str, width: u32, height: u32) -> Result<Self> {
        let (ours, theirs) = UnixStream::pair()?;
        let fd = theirs.as_raw_fd();
        let mut cmd = Command::new(app_binary()?);
        cmd.args([
            "--task",
            task,
            "--width",
            &width.to_string(),
            "--height",
            &height.to_string(),
        ])
        .env("DISPLAY", format!(":{display}"))
        // The app connects with x11rb, which reads the cookie from `$XAUTHORITY`.
        .env("XAUTHORITY", crate::xvfb::auth_file(display))
        .env("DESKGYM_CTL_FD", CTL_FD.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .process_group(0);
        // SAFETY: only async-signal-safe calls (dup2, fcntl, prctl) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if fd == CTL_FD {
                    libc::fcntl(fd, libc::F_SETFD, 0);
                } else if libc::dup2(fd, CTL_FD) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| DesktopError::App(format!("spawn {APP_BINARY}: {e}")))?;
        drop(theirs);
        ours.set_read_timeout(Some(REPLY_TIMEOUT))?;
        let writer = ours.try_clone()?;
        let mut app = Self {
            child,
            reader: BufReader::new(ours),
            writer,
        };
        let line = app.read_line()?;
        if line != "ready" {
            return Err(DesktopError::App(format!("unexpected greeting {line:?}")));
        }
        Ok(app)
    }

    fn read_line(&mut self) -> Result<String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err(DesktopError::App(format!(
                "task app exited ({})",
                self.exit_status()
            ))),
            Ok(_) => Ok(line.trim_end().to_string()),
            Err(e) => Err(DesktopError::App(format!("task app did not answer: {e}"))),
        }
    }

    fn exit_status(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_millis(200);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.to_string();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        "still running".into()
    }

    fn request(&mut self, line: &str) -> Result<AppState> {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| DesktopError::App(format!("task app is gone: {e}")))?;
        let reply = self.read_line()?;
        parse_reply(&reply)
    }

    /// Starts a new episode with `seed`.
    pub(crate) fn reset(&mut self, seed: u64) -> Result<AppState> {
        self.request(&format!("reset {seed}"))
    }

    /// Lets the app handle all input injected so far; returns once it has been drawn.
    pub(crate) fn sync(&mut self) -> Result<AppState> {
        self.request("sync")
    }

    /// The scene's widgets as an accessibility tree.
    pub(crate) fn tree(&mut self) -> Result<crate::a11y::Tree> {
        self.writer
            .write_all(b"tree\n")
            .map_err(|e| DesktopError::App(format!("task app is gone: {e}")))?;
        let reply = self.read_line()?;
        if let Some(msg) = reply.strip_prefix("err ") {
            return Err(DesktopError::App(msg.to_string()));
        }
        let json = reply
            .strip_prefix("tree ")
            .ok_or_else(|| DesktopError::App(format!("bad tree reply {reply:?}")))?;
        serde_json::from_str(json).map_err(|e| DesktopError::App(format!("bad tree reply: {e}")))
    }

    /// False once the app process has exited.
    pub(crate) fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The app's process id (the server's watchdog kills a stalled desktop by pid).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

fn parse_reply(reply: &str) -> Result<AppState> {
    let bad = || DesktopError::App(format!("bad reply {reply:?}"));
    if let Some(msg) = reply.strip_prefix("err ") {
        return Err(DesktopError::App(msg.to_string()));
    }
    let rest = reply.strip_prefix("ok ").ok_or_else(bad)?;
    let mut parts = rest.splitn(3, ' ');
    let reward = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
    let done = parts.next().ok_or_else(bad)? == "1";
    let instruction = parts.next().unwrap_or_default().to_string();
    Ok(AppState {
        reward,
        done,
        instruction,
        extra: Vec::new(),
    })
}

impl Drop for TaskApp {
    fn drop(&mut self) {
        let _ = self.writer.write_all(b"quit\n");
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        // SAFETY: plain syscall on the app's own process group.
        unsafe { libc::killpg(self.child.id() as libc::pid_t, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse() {
        let s = parse_reply("ok 1 1 Click the red circle.").unwrap();
        assert_eq!(
            s,
            AppState {
                reward: 1.0,
                done: true,
                instruction: "Click the red circle.".into(),
                extra: Vec::new(),
            }
        );
        assert!(parse_reply("err boom").is_err());
        assert!(parse_reply("garbage").is_err());
    }
}
