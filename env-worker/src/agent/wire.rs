//! The agent's wire: the requests the worker sends and the replies it reads, one JSON
//! line each (raw bytes follow for an exec's stdin and output).

use serde::{Deserialize, Serialize};

use crate::error::FileErrorKind;

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
    /// Send output as it comes (`Chunk` replies before the final `Exec`, whose lengths
    /// are then 0); `max_output` bounds each channel's total.
    #[serde(default)]
    pub stream: bool,
    /// The worker's way to stop the command early (its caller went away); never on the
    /// wire.
    #[serde(skip)]
    pub cancel: ExecCancel,
}

/// Stops a running exec from another thread: the worker hangs up on the agent, which
/// kills the command's process group. Cancelling before the exec starts makes it fail
/// at once. Clones share one state.
#[derive(Clone, Debug, Default)]
pub struct ExecCancel(std::sync::Arc<std::sync::Mutex<CancelState>>);

#[derive(Debug, Default)]
struct CancelState {
    cancelled: bool,
    /// The connection of the exec in flight (a clone, to shut down).
    conn: Option<std::os::unix::net::UnixStream>,
}

impl ExecCancel {
    fn state(&self) -> std::sync::MutexGuard<'_, CancelState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stops the exec (now, or as soon as it starts).
    pub fn cancel(&self) {
        let mut s = self.state();
        s.cancelled = true;
        if let Some(c) = s.conn.take() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }

    /// True once [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.state().cancelled
    }

    /// Registers the exec's connection; false (and nothing kept) when already cancelled.
    pub(crate) fn arm(&self, conn: &std::os::unix::net::UnixStream) -> bool {
        let mut s = self.state();
        if s.cancelled {
            return false;
        }
        s.conn = conn.try_clone().ok();
        true
    }

    /// The exec ended: nothing left to shut down.
    pub(crate) fn disarm(&self) {
        self.state().conn = None;
    }
}

/// Every cancel handle is alike: a spec's equality is its command's.
impl PartialEq for ExecCancel {
    fn eq(&self, _: &Self) -> bool {
        true
    }
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
        /// Permission bits: when not 0, set exactly (no umask) on the file, new or
        /// not, after the write; 0: 0644 for a new file.
        mode: u32,
        /// Bytes that follow.
        len: usize,
    },
    /// Makes a directory and its missing parents (inside the home or /tmp), then sets
    /// the directory's mode (an existing one too); answered `Done`.
    MakeDir {
        /// Path (absolute, or relative to the home).
        path: String,
        /// Permission bits, set exactly (no umask); 0: left as they are.
        mode: u32,
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
    /// Opens a TCP listener on a free port of the sandbox's own loopback and hands it
    /// to the worker (SCM_RIGHTS, with the `Listening` reply): the server accepts on
    /// it, so a port inside the sandbox's network namespace is served from outside
    /// (the egress proxy of a `net.egress` unlock) with no route out of the namespace.
    Listen,
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
    /// Permission bits (0o7777 at most); of the link itself for a symlink.
    #[serde(default)]
    pub mode: u32,
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

/// Part of a file, as a read returns it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FileChunk {
    /// The file's whole size, in bytes.
    pub size: u64,
    /// The bytes read from the asked offset.
    pub data: Vec<u8>,
    /// The read reached the end of the file.
    pub eof: bool,
}

/// A directory listing.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Listing {
    /// The directory, resolved (what a relative path named).
    pub path: String,
    /// What is under it, to the asked depth.
    pub entries: Vec<Entry>,
    /// More entries than were asked for were there.
    pub truncated: bool,
}

/// How a command ended, with what it wrote.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Executed {
    /// Exit status, signal, truncation, time.
    pub end: ExecEnd,
    /// What it wrote to stdout (empty when the output was streamed).
    pub stdout: Vec<u8>,
    /// What it wrote to stderr (empty when the output was streamed).
    pub stderr: Vec<u8>,
}

/// The agent's answer.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// Answer to `Ping`.
    Ready,
    /// Answer to `Exec`.
    Exec(ExecEnd),
    /// Part of a streamed exec's output: `len` bytes (at most 64 KiB) follow.
    Chunk {
        /// From stdout (else stderr).
        stdout: bool,
        /// Bytes that follow.
        len: usize,
    },
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
    /// Answer to `Listen`: the listener travels with this line (SCM_RIGHTS).
    Listening {
        /// The port it listens on (the worker checks it against the socket itself).
        port: u16,
    },
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
            Self::Chunk { .. } => "an output chunk",
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
            Self::Listening { .. } => "a listening reply",
            Self::Busy { .. } => "a busy reply",
        }
    }
}
