//! Which deskgym process still owns its host directories in the temp dir
//! (`deskgym-displays-<pid>`, `deskgym-sandboxes-<pid>`).
//!
//! A server sweeps what dead deskgym processes left behind. `/proc/<pid>` answers only
//! within one PID namespace: a process in another one (a container or CI job sharing
//! `/tmp`) looks dead, and sweeping its directories breaks its next desktop start
//! ("No such file or directory"). So each process holds an exclusive `flock` on
//! `deskgym-owner-<pid>.lock` for its whole life, taken before it makes any directory;
//! the kernel drops the lock when the process dies, in whatever namespace it ran.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The lock file of `pid`'s process.
fn lock_path(pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("deskgym-owner-{pid}.lock"))
}

/// Takes this process's owner lock (once; later calls are free). Call before making a
/// directory that [`is_gone`] guards. Without a lock (a read-only temp dir), sweepers
/// fall back to `/proc`, as before.
pub(crate) fn claim() {
    static HELD: OnceLock<Option<File>> = OnceLock::new();
    HELD.get_or_init(|| {
        let path = lock_path(std::process::id());
        // A sweeper may unlink a stale file of the same name (a pid reused from a dead
        // process) between our open and our flock: lock, then check that the path is
        // still the file we hold.
        for _ in 0..8 {
            let f = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .ok()?;
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return None;
            }
            let same = match (f.metadata(), std::fs::metadata(&path)) {
                (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
                _ => false,
            };
            if same {
                return Some(f);
            }
        }
        None
    });
}

/// Removes this process's lock file, at exit once its directories are gone (the lock
/// itself ends with the process).
pub fn release() {
    let _ = std::fs::remove_file(lock_path(std::process::id()));
}

/// True when `pid`'s deskgym process is certainly gone: not this process, no
/// `/proc/<pid>` here, and its owner lock (if it ever took one) free. A lock file left by
/// a dead owner is removed, under its lock.
pub(crate) fn is_gone(pid: u32) -> bool {
    if pid == std::process::id() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return false;
    }
    let path = lock_path(pid);
    let Ok(f) = File::options().write(true).open(&path) else {
        // No lock file: a process of a version before locks, or one that never made a
        // directory; `/proc` said it is gone.
        return true;
    };
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return false;
    }
    let _ = std::fs::remove_file(&path);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_owner_in_another_namespace_is_not_gone() {
        // A pid that does not exist here (beyond pid_max) stands for a process whose
        // `/proc` entry this namespace cannot see; it holds its lock.
        let pid = 4_194_304 + 17;
        let path = lock_path(pid);
        let held = File::create(&path).unwrap();
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
        assert!(!is_gone(pid), "its lock is held");
        assert!(path.exists());
        drop(held);
        assert!(is_gone(pid), "the lock died with its owner");
        assert!(!path.exists(), "the stale lock file is removed");
        assert!(is_gone(pid), "no file, no /proc entry: gone");
    }

    #[test]
    fn this_process_is_never_gone() {
        claim();
        assert!(!is_gone(std::process::id()));
        assert!(lock_path(std::process::id()).exists());
    }
}
