//! The task families, one folder each, and what every family shares: a task's
//! definition ([`TaskDef`]), its family ([`TaskFamily`], named once where the task is
//! declared) and the rules a pool's validation asks of that family ([`Rules`]: its
//! options, its settle default, its sandbox shares, its desktop). `bundled` (the task
//! app's tasks), `script` (declarative TOML tasks), `web` (MiniWoB++ pages). A new
//! family is a new folder here and its registration below (its `mod` line, its
//! variant, its arm in [`TaskFamily::rules`], its loader in [`load`]); validation and
//! the other families do not change (`docs/adding-a-family.md`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use deskgym_worker::{Family, SandboxConfig, ScriptSpec, SettlePolicy};

use crate::invalid::{Invalid, quote};
use crate::profiles::{Catalog, Profile};

mod bundled;
mod script;
mod web;

pub(crate) use bundled::tasks as bundled_tasks;
pub use web::find_miniwob;

/// One runnable task.
#[derive(Debug)]
pub(crate) struct TaskDef {
    /// Id on the wire, e.g. `click-target` or `desktop/rename-file`.
    pub(crate) id: String,
    /// One line for users.
    pub(crate) description: String,
    /// Episode bound when a pool sets none.
    pub(crate) default_max_steps: u32,
    /// Settle policy when a pool sets none and the task's app draws (bundled tasks).
    pub(crate) settle: SettlePolicy,
    /// The profile a pool of it runs unless it names another.
    pub(crate) profile: String,
    /// Runs on every profile.
    pub(crate) any_profile: bool,
    /// Which family the task is of, with what that family needs.
    pub(crate) family: TaskFamily,
    /// Screen size when a pool sets none (a MiniWoB++ page: its 160x210 task area).
    pub(crate) screen: Option<(u32, u32)>,
}

/// A task's family, named once where the task is declared (the pool's desktop family
/// follows from it and the profile, never from which options are set).
#[derive(Debug, Clone)]
pub(crate) enum TaskFamily {
    /// A bundled task: the task app draws it on a bare display, or a profile's session
    /// runs with no task (`blank` on a sandboxed profile).
    Bundled,
    /// A declarative task: its setup and checker (app names resolved).
    Script(Arc<ScriptSpec>),
    /// A web task: its page.
    Web(web::WebPage),
}

impl TaskFamily {
    /// The family's rules: the registration, one arm per family.
    pub(crate) fn rules(&self) -> &dyn Rules {
        match self {
            Self::Bundled => &bundled::Bundled,
            Self::Script(spec) => spec,
            Self::Web(page) => page,
        }
    }
}

/// Every task of every family, bundled first: the loaders, one line per family.
pub(crate) fn load(
    tasks_dir: Option<&Path>,
    miniwob: Option<&Path>,
    profiles: &Catalog,
) -> Result<Vec<Arc<TaskDef>>, String> {
    let mut all = bundled::tasks();
    web::load(miniwob, profiles, &mut all)?;
    script::load(tasks_dir, profiles, &mut all)?;
    Ok(all)
}

/// What a pool's validation asks of a task's family.
pub(crate) trait Rules {
    /// The pool's desktop family: the family reads the pool's `task_options` (one
    /// without options refuses any: [`no_options`]) and hands its desktop the
    /// profile's sandbox; on a bare display only the task app runs.
    fn desktop(&self, ask: Ask<'_>) -> Result<Family, Invalid>;

    /// The settle policy when the pool names none and asks for no quiet window (by
    /// default: the profile's for a session, the task's when its app draws).
    fn settle_default(&self, task: &TaskDef, profile: &Profile) -> SettlePolicy {
        match profile.settle {
            Some(SettlePolicy::Browser) | None => task.settle,
            Some(p) if profile.sandboxed() => p,
            Some(_) => task.settle,
        }
    }

    /// True when `SETTLE_POLICY_BROWSER` applies: a page in a browser that acknowledges
    /// its frames.
    fn browser_settle(&self) -> bool {
        false
    }

    /// Host directories the family's sandbox shows (host path, path inside).
    fn shares(&self) -> Vec<(PathBuf, String)> {
        Vec::new()
    }

    /// True when an unknown-task error lists the family's ids (a family of hundreds of
    /// tasks gives their count in [`unknown_note`] instead).
    fn listed(&self) -> bool {
        true
    }
}

/// What a family's [`Rules::desktop`] works from.
pub(crate) struct Ask<'a> {
    /// The task.
    pub(crate) task: &'a TaskDef,
    /// The pool's profile.
    pub(crate) profile: &'a Profile,
    /// The pool's `task_options`.
    pub(crate) options: &'a HashMap<String, String>,
    /// The profile's sandbox (its shares and network set), `None` on a bare display.
    pub(crate) sandbox: Option<SandboxConfig>,
}

/// Refuses any `task_options` (for the families that take none).
pub(crate) fn no_options(ask: &Ask<'_>) -> Result<(), Invalid> {
    match ask.options.keys().min() {
        Some(key) => Err(Invalid::new(
            format!("task_options.{}", quote(key)),
            format!("task {} takes no options", ask.task.id),
        )),
        None => Ok(()),
    }
}

/// What an unknown-task error adds after the listed ids, from the families that list
/// their tasks another way (today only `web`).
pub(crate) fn unknown_note(all: &[Arc<TaskDef>], asked: &str) -> String {
    web::unknown_note(all, asked)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each family picks its own desktop family: the task app on a bare display, its
    /// runner on a profile's sandbox (the web page with its share), whatever options
    /// would have been set.
    #[test]
    fn each_family_chooses_its_desktop() {
        let profiles = Catalog::load(None).unwrap();
        let dir = std::env::temp_dir().join(format!("deskgym-families-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("html/miniwob")).unwrap();
        std::fs::write(dir.join("html/miniwob/click-button.html"), "").unwrap();
        let all = load(None, Some(&dir), &profiles).unwrap();
        let task = |id: &str| all.iter().find(|t| t.id == id).unwrap();
        let none = HashMap::new();
        let desktop = |id: &str, sandbox: Option<SandboxConfig>| {
            let t = task(id);
            let profile = profiles.get(&t.profile).unwrap();
            let ask = Ask {
                task: t,
                profile,
                options: &none,
                sandbox,
            };
            t.family.rules().desktop(ask).unwrap()
        };
        let sb = SandboxConfig::default();
        assert_eq!(desktop("click-target", None), Family::TaskApp);
        assert_eq!(
            desktop("blank", Some(sb.clone())),
            Family::Blank(sb.clone())
        );
        assert!(matches!(
            desktop("desktop/editor-save", Some(sb.clone())),
            Family::Script(..)
        ));
        assert!(matches!(
            desktop("miniwob/click-button", Some(sb)),
            Family::Web(..)
        ));
        let web = task("miniwob/click-button").family.rules();
        assert!(web.browser_settle() && !web.listed());
        assert_eq!(web.shares()[0].1, "/run/deskgym-web");
        let bundled = task("click-target").family.rules();
        assert!(!bundled.browser_settle() && bundled.listed() && bundled.shares().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
