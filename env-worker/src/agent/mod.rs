//! The sandbox agent: the first process of an env's bubblewrap sandbox (binary
//! `deskgym-sandbox-agent`). It starts the profile's session programs, then runs the
//! worker's requests as `user`, inside the sandbox's view: `exec` (a command with a
//! time bound and capped output), `launch` (a detached application) and file reads,
//! writes and listings. It shares its uid with the code it runs, so the worker trusts
//! none of its answers beyond what it asked for (see `sandbox`).
//!
//! Wire (one request per connection on a Unix socket in the env's control dir): a JSON
//! [`Request`] line, then `stdin_len` raw bytes for `exec`; the reply is a JSON
//! [`Reply`] line, then `stdout_len` + `stderr_len` raw bytes for an exec. Raw bytes,
//! not JSON strings, so output that is not UTF-8 travels unchanged.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{FileErrorKind, quote};

mod files;

/// Where the session's programs and the sandbox's user start.
pub(crate) const HOME: &str = "/home/user";

/// One program of a session.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SessionProgram {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// A path the program makes once it is ready (a bus socket, a window manager's
    /// startup mark): the agent waits for it (20 s at most, else the desktop does not
    /// start) before the next program, and answers the worker only once all are there.
    #[serde(default)]
    pub wait_for: Option<String>,
}

/// What the agent starts with the sandbox (written by the worker as JSON).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct SessionSpec {
    /// Programs started at session start, in order, each in its own process group.
    pub session: Vec<SessionProgram>,
    /// Environment of every program the agent starts (besides the sandbox's own).
    pub env: Vec<(String, String)>,
    /// A directory (read-only in the sandbox) copied into the home before the session
    /// starts: the profile's seed files.
    #[serde(default)]
    pub home_template: Option<String>,
    /// Modes of the template's files once in the home (relative paths).
    #[serde(default)]
    pub home_modes: Vec<(String, u32)>,
}

/// A command to run and wait for.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ExecSpec {
    /// Program and arguments (no shell; a shell is `["sh", "-c", line]`).
    pub argv: Vec<String>,
    /// Working directory; default the home (`/home/user`).
    pub cwd: Option<String>,
    /// Variables added to the environment.
    pub env: Vec<(String, String)>,
    /// Time bound; past it the command's process group is killed.
    pub timeout_ms: u64,
    /// Bytes of stdout and of stderr kept; the rest is read and dropped.
    pub max_output: usize,
    /// Bytes of stdin that follow the request line.
    pub stdin_len: usize,
}

/// A request to the agent.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Answers `Ready` (the worker's readiness probe).
    Ping,
    /// Runs a command and waits for it.
    Exec(ExecSpec),
    /// Starts a program detached (its own process group, no stdio) and answers its pid.
    Launch {
        /// Program and arguments.
        argv: Vec<String>,
    },
    /// Reads at most `max` bytes of a file from `offset`.
    Read {
        /// Path (absolute, or relative to the home).
        path: String,
        /// Where to start.
        offset: u64,
        /// Most bytes to return.
        max: u64,
    },
    /// Writes the `len` bytes that follow the line at `offset` (0 truncates).
    Write {
        /// Path (absolute, or relative to the home).
        path: String,
        /// Where to write.
        offset: u64,
        /// Permission bits of a new file.
        mode: u32,
        /// Bytes that follow.
        len: usize,
    },
    /// Lists a directory to `depth` levels, at most `max` entries.
    List {
        /// Path (absolute, or relative to the home).
        path: String,
        /// Levels (1: its own entries).
        depth: u32,
        /// Most entries.
        max: usize,
    },
    /// Walks the accessibility tree (the reply's JSON [`crate::a11y::Tree`] follows).
    A11yTree {
        /// Bounds of the walk.
        limits: crate::a11y::Limits,
    },
    /// What one element is now.
    A11yLive {
        /// Element identity ([`crate::a11y::Node::id`]).
        id: String,
    },
    /// Performs an element's action (its first when `action` is empty).
    A11yInvoke {
        /// Element identity.
        id: String,
        /// Action name.
        action: String,
    },
    /// Sets an element's text or number.
    A11ySetValue {
        /// Element identity.
        id: String,
        /// New value.
        value: String,
    },
    /// Connects to a TCP port on the sandbox's own loopback; after a `Connected` reply
    /// the connection carries that socket's bytes both ways until either side closes.
    Connect {
        /// The port (a browser's remote debugging, say).
        port: u16,
    },
}

