//! Task families: what a desktop runs on its display besides the X session, how an
//! episode starts and how a step is judged. One [`Runner`] per family, chosen once when
//! the desktop starts ([`start`]): the bundled task app, a profile's session with no
//! task (`blank`), a declarative task (setup and checker), a web page. A new family is a
//! new file here and one line in [`start`]; the desktop and the other families do not
//! change.

use std::sync::Arc;

use crate::Point;
use crate::a11y::{Limits, Live, Tree};
use crate::action::Action;
use crate::error::Result;
use crate::sandbox::SandboxConfig;
use crate::script::ScriptSpec;
use crate::settle::{Settle, SettleReport};
use crate::task_app::AppState;
use crate::x11::XSession;

mod blank;
mod script;
mod session;
mod task_app;
mod web;

pub(crate) use session::Session;
pub(crate) use task_app::no_sandbox;

/// What a desktop runs and how.
#[derive(Clone, Debug, PartialEq)]
pub struct DesktopConfig {
    /// Bundled task id.
    pub task: String,
    /// Screen width in pixels.
    pub width: u32,
    /// Screen height in pixels.
    pub height: u32,
    /// Settle policy after every action.
    pub settle: Settle,
    /// The task family, and what it needs.
    pub family: Family,
}

/// A desktop's task family (one `Runner` each).
#[derive(Clone, Debug, PartialEq)]
pub enum Family {
    /// The bundled task app on a bare display (the `tasks` profile).
    TaskApp,
    /// A profile's sandboxed session with no task.
    Blank(SandboxConfig),
    /// A declarative task on a profile's session: setup at reset, a checker after each
    /// step. Shared: the step path takes a reference count, not a copy of the setup.
    Script(SandboxConfig, Arc<ScriptSpec>),
    /// A web task on a profile's session: a page in its browser, scored by the page.
    Web(SandboxConfig, Arc<crate::web::WebSpec>),
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

/// The runner of `config`'s family, started on `display`.
pub(crate) fn start(
    config: &DesktopConfig,
    display: u32,
    x: &mut XSession,
) -> Result<Box<dyn Runner>> {
    Ok(match &config.family {
        Family::TaskApp => Box::new(task_app::TaskAppRunner::start(config, display)?),
        Family::Blank(sb) => Box::new(blank::BlankRunner::start(sb, display)?),
        Family::Script(sb, s) => Box::new(script::ScriptRunner::start(sb, Arc::clone(s), display)?),
        Family::Web(sb, spec) => Box::new(web::WebRunner::start(
            sb,
            Arc::clone(spec),
            config,
            display,
            x,
        )?),
    })
}
