//! What a pool's desktops are: the real one (Xvfb, XTEST, the task app) or, for fast
//! unit tests of the pool machinery, a fake that runs the same task logic in memory.
//!
//! Envs and pools hold desktops as `Box<dyn Desktop>` and start them through a
//! [`Backend`]; nothing else in the server knows which one it has.

use deskgym_worker::a11y::{Limits, Live, Tree};
use deskgym_worker::agent::{ExecEnd, ExecSpec};
use deskgym_worker::windows::WindowInfo;
use deskgym_worker::{
    Action, DesktopConfig, DesktopError, Frame, Outcome, Point, Result as WorkerResult,
};

/// One running desktop, as the env drives it.
pub(crate) trait Desktop: Send + std::fmt::Debug {
    /// Starts a new episode laid out from `seed`.
    fn reset(&mut self, seed: u64) -> WorkerResult<Outcome>;
    /// Performs one action and waits for the screen to be final.
    fn step(&mut self, action: &Action) -> WorkerResult<Outcome>;
    /// Captures the screen.
    fn capture(&mut self) -> WorkerResult<Frame>;
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
    fn agent_socket(&self) -> Option<deskgym_worker::sandbox::AgentPeer> {
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
    fn exec(&mut self, spec: &ExecSpec, stdin: &[u8]) -> WorkerResult<Executed>;
    /// Reads the accessibility tree.
    fn tree(&mut self, limits: &Limits) -> WorkerResult<Tree>;
    /// What one element of the tree is now.
    fn live(&mut self, id: &str) -> WorkerResult<Live>;
}

/// A directory listing: resolved path, entries, truncated.
pub(crate) type Listing = (String, Vec<deskgym_worker::agent::Entry>, bool);

/// How a command ended, with its stdout and stderr.
pub(crate) type Executed = (ExecEnd, Vec<u8>, Vec<u8>);

impl Desktop for deskgym_worker::Desktop {
    fn reset(&mut self, seed: u64) -> WorkerResult<Outcome> {
        deskgym_worker::Desktop::reset(self, seed)
    }
    fn step(&mut self, action: &Action) -> WorkerResult<Outcome> {
        deskgym_worker::Desktop::step(self, action)
    }
    fn capture(&mut self) -> WorkerResult<Frame> {
        deskgym_worker::Desktop::capture(self)
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
    fn exec(&mut self, spec: &ExecSpec, stdin: &[u8]) -> WorkerResult<Executed> {
        deskgym_worker::Desktop::exec(self, spec, stdin)
    }
    fn restarts_to_reset(&self) -> bool {
        deskgym_worker::Desktop::restarts_to_reset(self)
    }
    fn agent_socket(&self) -> Option<deskgym_worker::sandbox::AgentPeer> {
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
#[cfg(test)]
pub(crate) mod fake {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};

    use deskgym_worker::tasks::{Episode, FontMetrics, Input};
    use deskgym_worker::{AppState, SettleReport};

    use super::*;

    /// Knobs tests turn: starts that fail, desktops that die.
    #[derive(Debug, Default)]
    pub(crate) struct FakeBackend {
        /// Desktops started so far.
        pub(crate) started: AtomicU32,
        /// Starts left before every further start fails (negative: never fail).
        pub(crate) fail_after: AtomicI64,
        /// Set on every desktop started: when true they report themselves dead.
        pub(crate) dead: Arc<AtomicBool>,
    }

    impl FakeBackend {
        /// A backend whose starts never fail.
        pub(crate) fn new() -> Self {
            Self {
                fail_after: AtomicI64::new(-1),
                ..Self::default()
            }
        }
    }

    impl Backend for FakeBackend {
        fn start(&self, config: DesktopConfig) -> Result<Box<dyn Desktop>, DesktopError> {
            // Check and count down in one atomic step: starts run in parallel.
            let left =
                self.fail_after
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| match n {
                        0 => None,
                        n if n > 0 => Some(n - 1),
                        n => Some(n),
                    });
            if left.is_err() {
                return Err(DesktopError::XvfbStart("injected start failure".into()));
            }
            let n = self.started.fetch_add(1, Ordering::AcqRel);
            Ok(Box::new(FakeDesktop {
                config,
                display: 1000 + n,
                episode: None,
                pointer: Point { x: 0, y: 0 },
                dead: self.dead.clone(),
            }))
        }
    }

    #[derive(Debug)]
    struct FakeDesktop {
        config: DesktopConfig,
        display: u32,
        episode: Option<Episode>,
        pointer: Point,
        dead: Arc<AtomicBool>,
    }

    const FONT: FontMetrics = FontMetrics {
        char_width: 10,
        ascent: 16,
        descent: 4,
    };

    impl FakeDesktop {
        fn app(&self) -> AppState {
            let e = self.episode.as_ref();
            AppState {
                reward: e.map_or(0.0, |e| e.reward()),
                done: e.is_some_and(|e| e.done()),
                instruction: e.map(|e| e.instruction().to_string()).unwrap_or_default(),
                extra: Vec::new(),
            }
        }

        fn outcome(&self) -> Outcome {
            Outcome {
                app: self.app(),
                settle: SettleReport {
                    policy: self.config.settle.policy,
                    quiesced: true,
                    ..Default::default()
                },
            }
        }
    }

    impl Desktop for FakeDesktop {
        fn reset(&mut self, seed: u64) -> WorkerResult<Outcome> {
            self.check_alive()?;
            let c = &self.config;
            self.episode = Episode::new(&c.task, seed, c.width, c.height);
            Ok(self.outcome())
        }

        fn step(&mut self, action: &Action) -> WorkerResult<Outcome> {
            self.check_alive()?;
            if let (Action::Click { at, .. }, Some(e)) = (action, self.episode.as_mut()) {
                self.pointer = *at;
                e.handle(Input::Press {
                    button: 1,
                    x: at.x,
                    y: at.y,
                });
                e.handle(Input::Release {
                    button: 1,
                    x: at.x,
                    y: at.y,
                });
            }
            Ok(self.outcome())
        }

        fn capture(&mut self) -> WorkerResult<Frame> {
            self.check_alive()?;
            // A picture of the scene: its draw list's text, tiled over the screen.
            let scene = self
                .episode
                .as_ref()
                .map(|e| format!("{:?}", e.scene(FONT)))
                .unwrap_or_default();
            let (w, h) = (self.config.width, self.config.height);
            let bytes = scene.as_bytes();
            let rgb: Vec<u8> = (0..(w * h * 3) as usize)
                .map(|i| bytes.get(i % bytes.len().max(1)).copied().unwrap_or(0))
                .collect();
            Ok(Frame::from_rgb(w, h, rgb))
        }

        fn pointer(&self) -> Point {
            self.pointer
        }

        fn display(&self) -> u32 {
            self.display
        }

        fn check_alive(&mut self) -> WorkerResult<()> {
            if self.dead.load(Ordering::Acquire) {
                return Err(DesktopError::DisplayGone {
                    display: self.display,
                    reason: "fake desktop marked dead".into(),
                });
            }
            Ok(())
        }

        fn pids(&self) -> Vec<u32> {
            Vec::new()
        }

        fn windows(&mut self) -> WorkerResult<Vec<WindowInfo>> {
            Ok(Vec::new())
        }

        fn clipboard(&mut self) -> WorkerResult<String> {
            Ok(String::new())
        }

        fn set_clipboard(&mut self, _: &str) -> WorkerResult<()> {
            Ok(())
        }

        fn read_file(&mut self, _: &str, _: u64, _: u64) -> WorkerResult<(u64, Vec<u8>, bool)> {
            Err(DesktopError::Exec("the fake backend has no sandbox".into()))
        }

        fn write_file(&mut self, _: &str, _: u64, _: u32, _: &[u8]) -> WorkerResult<u64> {
            Err(DesktopError::Exec("the fake backend has no sandbox".into()))
        }

        fn list_dir(&mut self, _: &str, _: u32, _: usize) -> WorkerResult<Listing> {
            Err(DesktopError::Exec("the fake backend has no sandbox".into()))
        }

        fn exec(&mut self, _: &ExecSpec, _: &[u8]) -> WorkerResult<Executed> {
            Err(DesktopError::Exec("the fake backend has no sandbox".into()))
        }

        fn tree(&mut self, _: &Limits) -> WorkerResult<Tree> {
            self.check_alive()?;
            let widgets = self
                .episode
                .as_ref()
                .map(|e| e.widgets())
                .unwrap_or_default();
            let (w, h) = (self.config.width as i32, self.config.height as i32);
            Ok(deskgym_worker::a11y::widget_tree("fake", &widgets, w, h))
        }

        fn live(&mut self, id: &str) -> WorkerResult<Live> {
            let n = self.tree(&Limits::default())?.take(id)?;
            Ok(Live::from(&n))
        }
    }
}
