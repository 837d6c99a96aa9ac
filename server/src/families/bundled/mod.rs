//! The bundled tasks (`deskgym_worker::TASKS`): the task app draws them on a bare
//! display; on a sandboxed profile, `blank` is the profile's session with no task.
//! They take no options and settle as the profile says (the task's own policy when
//! the app draws).

use std::sync::Arc;

use deskgym_worker::Family;

use super::{Ask, Rules, TaskDef, TaskFamily, no_options};
use crate::invalid::Invalid;

/// The bundled family's rules.
pub(crate) struct Bundled;

impl Rules for Bundled {
    fn desktop(&self, ask: Ask<'_>) -> Result<Family, Invalid> {
        no_options(&ask)?;
        Ok(ask.sandbox.map_or(Family::TaskApp, Family::Blank))
    }
}

/// The worker's bundled tasks as the server's registry holds them.
pub(crate) fn tasks() -> Vec<Arc<TaskDef>> {
    deskgym_worker::TASKS
        .iter()
        .map(|t| {
            Arc::new(TaskDef {
                id: t.id.into(),
                description: t.description.into(),
                default_max_steps: t.default_max_steps,
                settle: t.settle,
                profile: t.profile.into(),
                any_profile: t.any_profile,
                family: TaskFamily::Bundled,
                screen: None,
            })
        })
        .collect()
}
