//! One deskgym desktop, with no knowledge of gRPC.
//!
//! # Layout
//! The modules are private; the crate's face is the re-export list at the end of this
//! file (what the server, the binaries and the benches use). Inside:
//! - `xvfb`: the Xvfb process (`-displayfd`, process group, reaping, stale locks).
//! - `x11`: the client session: XTEST input, MIT-SHM capture, the XDamage wait.
//! - `settle`: every settle policy (sync, damage, browser) and the quiet window each ends on.
//! - `keys`: keysym names and chord parsing.
//! - `frame`: RGB frames and their XXH3-128 content hash.
//! - `a11y`: the accessibility tree as raw nodes, and the AT-SPI client the sandbox
//!   agent reads it with.
//! - `action`: actions in pixels, as the worker executes them.
//! - `sandbox`: an env's bubblewrap sandbox (profile desktops); `agent`: the
//!   program inside it that starts the session and runs `exec`/`launch` (binary
//!   `deskgym-sandbox-agent`).
//! - `owner`: the lock that tells a sweeper this process still owns its temp
//!   directories (across PID namespaces).
//! - `limits`: per-sandbox memory (cgroup or `RLIMIT_DATA`), open files, processes.
//! - `clipboard`: the CLIPBOARD selection as text (read, and owned by a thread of ours).
//! - `clock`: the desktop clock a replay sets (our preload's offsets, decisions 199, 201).
//! - `windows`: top-level windows through the window manager (EWMH).
//! - `runner`: what a task family implements (`Runner`, what a task reports) and the
//!   profile's session the sandboxed families share.
//! - `families`: the task families, one folder each, and the one place a desktop's
//!   family is chosen: `task_app` (the bundled tasks' logic, the app program that draws
//!   them with x11rb, binary `deskgym-task-app`, and the worker's handle on it), `blank`
//!   (a session with no task), `script` (declarative tasks: setup steps, a checker
//!   command), `web` (MiniWoB++ pages in Chromium, driven over DevTools).
//! - `contract`: the `Desktop` and `Backend` traits, what a server drives.
//! - `desktop`: the local desktop (Xvfb + X session + the family's runner as one
//!   unit) and its backend.
//! - `fake` (public): in-memory desktops for tests and the server's `--backend fake`.

mod a11y;
mod action;
mod agent;
mod clipboard;
mod clock;
mod contract;
mod desktop;
mod error;
pub mod fake;
mod families;
mod fdpass;
mod frame;
mod idle;
mod keys;
mod limits;
mod owner;
mod runner;
mod sandbox;
mod settle;
mod windows;
mod x11;
mod xvfb;

/// Bounds of an accessibility tree reading.
pub use a11y::Limits as TreeLimits;
pub use a11y::{ElementAction, Live, Node, Tree};
pub use action::{Action, Button, Point};
/// The sandbox agent's program (binary `deskgym-sandbox-agent`).
pub use agent::main as agent_main;
pub use agent::{
    Entry as DirEntry, ExecCancel, ExecEnd, ExecSpec, Executed, FileChunk, Listing, SessionProgram,
};
/// The sandbox agent's wire, as the server (and the hostile-tenant tests) speak it.
pub use agent::{Reply as AgentReply, Request as AgentRequest};
pub use clipboard::MAX_CLIPBOARD_BYTES;
pub use contract::{Backend, Desktop, Pace, Replayed, Seen, Sink};
pub use desktop::{LocalBackend, LocalDesktop};
pub use error::{DesktopError, ElementFailure, FileErrorKind, Result, quote};
/// The task app's program (binary `deskgym-task-app`).
pub use families::task_app_main;
pub use families::{Clock as WebClock, Reward as WebReward, WebSpec};
pub use families::{Color, Draw, Episode, FontMetrics, Input, Rng, TASKS, TaskSpec, task_spec};
pub use families::{DesktopConfig, Family, RewardFrom, ScriptSpec, SetupStep};
pub use frame::{Frame, frame_hash, hash_hex};
pub use keys::{char_keysym, parse_chord};
pub use limits::{memory_bound, raise_open_files, remove_cgroups};
pub use owner::release as release_owner_lock;
pub use runner::{AppState, Outcome};
pub use sandbox::{
    AgentPeer, MAX_SYSTEM_FILES, SandboxConfig, SandboxLimits, SystemFile, refuse_system_path,
    sandboxes_root, sweep_leftovers, system_dir_on_host, which,
};
pub use settle::{Settle, SettlePolicy, SettleReport};
pub use windows::WindowInfo;
pub use x11::XSession;
pub use xvfb::{Xvfb, displays_root};
