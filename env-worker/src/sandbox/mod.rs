//! An env's bubblewrap sandbox: everything the env runs except its Xvfb.
//!
//! Its own user namespace (no capabilities; `user`, uid 1000), pid, IPC and UTS
//! namespaces, a network namespace of its own (only `lo`, unless granted the network:
//! [`network`]; either way other displays' abstract X sockets are unreachable), no nested user
//! namespaces, the system trees read-only and nothing else of the host, a size-limited
//! tmpfs home and `/tmp`, the env's own X socket as `DISPLAY=:0` with its cookie
//! (`XAUTHORITY`, a read-only control file), and its limits
//! ([`crate::limits`]). Its first process is the agent ([`crate::agent`]), reached over a
//! socket the worker bound where no sandbox sees it. Dropping a sandbox kills everything
//! in it (pid namespace) and removes its directory.
//!
//! This file starts and stops a sandbox; [`peer`] checks who answers on the agent's
//! socket; `calls` is the worker's side of the agent's requests.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::agent::{Reply, Request, SessionProgram, SessionSpec};
use crate::error::{DesktopError, Result};
use crate::limits::{Cgroup, set_rlimit};

mod calls;
mod network;
mod peer;
mod policy;
mod system_files;

pub use peer::AgentPeer;
use peer::{bound_socket, parent_of, peer_cred, pid_namespace};
use policy::{HostView, Places};
pub use system_files::{MAX_SYSTEM_FILES, SystemFile, refuse_system_path, system_dir_on_host};

/// Name of the agent binary.
pub(crate) const AGENT_BINARY: &str = "deskgym-sandbox-agent";
/// How long a new sandbox may take to answer its first ping.
const READY_TIMEOUT: Duration = Duration::from_secs(45);
/// First host uid of sandboxes of a server running as root (display `n` gets base + n).
const SANDBOX_UID_BASE: u32 = 2_000_000;
/// Where the control files appear inside the sandbox (read-only).
const CTL: &str = "/run/deskgym";
/// Where the profile's home template appears inside the sandbox (read-only).
const TEMPLATE: &str = "/run/deskgym-template";
/// The sandbox's host name (what its FamilyLocal Xauthority entry names).
const HOSTNAME: &str = "deskgym";
/// The display's cookie inside the sandbox (a control file, `$XAUTHORITY`).
const XAUTHORITY: &str = "/run/deskgym/Xauthority";

/// Per-sandbox resource limits (how they are enforced: [`memory_bound`](crate::memory_bound)).
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
    /// Whether the sandbox gets a network stack of its own with outbound access (pasta);
    /// else only its own `lo`.
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
    /// Whether the sandbox's programs run on a clock the server sets (our preload,
    /// decisions 199, 201): a replay then shows apps the original's time at every action.
    pub clock: bool,
    /// Files shown at system paths, read-only, each in its directory beside the host's
    /// entries (at most [`MAX_SYSTEM_FILES`]; a profile's `system_files`).
    pub system_files: Vec<SystemFile>,
}

/// A running sandbox.
#[derive(Debug)]
pub(crate) struct Sandbox {
    child: Child,
    dir: PathBuf,
    peer: AgentPeer,
    /// The last bytes the agent and the session wrote to stderr (a pipe, drained by a
    /// thread: the sandbox can neither grow a file of ours nor make us follow one).
    log: Arc<Mutex<Vec<u8>>>,
    /// Its memory cgroup, if the host lets us make one.
    cgroup: Option<Cgroup>,
    limits: SandboxLimits,
    /// The agent's pid (host view): a process in the sandbox's namespaces.
    agent_pid: i32,
    /// Its network stack, when granted one (stopped after the sandbox).
    network: Option<network::Network>,
}

