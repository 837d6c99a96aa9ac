//! An env's bubblewrap sandbox: everything the env runs except its Xvfb.
//!
//! Its own user namespace (no capabilities; `user`, uid 1000, home `/home/user` backed
//! by a per-env host directory), pid, IPC and UTS namespaces, a network namespace with
//! only `lo` unless the profile allows the network (which also makes other displays'
//! abstract X sockets unreachable), private `/tmp` and `/run/user/1000`, the env's own X
//! socket as `DISPLAY=:0`, the system read-only, and the server's secrets (token file,
//! data dir) and every other env's directory masked. Its first process is the agent
//! ([`crate::agent`]), reached over a socket in the env's control directory. Dropping a
//! sandbox kills everything in it (pid namespace) and removes its directory.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::agent::{Entry, ExecEnd, ExecSpec, Reply, Request, SessionProgram, SessionSpec};
use crate::error::{DesktopError, Result};
use crate::limits::{Cgroup, set_rlimit};

/// Name of the agent binary.
pub const AGENT_BINARY: &str = "deskgym-sandbox-agent";
/// How long a new sandbox may take to answer its first ping.
const READY_TIMEOUT: Duration = Duration::from_secs(45);
/// First host uid of sandboxes of a server running as root (display `n` gets base + n).
const SANDBOX_UID_BASE: u32 = 2_000_000;
/// Where the control files appear inside the sandbox (read-only).
const CTL: &str = "/run/deskgym";
/// Where the profile's home template appears inside the sandbox (read-only).
const TEMPLATE: &str = "/run/deskgym-template";

/// Per-sandbox resource limits (see [`crate::limits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Most memory its processes may use together, in MiB (a cgroup; else each
    /// process's writable private memory).
    pub memory_mb: u64,
    /// Size of its home and of its `/tmp`, each a tmpfs, in MiB.
    pub disk_mb: u64,
    /// Most open files per process.
    pub open_files: u64,
    /// Most processes `user` may run at once (fork bombs stop there).
    pub processes: u32,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            memory_mb: 4096,
            disk_mb: 2048,
            open_files: 4096,
            processes: 512,
        }
    }
}

/// What a sandbox runs and may reach.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SandboxConfig {
    /// Programs started with the session (window manager, buses...), in order.
    pub session: Vec<SessionProgram>,
    /// Environment of every program in the sandbox.
    pub env: Vec<(String, String)>,
    /// Whether the sandbox may reach the network (else only its own `lo`).
    pub network: bool,
    /// Copied into the home directory at every start (the profile's seed files).
    pub home_template: Option<PathBuf>,
    /// Modes of the template's files in the home (the template itself is readable by
    /// every sandbox's user).
    pub home_modes: Vec<(String, u32)>,
    /// Host paths masked inside (the server's token file and data dir, where they lie
    /// in the system trees a sandbox sees).
    pub hide: Vec<PathBuf>,
    /// The user's password, which the sandbox's `sudo` accepts.
    pub password: String,
    /// Its resource limits.
    pub limits: SandboxLimits,
    /// Host directories shown read-only inside, each at a path under `/run` (a web
    /// task's pages, wherever the host keeps them).
    pub shares: Vec<(PathBuf, String)>,
}

/// Who may answer on a sandbox's agent socket: the process that listens on it must
/// run in the sandbox's own pid namespace (and, under a root server, as its host uid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentPeer {
    /// The agent socket's host path (in a directory only the server can write).
    pub socket: PathBuf,
    /// Inode of the sandbox's pid namespace.
    pidns: u64,
    /// The sandbox's host uid (a root server gives each its own).
    uid: u32,
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
fn peer_cred(fd: std::os::fd::BorrowedFd<'_>) -> Result<(i32, u32)> {
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
fn pid_namespace(pid: i32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/pid"))
        .ok()
        .map(|m| m.ino())
}

/// The parent of `pid`.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// A running sandbox.
#[derive(Debug)]
pub struct Sandbox {
    child: Child,
    dir: PathBuf,
    peer: AgentPeer,
    /// The last bytes the agent and the session wrote to stderr (a pipe, drained by a
    /// thread: the sandbox can neither grow a file of ours nor make us follow one).
    log: Arc<Mutex<Vec<u8>>>,
    /// Its memory cgroup, if the host lets us make one.
    cgroup: Option<Cgroup>,
    limits: SandboxLimits,
}

/// Finds a deskgym helper binary: `$var`, else next to the running executable (or one
/// level up, where cargo puts binaries relative to test executables in `deps/`).
pub fn helper_binary(name: &str, var: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            DesktopError::App(format!(
                "{name} not found next to {}; build it with `cargo build -p deskgym-worker` \
                 or set {var}",
                exe.display()
            ))
        })
}

