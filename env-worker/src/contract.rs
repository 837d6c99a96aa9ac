//! The desktop contract: what a server asks of one desktop, whoever runs it.
//!
//! A [`Backend`] starts desktops; a [`Desktop`] is one of them, driven one call at a
//! time. Two implementations ship: the local one ([`crate::LocalDesktop`], an Xvfb, an
//! X session and the task family's programs on this host) and an in-memory fake
//! ([`crate::fake`], the bundled tasks' logic with no X server). The server holds
//! `Box<dyn Desktop>` and never learns which it has.
//!
//! # A remote implementation
//! The trait is object-safe and its results are owned plain data with no handle into
//! this process (`FileChunk`, `Listing`, `Executed`, `Tree` and `Live` already derive
//! serde; `Outcome`, `Frame`, `SettleReport` and `WindowInfo` would take the same
//! derives), so a desktop on another host plugs in as one more `Backend` whose
//! `start` connects to a worker there and returns a `Desktop` that sends each call as
//! a request and decodes the answer. Two methods and a field are about this host and
//! answer plainly for a remote desktop: [`Desktop::pids`] is empty (an overrun is
//! ended by closing the connection), [`Desktop::agent_socket`] is `None` (port
//! tunnels then need a relay of their own), and `ExecSpec::cancel` is honoured by
//! hanging up. A streamed exec's `sink` is called as output frames arrive.

use crate::a11y::{Limits, Live, Tree};
use crate::action::{Action, Point};
use crate::agent::{ExecSpec, Executed, FileChunk, Listing};
use crate::error::{DesktopError, Result};
use crate::families::DesktopConfig;
use crate::frame::Frame;
use crate::runner::Outcome;
use crate::sandbox::AgentPeer;
use crate::settle::SettleReport;
use crate::windows::WindowInfo;

/// Where a streamed exec's output goes, as it comes: (from stdout, else stderr; bytes).
pub type Sink<'a> = &'a mut dyn FnMut(bool, &[u8]);

/// How [`Desktop::replay`] sends a checkpoint's actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Every action is a step, waited for.
    Settled,
    /// Keys in a run go without a settle; the replay stops once it has left the
    /// original's path (the caller starts again from a reset, settled).
    Fast,
    /// As [`Pace::Fast`], but to the last action whatever it met on the way: for a
    /// parked replica's few actions since its checkpoint, where the final frame tells
    /// and starting again from a reset costs the whole episode (decision 214).
    FastToEnd,
}

impl Pace {
    /// Whether keys in a run go without a settle.
    pub fn is_fast(self) -> bool {
        self != Pace::Settled
    }
}

/// What the original run showed after one action: a replay steers by it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// The frame hash the action left, which the agent saw (0: its capture failed).
    pub hash: u128,
    /// Milliseconds the original's step took (the action, its settle and the capture):
    /// how long a replay may wait for `hash` is a multiple of it.
    pub ms: u32,
    /// What the desktop's clock read when the action was sent, in ms since the epoch
    /// (0: the desktop has no clock of its own): a replay sets its clock to it before
    /// the action (decision 199).
    pub clock_ms: u64,
}

/// What a replay ended on.
#[derive(Clone, Debug, PartialEq)]
pub struct Replayed {
    /// The last action's outcome (the reset's, with no actions).
    pub outcome: Outcome,
    /// How many actions were sent without waiting for their settle.
    pub unsettled: usize,
    /// Actions after which the replay looked for the original's frame.
    pub checked: usize,
    /// Of those, the ones whose frame did not come within the bound (a passing state
    /// the original caught, such as a window half drawn, or a replay gone elsewhere).
    pub missed: usize,
    /// The last action (0-based) whose frame the replay showed, if any: a replica
    /// that ends elsewhere left the original's path after it.
    pub last_on_path: Option<usize>,
    /// With `fast`: the replay stopped at a step whose frame did not come, so the
    /// caller replays again settled rather than compare a frame known to be off.
    pub stopped: bool,
    /// Time spent waiting for the original's frames.
    pub waited: std::time::Duration,
    /// Settled actions before which the desktop's clock already read later than the
    /// original's had (the replay ran slower there; a clock never goes back).
    pub clock_late: usize,
    /// Time spent letting the apps go idle where the original's agent paused.
    pub idle_waited: std::time::Duration,
}

impl Replayed {
    /// A replay that ended on `outcome` and has nothing else to say yet.
    pub fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            unsettled: 0,
            checked: 0,
            missed: 0,
            last_on_path: None,
            stopped: false,
            waited: std::time::Duration::ZERO,
            clock_late: 0,
            idle_waited: std::time::Duration::ZERO,
        }
    }
}

