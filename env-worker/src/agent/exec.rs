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
        let to = |stdout: bool| sink.clone().map(|s| (s, stdout));
        let out = out_pipe
            .map(|r| drain(r, spec.max_output, to(true)))
            .transpose()?;
        let err = err_pipe
            .map(|r| drain(r, spec.max_output, to(false)))
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
    let reaped = |exited: &mpsc::Receiver<Ended>| loop {
        match exited.recv_timeout(Duration::from_secs(5)) {
            Ok(Ended::Exited(status)) => break status,
            Ok(Ended::HungUp) => continue,
            Err(_) => break None,
        }
    };
    let (status, timed_out) = match exited.recv_timeout(left) {
        Ok(Ended::Exited(status)) => (status, false),
        Ok(Ended::HungUp) => {
            kill();
            reaped(&exited);
            return Err("the worker hung up; the command was killed".into());
        }
        Err(_) => {
            kill();
            (reaped(&exited), true)
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
