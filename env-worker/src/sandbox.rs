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
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::agent::{Entry, ExecEnd, ExecSpec, Reply, Request, SessionProgram, SessionSpec};
use crate::error::{DesktopError, Result};

/// Name of the agent binary.
pub const AGENT_BINARY: &str = "deskgym-sandbox-agent";
/// How long a new sandbox may take to answer its first ping.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// First host uid of sandboxes of a server running as root (display `n` gets base + n).
const SANDBOX_UID_BASE: u32 = 2_000_000;
/// Where the control directory appears inside the sandbox.
const CTL: &str = "/run/deskgym";

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
    /// Host paths masked inside (the server's token file and data dir).
    pub hide: Vec<PathBuf>,
    /// The user's password, which the sandbox's `sudo` accepts.
    pub password: String,
    /// Most processes `user` may run at once in this sandbox (fork bombs stop there).
    pub max_processes: u32,
    /// Host directories shown read-only inside, each at a path under `/run` (a web
    /// task's pages, wherever the host keeps them: its home and `/tmp` are masked).
    pub shares: Vec<(PathBuf, String)>,
}

/// A running sandbox.
#[derive(Debug)]
pub struct Sandbox {
    child: Child,
    dir: PathBuf,
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

/// The host directory under which every sandbox of this process keeps its files; it is
/// masked inside every sandbox.
pub fn sandboxes_root() -> PathBuf {
    std::env::temp_dir().join(format!("deskgym-sandboxes-{}", std::process::id()))
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

fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    std::fs::write(path, bytes)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

impl Sandbox {
    /// Starts a sandbox on `display` and waits until its agent answers.
    pub fn start(display: u32, cfg: &SandboxConfig) -> Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let root = sandboxes_root();
        let dir = root.join(format!(
            "{display}-{}",
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for d in ["home", "tmp", "ctl", "ctl/bin"] {
            std::fs::create_dir_all(dir.join(d))?;
        }
        if let Some(t) = &cfg.home_template {
            copy_tree(t, &dir.join("home"))?;
        }
        // A server running as root gives each sandbox its own unprivileged host uid, so
        // its files and processes are its own (and the process limit counts only its
        // processes: the kernel exempts root from RLIMIT_NPROC altogether).
        // SAFETY: plain syscall without arguments.
        let host_uid = (unsafe { libc::geteuid() } == 0).then_some(SANDBOX_UID_BASE + display);
        let ctl = dir.join("ctl");
        let session = SessionSpec {
            session: cfg.session.clone(),
            env: cfg.env.clone(),
        };
        write(
            &ctl.join("session.json"),
            &serde_json::to_vec(&session).map_err(std::io::Error::other)?,
            0o644,
        )?;
        write(
            &ctl.join("passwd"),
            b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/bash\n\
              nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
            0o644,
        )?;
        write(
            &ctl.join("group"),
            b"root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n",
            0o644,
        )?;
        write(&ctl.join("password"), cfg.password.as_bytes(), 0o644)?;
        write(&ctl.join("bin/sudo"), SUDO.as_bytes(), 0o755)?;
        if let Some(uid) = host_uid {
            chown_tree(&dir, uid)?;
        }
        let agent = helper_binary(AGENT_BINARY, "DESKGYM_SANDBOX_AGENT")?;
        let x_socket = format!("/tmp/.X11-unix/X{display}");
        let mut cmd = Command::new(bwrap_binary()?);
        cmd.env_clear()
            .args(["--unshare-user", "--uid", "1000", "--gid", "1000"])
            .args(["--unshare-pid", "--unshare-ipc", "--unshare-uts"])
            .args(["--hostname", "deskgym"])
            .args(["--die-with-parent", "--new-session"]);
        if !cfg.network {
            cmd.arg("--unshare-net");
        }
        cmd.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]);
        // Replaced wholesale (and /tmp by the env's own): nothing under them shows.
        const MASKED: [&str; 5] = ["/root", "/home", "/run", "/var/tmp", "/tmp"];
        for masked in &MASKED[..4] {
            cmd.args(["--tmpfs", masked]);
        }
        let hidden_anyway = |p: &Path| MASKED.iter().any(|m| p.starts_with(m));
        for h in cfg.hide.iter().chain([&root]) {
            if hidden_anyway(h) {
                continue;
            }
            if h.is_dir() {
                cmd.arg("--tmpfs").arg(h);
            } else if h.exists() {
                cmd.args(["--ro-bind", "/dev/null"]).arg(h);
            }
        }
        for (host, inside) in &cfg.shares {
            cmd.arg("--ro-bind").arg(host).arg(inside);
        }
        cmd.arg("--bind")
            .arg(dir.join("home"))
            .arg("/home/user")
            .arg("--bind")
            .arg(dir.join("tmp"))
            .arg("/tmp")
            .args([
                "--dir",
                "/tmp/.X11-unix",
                "--bind",
                &x_socket,
                "/tmp/.X11-unix/X0",
            ])
            .arg("--bind")
            .arg(&ctl)
            .arg(CTL)
            .arg("--ro-bind")
            .arg(ctl.join("passwd"))
            .arg("/etc/passwd")
            .arg("--ro-bind")
            .arg(ctl.join("group"))
            .arg("/etc/group")
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
        let max_processes = u64::from(cfg.max_processes.max(16))
            + if host_uid.is_some() {
                0
            } else {
                processes_of_this_uid()
            };
        if let Some(uid) = host_uid {
            cmd.uid(uid).gid(uid);
        }
        cmd.arg("--")
            .arg("/run/deskgym-agent")
            .arg(format!("{CTL}/agent.sock"))
            .arg(format!("{CTL}/session.json"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(ctl.join("agent.log"))?)
            .process_group(0);
        // SAFETY: only async-signal-safe calls (prctl, setrlimit) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                limit_processes(max_processes);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| DesktopError::App(format!("cannot start bwrap: {e}")))?;
        let mut sb = Self { child, dir };
        sb.wait_ready()?;
        Ok(sb)
    }

    /// The agent's socket (one request per connection; see [`crate::agent`]).
    pub fn socket(&self) -> PathBuf {
        self.dir.join("ctl/agent.sock")
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
            if let Ok((Reply::Ready, _)) = self.call(&Request::Ping, &[], READY_TIMEOUT) {
                return Ok(());
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

    /// The end of the agent's and the session's logs (for error messages).
    fn log_tail(&self) -> String {
        let mut s = String::new();
        for f in ["agent.log", "session.log"] {
            if let Ok(t) = std::fs::read_to_string(self.dir.join("ctl").join(f)) {
                let start = t.len().saturating_sub(400);
                s.push_str(t.get(start..).unwrap_or(""));
            }
        }
        s.trim().to_string()
    }

    /// One request/reply exchange with the agent; what follows the reply line (an
    /// exec's output, a file's data) is read from the returned reader.
    fn call(
        &self,
        req: &Request,
        body: &[u8],
        bound: Duration,
    ) -> Result<(Reply, BufReader<UnixStream>)> {
        let mut conn = UnixStream::connect(self.socket())?;
        conn.set_read_timeout(Some(bound))?;
        conn.set_write_timeout(Some(bound))?;
        let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
        line.push(b'\n');
        conn.write_all(&line)?;
        conn.write_all(body)?;
        let mut conn = BufReader::new(conn);
        let reply = read_line(&mut conn)?;
        let reply: Reply = serde_json::from_str(&reply)
            .map_err(|e| DesktopError::App(format!("the sandbox agent answered {reply:?}: {e}")))?;
        Ok((reply, conn))
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
        let (reply, mut conn) = self.call(&Request::Exec(spec), stdin, bound)?;
        match reply {
            Reply::Exec(end) => {
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
            Reply::Failed { message } => Err(DesktopError::Exec(message)),
            other => Err(untrusted(other.kind())),
        }
    }

    /// A byte stream to TCP `port` on the sandbox's own loopback (the agent's
    /// `Connect`), with `bound` as its read and write timeout. `Exec` when nothing
    /// accepts on the port (yet).
    pub fn connect(&self, port: u16, bound: Duration) -> Result<UnixStream> {
        let mut conn = UnixStream::connect(self.socket())?;
        conn.set_read_timeout(Some(bound))?;
        conn.set_write_timeout(Some(bound))?;
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

    /// The host directory backing `/home/user`.
    pub fn home(&self) -> PathBuf {
        self.dir.join("home")
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

/// Caps `RLIMIT_NPROC` in the sandbox at `limit`. The kernel counts it per real uid of
/// the host, which the server and all its sandboxes share, so a fork bomb is bounded
/// (the server itself, privileged or not inheriting the limit, keeps running) but
/// shares the headroom with its neighbours until its command's time bound kills it.
fn limit_processes(limit: u64) {
    let lim = libc::rlimit {
        rlim_cur: limit as libc::rlim_t,
        rlim_max: limit as libc::rlim_t,
    };
    // SAFETY: plain syscall on this (child) process.
    unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &lim) };
}

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

/// Gives a tree to `uid` (group `uid`).
fn chown_tree(root: &Path, uid: u32) -> Result<()> {
    let status = Command::new("chown")
        .args(["-R", "-h", &format!("{uid}:{uid}")])
        .arg(root)
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(DesktopError::App(format!(
            "cannot chown {}",
            root.display()
        )))
    }
}

/// Copies a directory tree (`cp -a`, which reflinks where the filesystem can).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let status = Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(from.join("."))
        .arg(to)
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(DesktopError::App(format!(
            "cannot copy the home template {}",
            from.display()
        )))
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // SIGKILL to bwrap's group: its pid-namespace init dies (PDEATHSIG), and the
        // kernel ends every process in the namespace with it.
        // SAFETY: plain syscall on the sandbox's own process group.
        unsafe { libc::killpg(self.child.id() as libc::pid_t, libc::SIGKILL) };
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
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
        std::fs::create_dir_all(dir.join("ctl")).unwrap();
        let listener = UnixListener::bind(dir.join("ctl/agent.sock")).unwrap();
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
        Sandbox { child, dir }
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
