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

use crate::error::quote;

mod exec;
mod files;
mod relay;
mod wire;

use exec::{exec, helper};
use relay::connect;
pub(crate) use wire::SessionSpec;
pub use wire::{
    Entry, ExecCancel, ExecEnd, ExecSpec, Executed, FileChunk, Listing, Reply, Request,
    SessionProgram,
};

/// Where the session's programs and the sandbox's user start.
pub(crate) const HOME: &str = "/home/user";

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
        Request::MakeDir { path, mode } => {
            let r = match files::make_dir(&path, mode) {
                Ok(()) => Reply::Done,
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
        Request::Listen => relay::listen(&mut conn),
        Request::Exec(spec) => {
            let mut stdin = vec![0; spec.stdin_len];
            reader.read_exact(&mut stdin)?;
            // The worker hangs up when the command's caller went away: it is killed then.
            let hangup = conn.try_clone().ok();
            let sink = if spec.stream {
                Some(exec::sink(conn.try_clone()?))
            } else {
                None
            };
            match exec(&spec, stdin, env, hangup, sink) {
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
