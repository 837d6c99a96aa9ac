//! The bundled tasks (`click-target`, ...): the task app draws a task with x11rb and
//! reports its reward; the `tasks` profile, no sandbox. The family's files: the tasks'
//! pure logic (`tasks/`), the app program that draws them (`app`), the worker's handle
//! on a running app (`process`), their widgets as an accessibility tree (`widgets`),
//! and the runner (here).

use super::DesktopConfig;
use crate::Point;
use crate::a11y::{Limits, Live, Node, Tree};
use crate::action::{Action, Button};
use crate::error::{DesktopError, ElementFailure, Result};
use crate::runner::{Ctx, Outcome, Runner, no_sandbox};

mod app;
mod process;
mod tasks;
mod widgets;

pub use app::run;
use process::TaskApp;
pub use tasks::{Color, Draw, Episode, FontMetrics, Input, Rng, TASKS, TaskSpec, task_spec};
pub(crate) use widgets::widget_tree;

/// The task app of one desktop.
pub(crate) struct TaskAppRunner {
    app: TaskApp,
}

impl TaskAppRunner {
    /// Spawns the task app of `config.task` on `display`.
    pub(crate) fn start(config: &DesktopConfig, display: u32) -> Result<Self> {
        Ok(Self {
            app: TaskApp::spawn(display, &config.task, config.width, config.height)?,
        })
    }

    /// The widget `id` as the app shows it now.
    fn widget(&mut self, id: &str) -> Result<Node> {
        self.app.tree()?.take(id)
    }

    /// Performs an element's action. The widgets have one, `click`, done with the
    /// pointer (the app reads only X input).
    fn invoke(&mut self, cx: &mut Ctx<'_>, id: &str, action: &str) -> Result<()> {
        if !(action.is_empty() || action.eq_ignore_ascii_case("click")) {
            return Err(DesktopError::element(
                ElementFailure::Unsupported,
                format!("the element has no action {action:?}; it offers [\"click\"]"),
            ));
        }
        let at = showing_target(&self.widget(id)?)?;
        cx.x.perform(&Action::Click {
            at,
            button: Button::Left,
            count: 1,
        })
    }

    /// Sets an element's value as a human would: a click, a backspace per character,
    /// the new text.
    fn set_value(&mut self, cx: &mut Ctx<'_>, id: &str, value: &str) -> Result<()> {
        let node = self.widget(id)?;
        if !node.editable {
            return Err(DesktopError::element(
                ElementFailure::Unsupported,
                "the element has no editable text or value",
            ));
        }
        let old = node.text.as_deref().unwrap_or("").chars().count();
        let at = showing_target(&node)?;
        cx.x.perform(&Action::Click {
            at,
            button: Button::Left,
            count: 1,
        })?;
        for _ in 0..old {
            cx.x.perform(&Action::Key("BackSpace".into()))?;
        }
        if !value.is_empty() {
            cx.x.perform(&Action::TypeText(value.into()))?;
        }
        Ok(())
    }
}

/// Where a pointer action on a widget lands (its centre), if it shows.
fn showing_target(n: &Node) -> Result<Point> {
    Live::from(n)
        .target()
        .ok_or_else(|| DesktopError::element(ElementFailure::Gone, "the element is not showing"))
}

impl Runner for TaskAppRunner {
    fn reset(&mut self, cx: Ctx<'_>, seed: u64) -> Result<Outcome> {
        // The bundled tasks park the pointer at the origin (their layouts were made so).
        cx.x.release_all(Point::default())?;
        let app = self.app.reset(seed)?;
        let settle = cx.x.settle(cx.settle)?;
        Ok(Outcome { app, settle })
    }

    fn step(&mut self, mut cx: Ctx<'_>, action: &Action) -> Result<Outcome> {
        match action {
            Action::InvokeAction { element, action } => self.invoke(&mut cx, element, action)?,
            Action::SetValue { element, value } => self.set_value(&mut cx, element, value)?,
            Action::LaunchApp(_) => return Err(no_sandbox()),
            _ => cx.x.perform(action)?,
        }
        // The app reports what the input did before the screen settles on it.
        let app = self.app.sync()?;
        let settle = cx.x.settle(cx.settle)?;
        Ok(Outcome { app, settle })
    }

    fn check_alive(&mut self) -> Result<()> {
        if self.app.is_alive() {
            Ok(())
        } else {
            Err(DesktopError::App("task app exited".into()))
        }
    }

    fn pid(&self) -> u32 {
        self.app.pid()
    }

    fn tree(&mut self, _: &Limits) -> Result<Tree> {
        self.app.tree()
    }

    fn live(&mut self, id: &str) -> Result<Live> {
        self.widget(id).map(|n| Live::from(&n))
    }
}