/// Prefix of the host directories under which each process keeps its sandboxes' files.
const ROOT_PREFIX: &str = "deskgym-sandboxes-";

/// The host directory under which every sandbox of this process keeps its files. No
/// sandbox sees it: each sees only its own control files, bound read-only.
pub fn sandboxes_root() -> PathBuf {
    std::env::temp_dir().join(format!("{ROOT_PREFIX}{}", std::process::id()))
}

/// Removes what sandboxes of deskgym processes that are gone left behind (a server
/// killed with SIGKILL): their directories and memory cgroups. Called at server start.
pub fn sweep_leftovers() -> usize {
    let mut swept = 0;
    if let Ok(d) = std::fs::read_dir(std::env::temp_dir()) {
        for e in d.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .and_then(|n| n.strip_prefix(ROOT_PREFIX))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let alive = Path::new(&format!("/proc/{pid}")).exists();
            if pid != std::process::id() && !alive && std::fs::remove_dir_all(e.path()).is_ok() {
                swept += 1;
            }
        }
    }
    crate::limits::sweep_cgroups();
    swept
}

/// The sandbox's `sudo`: checks the profile's password, then runs the command as
/// `user` (the sandbox already bounds what any command can do).
const SUDO: &str = r#"#!/bin/sh
# deskgym sandbox sudo: asks for the profile's password, then runs the command.
stdin_pw=0
while [ $# -gt 0 ]; do
  case "$1" in
    -S) stdin_pw=1; shift ;;
    -u|-g|-p|-C) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ "$stdin_pw" = 1 ]; then
  IFS= read -r pw || pw=""
else
  printf '[sudo] password for user: ' > /dev/tty 2>/dev/null
  IFS= read -r pw < /dev/tty 2>/dev/null || pw=""
fi
if [ "$pw" != "$(cat /run/deskgym/password)" ]; then
  echo "sudo: incorrect password" >&2
  exit 1
