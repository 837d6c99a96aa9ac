//! What a pool's desktops are: the real one (Xvfb, XTEST, the task app) or, for fast
//! unit tests of the pool machinery, a fake that runs the same task logic in memory.
//!
//! Envs and pools hold desktops as `Box<dyn Desktop>` and start them through a
//! [`Backend`]; nothing else in the server knows which one it has.

use deskgym_worker::WindowInfo;
use deskgym_worker::{
    Action, DesktopConfig, DesktopError, Frame, Outcome, Point, Result as WorkerResult,
};
use deskgym_worker::{ExecEnd, ExecSpec};
use deskgym_worker::{Live, Tree, TreeLimits as Limits};

/// One running desktop, as the env drives it.
pub(crate) trait Desktop: Send + std::fmt::Debug {
    /// Starts a new episode laid out from `seed`.
    fn reset(&mut self, seed: u64) -> WorkerResult<Outcome>;
    /// Performs one action and waits for the screen to be final.
    fn step(&mut self, action: &Action) -> WorkerResult<Outcome>;
    /// Replays `actions` after a reset whose outcome is `out`: the last outcome and
    /// how many actions went without a settle (`fast`: keys in a run; `seen`: the
    /// frame each action left, to wait for; see `deskgym_worker::Desktop::replay`).
    /// By default every action is a step.
    fn replay(
        &mut self,
        actions: &[Action],
        _seen: &[u128],
        _fast: bool,
        mut out: Outcome,
    ) -> WorkerResult<(Outcome, usize)> {
        for a in actions {
            out = self.step(a)?;
        }
        Ok((out, 0))
    }
    /// Captures the screen.
    fn capture(&mut self) -> WorkerResult<Frame>;
    /// Waits, without acting, until the screen has been quiet for `quiet_ms` (at most
    /// `max_ms`).
    fn quiesce(&mut self, quiet_ms: u32, max_ms: u32)
    -> WorkerResult<deskgym_worker::SettleReport>;
    /// Pointer position as placed by the last action.
    fn pointer(&self) -> Point;
    /// Display number (operators find the env's X server by it).
    fn display(&self) -> u32;
    /// Fails when a part of the desktop died.
    fn check_alive(&mut self) -> WorkerResult<()>;
    /// Pids to SIGKILL when a call overruns its deadline (none for a fake).
    fn pids(&self) -> Vec<u32>;
    /// True when a reset would restart its session (a used sandbox): a warm spare is
    /// then the faster reset.
    fn restarts_to_reset(&self) -> bool {
        false
    }
    /// The sandbox agent's socket (port tunnels); `None` without a sandbox.
    fn agent_socket(&self) -> Option<deskgym_worker::AgentPeer> {
        None
    }
    /// The top-level windows, through the window manager.
    fn windows(&mut self) -> WorkerResult<Vec<WindowInfo>>;
    /// The CLIPBOARD as text.
    fn clipboard(&mut self) -> WorkerResult<String>;
    /// Makes `text` the CLIPBOARD.
    fn set_clipboard(&mut self, text: &str) -> WorkerResult<()>;
    /// Reads part of a file in the sandbox: (file size, data, eof).
    fn read_file(
        &mut self,
        path: &str,
        offset: u64,
        max: u64,
    ) -> WorkerResult<(u64, Vec<u8>, bool)>;
    /// Writes a file in the sandbox; its size after.
    fn write_file(&mut self, path: &str, offset: u64, mode: u32, data: &[u8]) -> WorkerResult<u64>;
    /// Lists a directory in the sandbox: (resolved path, entries, truncated).
    fn list_dir(&mut self, path: &str, depth: u32, max: usize) -> WorkerResult<Listing>;
    /// Runs a command in the desktop's sandbox and waits for it.
    /// With `sink`, output goes there as it comes (stdout or not, bytes) and the end
    /// carries none.
    fn exec(
        &mut self,
        spec: &ExecSpec,
        stdin: &[u8],
        sink: Option<Sink<'_>>,
    ) -> WorkerResult<Executed>;
    /// Reads the accessibility tree.
    fn tree(&mut self, limits: &Limits) -> WorkerResult<Tree>;
    /// What one element of the tree is now.
    fn live(&mut self, id: &str) -> WorkerResult<Live>;
}

/// A directory listing: resolved path, entries, truncated.
pub(crate) type Listing = (String, Vec<deskgym_worker::DirEntry>, bool);

/// Where a streamed exec's output goes: (stdout or not, bytes).
pub(crate) type Sink<'a> = &'a mut dyn FnMut(bool, &[u8]);