/// Finds a deskgym helper binary: `$var`, else next to the running executable (or one
/// level up, where cargo puts binaries relative to test executables in `deps/`).
pub(crate) fn helper_binary(name: &str, var: &str) -> Result<PathBuf> {
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

/// Removes what sandboxes and displays of deskgym processes that are gone left behind
/// (a server killed with SIGKILL): their directories, Xauthority files and memory
/// cgroups. Called at server start.
pub fn sweep_leftovers() -> usize {
    let mut swept = 0;
    if let Ok(d) = std::fs::read_dir(std::env::temp_dir()) {
        for e in d.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            // A lock file alone: `is_gone` removes it when its owner is gone.
            if let Some(pid) = name
                .strip_prefix("deskgym-owner-")
                .and_then(|n| n.strip_suffix(".lock"))
                .and_then(|p| p.parse::<u32>().ok())
            {
                crate::owner::is_gone(pid);
                continue;
            }
            let Some(pid) = name
                .strip_prefix(ROOT_PREFIX)
                .or_else(|| name.strip_prefix(crate::xvfb::AUTH_DIR_PREFIX))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if crate::owner::is_gone(pid) && std::fs::remove_dir_all(e.path()).is_ok() {
                swept += 1;
            }
        }
    }
    crate::limits::sweep_cgroups();
    swept
}

/// The sandbox's `sudo`: checks the profile's password, then runs the command as
/// `user` (the sandbox already bounds what any command can do).
///
/// `sudo apt`/`sudo apt-get` is answered here: the sandbox's system is the host's,
/// read-only and offline, so a real apt could only fail (no root, no lists, no
/// network). OSWorld's setups install tools its image may lack (`jq`, `expect`,
/// `unzip`...): an install of packages the host has answers as apt does for
/// installed ones, `update` has nothing to fetch, and anything else fails with apt's
/// exit code 100 and a message naming the package and where the host installs it
/// (decision 168). `sudo pip install` (and `sudo python3 -m pip install`) is answered
/// the same way from the host's Python: OSWorld's image lets root pip install into the
/// system, Debian's refuses (PEP 668), so a package the host has answers as pip does
/// for an installed one, and one it lacks fails naming it (decision 204).
const SUDO: &str = include_str!("sudo.sh");

/// Chromium flags for every Chromium in a sandbox (Debian's `/usr/bin/chromium`
/// sources `/etc/chromium.d/*`). Nested user namespaces are off in sandboxes, so
/// Chromium's own sandbox cannot start: the env's sandbox is the boundary.
/// `--test-type` keeps the "unsupported flag" bar off the screen, as under ChromeDriver.
const CHROMIUM_FLAGS: &str = "export CHROMIUM_FLAGS=\"$CHROMIUM_FLAGS --no-sandbox --test-type\"\n";
/// Where Debian's Chromium reads its flags from, when the host has it.
const CHROMIUM_D: &str = "/etc/chromium.d";
/// deskgym's flags file there.
const CHROMIUM_FLAGS_FILE: &str = "/etc/chromium.d/zz-deskgym";