fi
[ $# -eq 0 ] && exit 0
exec "$@"
"#;

/// Chromium flags for every Chromium in a sandbox (Debian's `/usr/bin/chromium`
/// sources `/etc/chromium.d/*`). Nested user namespaces are off in sandboxes, so
/// Chromium's own sandbox cannot start: the env's sandbox is the boundary.
/// `--test-type` keeps the "unsupported flag" bar off the screen, as under ChromeDriver.
const CHROMIUM_FLAGS: &str = "export CHROMIUM_FLAGS=\"$CHROMIUM_FLAGS --no-sandbox --test-type\"\n";

/// The system trees a sandbox sees, read-only (with `/bin`, `/lib`... as the host has
/// them: links into `/usr` on a merged-/usr system). Nothing else of the host shows:
/// not `/opt`, `/srv`, `/mnt`, `/work`, other homes or checkouts.
const SYSTEM: &[&str] = &[
    "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];
/// Parts of `/var` programs read (font caches, D-Bus's machine id).
const SYSTEM_VAR: &[&str] = &["/var/cache/fontconfig", "/var/lib/dbus"];

/// A file whose bytes live in memory (a memfd), for bwrap's `--ro-bind-data`: the
/// sandbox's control files come from descriptors, never from a host path.
fn memfile(bytes: &[u8]) -> Result<std::os::fd::OwnedFd> {
    use std::io::{Seek, SeekFrom};
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create with a NUL-terminated name; the fd is owned right away.
    let fd = unsafe { libc::memfd_create(c"deskgym-ctl".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: a fresh descriptor no one else owns.
    let mut f = std::fs::File::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
    f.write_all(bytes)?;
    // bwrap reads the data from the descriptor's position.
    f.seek(SeekFrom::Start(0))?;
    Ok(f.into())
}

/// The first descriptor number the control files are passed at.
const DATA_FD_BASE: i32 = 10;

/// The agent binary as a sandbox sees it: a hard link in the sandbox's directory, so
/// no sandbox learns where the server's own files are (or, across filesystems, the
/// binary itself).
fn agent_for(dir: &Path) -> Result<PathBuf> {
    let agent = helper_binary(AGENT_BINARY, "DESKGYM_SANDBOX_AGENT")?;
    let link = dir.join("agent");
    Ok(match std::fs::hard_link(&agent, &link) {
        Ok(()) => link,
        Err(_) => agent,
    })
}

/// Makes `dir` with `mode` (ignoring the umask).
fn make_dir(dir: &Path, mode: u32) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// A Unix socket bound at `path`, not yet listening: the agent listens on it, so the
/// socket's peer credentials are the agent's (`SO_PEERCRED` records the listener).
fn bound_socket(path: &Path) -> Result<std::os::fd::OwnedFd> {
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

/// Size of a sandbox's `/run` (bus sockets, the control files, `XDG_RUNTIME_DIR`).
const RUN_SIZE: &str = "67108864";

/// Removes a directory when dropped, unless disarmed.
struct RemoveOnDrop(Option<PathBuf>);

impl RemoveOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The descriptor number the agent finds its socket at.
pub const AGENT_FD: i32 = 3;

impl Sandbox {
    /// Starts a sandbox on `display` and waits until its agent answers.
    ///
    /// Host layout, all made by this process before the sandbox starts: `<dir>/` (mode
    /// 0711, the server's) holds `agent.sock` (bound here, listened on by the agent
    /// through an inherited descriptor) and `ctl/` (session spec, passwd, sudo: bound
    /// read-only at `/run/deskgym`). The home and `/tmp` are size-limited tmpfs mounts
    /// of the sandbox's own, filled from the profile's template by the agent, so
    /// nothing the tenant writes exists on a host path the server (or Xvfb, which runs
    /// as the server's user) could be made to follow.
    pub fn start(display: u32, cfg: &SandboxConfig) -> Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = sandboxes_root();
        make_dir(&root, 0o711)?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("{display}-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        make_dir(&dir, 0o711)?;
        // Until the sandbox owns it (its Drop removes it), a failed start removes it.
        let cleanup = RemoveOnDrop(Some(dir.clone()));
        // A server running as root gives each sandbox its own unprivileged host uid, so
        // its files and processes are its own (and the process limit counts only its
        // processes: the kernel exempts root from RLIMIT_NPROC altogether).
        // SAFETY: plain syscalls without arguments.
        let (euid, uid) = unsafe { (libc::geteuid(), libc::getuid()) };
        let host_uid = (euid == 0).then_some(SANDBOX_UID_BASE + display);
        let session = SessionSpec {
            session: cfg.session.clone(),
            env: cfg.env.clone(),
            home_template: cfg.home_template.as_ref().map(|_| TEMPLATE.to_string()),
            home_modes: cfg.home_modes.clone(),
        };
        let session = serde_json::to_vec(&session).map_err(std::io::Error::other)?;
        // (inside path, mode, bytes): read-only files in the sandbox's own tmpfs.
        let mut data: Vec<(&str, &str, &[u8])> = vec![
            ("/run/deskgym/session.json", "0644", &session),
            ("/run/deskgym/password", "0644", cfg.password.as_bytes()),
            ("/run/deskgym/bin/sudo", "0755", SUDO.as_bytes()),
            (
                "/etc/passwd",
                "0644",
                b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/bash\n\
                  nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
            ),
            (
                "/etc/group",
                "0644",
                b"root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n",
            ),
        ];
        let chromium_d = Path::new("/etc/chromium.d");
        if chromium_d.is_dir() {
            data.push((
                "/etc/chromium.d/zz-deskgym",
                "0644",
                CHROMIUM_FLAGS.as_bytes(),
            ));
        }
        // (At most 15 with the socket: the child moves them in a fixed-size array.)
        debug_assert!(data.len() < 16);
        let data_fds = data
            .iter()
            .map(|(_, _, bytes)| memfile(bytes))
            .collect::<Result<Vec<_>>>()?;
        let socket_path = dir.join("agent.sock");
        let socket = bound_socket(&socket_path)?;
        let agent = agent_for(&dir)?;
        let x_socket = format!("/tmp/.X11-unix/X{display}");
        let lim = cfg.limits;
        let disk = (lim.disk_mb.max(16) << 20).to_string();
        let mut cmd = Command::new(bwrap_binary()?);
        cmd.env_clear()
            .args(["--unshare-user", "--uid", "1000", "--gid", "1000"])
            .args([
                "--unshare-pid",
                "--unshare-ipc",
                "--unshare-uts",
                "--unshare-cgroup-try",
            ])
            // No user namespaces inside: their kernel surface is the tenant's way out.
            .arg("--disable-userns")
            .args(["--hostname", "deskgym"])
            .args(["--die-with-parent", "--new-session"]);
        if !cfg.network {
            cmd.arg("--unshare-net");
        }
        for p in SYSTEM.iter().chain(SYSTEM_VAR) {
            let path = Path::new(p);
            match std::fs::read_link(path) {
                Ok(target) => {
                    cmd.arg("--symlink").arg(target).arg(path);
                }
                Err(_) if path.is_dir() => {
                    cmd.arg("--ro-bind").arg(path).arg(path);
                }
                Err(_) => {}
            }
        }
        // Every writable mount is a tmpfs with a size (else half the host's memory
        // each); the rest is made read-only at the end.
        cmd.args(["--ro-bind", "/sys", "/sys", "--tmpfs", "/sys/fs/cgroup"])
            .args(["--remount-ro", "/sys/fs/cgroup"])
            .args(["--dev", "/dev", "--proc", "/proc"])
            .args(["--perms", "1777", "--size", &disk, "--tmpfs", "/dev/shm"])
            .args(["--size", RUN_SIZE, "--tmpfs", "/run"])
            .args(["--perms", "1777", "--size", &disk, "--tmpfs", "/var/tmp"])
            .args(["--dir", "/root"]);
        let shown = |p: &Path| SYSTEM.iter().chain(SYSTEM_VAR).any(|s| p.starts_with(s));
        for h in cfg.hide.iter().filter(|h| shown(h)) {
            if h.is_dir() {
                cmd.arg("--tmpfs").arg(h);
            } else if h.exists() {
                cmd.args(["--ro-bind", "/dev/null"]).arg(h);
            }
        }
        if chromium_d.is_dir() {
            // The host's files, and deskgym's beside them (below).
            cmd.args(["--tmpfs", "/etc/chromium.d"]);
            for e in std::fs::read_dir(chromium_d)?.flatten() {
                if e.file_type().is_ok_and(|t| t.is_file()) {
                    cmd.arg("--ro-bind").arg(e.path()).arg(e.path());
                }
            }
        }
        for (host, inside) in &cfg.shares {
            cmd.arg("--ro-bind").arg(host).arg(inside);
        }
        if let Some(t) = &cfg.home_template {
            cmd.arg("--ro-bind").arg(t).arg(TEMPLATE);
        }
        cmd.args(["--perms", "0700", "--size", &disk, "--tmpfs", "/home/user"])
            .args(["--perms", "1777", "--size", &disk, "--tmpfs", "/tmp"])
            .args([
                "--dir",
                "/tmp/.X11-unix",
                "--bind",
                &x_socket,
                "/tmp/.X11-unix/X0",
            ])
            .arg("--ro-bind")
            .arg(&agent)
            .arg("/run/deskgym-agent")
            .args([
                "--dir",
                "/run/user/1000",
                "--chmod",
                "0700",
                "/run/user/1000",
            ])
            .args(["--chdir", "/home/user"]);
        let path = "/run/deskgym/bin:/home/user/.local/bin:/usr/local/bin:/usr/bin:/bin";
        let base = [
            ("HOME", "/home/user"),
            ("USER", "user"),
            ("LOGNAME", "user"),
            ("SHELL", "/bin/bash"),
            ("DISPLAY", ":0"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("PATH", path),
        ];
        for (k, v) in base {
            cmd.args(["--setenv", k, v]);
        }
        for (k, v) in &cfg.env {
            cmd.arg("--setenv").arg(k).arg(v);
        }
        // A mount of its own, so it can be made read-only once filled.
        cmd.args(["--perms", "0755", "--tmpfs", CTL]);
        for (i, (inside, mode, _)) in data.iter().enumerate() {
            let fd = (DATA_FD_BASE + i as i32).to_string();
            cmd.args(["--perms", mode, "--ro-bind-data", &fd, inside]);
        }
        // Nothing can be added beside the control files either, nor anywhere but the
        // sized mounts.
        cmd.args(["--remount-ro", CTL]);
        if chromium_d.is_dir() {
            cmd.args(["--remount-ro", "/etc/chromium.d"]);
        }
        cmd.args(["--remount-ro", "/dev", "--remount-ro", "/"]);
        let max_processes = u64::from(lim.processes.max(16))
            + if host_uid.is_some() {
                0
            } else {
                processes_of_this_uid()
            };
        let cgroup = Cgroup::create(&format!("{display}-{n}"), lim.memory_mb.max(64) << 20)?;
        let (log_read, log_write) = std::io::pipe()?;
        cmd.arg("--")
            .arg("/run/deskgym-agent")
            .arg(format!("fd:{AGENT_FD}"))
            .arg(format!("{CTL}/session.json"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_write)
            .process_group(0);
        let sock_fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
        let data_raw: Vec<i32> = data_fds
            .iter()
            .map(std::os::fd::AsRawFd::as_raw_fd)
            .collect();
        let memory = lim.memory_mb.max(64) << 20;
        let open_files = lim.open_files.max(64);
        let cg = cgroup.as_ref().map(|c| c as *const Cgroup as usize);
        // SAFETY: only async-signal-safe calls (open/write, dup2, fcntl, setgroups,
        // setgid, setuid, prctl, setrlimit) between fork and exec; `cg` points at the
        // cgroup this function owns until after spawn returns.
        unsafe {
            cmd.pre_exec(move || {
                if let Some(cg) = cg {
                    // Before dropping root: a cgroup's procs file is root's to write.
                    (*(cg as *const Cgroup)).enter_from_child()?;
                }
                // The agent's socket and the control files at fixed numbers, kept
                // across exec. First out of the way (a source may sit on a target
                // number), then into place (dup2 clears close-on-exec).
                let mut moved = [0i32; 16];
                let sources = std::iter::once(sock_fd).chain(data_raw.iter().copied());
                for (slot, from) in moved.iter_mut().zip(sources) {
                    *slot = libc::fcntl(from, libc::F_DUPFD_CLOEXEC, 256);
                    if *slot < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                let targets = std::iter::once(AGENT_FD)
                    .chain((0..data_raw.len() as i32).map(|i| DATA_FD_BASE + i));
                for (from, to) in moved.iter().zip(targets) {
                    if libc::dup2(*from, to) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(uid) = host_uid
                    && (libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(uid) != 0
                        || libc::setuid(uid) != 0)
                {
                    return Err(std::io::Error::last_os_error());
                }
                // After the uid change, which clears it.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                set_rlimit(libc::RLIMIT_NPROC, max_processes);
                set_rlimit(libc::RLIMIT_NOFILE, open_files);
                if cg.is_none() {
                    set_rlimit(libc::RLIMIT_DATA, memory);
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| DesktopError::App(format!("cannot start bwrap: {e}")))?;
        cleanup.disarm();
        drop((socket, data_fds));
        let log = Arc::new(Mutex::new(Vec::new()));
        spawn_log_reader(log_read, log.clone());
        let peer = AgentPeer {
            socket: socket_path,
            pidns: 0,
            uid: host_uid.unwrap_or(uid),
        };
        let mut sb = Self {
            child,
            dir,
            peer,
            log,
            cgroup,
            limits: lim,
        };
        sb.wait_ready()?;
        Ok(sb)
    }

    /// How to reach the agent, and whom to expect there (for the server's own
    /// async connections, such as port tunnels).
    pub fn agent(&self) -> AgentPeer {
        self.peer.clone()
    }

    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut pause = Duration::from_millis(1);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(DesktopError::App(format!(
                    "the sandbox exited at start ({status}): {}",
                    self.log_tail()
                )));
            }
            if let Ok(conn) = UnixStream::connect(&self.peer.socket) {
                // The first answer fixes whom to expect: a process in a pid namespace
                // whose first process is a child of our bwrap.
                if let Ok((pid, uid)) = peer_cred(conn.as_fd()) {
                    let ours = std::iter::successors(Some(pid), |p| parent_of(*p))
                        .take(4)
                        .any(|p| p == self.child.id() as i32);
                    if ours
                        && uid == self.peer.uid
                        && let Some(ns) = pid_namespace(pid)
                    {
                        self.peer.pidns = ns;
                    }
                }
                drop(conn);
                if self.peer.pidns != 0
                    && let Ok((Reply::Ready, _)) = self.call(&Request::Ping, &[], READY_TIMEOUT)
                {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(DesktopError::App(format!(
                    "the sandbox did not answer within {} s: {}",
                    READY_TIMEOUT.as_secs(),
                    self.log_tail()
                )));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// The end of the agent's and the session's stderr (for error messages).
    fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let start = log.len().saturating_sub(400);
        String::from_utf8_lossy(&log[start..]).trim().to_string()
    }

    /// One request/reply exchange with the agent; what follows the reply line (an
    /// exec's output, a file's data) is read from the returned reader.
    fn call(
        &self,
        req: &Request,
        body: &[u8],
        bound: Duration,
    ) -> Result<(Reply, BufReader<UnixStream>)> {
        let mut conn = self.connect_agent(bound)?;
        let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
        line.push(b'\n');
        conn.write_all(&line)?;
        conn.write_all(body)?;
        let mut conn = BufReader::new(conn);
        let reply = read_line(&mut conn)?;
        let reply: Reply = serde_json::from_str(&reply)
            .map_err(|e| DesktopError::App(format!("the sandbox agent answered {reply:?}: {e}")))?;
        if let Reply::Busy { message } = reply {
            return Err(DesktopError::Limit(message));
        }
        Ok((reply, conn))
    }

    /// A connection to this sandbox's own agent, checked.
    fn connect_agent(&self, bound: Duration) -> Result<UnixStream> {
        let conn = UnixStream::connect(&self.peer.socket)?;
        self.peer.verify(conn.as_fd())?;
        conn.set_read_timeout(Some(bound))?;
        conn.set_write_timeout(Some(bound))?;
        Ok(conn)
    }

    /// Turns an exec that the kernel's memory bound killed into a limit error.
    fn over_memory(&self, oom_before: u64) -> Option<DesktopError> {
        let cg = self.cgroup.as_ref()?;
        (cg.oom_kills() > oom_before).then(|| {
            DesktopError::Limit(format!(
                "the desktop reached its memory limit of {} MiB and the kernel killed a \
                 process in it",
                self.limits.memory_mb
            ))
        })
    }

    /// Runs a command as `user` and waits for it (at most its time bound, plus a margin
    /// for the agent to report).
    pub fn exec(&self, spec: &ExecSpec, stdin: &[u8]) -> Result<(ExecEnd, Vec<u8>, Vec<u8>)> {
        let spec = ExecSpec {
            stdin_len: stdin.len(),
            ..spec.clone()
        };
        let bound = Duration::from_millis(spec.timeout_ms) + Duration::from_secs(5);
        let spec_max = spec.max_output;
        let oom_before = self.cgroup.as_ref().map_or(0, Cgroup::oom_kills);
        let (reply, mut conn) = self.call(&Request::Exec(spec), stdin, bound)?;
        match reply {
            Reply::Exec(end) => {
                // A command that failed while the kernel's memory bound killed in this
                // desktop (it, or a child of its shell: "exit 137"): the limit is the
                // answer, not a command that "exited on signal 9".
                if end.exit_code != Some(0)
                    && !end.timed_out
                    && let Some(e) = self.over_memory(oom_before)
                {
                    return Err(e);
                }
                // The agent shares its uid with the untrusted code it runs: its claims
                // are bounded before anything is allocated on them.
                if end.stdout_len.max(end.stderr_len) > spec_max {
                    return Err(untrusted("more output than it was asked to keep"));
                }
                let mut out = vec![0; end.stdout_len];
                conn.read_exact(&mut out)?;
                let mut err = vec![0; end.stderr_len];
                conn.read_exact(&mut err)?;
                Ok((end, out, err))
            }
            Reply::Failed { message } => Err(self
                .over_memory(oom_before)
                .unwrap_or(DesktopError::Exec(message))),
            other => Err(untrusted(other.kind())),
        }
    }

    /// A byte stream to TCP `port` on the sandbox's own loopback (the agent's
    /// `Connect`), with `bound` as its read and write timeout. `Exec` when nothing
    /// accepts on the port (yet).
    pub fn connect(&self, port: u16, bound: Duration) -> Result<UnixStream> {
        let mut conn = self.connect_agent(bound)?;
        let mut line =
            serde_json::to_vec(&Request::Connect { port }).map_err(std::io::Error::other)?;
        line.push(b'\n');
        conn.write_all(&line)?;
        // Byte by byte: what follows the reply line is the port's, not ours to buffer.
        let mut reply = Vec::with_capacity(64);
        let mut byte = [0u8; 1];
        while reply.len() < 4096 {
            if conn.read(&mut byte)? == 0 {
                break;
            }
            if byte[0] == b'\n' {
                break;
            }
            reply.push(byte[0]);
        }
        match serde_json::from_slice::<Reply>(&reply) {
            Ok(Reply::Connected) => Ok(conn),
            Ok(Reply::Busy { message }) => Err(DesktopError::Limit(message)),
            Ok(Reply::Failed { message }) => Err(DesktopError::Exec(message)),
            Ok(other) => Err(untrusted(other.kind())),
            Err(_) => Err(untrusted("a cut Connect reply")),
        }
    }

    /// Starts a program detached; returns its pid inside the sandbox.
    pub fn launch(&self, argv: &[String]) -> Result<u32> {
        let req = Request::Launch {
            argv: argv.to_vec(),
        };
        match self.call(&req, &[], Duration::from_secs(10))?.0 {
            Reply::Launched { pid } => Ok(pid),
            Reply::Failed { message } => Err(DesktopError::Exec(message)),
            other => Err(untrusted(other.kind())),
        }
    }

    /// Reads at most `max` bytes of a file from `offset`: (file size, data, eof).
    pub fn read_file(&self, path: &str, offset: u64, max: u64) -> Result<(u64, Vec<u8>, bool)> {
        let req = Request::Read {
            path: path.into(),
            offset,
            max,
        };
        match self.call(&req, &[], FILE_TIMEOUT)? {
            (Reply::Read { size, len, eof }, mut conn) => {
                if len as u64 > max {
                    return Err(untrusted("more file data than it was asked for"));
                }
                let mut data = vec![0; len];
                conn.read_exact(&mut data)?;
                Ok((size, data, eof))
            }
            (other, _) => Err(file_error(other)),
        }
    }

    /// Writes `data` at `offset` (0 creates or truncates); the file's size after.
    pub fn write_file(&self, path: &str, offset: u64, mode: u32, data: &[u8]) -> Result<u64> {
        let req = Request::Write {
            path: path.into(),
            offset,
            mode,
            len: data.len(),
        };
        match self.call(&req, data, FILE_TIMEOUT)?.0 {
            Reply::Written { size } => Ok(size),
            other => Err(file_error(other)),
        }
    }

    /// Lists a directory: (resolved path, entries, truncated).
    pub fn list_dir(
        &self,
        path: &str,
        depth: u32,
        max: usize,
    ) -> Result<(String, Vec<Entry>, bool)> {
        let req = Request::List {
            path: path.into(),
            depth,
            max,
        };
        match self.call(&req, &[], FILE_TIMEOUT)?.0 {
            Reply::Listed {
                path,
                entries,
                truncated,
            } if entries.len() <= max => Ok((path, entries, truncated)),
            Reply::Listed { .. } => Err(untrusted("more entries than it was asked for")),
            other => Err(file_error(other)),
        }
    }

    /// Walks the session's accessibility tree (the agent enforces `limits`; the worker
    /// bounds the answer's size).
    pub fn a11y_tree(&self, limits: &crate::a11y::Limits) -> Result<crate::a11y::Tree> {
        let req = Request::A11yTree { limits: *limits };
        let bound = Duration::from_millis(limits.timeout_ms) + Duration::from_secs(5);
        match self.call(&req, &[], bound)? {
            (Reply::Tree { len }, mut conn) => {
                if len > MAX_TREE_BYTES {
                    return Err(untrusted("a tree over the size limit"));
                }
                let mut body = vec![0; len];
                conn.read_exact(&mut body)?;
                let tree: crate::a11y::Tree = serde_json::from_slice(&body)
                    .map_err(|e| untrusted(&format!("an unreadable tree ({e})")))?;
                if tree.nodes.len() > limits.max_nodes as usize
                    || tree
                        .nodes
                        .iter()
                        .enumerate()
                        .any(|(i, n)| n.parent.is_some_and(|p| p as usize >= i))
                {
                    return Err(untrusted("a tree out of order or over its limit"));
                }
                Ok(tree)
            }
            (other, _) => Err(element_error(other)),
        }
    }

    /// What one element is now.
    pub fn a11y_live(&self, id: &str) -> Result<crate::a11y::Live> {
        let req = Request::A11yLive { id: id.into() };
        match self.call(&req, &[], ELEMENT_TIMEOUT)?.0 {
            Reply::Live(live) => Ok(live),
            other => Err(element_error(other)),
        }
    }

    /// Performs an element's action.
    pub fn a11y_invoke(&self, id: &str, action: &str) -> Result<()> {
        self.element_call(Request::A11yInvoke {
            id: id.into(),
            action: action.into(),
        })
    }

    /// Sets an element's text or number.
    pub fn a11y_set_value(&self, id: &str, value: &str) -> Result<()> {
        self.element_call(Request::A11ySetValue {
            id: id.into(),
            value: value.into(),
        })
    }

    fn element_call(&self, req: Request) -> Result<()> {
        match self.call(&req, &[], ELEMENT_TIMEOUT)?.0 {
            Reply::Done => Ok(()),
            other => Err(element_error(other)),
        }
    }

    /// False once the sandbox's first process has exited.
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Pid of the `bwrap` process (killing it ends the sandbox).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// How long one file request may take (a large file on a slow disk).
const FILE_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest tree the worker reads from the agent.
const MAX_TREE_BYTES: usize = 64 << 20;
/// How long one element request may take (the agent's D-Bus calls time out sooner).
const ELEMENT_TIMEOUT: Duration = Duration::from_secs(10);

fn element_error(r: Reply) -> DesktopError {
    match r {
        Reply::ElementError { failure, message } => DesktopError::Element { failure, message },
        other => untrusted(other.kind()),
    }
}

fn file_error(r: Reply) -> DesktopError {
    match r {
        Reply::FileError { kind, message } => DesktopError::File { kind, message },
        other => untrusted(other.kind()),
    }
}

/// Longest reply line (a directory listing of `max_list_entries` fits).
const MAX_REPLY_LINE: u64 = 16 << 20;

/// An agent reply that breaks the protocol. The agent runs with the uid of the code in
/// the sandbox, which could replace it: the worker trusts none of its numbers.
/// Not fatal: the sandbox may be fine, only this answer is not.
fn untrusted(what: &str) -> DesktopError {
    DesktopError::Exec(format!("the sandbox agent answered {what}"))
}

/// Reads the reply line (bounded: an agent cannot make the worker buffer without end).
fn read_line(conn: &mut BufReader<UnixStream>) -> Result<String> {
    let mut line = Vec::with_capacity(256);
    conn.by_ref()
        .take(MAX_REPLY_LINE)
        .read_until(b'\n', &mut line)?;
    if line.pop() != Some(b'\n') {
        return Err(untrusted(
            "a cut or overlong reply line (is the sandbox at its process limit?)",
        ));
    }
    String::from_utf8(line).map_err(|e| DesktopError::App(format!("agent reply: {e}")))
}

/// Processes the host runs as this process's real uid (what `RLIMIT_NPROC` counts).
fn processes_of_this_uid() -> u64 {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: plain syscall without arguments.
    let uid = unsafe { libc::getuid() };
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                })
                .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
                .count() as u64
        })
        .unwrap_or(0)
}

/// Keeps the last [`LOG_KEEP`] bytes the sandbox writes to its stderr pipe.
fn spawn_log_reader(mut pipe: std::io::PipeReader, log: Arc<Mutex<Vec<u8>>>) {
    let _ = std::thread::Builder::new()
        .name("sandbox-log".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                log.extend_from_slice(&buf[..n]);
                if log.len() > 2 * LOG_KEEP {
                    let cut = log.len() - LOG_KEEP;
                    log.drain(..cut);
                }
            }
        });
}

/// Bytes of a sandbox's stderr kept for error messages.
const LOG_KEEP: usize = 4096;

fn bwrap_binary() -> Result<PathBuf> {
    which("bwrap").ok_or_else(|| {
        DesktopError::App(
            "bwrap not found: install the Debian package bubblewrap (scripts/setup.sh \
             --desktop)"
                .into(),
        )
    })
}

/// Looks a program up on `PATH` (or takes an existing absolute path).
pub fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/libexec")])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // SIGKILL to bwrap's group: its pid-namespace init dies (PDEATHSIG), and the
        // kernel ends every process in the namespace with it.
        // SAFETY: plain syscall on the sandbox's own process group.
        unsafe { libc::killpg(self.child.id() as libc::pid_t, libc::SIGKILL) };
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        // The cgroup (a field) goes after this, once the processes are gone.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A sandbox whose "agent" is this test: it answers `reply` to one request.
    fn impostor(tag: &str, reply: &'static str) -> Sandbox {
        let dir =
            std::env::temp_dir().join(format!("deskgym-impostor-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("agent.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        // SAFETY: plain syscall without arguments.
        let uid = unsafe { libc::getuid() };
        std::thread::spawn(move || {
            if let Ok((mut c, _)) = listener.accept() {
                let mut line = String::new();
                let _ = BufReader::new(c.try_clone().unwrap()).read_line(&mut line);
                let _ = c.write_all(reply.as_bytes());
            }
        });
        let child = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        Sandbox {
            child,
            dir,
            peer: AgentPeer {
                socket,
                pidns: pid_namespace(std::process::id() as i32).unwrap(),
                uid,
            },
            log: Arc::default(),
            cgroup: None,
            limits: SandboxLimits::default(),
        }
    }

    /// The agent shares its uid with the code it runs, which could replace it: lying
    /// lengths must be errors, never allocations that abort the server.
    #[test]
    fn an_agent_that_lies_gets_an_error_not_an_abort() {
        let spec = ExecSpec {
            argv: vec!["true".into()],
            timeout_ms: 1000,
            max_output: 1024,
            ..Default::default()
        };
        let sb = impostor(
            "exec",
            "{\"reply\":\"exec\",\"exit_code\":0,\"signal\":null,\"stdout_len\":1000000000000,\
             \"stderr_len\":0,\"stdout_truncated\":false,\"stderr_truncated\":false,\
             \"timed_out\":false,\"duration_ms\":1.0}\n",
        );
        let e = sb.exec(&spec, &[]).unwrap_err();
        assert!(e.to_string().contains("more output"), "{e}");
        let sb = impostor(
            "read",
            "{\"reply\":\"read\",\"size\":1,\"len\":999999999999,\"eof\":true}\n",
        );
        let e = sb.read_file("x", 0, 10).unwrap_err();
        assert!(e.to_string().contains("more file data"), "{e}");
        let sb = impostor("garbage", "not json\n");
        assert!(sb.exec(&spec, &[]).is_err());
    }
}
