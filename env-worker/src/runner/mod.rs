//! What a task family implements: one [`Runner`] per desktop, chosen once when the
//! desktop starts (`crate::families::start`), that says how an episode starts and how
//! a step is judged, and the profile's sandboxed session ([`Session`]) the families that
//! run one share. The families themselves live in `crate::families`, one folder each;
//! this module knows none of them.

use crate::Point;
use crate::a11y::{Limits, Live, Tree};
use crate::action::Action;
use crate::error::{DesktopError, Result};
use crate::settle::{Settle, SettleReport};
use crate::x11::XSession;

mod session;

pub(crate) use session::Session;

/// What a task reports after each reset and step (the task app over its socket, a
/// checker's result, a web page's score).
#[derive(Clone, Debug, PartialEq)]
pub struct AppState {
    /// Reward so far in this episode.
    pub reward: f64,
    /// The episode reached a terminal state.
    pub done: bool,
    /// The episode's instruction.
    pub instruction: String,
    /// What the task reports beside the reward (a web page's raw reward and reason),
    /// carried into `info`.
    pub extra: Vec<(String, String)>,
}

impl AppState {
    /// No task logic: reward 0, never done, no instruction (sandboxed sessions).
    pub fn idle() -> Self {
        Self {
            reward: 0.0,
            done: false,
            instruction: String::new(),
            extra: Vec::new(),
        }
    }
}

/// What the sandbox verbs answer on a desktop with no session (the `tasks` profile).
pub(crate) fn no_sandbox() -> DesktopError {
    DesktopError::Exec("this desktop has no sandbox (the `tasks` profile)".into())
}

/// The outcome of a reset or step, before capture.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// What the task app reported.
    pub app: AppState,
    /// How the settle wait went.
    pub settle: SettleReport,
}

/// What a runner works with: the display's X session and the desktop's settings.
pub(crate) struct Ctx<'a> {
    /// The X session (input, settle, windows).
    pub x: &'a mut XSession,
    /// The display number.
    pub display: u32,
    /// The settle policy after every reset and step.
    pub settle: Settle,
    /// Screen width in pixels.
    pub width: u32,
    /// Screen height in pixels.
    pub height: u32,
}

/// One task family's part of a desktop.
pub(crate) trait Runner: Send {
    /// Starts a new episode from `seed`, the screen settled.
    fn reset(&mut self, cx: Ctx<'_>, seed: u64) -> Result<Outcome>;
    /// Performs one action, the screen settled, and says what the task makes of it.
    fn step(&mut self, cx: Ctx<'_>, action: &Action) -> Result<Outcome>;
    /// Performs one action without waiting for the screen or asking the task, for a
    /// replay that waits later; `None` where the family has no such shortcut (the
    /// replay steps the action).
    fn act_only(&mut self, _cx: Ctx<'_>, _action: &Action) -> Option<Result<()>> {
        None
    }
    /// Where the last action left the pointer.
    fn pointer(&self, x: &XSession) -> Point {
        x.pointer()
    }
    /// Fails with [`crate::DesktopError::App`] when the family's programs died (by
    /// default: its session's sandbox).
    fn check_alive(&mut self) -> Result<()> {
        self.session().map_or(Ok(()), Session::check_alive)
    }
    /// The pid whose death ends the family's programs (by default: the sandbox's).
    fn pid(&self) -> u32 {
        self.session_ref().map_or(0, Session::pid)
    }
    /// The accessibility tree (by default: the session's, through AT-SPI).
    fn tree(&mut self, limits: &Limits) -> Result<Tree> {
        self.session_ref().ok_or_else(no_sandbox)?.tree(limits)
    }
    /// What an element is now (by default: in the session).
    fn live(&mut self, id: &str) -> Result<Live> {
        self.session_ref().ok_or_else(no_sandbox)?.live(id)
    }
    /// The profile's sandboxed session, for families that run one.
    fn session(&mut self) -> Option<&mut Session> {
        None
    }
    /// The same, to read.
    fn session_ref(&self) -> Option<&Session> {
        None
    }
}

/// The `Runner` methods of a family that owns its profile's sandboxed [`Session`] in
/// the field `$field`: `session` and `session_ref` hand it out; with `acts`, the family
/// also replays an action straight into the session (`act_only`), as `blank` and
/// `script` do (`web` does not: its input goes through the page). One definition, so
/// every family that runs a session exposes it the same way.
macro_rules! session_methods {
    ($field:ident) => {
        fn session(&mut self) -> Option<&mut $crate::runner::Session> {
            Some(&mut self.$field)
        }

        fn session_ref(&self) -> Option<&$crate::runner::Session> {
            Some(&self.$field)
        }
    };
    ($field:ident, acts) => {
        fn act_only(
            &mut self,
            cx: $crate::runner::Ctx<'_>,
            action: &$crate::action::Action,
        ) -> Option<$crate::error::Result<()>> {
            Some(self.$field.act(cx.x, action))
        }

        $crate::runner::session_methods!($field);
    };
}
pub(crate) use session_methods;
