//! `Exec`: a command as `user`, with a time bound, capped output and its stdin, run on
//! helper threads that the sandbox's process limit may refuse (an error, never a panic).

use super::*;

/// What a pipe gave so far: the first `max` bytes, and whether there was more.
type Captured = Arc<Mutex<(Vec<u8>, bool)>>;

/// Starts a helper thread. The agent shares the sandbox's process limit with the code
/// it runs, so under a fork bomb there may be none to have: that is an error, never a
/// panic.
pub(super) fn helper(f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    // (Messages that start with PROCESS_LIMIT are answered `Busy`: a limit.)
    std::thread::Builder::new()
        .spawn(f)
        .map(drop)
        .map_err(|e| format!("{PROCESS_LIMIT} (the agent cannot start a thread: {e})"))
}

/// Where a streamed exec's output goes: the worker's connection, shared by the two
/// pipe readers, closed to them (`done`) before the final reply is written.
pub(super) struct StreamOut {
    conn: std::os::unix::net::UnixStream,
    done: bool,
}

/// A streamed exec's sink.
pub(super) type Sink = Arc<Mutex<StreamOut>>;

/// A sink writing chunks to `conn`.
pub(super) fn sink(conn: std::os::unix::net::UnixStream) -> Sink {
    Arc::new(Mutex::new(StreamOut { conn, done: false }))
}

/// Reads a pipe to its end on a thread, keeping the first `max` bytes (or, with a
/// sink, sending them on as `Chunk` replies as they come); the receiver hears when the
/// pipe closed.
fn drain(
    mut r: impl Read + Send + 'static,
    max: usize,
    sink: Option<(Sink, bool)>,
) -> Result<(Captured, mpsc::Receiver<()>), String> {
    let (tx, rx) = mpsc::channel();
    let captured = Captured::default();
    let c = captured.clone();
    helper(move || {
        let mut buf = [0u8; 64 * 1024];
        let mut sent = 0usize;
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => match &sink {
                    None => {
                        let mut g = c.lock().unwrap_or_else(|p| p.into_inner());
                        let room = max.saturating_sub(g.0.len());
                        g.0.extend_from_slice(&buf[..n.min(room)]);
                        g.1 |= n > room;
                    }
                    Some((out, stdout)) => {
                        // The pipe is always drained (a child never blocks on a full
                        // pipe); past `max` the rest is counted as truncated.
                        let take = n.min(max.saturating_sub(sent));
                        if take < n {
                            c.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
                        }
                        let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
                        if take > 0 && !o.done {
                            let head = Reply::Chunk {
                                stdout: *stdout,
                                len: take,
                            };
                            let sent_ok = super::reply_line(&mut o.conn, &head)
                                .and_then(|()| o.conn.write_all(&buf[..take]));
                            if sent_ok.is_err() {
                                o.done = true; // the worker went away
                            }
                            sent += take;
                        }
                    }
                },
            }
        }
        let _ = tx.send(());
    })?;
    Ok((captured, rx))
}

/// How long output may keep coming after the command exited: a background child it
/// left may hold the pipes open for good, so its output is taken as it stands then.
const OUTPUT_GRACE: Duration = Duration::from_millis(200);

/// Why the wait for a command ended.
enum Ended {
    /// It exited (the status, when it was reaped here).
    Exited(Option<std::process::ExitStatus>),
    /// The worker hung up: nobody waits for the command any more.
    HungUp,
}

/// What a pipe reader hands back: its capture, and word when the pipe closed.
type Drained = (Captured, mpsc::Receiver<()>);

/// Runs one command to its end, its time bound, or the worker hanging up on `hangup`
/// (the connection the request came on; nothing more is read from it). With `sink`,
/// output goes there as it comes and the returned output is empty.
pub(super) fn exec(
    spec: &ExecSpec,
    stdin: Vec<u8>,
    env: &[(String, String)],
    hangup: Option<std::os::unix::net::UnixStream>,
    sink: Option<Sink>,
) -> Result<(ExecEnd, Vec<u8>, Vec<u8>), String> {
    let started = Instant::now();
    let deadline = started + Duration::from_millis(spec.timeout_ms);
    let mut child = spawn(spec, env)?;
    let pgid = child.id() as libc::pid_t;
    let (tx, exited) = mpsc::channel();
    let (out, err) = match start_helpers(
        &mut child,
        stdin,
        spec.max_output,
        hangup,
        sink.as_ref(),
        tx,
    ) {
        Ok(pipes) => pipes,
        Err(e) => {
            kill_group(pgid);
            let _ = child.wait();
            return Err(e);
        }
    };
    let (status, timed_out) = wait_for_end(&exited, deadline, pgid)?;
    // Output ends when every holder of the pipes closes them; a background child of the
    // command may keep them open, so wait at most a short grace.
    let grace_end = (Instant::now() + OUTPUT_GRACE).min(deadline.max(Instant::now()));
    let (stdout, stdout_truncated) = collect(out, grace_end);
    let (stderr, stderr_truncated) = collect(err, grace_end);
    if let Some(s) = &sink {
        // Nothing more goes out after this: the final reply follows.
        s.lock().unwrap_or_else(|p| p.into_inner()).done = true;
    }
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

/// Starts the command as `user` in its own process group, its three pipes open; a
/// failure says what the caller can fix (the program or cwd missing) or that it hit
/// the process limit.
fn spawn(spec: &ExecSpec, env: &[(String, String)]) -> Result<Child, String> {
    let mut cmd = base_command(&spec.argv, env).map_err(|e| e.to_string())?;
    cmd.envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(spec.cwd.as_deref().unwrap_or(HOME))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "program {} not found in the sandbox (or cwd {} does not exist)",
            quote(&spec.argv[0]),
            quote(spec.cwd.as_deref().unwrap_or(HOME))
        ),
        std::io::ErrorKind::WouldBlock => format!("{PROCESS_LIMIT} ({e})"),
        _ => format!("cannot start {}: {e}", quote(&spec.argv[0])),
    })
}

