//! The bundled task app: draws one deskgym task full-screen on `$DISPLAY` and reports
//! reward/done over the control socket on `$DESKGYM_CTL_FD` (see `env-worker/src/families/task_app/app.rs`).

use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let task = arg(&args, "--task").unwrap_or_else(|| "click-target".into());
    let width = arg(&args, "--width")
        .and_then(|w| w.parse().ok())
        .unwrap_or(1280);
    let height = arg(&args, "--height")
        .and_then(|h| h.parse().ok())
        .unwrap_or(720);
    let Some(fd) = std::env::var("DESKGYM_CTL_FD")
        .ok()
        .and_then(|f| f.parse::<i32>().ok())
    else {
        eprintln!(
            "deskgym-task-app: DESKGYM_CTL_FD is not set; this program is started by deskgym"
        );
        std::process::exit(2);
    };
    // SAFETY: the worker hands us this descriptor as our end of a socket pair.
    let ctl = unsafe { UnixStream::from_raw_fd(fd) };
    if let Err(e) = deskgym_worker::task_app_main(&task, width, height, ctl) {
        eprintln!("deskgym-task-app: {e}");
        std::process::exit(1);
    }
}
