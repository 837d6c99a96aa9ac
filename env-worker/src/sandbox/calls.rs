//! The worker's side of the agent's requests: one exchange per connection, every
//! answer bounded and checked (the agent runs with the uid of the code in the sandbox,
//! which could replace it: the worker trusts none of its numbers).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::Sandbox;
use crate::agent::{ExecSpec, Executed, FileChunk, Listing, Reply, Request};
use crate::error::{DesktopError, Result};
use crate::limits::Cgroup;

impl Sandbox {
    /// One request/reply exchange with the agent; what follows the reply line (an
    /// exec's output, a file's data) is read from the returned reader.
    pub(super) fn call(
        &self,
        req: &Request,
        body: &[u8],
        bound: Duration,
    ) -> Result<(Reply, BufReader<UnixStream>)> {
        let conn = self.connect_agent(bound)?;
        Self::exchange(conn, req, body)
    }

    fn exchange(
        mut conn: UnixStream,
        req: &Request,
        body: &[u8],
    ) -> Result<(Reply, BufReader<UnixStream>)> {
        let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let sent = conn.write_all(&line).and_then(|()| conn.write_all(body));
        let mut conn = BufReader::new(conn);
        if let Err(e) = sent {
            // The agent took the connection and closed it unread: it refused the
            // request (it says why first when it can, Busy; at its process limit it may
            // not even manage that).
            if !hung_up(&e) {
                return Err(e.into());
            }
            let why = read_line(&mut conn)
                .ok()
                .and_then(|l| match serde_json::from_str(&l) {
                    Ok(Reply::Busy { message }) => Some(message),
                    _ => None,
                });
            return Err(DesktopError::Limit(why.unwrap_or_else(refused)));
        }
        let reply = match read_line(&mut conn) {
            // On a Unix socket a reset (not an end of file) means the agent closed it
            // with our request unread: nothing ran, the refusal is safe to retry.
            Err(DesktopError::Io(e)) if hung_up(&e) => {
                return Err(DesktopError::Limit(refused()));
            }
            r => r?,
        };
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

    /// A streamed exec's output chunks, handed to `sink` (stdout or not, bytes) as they
    /// come, up to the final reply. The agent's claims are bounded: a chunk over 64 KiB
    /// or a channel over `max` bytes is an untrusted agent.
    fn chunks(
        mut reply: Reply,
        mut conn: BufReader<UnixStream>,
        max: usize,
        sink: &mut dyn FnMut(bool, &[u8]),
    ) -> Result<(Reply, BufReader<UnixStream>)> {
        let mut sent = [0usize; 2];
        while let Reply::Chunk { stdout, len } = reply {
            let total = &mut sent[usize::from(stdout)];
            *total = total.saturating_add(len);
            if len > 64 * 1024 || *total > max {
                return Err(untrusted("more output than it was asked to stream"));
            }
            let mut buf = vec![0; len];
            conn.read_exact(&mut buf)?;
            sink(stdout, &buf);
            let line = read_line(&mut conn)?;
            reply = serde_json::from_str(&line).map_err(|e| {
                DesktopError::App(format!("the sandbox agent answered {line:?}: {e}"))
            })?;
        }
        Ok((reply, conn))
    }

    /// Runs a command as `user` and waits for it (at most its time bound, plus a margin
    /// for the agent to report). With `spec.stream`, output goes to `sink` as it comes
    /// (and none is returned).
    pub(crate) fn exec(
        &self,
        spec: &ExecSpec,
        stdin: &[u8],
        sink: &mut dyn FnMut(bool, &[u8]),
    ) -> Result<Executed> {
        let spec = ExecSpec {
            stdin_len: stdin.len(),
            ..spec.clone()
        };
        let bound = Duration::from_millis(spec.timeout_ms) + Duration::from_secs(5);
        let spec_max = spec.max_output;
        let oom_before = self.cgroup.as_ref().map_or(0, Cgroup::oom_kills);
        let cancel = spec.cancel.clone();
        let conn = self.connect_agent(bound)?;
        let cancelled = || DesktopError::Exec("the exec was cancelled by its caller".into());
        if !cancel.arm(&conn) {
            return Err(cancelled());
        }
        let stream = spec.stream;
        let exchanged =
            Self::exchange(conn, &Request::Exec(spec), stdin).and_then(|(reply, conn)| {
                if stream {
                    Self::chunks(reply, conn, spec_max, sink)
                } else {
                    Ok((reply, conn))
                }
            });
        cancel.disarm();
        let (reply, mut conn) = match exchanged {
            Err(_) if cancel.is_cancelled() => return Err(cancelled()),
            other => other?,
        };
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
                Ok(Executed {
                    end,
                    stdout: out,
                    stderr: err,
                })
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
    pub(crate) fn connect(&self, port: u16, bound: Duration) -> Result<UnixStream> {
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
    pub(crate) fn launch(&self, argv: &[String]) -> Result<u32> {
        let req = Request::Launch {
            argv: argv.to_vec(),
        };
        match self.call(&req, &[], Duration::from_secs(10))?.0 {
            Reply::Launched { pid } => Ok(pid),
            Reply::Failed { message } => Err(DesktopError::Exec(message)),
            other => Err(untrusted(other.kind())),
        }
    }

    /// Reads at most `max` bytes of a file from `offset`.
    pub(crate) fn read_file(&self, path: &str, offset: u64, max: u64) -> Result<FileChunk> {
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
                Ok(FileChunk { size, data, eof })
            }
            (other, _) => Err(file_error(other)),
        }
    }

    /// Writes `data` at `offset` (0 creates or truncates); the file's size after.
    pub(crate) fn write_file(
        &self,
        path: &str,
        offset: u64,
        mode: u32,
        data: &[u8],
    ) -> Result<u64> {
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

    /// Makes a directory and its missing parents; sets its mode.
    pub(crate) fn make_dir(&self, path: &str, mode: u32) -> Result<()> {
        let req = Request::MakeDir {
            path: path.into(),
            mode,
        };
        match self.call(&req, &[], FILE_TIMEOUT)?.0 {
            Reply::Done => Ok(()),
            other => Err(file_error(other)),
        }
    }

    /// Lists a directory.
    pub(crate) fn list_dir(&self, path: &str, depth: u32, max: usize) -> Result<Listing> {
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
            } if entries.len() <= max => Ok(Listing {
                path,
                entries,
                truncated,
            }),
            Reply::Listed { .. } => Err(untrusted("more entries than it was asked for")),
            other => Err(file_error(other)),
        }
    }