/// One directory entry.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    /// Path relative to the listed directory.
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, Unix milliseconds.
    pub mtime_ms: i64,
}

/// How a command ended (its output follows the reply line).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ExecEnd {
    /// Exit status, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Bytes of stdout that follow.
    pub stdout_len: usize,
    /// Bytes of stderr that follow (after stdout).
    pub stderr_len: usize,
    /// Stdout was longer than `max_output`.
    pub stdout_truncated: bool,
    /// Stderr was longer than `max_output`.
    pub stderr_truncated: bool,
    /// The time bound ended it.
    pub timed_out: bool,
    /// Wall time, in milliseconds.
    pub duration_ms: f64,
}

/// The agent's answer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// Answer to `Ping`.
    Ready,
    /// Answer to `Exec`.
    Exec(ExecEnd),
    /// Answer to `Launch`.
    Launched {
        /// Pid inside the sandbox.
        pid: u32,
    },
    /// The program could not be started (missing, not executable, bad cwd).
    Failed {
        /// What went wrong, for the user.
        message: String,
    },
    /// Answer to `Read`: `len` bytes follow.
    Read {
        /// Size of the whole file.
        size: u64,
        /// Bytes that follow.
        len: usize,
        /// The file ends with them.
        eof: bool,
    },
    /// Answer to `Write`.
    Written {
        /// Size of the file after the write.
        size: u64,
    },
    /// Answer to `List`.
    Listed {
        /// The directory, resolved.
        path: String,
        /// Its entries, depth first.
        entries: Vec<Entry>,
        /// Stopped at `max`.
        truncated: bool,
    },
    /// A file request failed.
    FileError {
        /// Why.
        kind: FileErrorKind,
        /// What, for the user.
        message: String,
    },
    /// Answer to `A11yTree`: `len` bytes of JSON follow.
    Tree {
        /// Bytes that follow.
        len: usize,
    },
    /// Answer to `A11yLive`.
    Live(crate::a11y::Live),
    /// An element request succeeded.
    Done,
    /// Answer to `Connect`: raw bytes follow, both ways.
    Connected,
    /// The agent is serving as many requests as it may: try again later.
    Busy {
        /// Which limit, for the user.
        message: String,
    },
    /// An accessibility request failed.
    ElementError {
        /// Why.
        failure: crate::error::ElementFailure,
        /// What, for the user.
        message: String,
    },
}

impl Reply {
    /// The reply's kind, for error messages (never its contents, which may be large).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Ready => "a ready",
            Self::Exec(_) => "an exec reply",
            Self::Launched { .. } => "a launched reply",
            Self::Failed { .. } => "a failure",
            Self::Read { .. } => "a read reply",
            Self::Written { .. } => "a written reply",
            Self::Listed { .. } => "a listing",
            Self::FileError { .. } => "a file error",
            Self::Tree { .. } => "a tree",
            Self::Live(_) => "an element",
            Self::Done => "a done reply",
            Self::ElementError { .. } => "an element error",
            Self::Connected => "a connected reply",
            Self::Busy { .. } => "a busy reply",
        }
    }
}

type Children = Arc<Mutex<Vec<Child>>>;

/// How long a session program may take to show it is ready (its `wait_for` path).
const SESSION_READY: Duration = Duration::from_secs(20);

/// How a failure for want of processes starts (answered `Busy`, a limit).
const PROCESS_LIMIT: &str = "the desktop is at its process limit";

/// Most requests (exec, file, tunnel...) the agent serves at once; more are answered
/// `Busy` at once, so a flood of tunnels never leaves one half-served.
pub(crate) const MAX_CONCURRENT: usize = 64;

