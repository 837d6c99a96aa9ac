//! The task families, one folder each, and the one place a desktop's family is chosen:
//! the bundled task app (`task_app`), a profile's session with no task (`blank`), a
//! declarative task (`script`: setup and checker), a web page (`web`). Each family is a
//! [`crate::runner::Runner`] and what it needs; a new family is a new folder here and
//! its registration below (its `mod` line, its [`Family`] variant, its arm in
//! [`start`]); the desktop and the other families do not change
//! (`docs/adding-a-family.md`).

use std::sync::Arc;

use crate::error::Result;
use crate::runner::Runner;
use crate::sandbox::SandboxConfig;
use crate::settle::Settle;
use crate::x11::XSession;

mod blank;
mod script;
mod task_app;
mod web;

pub use script::{RewardFrom, ScriptSpec, SetupStep};
pub(crate) use task_app::widget_tree;
pub use task_app::{
    Color, Draw, Episode, FontMetrics, Input, Rng, TASKS, TaskSpec, run as task_app_main, task_spec,
};
pub use web::{Clock, Reward, WebSpec};

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
    Web(SandboxConfig, Arc<WebSpec>),
}

/// The runner of `config`'s family, started on `display`: the registration, one arm per
/// family.
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
