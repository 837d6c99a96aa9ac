//! One deskgym desktop, with no knowledge of gRPC.
//!
//! # Layout
//! - [`xvfb`]: the Xvfb process (`-displayfd`, process group, reaping, stale locks).
//! - [`x11`]: the client session: XTEST input, MIT-SHM capture, XDamage settle.
//! - [`keys`]: keysym names and chord parsing.
//! - [`frame`]: RGB frames and their XXH3-128 content hash.
//! - [`a11y`]: the accessibility tree as raw nodes, and the AT-SPI client the sandbox
//!   agent reads it with.
//! - [`action`]: actions in pixels, as the worker executes them.
//! - [`tasks`]: the bundled tasks' pure logic (layout, input, scene).
//! - [`app`]: the task app program that draws a task with x11rb (binary `deskgym-task-app`).
//! - [`task_app`]: the worker's handle on a running task app.
//! - [`sandbox`]: an env's bubblewrap sandbox (profile desktops); [`agent`]: the
//!   program inside it that starts the session and runs `exec`/`launch` (binary
//!   `deskgym-sandbox-agent`).
//! - [`limits`]: per-sandbox memory (cgroup or `RLIMIT_DATA`), open files, processes.
//! - [`clipboard`]: the CLIPBOARD selection as text (read, and owned by a thread of ours).
//! - [`script`]: declarative tasks (setup steps, a checker command for the reward).
//! - [`windows`]: top-level windows through the window manager (EWMH).
//! - [`web`]: web tasks (MiniWoB++ pages) in Chromium, driven over DevTools ([`cdp`]).
//! - [`runner`]: the task families (task app, blank session, declarative task, web
//!   page), one `Runner` each, chosen once per desktop.
//! - [`desktop`]: Xvfb + X session + the family's runner as one unit.

pub mod a11y;
pub mod action;
pub mod agent;
pub mod app;
pub mod cdp;
pub mod clipboard;
pub mod desktop;
pub mod error;
pub mod frame;
pub mod keys;
pub mod limits;
pub mod runner;
pub mod sandbox;
pub mod script;
pub mod task_app;
pub mod tasks;
pub mod web;
pub mod windows;
pub mod x11;
pub mod xvfb;

pub use action::{Action, Button, Point};
pub use desktop::Desktop;
pub use error::{DesktopError, Result};
pub use frame::{Frame, frame_hash, hash_hex};
pub use runner::{DesktopConfig, Outcome};
pub use sandbox::{SandboxConfig, SandboxLimits};
pub use task_app::AppState;
pub use tasks::{TASKS, TaskSpec, task_spec};
pub use x11::{Settle, SettlePolicy, SettleReport};