/// The agent program: `deskgym-sandbox-agent fd:<n>|<socket> <session.json>`. With
/// `fd:<n>` it listens on a socket the worker bound (in a directory of the worker's)
/// and passed down; the sandbox never holds a path to it.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, session] = args.as_slice() else {
        return Err("usage: deskgym-sandbox-agent fd:<n>|<socket> <session.json>".into());
    };
    let listener = listen(socket)?;
    let spec: SessionSpec = serde_json::from_slice(&std::fs::read(session)?)?;
    if let Some(t) = &spec.home_template {
        if let Err(e) = copy_tree(std::path::Path::new(t), std::path::Path::new(HOME)) {
            eprintln!("home template: {e}");
        }
        for (path, mode) in &spec.home_modes {
            use std::os::unix::fs::PermissionsExt;
            let p = std::path::Path::new(HOME).join(path);
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(*mode));
        }
    }
    let children: Children = Arc::default();
    for program in &spec.session {
        let argv = &program.argv;
        // Session programs write to the agent's stderr: a pipe the worker drains.
        let started =
            base_command(argv, &spec.env).and_then(|mut c| c.stderr(Stdio::inherit()).spawn());
        match started {
            Ok(c) => lock(&children).push(c),
            // Logged where the worker can read it; the session goes on without it.
            Err(e) => eprintln!("session program {argv:?}: {e}"),
        }
        if let Some(path) = &program.wait_for {
            let deadline = Instant::now() + SESSION_READY;
            while !std::path::Path::new(path).exists() {
                if Instant::now() >= deadline {
                    // No answer to the worker's ping: the desktop does not start, and
                    // the worker's error quotes this line.
                    eprintln!(
                        "session program {} was not ready within {} s (no {})",
                        quote(&argv.join(" ")),
                        SESSION_READY.as_secs(),
                        quote(path)
                    );
                    std::process::exit(1);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    std::thread::spawn({
        let children = children.clone();
        move || reap(&children)
    });
    let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let (env, children) = (spec.env.clone(), children.clone());
        use std::sync::atomic::Ordering::AcqRel;
        if active.fetch_add(1, AcqRel) >= MAX_CONCURRENT {
            active.fetch_sub(1, AcqRel);
            let message = format!(
                "the desktop's agent is serving {MAX_CONCURRENT} requests (exec, files, \
                 tunnels) already; retry when some have ended"
            );
            let _ = reply_line(&mut conn, &Reply::Busy { message });
            continue;
        }
        let done = Done(active.clone());
        // Without a thread to serve it (the sandbox at its process limit) the
        // connection gets a busy answer; the agent stays up.
        let spare = conn.try_clone();
        let started = helper(move || {
            let _done = done;
            if let Err(e) = serve(conn, &env, &children) {
                eprintln!("request failed: {e}");
            }
        });
        if let (Err(message), Ok(mut c)) = (started, spare) {
            let _ = reply_line(&mut c, &Reply::Busy { message });
        }
    }
    Ok(())
}

/// Counts a request as ended when dropped (whatever way its thread ends).
struct Done(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The agent's listening socket: a bound socket passed as descriptor `fd:<n>` (the
/// agent listens, so the socket's peer credentials name the agent), or a path.
fn listen(socket: &str) -> std::io::Result<UnixListener> {
    use std::os::fd::FromRawFd;
    let Some(fd) = socket.strip_prefix("fd:") else {
        let _ = std::fs::remove_file(socket);
        return UnixListener::bind(socket);
    };
    let fd: i32 = fd
        .parse()
        .map_err(|_| std::io::Error::other(format!("bad descriptor {fd:?}")))?;
    // SAFETY: listen/fcntl on a descriptor the worker passed for this; it is owned
    // from here on.
    unsafe {
        if libc::listen(fd, 128) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Not inherited by the programs the agent starts.
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        Ok(UnixListener::from_raw_fd(fd))
    }
}

/// Copies a directory tree (modes kept, symlinks as links) into `to`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let meta = std::fs::symlink_metadata(&src)?;
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if meta.is_dir() {
            std::fs::create_dir_all(&dst)?;
            copy_tree(&src, &dst)?;
            std::fs::set_permissions(
                &dst,
                std::fs::Permissions::from_mode(meta.permissions().mode() | 0o700),
            )?;
        } else if meta.is_file() {
            std::fs::copy(&src, &dst)?;
            std::fs::set_permissions(
                &dst,
                std::fs::Permissions::from_mode(meta.permissions().mode() | 0o600),
            )?;
        }
    }
    Ok(())
}

fn element_error((failure, message): crate::a11y::client::Fail) -> Reply {
    if failure == crate::error::ElementFailure::Unavailable {
        // Connect again next time: the bus (or our connection to it) may be gone.
        *A11Y.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
    Reply::ElementError { failure, message }
}

static A11Y: Mutex<Option<crate::a11y::client::Client>> = Mutex::new(None);

/// The session's accessibility bus, connected on first use and kept; a connection
/// that failed is dropped so the next request connects again (the bus may have been
/// starting).
fn a11y(
    env: &[(String, String)],
) -> Result<crate::a11y::client::Client, crate::a11y::client::Fail> {
    use crate::a11y::client::{Client, Failure};
    let mut slot = A11Y.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = slot.as_ref() {
        return Ok(c.clone());
    }
    let address = env
        .iter()
        .find(|(k, _)| k == "DBUS_SESSION_BUS_ADDRESS")
        .map(|(_, v)| v.as_str())
        .ok_or((
            Failure::Unavailable,
            "this profile has no session bus (DBUS_SESSION_BUS_ADDRESS), so no accessibility tree"
                .to_string(),
        ))?;
    let c = Client::connect(address)?;
    *slot = Some(c.clone());
    Ok(c)
}

fn lock(c: &Children) -> std::sync::MutexGuard<'_, Vec<Child>> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

/// Collects exited session and launched programs, so none stays a zombie.
fn reap(children: &Children) {
    loop {
        lock(children).retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn base_command(argv: &[String], env: &[(String, String)]) -> std::io::Result<Command> {
    let Some((program, args)) = argv.split_first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty argv",
        ));
    };
    let mut c = Command::new(program);
    c.args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(HOME)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    Ok(c)
}

fn reply_line(conn: &mut UnixStream, r: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(r)?;
    line.push(b'\n');
    conn.write_all(&line)
}

fn serve(conn: UnixStream, env: &[(String, String)], children: &Children) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut conn = conn;
    let req: Request = serde_json::from_str(&line)?;
    match req {
        Request::Ping => reply_line(&mut conn, &Reply::Ready),
        Request::A11yTree { limits } => match a11y(env).and_then(|c| c.tree(&limits)) {
            Ok(tree) => {
                let body = serde_json::to_vec(&tree)?;
                reply_line(&mut conn, &Reply::Tree { len: body.len() })?;
                conn.write_all(&body)
            }
            Err(e) => reply_line(&mut conn, &element_error(e)),
        },
        Request::A11yLive { id } => {
            let r = match a11y(env).and_then(|c| c.live(&id)) {
                Ok(live) => Reply::Live(live),
                Err(e) => element_error(e),
            };
            reply_line(&mut conn, &r)
        }
        Request::A11yInvoke { id, action } => {
            let r = a11y(env).and_then(|c| c.invoke(&id, &action));
            reply_line(&mut conn, &r.map_or_else(element_error, |()| Reply::Done))
        }
        Request::A11ySetValue { id, value } => {
            let r = a11y(env).and_then(|c| c.set_value(&id, &value));
            reply_line(&mut conn, &r.map_or_else(element_error, |()| Reply::Done))
        }
        Request::Launch { argv } => {
            let r = match base_command(&argv, env).and_then(|mut c| c.spawn()) {
                Ok(child) => {
                    let pid = child.id();
                    lock(children).push(child);
                    Reply::Launched { pid }
                }
                Err(e) => Reply::Failed {
                    message: format!(
                        "cannot start {}: {e}",
                        quote(argv.first().map_or("", String::as_str))
                    ),
                },
            };
            reply_line(&mut conn, &r)
        }
        Request::Read { path, offset, max } => match files::read(&path, offset, max) {
            Ok((size, data, eof)) => {
                let len = data.len();
                reply_line(&mut conn, &Reply::Read { size, len, eof })?;
                conn.write_all(&data)
            }
            Err((kind, message)) => reply_line(&mut conn, &Reply::FileError { kind, message }),
        },
        Request::Write {
            path,
            offset,
            mode,
            len,
        } => {
            let mut data = vec![0; len];
            reader.read_exact(&mut data)?;
            let r = match files::write(&path, offset, mode, &data) {
                Ok(size) => Reply::Written { size },
                Err((kind, message)) => Reply::FileError { kind, message },
            };
            reply_line(&mut conn, &r)
        }
        Request::List { path, depth, max } => {
            let r = match files::list(&path, depth, max) {
                Ok((path, entries, truncated)) => Reply::Listed {
                    path,
                    entries,
                    truncated,
                },
                Err((kind, message)) => Reply::FileError { kind, message },
            };
            reply_line(&mut conn, &r)
        }
        Request::Connect { port } => connect(reader, conn, port),
        Request::Exec(spec) => {
            let mut stdin = vec![0; spec.stdin_len];
            reader.read_exact(&mut stdin)?;
            match exec(&spec, stdin, env) {
                Ok((end, out, err)) => {
                    reply_line(&mut conn, &Reply::Exec(end))?;
                    conn.write_all(&out)?;
                    conn.write_all(&err)
                }
                Err(message) if message.starts_with(PROCESS_LIMIT) => {
                    reply_line(&mut conn, &Reply::Busy { message })
                }
                Err(message) => reply_line(&mut conn, &Reply::Failed { message }),
            }
        }
    }
}

