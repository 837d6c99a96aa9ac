//! Per-sandbox resource limits: memory (a cgroup of its own where the host lets this
//! process make one, else `RLIMIT_DATA`), open files (`RLIMIT_NOFILE`) and processes
//! (`RLIMIT_NPROC`). Disk is bounded by the size of the sandbox's tmpfs home and
//! `/tmp` (see [`crate::sandbox`]).
//!
//! A cgroup is the real bound: the kernel charges every page a sandbox's processes
//! touch (tmpfs files included) and, at the limit, kills inside that cgroup only.
//! `RLIMIT_DATA` bounds each process's writable private memory instead (heap and
//! anonymous mappings; not the address space, which V8 reserves by the terabyte and
//! `RLIMIT_AS` would make Chromium crash on): a single process cannot take the host,
//! but many processes of one sandbox together can exceed the figure.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How memory is bounded on this host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryBound {
    /// A cgroup v2 per sandbox (`memory.max`, no swap).
    CgroupV2(PathBuf),
    /// A cgroup v1 memory controller group per sandbox (`memory.limit_in_bytes`).
    CgroupV1(PathBuf),
    /// `RLIMIT_DATA` per process (no cgroup this process may create).
    Rlimit,
}

impl MemoryBound {
    /// The name GetCapabilities reports: `cgroup2`, `cgroup1` or `rlimit_data`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::CgroupV2(_) => "cgroup2",
            Self::CgroupV1(_) => "cgroup1",
            Self::Rlimit => "rlimit_data",
        }
    }
}

/// The memory bound this process can apply, found once: a cgroup directory of ours
/// (`deskgym-<pid>` under the cgroup this process runs in) that we could create, with
/// the memory controller on; `RLIMIT_DATA` without one, or with
/// `DESKGYM_SANDBOX_CGROUPS=0` in the environment.
pub fn memory_bound() -> &'static MemoryBound {
    static BOUND: OnceLock<MemoryBound> = OnceLock::new();
    BOUND.get_or_init(|| detect().unwrap_or(MemoryBound::Rlimit))
}

fn detect() -> Option<MemoryBound> {
    // The operator (or a test of the fallback) may turn cgroups off.
    if std::env::var_os("DESKGYM_SANDBOX_CGROUPS").is_some_and(|v| v == "0") {
        return None;
    }
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let name = format!("deskgym-{}", std::process::id());
    // cgroup v2: the unified hierarchy with the memory controller available.
    let v2 = Path::new("/sys/fs/cgroup");
    if let Some(rel) = own.lines().find_map(|l| l.strip_prefix("0::")) {
        let base = v2.join(rel.trim_start_matches('/'));
        let controllers = std::fs::read_to_string(base.join("cgroup.controllers")).ok();
        if controllers.is_some_and(|c| c.split_whitespace().any(|w| w == "memory")) {
            let dir = base.join(&name);
            if std::fs::create_dir_all(&dir).is_ok() {
                // Children of ours get the controller only when we hand it down.
                let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+memory +pids");
                if dir.join("cgroup.subtree_control").exists() {
                    return Some(MemoryBound::CgroupV2(dir));
                }
            }
        }
    }
    // cgroup v1: the memory controller's own hierarchy.
    let rel = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| path.to_string())
    })?;
    let dir = Path::new("/sys/fs/cgroup/memory")
        .join(rel.trim_start_matches('/'))
        .join(&name);
    (std::fs::create_dir_all(&dir).is_ok() && dir.join("memory.limit_in_bytes").exists())
        .then_some(MemoryBound::CgroupV1(dir))
}

/// Removes this process's cgroup directory (at process exit, children first: call it
/// only when no sandbox of this process can be starting).
pub fn remove_cgroups() {
    if let MemoryBound::CgroupV1(dir) | MemoryBound::CgroupV2(dir) = memory_bound() {
        if let Ok(d) = std::fs::read_dir(dir) {
            for e in d.flatten() {
                let _ = std::fs::remove_dir(e.path());
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
}

/// Sweeps cgroups left by deskgym processes that are gone (killed with SIGKILL).
pub(crate) fn sweep_cgroups() {
    let Some(parent) = (match memory_bound() {
        MemoryBound::CgroupV1(d) | MemoryBound::CgroupV2(d) => d.parent(),
        MemoryBound::Rlimit => None,
    }) else {
        return;
    };
    let Ok(d) = std::fs::read_dir(parent) else {
        return;
    };
    for e in d.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("deskgym-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            if let Ok(children) = std::fs::read_dir(e.path()) {
                for c in children.flatten() {
                    let _ = std::fs::remove_dir(c.path());
                }
            }
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// One sandbox's memory cgroup, removed on drop (once its processes are gone).
#[derive(Debug)]
pub(crate) struct Cgroup {
    dir: PathBuf,
    /// `cgroup.procs`, as the child writes itself into it before exec.
    procs: CString,
    v2: bool,
}

impl Cgroup {
    /// Makes the cgroup `name` with a memory limit of `bytes` (no swap beyond it).
    pub(crate) fn create(name: &str, bytes: u64) -> std::io::Result<Option<Self>> {
        let (base, v2) = match memory_bound() {
            MemoryBound::CgroupV2(d) => (d, true),
            MemoryBound::CgroupV1(d) => (d, false),
            MemoryBound::Rlimit => return Ok(None),
        };
        let dir = base.join(name);
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir_all(&dir)?;
        if v2 {
            std::fs::write(dir.join("memory.max"), bytes.to_string())?;
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
        } else {
            std::fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string())?;
            // Present only with swap accounting; then swap counts against the same bound.
            let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), bytes.to_string());
        }
        let procs = CString::new(
            dir.join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .map_err(std::io::Error::other)?;
        Ok(Some(Self { dir, procs, v2 }))
    }

    /// Moves the calling process into this cgroup. Only async-signal-safe calls: it
    /// runs between fork and exec.
    pub(crate) fn enter_from_child(&self) -> std::io::Result<()> {
        // SAFETY: open/write/close on a NUL-terminated path prepared before the fork.
        unsafe {
            let fd = libc::open(self.procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // "0" is the writing process itself.
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
            if n != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// How many times the kernel killed a process here for memory.
    pub(crate) fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The sandbox was killed just before: its processes may take a moment to leave.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// Sets a resource limit (soft and hard) on the calling process; async-signal-safe.
pub(crate) fn set_rlimit(resource: libc::__rlimit_resource_t, value: u64) {
    let lim = libc::rlimit {
        rlim_cur: value as libc::rlim_t,
        rlim_max: value as libc::rlim_t,
    };
    // SAFETY: plain syscall on the calling process.
    unsafe { libc::setrlimit(resource, &lim) };
}

/// Raises this process's open-file limit to its hard limit (a server holds a
/// descriptor per connection and several per desktop); returns the new soft limit.
pub fn raise_open_files() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on this process with a valid pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    lim.rlim_cur
}
