//! The sandbox agent: the first process of an env's bubblewrap sandbox (binary
//! `deskgym-sandbox-agent`). It starts the profile's session programs, then runs the
//! worker's requests as `user`, inside the sandbox's view: `exec` (a command with a
//! time bound and capped output) and `launch` (a detached application).
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

/// Where the session's programs and the sandbox's user start.
pub const HOME: &str = "/home/user";

/// One program of a session.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SessionProgram {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// A path (a bus socket) the next program needs: the agent waits up to 5 s for it
    /// to exist before starting the next one.
    #[serde(default)]
    pub wait_for: Option<String>,
}

/// What the agent starts with the sandbox (written by the worker as JSON).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SessionSpec {
    /// Programs started at session start, in order, each in its own process group.
    pub session: Vec<SessionProgram>,
    /// Environment of every program the agent starts (besides the sandbox's own).
    pub env: Vec<(String, String)>,
}

/// A command to run and wait for.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ExecSpec {
    /// Program and arguments (no shell; a shell is `["sh", "-c", line]`).
    pub argv: Vec<String>,
    /// Working directory; default [`HOME`].
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
}

type Children = Arc<Mutex<Vec<Child>>>;

/// The agent program: `deskgym-sandbox-agent <socket> <session.json>`.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, session] = args.as_slice() else {
        return Err("usage: deskgym-sandbox-agent <socket> <session.json>".into());
    };
    let spec: SessionSpec = serde_json::from_slice(&std::fs::read(session)?)?;
    let children: Children = Arc::default();
    let log = session_log(session);
    for program in &spec.session {
        let argv = &program.argv;
        let started = base_command(argv, &spec.env).and_then(|mut c| {
            if let Some(f) = log.as_ref().and_then(|f| f.try_clone().ok()) {
                c.stderr(f);
            }
            c.spawn()
        });
        match started {
            Ok(c) => lock(&children).push(c),
            // Logged where the worker can read it; the session goes on without it.
            Err(e) => eprintln!("session program {argv:?}: {e}"),
        }
        if let Some(path) = &program.wait_for {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !std::path::Path::new(path).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket)?;
    std::thread::spawn({
        let children = children.clone();
        move || reap(&children)
    });
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let (env, children) = (spec.env.clone(), children.clone());
        std::thread::spawn(move || {
            if let Err(e) = serve(conn, &env, &children) {
                eprintln!("request failed: {e}");
            }
        });
    }
    Ok(())
}

fn lock(c: &Children) -> std::sync::MutexGuard<'_, Vec<Child>> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

/// `session.log` beside the session spec (the control dir the worker can read).
fn session_log(session: &str) -> Option<std::fs::File> {
    let path = std::path::Path::new(session).with_file_name("session.log");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .ok()
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
        Request::Launch { argv } => {
            let r = match base_command(&argv, env).and_then(|mut c| c.spawn()) {
                Ok(child) => {
                    let pid = child.id();
                    lock(children).push(child);
                    Reply::Launched { pid }
                }
                Err(e) => Reply::Failed {
                    message: format!("cannot start {:?}: {e}", argv.first()),
                },
            };
            reply_line(&mut conn, &r)
        }
        Request::Exec(spec) => {
            let mut stdin = vec![0; spec.stdin_len];
            reader.read_exact(&mut stdin)?;
            match exec(&spec, stdin, env) {
                Ok((end, out, err)) => {
                    reply_line(&mut conn, &Reply::Exec(end))?;
                    conn.write_all(&out)?;
                    conn.write_all(&err)
                }
                Err(message) => reply_line(&mut conn, &Reply::Failed { message }),
            }
        }
    }
}

/// What a pipe gave so far: the first `max` bytes, and whether there was more.
type Captured = Arc<Mutex<(Vec<u8>, bool)>>;

/// Reads a pipe to its end on a thread, keeping the first `max` bytes; the receiver
/// hears when the pipe closed.
fn drain(mut r: impl Read + Send + 'static, max: usize) -> (Captured, mpsc::Receiver<()>) {
    let (tx, rx) = mpsc::channel();
    let captured = Captured::default();
    let c = captured.clone();
    std::thread::spawn(move || {
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
    });
    (captured, rx)
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
            "program {:?} not found in the sandbox (or cwd {:?} does not exist)",
            spec.argv[0],
            spec.cwd.as_deref().unwrap_or(HOME)
        ),
        _ => format!("cannot start {:?}: {e}", spec.argv[0]),
    })?;
    let pgid = child.id() as libc::pid_t;
    if let Some(mut w) = child.stdin.take() {
        // A command that never reads its input must not block the agent: own thread,
        // and a closed pipe (EPIPE) just ends it.
        std::thread::spawn(move || {
            let _ = w.write_all(&stdin);
        });
    }
    let out = child.stdout.take().map(|r| drain(r, spec.max_output));
    let err = child.stderr.take().map(|r| drain(r, spec.max_output));
    // A thread waits for the exit, so the reply goes out the moment the command ends
    // (no polling interval), and the time bound is a plain receive timeout.
    let (tx, exited) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait().ok());
    });
    let left = deadline.saturating_duration_since(Instant::now());
    let (status, timed_out) = match exited.recv_timeout(left) {
        Ok(status) => (status, false),
        Err(_) => {
            // SAFETY: plain syscall on the command's own process group (its leader is
            // not reaped yet: the waiter thread has not returned).
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
            (exited.recv().ok().flatten(), true)
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