/// How long a `Connect` waits for the port to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves a `Connect`: the port's bytes both ways, each way on its own thread, each
/// closing its write side at the other's end of stream (so either end hanging up ends
/// both).
fn connect(reader: BufReader<UnixStream>, mut conn: UnixStream, port: u16) -> std::io::Result<()> {
    let addr = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
    let tcp = match std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
        Ok(t) => t,
        Err(e) => {
            let message =
                format!("nothing accepts connections on port {port} in this desktop ({e})");
            return reply_line(&mut conn, &Reply::Failed { message });
        }
    };
    tcp.set_nodelay(true)?;
    reply_line(&mut conn, &Reply::Connected)?;
    let (mut tcp_in, mut tcp_out) = (tcp.try_clone()?, tcp);
    let mut conn_out = conn;
    let spawned = helper(move || {
        let _ = std::io::copy(&mut tcp_in, &mut conn_out);
        let _ = conn_out.shutdown(std::net::Shutdown::Write);
    });
    if let Err(message) = spawned {
        // The reply went out already: closing is the only answer left.
        eprintln!("connect to port {port}: {message}");
        return Ok(());
    }
    // Bytes the worker sent right behind its request line sit in the reader's buffer.
    let mut reader = reader;
    let _ = std::io::copy(&mut reader, &mut tcp_out);
    let _ = tcp_out.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// What a pipe gave so far: the first `max` bytes, and whether there was more.