/// How a command ended, with its stdout and stderr.
pub(crate) type Executed = (ExecEnd, Vec<u8>, Vec<u8>);

impl Desktop for deskgym_worker::Desktop {
    fn reset(&mut self, seed: u64) -> WorkerResult<Outcome> {
        deskgym_worker::Desktop::reset(self, seed)
    }
    fn step(&mut self, action: &Action) -> WorkerResult<Outcome> {
        deskgym_worker::Desktop::step(self, action)
    }
    fn replay(
        &mut self,
        actions: &[Action],
        seen: &[u128],
        fast: bool,
        out: Outcome,
    ) -> WorkerResult<(Outcome, usize)> {
        deskgym_worker::Desktop::replay(self, actions, seen, fast, out)
    }
    fn capture(&mut self) -> WorkerResult<Frame> {
        deskgym_worker::Desktop::capture(self)
    }
    fn quiesce(
        &mut self,
        quiet_ms: u32,
        max_ms: u32,
    ) -> WorkerResult<deskgym_worker::SettleReport> {
        deskgym_worker::Desktop::quiesce(self, quiet_ms, max_ms)
    }
    fn pointer(&self) -> Point {
        deskgym_worker::Desktop::pointer(self)
    }
    fn display(&self) -> u32 {
        deskgym_worker::Desktop::display(self)
    }
    fn check_alive(&mut self) -> WorkerResult<()> {
        deskgym_worker::Desktop::check_alive(self)
    }
    fn pids(&self) -> Vec<u32> {
        vec![self.xvfb_pid(), self.app_pid()]
    }
    fn exec(
        &mut self,
        spec: &ExecSpec,
        stdin: &[u8],
        sink: Option<Sink<'_>>,
    ) -> WorkerResult<Executed> {
        match sink {
            None => deskgym_worker::Desktop::exec(self, spec, stdin),
            Some(sink) => deskgym_worker::Desktop::exec_stream(self, spec, stdin, sink)
                .map(|end| (end, Vec::new(), Vec::new())),
        }
    }
    fn restarts_to_reset(&self) -> bool {
        deskgym_worker::Desktop::restarts_to_reset(self)
    }
    fn agent_socket(&self) -> Option<deskgym_worker::AgentPeer> {
        deskgym_worker::Desktop::agent_socket(self)
    }
    fn windows(&mut self) -> WorkerResult<Vec<WindowInfo>> {
        deskgym_worker::Desktop::windows(self)
    }
    fn clipboard(&mut self) -> WorkerResult<String> {
        deskgym_worker::Desktop::clipboard(self)
    }
    fn set_clipboard(&mut self, text: &str) -> WorkerResult<()> {
        deskgym_worker::Desktop::set_clipboard(self, text)
    }
    fn read_file(
        &mut self,
        path: &str,
        offset: u64,
        max: u64,
    ) -> WorkerResult<(u64, Vec<u8>, bool)> {
        deskgym_worker::Desktop::read_file(self, path, offset, max)
    }
    fn write_file(&mut self, path: &str, offset: u64, mode: u32, data: &[u8]) -> WorkerResult<u64> {
        deskgym_worker::Desktop::write_file(self, path, offset, mode, data)
    }
    fn list_dir(&mut self, path: &str, depth: u32, max: usize) -> WorkerResult<Listing> {
        deskgym_worker::Desktop::list_dir(self, path, depth, max)
    }
    fn tree(&mut self, limits: &Limits) -> WorkerResult<Tree> {
        deskgym_worker::Desktop::tree(self, limits)
    }
    fn live(&mut self, id: &str) -> WorkerResult<Live> {
        deskgym_worker::Desktop::live(self, id)
    }
}

/// Starts desktops.
pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// Starts one desktop for `config`.
    fn start(&self, config: DesktopConfig) -> Result<Box<dyn Desktop>, DesktopError>;
}

/// Real desktops: an Xvfb, an X session and the task app each.
#[derive(Debug, Default)]
pub(crate) struct Real;

impl Backend for Real {
    fn start(&self, config: DesktopConfig) -> Result<Box<dyn Desktop>, DesktopError> {
        Ok(Box::new(deskgym_worker::Desktop::start(config)?))
    }
}

/// An in-memory backend for unit tests of pool logic: the real task logic
/// (`tasks::Episode`), no X server. Frames are a small picture derived from the scene,
/// so the same seed and actions give the same hash, as on a real desktop.
pub(crate) mod fake;