/// One running desktop. Every call blocks until the desktop has answered; at most one
/// call is in flight per desktop (the server's env flight makes sure).
pub trait Desktop: Send + std::fmt::Debug {
    /// Starts a new episode laid out from `seed`.
    fn reset(&mut self, seed: u64) -> Result<Outcome>;
    /// Performs one action and waits for the screen to be final.
    fn step(&mut self, action: &Action) -> Result<Outcome>;
    /// Replays `actions` after a reset whose outcome is `out`, as `pace` says. `seen`
    /// (what each action left in the original) is what
    /// the replay waits for, bounded by the original's own step time, after each
    /// settled action. By default every action is a step and nothing is waited for.
    fn replay(
        &mut self,
        actions: &[Action],
        _seen: &[Seen],
        _pace: Pace,
        out: Outcome,
    ) -> Result<Replayed> {
        let mut outcome = out;
        for a in actions {
            outcome = self.step(a)?;
        }
        Ok(Replayed::new(outcome))
    }
    /// What the clock the desktop's apps read says now, in ms since the epoch, where
    /// the desktop has a clock the server sets (decision 199); `None` elsewhere.
    fn clock_ms(&self) -> Option<u64> {
        None
    }
    /// The next reset starts the episode's apps on a clock that reads `at_ms` then (a
    /// rebuild: the original's time at its reset); `None`: the host's time. Nothing
    /// where the desktop has no clock.
    fn start_clock(&mut self, _at_ms: Option<u64>) {}
    /// Moves the desktop's clock forward to read `at_ms` now. False where it already
    /// reads later (it never goes back) or the desktop has no clock.
    fn advance_clock(&mut self, _at_ms: u64) -> Result<bool> {
        Ok(false)
    }
    /// Holds the desktop's clock when it reads `until_ms` (at once where it already
    /// reads later) until the next [`Self::advance_clock`] or replay moves it on;
    /// `None` lets it run on from where it stands. Nothing where it has no clock.
    fn hold_clock(&mut self, _until_ms: Option<u64>) {}
    /// Captures the screen.
    fn capture(&mut self) -> Result<Frame>;
    /// Waits, without acting, until the screen has been quiet for `quiet_ms` (at most
    /// `max_ms`).
    fn quiesce(&mut self, quiet_ms: u32, max_ms: u32) -> Result<SettleReport>;
    /// Pointer position as placed by the last action.
    fn pointer(&self) -> Point;
    /// Display number (operators find the env's X server by it).
    fn display(&self) -> u32;
    /// Fails with [`DesktopError::DisplayGone`] or [`DesktopError::App`] when a part
    /// of the desktop died.
    fn check_alive(&mut self) -> Result<()>;
    /// Pids on this host to SIGKILL when a call overruns its deadline (none for a fake
    /// or a remote desktop).
    fn pids(&self) -> Vec<u32>;
    /// True when a reset would restart its session (a used sandbox): a warm spare is
    /// then the faster reset.
    fn restarts_to_reset(&self) -> bool {
        false
    }
    /// The sandbox agent's socket, for port tunnels; `None` without a sandbox on this
    /// host. It changes when a reset restarts the sandbox.
    fn agent_socket(&self) -> Option<AgentPeer> {
        None
    }
    /// The top-level windows, through the window manager.
    fn windows(&mut self) -> Result<Vec<WindowInfo>>;
    /// The CLIPBOARD as text.
    fn clipboard(&mut self) -> Result<String>;
    /// Makes `text` the CLIPBOARD.
    fn set_clipboard(&mut self, text: &str) -> Result<()>;
    /// Reads at most `max` bytes of a file in the sandbox from `offset`. The sandbox
    /// verbs refuse by default, so a desktop without one (the fake) and a new verb's
    /// first version need nothing but the local desktop's body.
    fn read_file(&mut self, _path: &str, _offset: u64, _max: u64) -> Result<FileChunk> {
        Err(no_sandbox())
    }
    /// Writes a file in the sandbox at `offset` (0 creates or truncates; a mode that is not
    /// 0 is set exactly after the write); its size after.
    fn write_file(&mut self, _path: &str, _offset: u64, _mode: u32, _data: &[u8]) -> Result<u64> {
        Err(no_sandbox())
    }
    /// Makes a directory in the sandbox with its missing parents, and sets its mode
    /// (exactly, an existing directory's too; 0 leaves it).
    fn make_dir(&mut self, _path: &str, _mode: u32) -> Result<()> {
        Err(no_sandbox())
    }
    /// Lists a directory in the sandbox, `depth` levels down, at most `max` entries.
    fn list_dir(&mut self, _path: &str, _depth: u32, _max: usize) -> Result<Listing> {
        Err(no_sandbox())
    }
    /// Runs a command in the sandbox and waits for it. With `sink`, output goes there
    /// as it comes and the result carries none.
    fn exec(
        &mut self,
        _spec: &ExecSpec,
        _stdin: &[u8],
        _sink: Option<Sink<'_>>,
    ) -> Result<Executed> {
        Err(no_sandbox())
    }
    /// Reads the accessibility tree.
    fn tree(&mut self, limits: &Limits) -> Result<Tree>;
    /// What one element of the tree is now.
    fn live(&mut self, id: &str) -> Result<Live>;
}

/// Starts desktops (shared by every pool: starts run in parallel).
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Starts one desktop for `config`.
    fn start(&self, config: DesktopConfig) -> Result<Box<dyn Desktop>>;
}

/// What a desktop with no sandbox answers a sandbox verb (the same kind of error as a
/// local desktop of the `tasks` profile).
fn no_sandbox() -> DesktopError {
    DesktopError::Exec("this desktop has no sandbox".into())
}