type Captured = Arc<Mutex<(Vec<u8>, bool)>>;

/// Starts a helper thread. The agent shares the sandbox's process limit with the code
/// it runs, so under a fork bomb there may be none to have: that is an error, never a
/// panic.
fn helper(f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    // (Messages that start with PROCESS_LIMIT are answered `Busy`: a limit.)
    std::thread::Builder::new()
        .spawn(f)
        .map(drop)
        .map_err(|e| format!("{PROCESS_LIMIT} (the agent cannot start a thread: {e})"))
}

/// Reads a pipe to its end on a thread, keeping the first `max` bytes; the receiver
/// hears when the pipe closed.
fn drain(
    mut r: impl Read + Send + 'static,
    max: usize,
) -> Result<(Captured, mpsc::Receiver<()>), String> {
    let (tx, rx) = mpsc::channel();
    let captured = Captured::default();
    let c = captured.clone();
    helper(move || {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut g = c.lock().unwrap_or_else(|p| p.into_inner());
                    let room = max.saturating_sub(g.0.len());
                    g.0.extend_from_slice(&buf[..n.min(room)]);
                    g.1 |= n > room;
                }
            }
        }
        let _ = tx.send(());
    })?;
    Ok((captured, rx))
}

/// How long output may keep coming after the command exited: a background child it
/// left may hold the pipes open for good, so its output is taken as it stands then.
const OUTPUT_GRACE: Duration = Duration::from_millis(200);