/// The system trees a sandbox sees, read-only (with `/bin`, `/lib`... as the host has
/// them: links into `/usr` on a merged-/usr system). Nothing else of the host shows:
/// not `/opt`, `/srv`, `/mnt`, `/work`, other homes or checkouts.
const SYSTEM: &[&str] = &[
    "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];
/// Parts of `/var` programs read (font caches, D-Bus's machine id, dpkg's database:
/// which packages the host has, for `sudo apt install` and tools that ask dpkg).
const SYSTEM_VAR: &[&str] = &["/var/cache/fontconfig", "/var/lib/dbus", "/var/lib/dpkg"];

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

/// In a child between fork and exec (async-signal-safe calls only): takes the sandbox's
/// host uid where there is one (the server runs as root), and dies with its parent
/// (set after the uid change, which clears it).
fn become_sandbox_user(host_uid: Option<u32>) -> std::io::Result<()> {
    // SAFETY: plain syscalls on this process's own credentials.
    unsafe {
        if let Some(uid) = host_uid
            && (libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0)
        {
            return Err(std::io::Error::last_os_error());
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    Ok(())
}

/// The descriptor number the agent finds its socket at.
pub(crate) const AGENT_FD: i32 = 3;

/// What bwrap's process does between fork and exec, all of it computed (and allocated)
/// before the fork: the child may make only async-signal-safe calls.
struct ChildSetup {
    /// The address of the memory cgroup to enter, when there is one (an address, not a
    /// reference, so the `pre_exec` closure holding it can be `'static` and `Send`).
    cgroup: Option<usize>,
    /// The agent's socket, to sit at [`AGENT_FD`].
    socket: i32,
    /// The control files' descriptors, to sit from [`DATA_FD_BASE`] on, in order.
    data: Vec<i32>,
    /// The sandbox's own host uid, where the server runs as root.
    host_uid: Option<u32>,
    /// `RLIMIT_NPROC`.
    max_processes: u64,
    /// `RLIMIT_NOFILE`.
    open_files: u64,
    /// `RLIMIT_DATA`, set only when there is no cgroup to bound memory.
    memory: u64,
    /// The display's IPC namespace to join (an open `/proc/<pid>/ns/ipc` of its Xvfb),
    /// where it has one of its own.
    ipc: Option<i32>,
}

impl ChildSetup {
    /// In the child: joins the display's IPC namespace, enters the cgroup, puts the
    /// descriptors in place, becomes the sandbox's user and sets its limits
    /// (async-signal-safe calls only: setns, open/write, fcntl, dup2, setgroups, setgid,
    /// setuid, prctl, setrlimit).
    ///
    /// # Safety
    ///
    /// Only in a child between fork and exec, while the [`Cgroup`] at `cgroup` lives.
    unsafe fn run(&self) -> std::io::Result<()> {
        // First: while root, and before the descriptors move (its number may be a target).
        // SAFETY: a plain syscall on a descriptor this process holds.
        if let Some(ns) = self.ipc
            && unsafe { libc::setns(ns, libc::CLONE_NEWIPC) } != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(cg) = self.cgroup {
            // Before dropping root: a cgroup's procs file is root's to write.
            // SAFETY: the cgroup lives (this function's contract).
            unsafe { (*(cg as *const Cgroup)).enter_from_child()? };
        }
        // SAFETY: in the child between fork and exec (this function's contract).
        unsafe { self.place_fds()? };
        become_sandbox_user(self.host_uid)?;
        set_rlimit(libc::RLIMIT_NPROC, self.max_processes);
        set_rlimit(libc::RLIMIT_NOFILE, self.open_files);
        if self.cgroup.is_none() {
            set_rlimit(libc::RLIMIT_DATA, self.memory);
        }
        Ok(())
    }

    /// The agent's socket and the control files at fixed numbers, kept across exec.
    /// First out of the way (a source may sit on a target number), then into place
    /// (dup2 clears close-on-exec).
    ///
    /// # Safety
    ///
    /// Only in a child between fork and exec: it overwrites whatever descriptors sit
    /// at the target numbers.
    unsafe fn place_fds(&self) -> std::io::Result<()> {
        let mut moved = [0i32; 16];
        let sources = std::iter::once(self.socket).chain(self.data.iter().copied());
        for (slot, from) in moved.iter_mut().zip(sources) {
            // SAFETY: a plain syscall on a descriptor this process holds.
            *slot = unsafe { libc::fcntl(from, libc::F_DUPFD_CLOEXEC, 256) };
            if *slot < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let targets =
            std::iter::once(AGENT_FD).chain((0..self.data.len() as i32).map(|i| DATA_FD_BASE + i));
        for (from, to) in moved.iter().zip(targets) {
            // SAFETY: a plain syscall; the targets are ours to take (the contract).
            if unsafe { libc::dup2(*from, to) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Makes a new, empty directory for one sandbox under [`sandboxes_root`]; returns it
/// and its name (`<display>-<n>`, unique in this process, so also its cgroup's name).
fn fresh_dir(display: u32) -> Result<(PathBuf, String)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let root = sandboxes_root();
    crate::owner::claim();
    make_dir(&root, 0o711)?;
    let name = format!("{display}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let dir = root.join(&name);
    let _ = std::fs::remove_dir_all(&dir);
    make_dir(&dir, 0o711)?;
    Ok((dir, name))
}

/// The sandbox's own host uid, where it gets one, and this process's real uid.
///
/// A server running as root gives each sandbox its own unprivileged host uid, so its
/// files and processes are its own (and the process limit counts only its processes:
/// the kernel exempts root from RLIMIT_NPROC altogether).
fn host_uids(display: u32) -> (Option<u32>, u32) {
    // SAFETY: plain syscalls without arguments.
    let (euid, uid) = unsafe { (libc::geteuid(), libc::getuid()) };
    ((euid == 0).then_some(SANDBOX_UID_BASE + display), uid)
}

/// A file of the sandbox's control data: read-only in its own tmpfs, its bytes passed
/// to bwrap in a memfd.
struct ControlFile {
    /// Where it shows inside the sandbox.
    inside: String,
    /// Its mode there (octal digits).
    mode: String,
    bytes: Vec<u8>,
}

impl ControlFile {
    fn new(inside: impl Into<String>, mode: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        Self {
            inside: inside.into(),
            mode: mode.into(),
            bytes: bytes.into(),
        }
    }
}

/// The sandbox's control files, in the order of their descriptors: the session spec
/// the agent starts, the password and the `sudo` that checks it, the display's cookie,
/// `passwd` and `group` naming `user`, Chromium's flags where the host has
/// `/etc/chromium.d`, and last the config's system files.
fn control_files(display: u32, cfg: &SandboxConfig) -> Result<Vec<ControlFile>> {
    let session = SessionSpec {
        session: cfg.session.clone(),
        env: cfg.env.clone(),
        home_template: cfg.home_template.as_ref().map(|_| TEMPLATE.to_string()),
        home_modes: cfg.home_modes.clone(),
    };
    let session = serde_json::to_vec(&session).map_err(std::io::Error::other)?;
    // The display checks its cookie; the sandbox sees its display as `:0`.
    let xauthority = crate::xvfb::cookie_of(display)?.xauthority(HOSTNAME.as_bytes(), "0");
    let mut files = vec![
        ControlFile::new("/run/deskgym/session.json", "0644", session),
        ControlFile::new("/run/deskgym/password", "0644", cfg.password.as_bytes()),
        ControlFile::new("/run/deskgym/bin/sudo", "0755", SUDO),
        ControlFile::new(XAUTHORITY, "0600", xauthority),
        ControlFile::new(
            "/etc/passwd",
            "0644",
            b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/bash\n\
              nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        ),
        ControlFile::new(
            "/etc/group",
            "0644",
            b"root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n",
        ),
    ];
    if Path::new(CHROMIUM_D).is_dir() {
        files.push(ControlFile::new(
            CHROMIUM_FLAGS_FILE,
            "0644",
            CHROMIUM_FLAGS,
        ));
    }
    files.extend(cfg.system_files.iter().map(|f| {
        let inside = f.path.to_string_lossy();
        ControlFile::new(inside, format!("{:04o}", f.mode), f.content.as_bytes())
    }));
    Ok(files)
}

/// bwrap's command (started in the display's IPC namespace when `display_ipc`): an
/// empty environment, the policy's arguments for what this host shows, then the agent
/// on [`AGENT_FD`] with its session spec; no stdin or stdout, and a process group of
/// its own (what Drop kills). The caller adds stderr.
fn bwrap_command(
    display: u32,
    cfg: &SandboxConfig,
    agent: &Path,
    files: &[ControlFile],
    display_ipc: bool,
) -> Result<Command> {
    let x_socket = format!("/tmp/.X11-unix/X{display}");
    let host = HostView::read(cfg)?;
    let data: Vec<(&str, &str)> = files
        .iter()
        .map(|f| (f.inside.as_str(), f.mode.as_str()))
        .collect();
    let places = Places {
        x_socket: &x_socket,
        agent,
        data: &data,
        display_ipc,
    };
    let mut cmd = Command::new(bwrap_binary()?);
    cmd.env_clear()
        .args(policy::bwrap_args(cfg, &host, &places))
        .arg("--")
        .arg("/run/deskgym-agent")
        .arg(format!("fd:{AGENT_FD}"))
        .arg(format!("{CTL}/session.json"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .process_group(0);
    Ok(cmd)
}

/// The sandbox's `RLIMIT_NPROC`, which counts every process of its uid: its own budget
/// (at least 16), plus, where it shares this process's uid rather than having its own,
/// the processes that uid runs already.
fn process_limit(processes: u32, own_uid: bool) -> u64 {
    u64::from(processes.max(16)) + if own_uid { 0 } else { processes_of_this_uid() }
}

impl Sandbox {
    /// Starts a sandbox on `display` and waits until its agent answers.
    ///
    /// Host layout, all made by this process before the sandbox starts: `<dir>/` (mode
    /// 0711, the server's) holds `agent.sock` (bound here, listened on by the agent
    /// through an inherited descriptor) and `agent` (a hard link to the agent binary,
    /// where the file system allows one). The control files ([`control_files`]) are
    /// memfds, bound read-only inside: they have no host path. The home and `/tmp` are
    /// size-limited tmpfs mounts of the sandbox's own, filled from the profile's
    /// template by the agent, so nothing the tenant writes exists on a host path the
    /// server (or Xvfb, which runs as the server's user) could be made to follow.
    pub(crate) fn start(display: u32, cfg: &SandboxConfig) -> Result<Self> {
        let (dir, name) = fresh_dir(display)?;
        // Until the sandbox owns it (its Drop removes it), a failed start removes it.
        let cleanup = RemoveOnDrop(Some(dir.clone()));
        let (host_uid, uid) = host_uids(display);
        let files = control_files(display, cfg)?;
        // At most 15 with the socket: the child moves them in a fixed-size array.
        if files.len() >= 16 {
            return Err(DesktopError::App(format!(
                "a sandbox takes at most {MAX_SYSTEM_FILES} system files ({} given)",
                cfg.system_files.len()
            )));
        }
        let data_fds = files
            .iter()
            .map(|f| memfile(&f.bytes))
            .collect::<Result<Vec<_>>>()?;
        let socket_path = dir.join("agent.sock");
        let socket = bound_socket(&socket_path)?;
        let agent = agent_for(&dir)?;
        // The display's own IPC namespace, held open until bwrap has joined it.
        let ipc = crate::xvfb::ipc_namespace_of(display);
        let mut cmd = bwrap_command(display, cfg, &agent, &files, ipc.is_some())?;
        let lim = cfg.limits;
        let max_processes = process_limit(lim.processes, host_uid.is_some());
        let cgroup = Cgroup::create(&name, lim.memory_mb.max(64) << 20)?;
        let (log_read, log_write) = std::io::pipe()?;
        cmd.stderr(log_write);
        let setup = ChildSetup {
            cgroup: cgroup.as_ref().map(|c| c as *const Cgroup as usize),
            socket: std::os::fd::AsRawFd::as_raw_fd(&socket),
            data: data_fds
                .iter()
                .map(std::os::fd::AsRawFd::as_raw_fd)
                .collect(),
            host_uid,
            max_processes,
            open_files: lim.open_files.max(64),
            memory: lim.memory_mb.max(64) << 20,
            ipc: ipc.as_deref().map(std::os::fd::AsRawFd::as_raw_fd),
        };
        // SAFETY: the child makes only async-signal-safe calls (`ChildSetup::run`), on
        // what was prepared here; `setup.cgroup` points at `cgroup`, which this function
        // owns until after spawn returns.
        unsafe { cmd.pre_exec(move || setup.run()) };
        let child = cmd
            .spawn()
            .map_err(|e| DesktopError::App(format!("cannot start bwrap: {e}")))?;
        cleanup.disarm();
        drop((socket, data_fds, ipc));
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
            agent_pid: 0,
            network: None,
        };
        sb.wait_ready()?;
        if cfg.network {
            sb.network = Some(network::Network::attach(sb.agent_pid, host_uid)?);
        }
        Ok(sb)
    }

    /// How to reach the agent, and whom to expect there (for the server's own
    /// async connections, such as port tunnels).
    pub(crate) fn agent(&self) -> AgentPeer {
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
                        self.agent_pid = pid;
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

    /// False once the sandbox's first process has exited.
    pub(crate) fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Pid of the `bwrap` process (killing it ends the sandbox).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
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