    /// Walks the session's accessibility tree (the agent enforces `limits`; the worker
    /// bounds the answer's size).
    pub(crate) fn a11y_tree(&self, limits: &crate::a11y::Limits) -> Result<crate::a11y::Tree> {
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
    pub(crate) fn a11y_live(&self, id: &str) -> Result<crate::a11y::Live> {
        let req = Request::A11yLive { id: id.into() };
        match self.call(&req, &[], ELEMENT_TIMEOUT)?.0 {
            Reply::Live(live) => Ok(live),
            other => Err(element_error(other)),
        }
    }

    /// Performs an element's action.
    pub(crate) fn a11y_invoke(&self, id: &str, action: &str) -> Result<()> {
        self.element_call(Request::A11yInvoke {
            id: id.into(),
            action: action.into(),
        })
    }

    /// Sets an element's text or number.
    pub(crate) fn a11y_set_value(&self, id: &str, value: &str) -> Result<()> {
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
/// The peer closed the connection under us.
fn hung_up(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
    )
}

/// Why a request the agent dropped unanswered failed.
fn refused() -> String {
    "the desktop's agent closed the connection without taking the request: the desktop \
     is likely at its process limit; retry once its processes are gone"
        .to_string()
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::peer::pid_namespace;
    use crate::sandbox::{AgentPeer, SandboxLimits};
    use std::os::unix::net::UnixListener;
    use std::os::unix::process::CommandExt;
    use std::process::Command;
    use std::sync::Arc;

    /// A sandbox whose "agent" is this test: it answers `reply` to one request (an
    /// empty reply: it hangs up at once, the request unread, as an agent at its
    /// process limit does).
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
                if reply.is_empty() {
                    return drop(c);
                }
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
            agent_pid: 0,
            network: None,
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
        let e = sb.exec(&spec, &[], &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains("more output"), "{e}");
        let sb = impostor(
            "read",
            "{\"reply\":\"read\",\"size\":1,\"len\":999999999999,\"eof\":true}\n",
        );
        let e = sb.read_file("x", 0, 10).unwrap_err();
        assert!(e.to_string().contains("more file data"), "{e}");
        let sb = impostor("garbage", "not json\n");
        assert!(sb.exec(&spec, &[], &mut |_, _| {}).is_err());
    }

    /// An agent that hangs up on a request it never read refused it: a limit (safe to
    /// retry), not an internal error.
    #[test]
    fn a_request_the_agent_hangs_up_on_is_a_limit() {
        let spec = ExecSpec {
            argv: vec!["true".into()],
            timeout_ms: 1000,
            max_output: 1024,
            ..Default::default()
        };
        let sb = impostor("hangup", "");
        // A large stdin: the hang-up meets the write (EPIPE) or the read (reset).
        let e = sb
            .exec(&spec, &vec![b'x'; 4 << 20], &mut |_, _| {})
            .unwrap_err();
        assert!(matches!(e, DesktopError::Limit(_)), "{e:?}");
        assert!(e.to_string().contains("process limit"), "{e}");
    }
}