/// Runs one command to its end or its time bound.
fn exec(
    spec: &ExecSpec,
    stdin: Vec<u8>,
    env: &[(String, String)],
) -> Result<(ExecEnd, Vec<u8>, Vec<u8>), String> {
    let started = Instant::now();
    let deadline = started + Duration::from_millis(spec.timeout_ms);
    let mut cmd = base_command(&spec.argv, env).map_err(|e| e.to_string())?;
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(spec.cwd.as_deref().unwrap_or(HOME))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "program {} not found in the sandbox (or cwd {} does not exist)",
            quote(&spec.argv[0]),
            quote(spec.cwd.as_deref().unwrap_or(HOME))
        ),
        std::io::ErrorKind::WouldBlock => format!("{PROCESS_LIMIT} ({e})"),
        _ => format!("cannot start {}: {e}", quote(&spec.argv[0])),
    })?;
    let pgid = child.id() as libc::pid_t;
    let kill = || {
        // SAFETY: plain syscalls on the command's own process group and leader (a
        // leader that moved to another group is still killed by pid). Pids are not
        // reused that fast in the sandbox's own pid namespace.
        unsafe {
            libc::killpg(pgid, libc::SIGKILL);
            libc::kill(pgid, libc::SIGKILL);
        }
    };
    // Threads: one writes stdin (a command that never reads it must not block the
    // agent), two read the outputs, one waits for the exit (so the reply leaves the
    // moment it ends, and the bound is a receive timeout). The waiter reaps by pid, so
    // `child` stays here to be reaped inline when a thread cannot start.
    let (tx, exited) = mpsc::channel();
    let stdin_pipe = child.stdin.take();
    let (out_pipe, err_pipe) = (child.stdout.take(), child.stderr.take());
    let helpers = (|| {
        if let Some(mut w) = stdin_pipe {
            helper(move || {
                let _ = w.write_all(&stdin);
            })?;
        }
        let out = out_pipe.map(|r| drain(r, spec.max_output)).transpose()?;
        let err = err_pipe.map(|r| drain(r, spec.max_output)).transpose()?;
        helper(move || {
            let mut raw = 0;
            // SAFETY: waits for our own child; nothing else reaps it.
            let r = unsafe { libc::waitpid(pgid, &mut raw, 0) };
            let _ = tx.send((r == pgid).then(|| std::process::ExitStatus::from_raw(raw)));
        })?;
        Ok::<_, String>((out, err))
    })();
    let (out, err) = match helpers {
        Ok(pipes) => pipes,
        Err(e) => {
            kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let left = deadline.saturating_duration_since(Instant::now());
    let (status, timed_out) = match exited.recv_timeout(left) {
        Ok(status) => (status, false),
        Err(_) => {
            kill();
            (
                exited.recv_timeout(Duration::from_secs(5)).ok().flatten(),
                true,
            )
        }
    };
    // Output ends when every holder of the pipes closes them; a background child of the
    // command may keep them open, so wait at most a short grace.
    let grace_end = (Instant::now() + OUTPUT_GRACE).min(deadline.max(Instant::now()));
    let collect = |d: Option<(Captured, mpsc::Receiver<()>)>| {
        let Some((captured, closed)) = d else {
            return (Vec::new(), false);
        };
        let _ = closed.recv_timeout(grace_end.saturating_duration_since(Instant::now()));
        let mut g = captured.lock().unwrap_or_else(|p| p.into_inner());
        (std::mem::take(&mut g.0), g.1)
    };
    let (stdout, stdout_truncated) = collect(out);
    let (stderr, stderr_truncated) = collect(err);
    let end = ExecEnd {
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        stdout_len: stdout.len(),
        stderr_len: stderr.len(),
        stdout_truncated,
        stderr_truncated,
        timed_out,
        duration_ms: started.elapsed().as_secs_f64() * 1e3,
    };
    Ok((end, stdout, stderr))
}