/// Kills the command: its process group and its leader (a leader that moved to
/// another group is still killed by pid).
fn kill_group(pgid: libc::pid_t) {
    // SAFETY: plain syscalls on the command's own process group and leader. Pids are
    // not reused that fast in the sandbox's own pid namespace.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
        libc::kill(pgid, libc::SIGKILL);
    }
}

/// Starts the threads that tend a running command, in this order: one writes stdin (a
/// command that never reads it must not block the agent), two read the outputs, one
/// watches `hangup` for the worker going away, one waits for the exit (so the reply
/// leaves the moment it ends, and the bound is a receive timeout on `tx`'s receiver).
/// The waiter reaps by pid, so `child` stays with the caller to be reaped inline when
/// a thread cannot start (the error). Takes `tx`: once these threads end, the receiver
/// hears that nothing more will come.
fn start_helpers(
    child: &mut Child,
    stdin: Vec<u8>,
    max_output: usize,
    hangup: Option<std::os::unix::net::UnixStream>,
    sink: Option<&Sink>,
    tx: mpsc::Sender<Ended>,
) -> Result<(Option<Drained>, Option<Drained>), String> {
    let pgid = child.id() as libc::pid_t;
    // All three at once: on an error, the ones not handed to a thread close here.
    let stdin_pipe = child.stdin.take();
    let (out_pipe, err_pipe) = (child.stdout.take(), child.stderr.take());
    if let Some(mut w) = stdin_pipe {
        helper(move || {
            let _ = w.write_all(&stdin);
        })?;
    }
    let to = |stdout: bool| sink.cloned().map(|s| (s, stdout));
    let out = out_pipe
        .map(|r| drain(r, max_output, to(true)))
        .transpose()?;
    let err = err_pipe
        .map(|r| drain(r, max_output, to(false)))
        .transpose()?;
    if let Some(mut conn) = hangup {
        let tx = tx.clone();
        helper(move || {
            // The worker sends nothing more: a read ends only when it hangs up (or
            // closes after the reply, when nobody listens on `tx` any more).
            let _ = conn.read(&mut [0u8; 1]);
            let _ = tx.send(Ended::HungUp);
        })?;
    }
    helper(move || {
        let mut raw = 0;
        // SAFETY: waits for our own child; nothing else reaps it.
        let r = unsafe { libc::waitpid(pgid, &mut raw, 0) };
        let status = (r == pgid).then(|| std::process::ExitStatus::from_raw(raw));
        let _ = tx.send(Ended::Exited(status));
    })?;
    Ok((out, err))
}

/// Waits for the command's exit until `deadline`; past it the command is killed (and
/// reaped, briefly waited for) and the end is marked timed out. A worker that hung up
/// gets the command killed and an error: nobody is left to read its end.
fn wait_for_end(
    exited: &mpsc::Receiver<Ended>,
    deadline: Instant,
    pgid: libc::pid_t,
) -> Result<(Option<std::process::ExitStatus>, bool), String> {
    let left = deadline.saturating_duration_since(Instant::now());
    match exited.recv_timeout(left) {
        Ok(Ended::Exited(status)) => Ok((status, false)),
        Ok(Ended::HungUp) => {
            kill_group(pgid);
            reaped(exited);
            Err("the worker hung up; the command was killed".into())
        }
        Err(_) => {
            kill_group(pgid);
            Ok((reaped(exited), true))
        }
    }
}

/// The status of a killed command once the waiter reaps it (a hang-up reported
/// meanwhile changes nothing); none when it takes more than a few seconds.
fn reaped(exited: &mpsc::Receiver<Ended>) -> Option<std::process::ExitStatus> {
    loop {
        match exited.recv_timeout(Duration::from_secs(5)) {
            Ok(Ended::Exited(status)) => break status,
            Ok(Ended::HungUp) => continue,
            Err(_) => break None,
        }
    }
}

/// A pipe's output and whether it was cut at the cap, waiting for the pipe to close
/// until `until` at most (a background child may hold it open for good).
fn collect(drained: Option<Drained>, until: Instant) -> (Vec<u8>, bool) {
    let Some((captured, closed)) = drained else {
        return (Vec::new(), false);
    };
    let _ = closed.recv_timeout(until.saturating_duration_since(Instant::now()));
    let mut g = captured.lock().unwrap_or_else(|p| p.into_inner());
    (std::mem::take(&mut g.0), g.1)
}
