//! Web tasks: the `miniwob/<name>` pages of the installed `miniwob` package (listed at
//! start, never copied), each shown in the `web` profile's Chromium from a read-only
//! share of the package's `html/`. The family takes options (`options`), settles on the
//! browser's frame acknowledgement, and is counted, not listed, in an unknown-task error.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use deskgym_worker::{Family, SettlePolicy};

use super::{Ask, Rules, TaskDef, TaskFamily};
use crate::invalid::Invalid;
use crate::profiles::{Catalog, Profile};

mod options;

/// A web task's page: a file under a host directory that its sandbox shows at
/// [`WEB_ROOT`].
#[derive(Debug, Clone)]
pub(crate) struct WebPage {
    /// The host directory (MiniWoB++'s `html/`, with `core/` beside the pages).
    pub(crate) root: std::path::PathBuf,
    /// The page's path under it, e.g. `miniwob/click-button.html`.
    pub(crate) path: String,
}

/// Where a web task's sandbox shows its pages' directory (read-only).
pub(crate) const WEB_ROOT: &str = "/run/deskgym-web";

/// The `miniwob/` family's profile: Chromium alone in a sandbox.
pub(crate) const WEB_PROFILE: &str = "web";
/// MiniWoB++'s task area (`#wrap` in its `core.css`), the screen of its envs.
const MINIWOB_SCREEN: (u32, u32) = (160, 210);
/// Episode bound of a MiniWoB++ task: the step clock's timeout (100 steps of 100 ms)
/// ends an episode first.
const MINIWOB_MAX_STEPS: u32 = 100;

impl Rules for WebPage {
    fn desktop(&self, ask: Ask<'_>) -> Result<Family, Invalid> {
        let spec = options::web_spec(self, ask.profile, ask.options)?;
        Ok(ask
            .sandbox
            .map_or(Family::TaskApp, |sb| Family::Web(sb, spec)))
    }

    /// The page's own policy (the browser's), whatever the profile says.
    fn settle_default(&self, task: &TaskDef, _: &Profile) -> SettlePolicy {
        task.settle
    }

    fn browser_settle(&self) -> bool {
        true
    }

    fn shares(&self) -> Vec<(PathBuf, String)> {
        vec![(self.root.clone(), WEB_ROOT.to_string())]
    }

    fn listed(&self) -> bool {
        false
    }
}

/// Adds the MiniWoB++ pages of the `miniwob` package at `miniwob` to `all` when the
/// catalog has the `web` profile.
pub(super) fn load(
    miniwob: Option<&Path>,
    profiles: &Catalog,
    all: &mut Vec<Arc<TaskDef>>,
) -> Result<(), String> {
    if let (Some(d), Some(_)) = (miniwob, profiles.get(WEB_PROFILE)) {
        all.extend(miniwob_tasks(d)?);
    }
    Ok(())
}

/// An unknown-task error's word on web tasks: how many there are (GetCapabilities
/// lists them), or, when there are none and a `miniwob/` id was asked for, how to get
/// them.
pub(super) fn unknown_note(all: &[Arc<TaskDef>], asked: &str) -> String {
    let pages = all
        .iter()
        .filter(|t| matches!(t.family, TaskFamily::Web(_)))
        .count();
    match pages {
        0 if asked.starts_with("miniwob/") => {
            " (no miniwob/ tasks here: the server found no `miniwob` package with the \
             active venv's python, ./.venv/bin/python or python3; install it into one of \
             them, or start the server with --miniwob-dir DIR or DESKGYM_MINIWOB_DIR)"
                .to_string()
        }
        0 => String::new(),
        n => format!(", and {n} miniwob/<name> tasks (GetCapabilities lists them)"),
    }
}

/// The `miniwob` package directory as the active venv's Python, `./.venv/bin/python` or
/// `python3` finds it (without importing it); `None` when none has it.
pub fn find_miniwob() -> Option<std::path::PathBuf> {
    // The package is installed into a venv more often than into the system Python: the
    // active venv's interpreter first, then the checkout's `.venv`, then `python3`.
    let venv = std::env::var_os("VIRTUAL_ENV").map(|v| Path::new(&v).join("bin/python"));
    let candidates = venv
        .into_iter()
        .chain([".venv/bin/python".into(), "python3".into()]);
    candidates
        .filter(|p: &std::path::PathBuf| p.components().count() == 1 || p.exists())
        .find_map(|python| {
            let out = std::process::Command::new(&python)
                .args([
                    "-c",
                    "import importlib.util as u; s = u.find_spec('miniwob'); \
                     print(s.submodule_search_locations[0] if s else '')",
                ])
                .stderr(std::process::Stdio::null())
                .output()
                .ok()?;
            let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
            (!dir.is_empty()).then(|| std::path::absolute(dir).ok())?
        })
}

/// One task per page of `<package>/html/miniwob/*.html`.
fn miniwob_tasks(package: &Path) -> Result<Vec<Arc<TaskDef>>, String> {
    let html =
        std::path::absolute(package.join("html")).map_err(|e| format!("miniwob dir: {e}"))?;
    let pages = html.join("miniwob");
    let mut names: Vec<String> = std::fs::read_dir(&pages)
        .map_err(|e| {
            format!(
                "miniwob dir {}: {e} (expected the installed `miniwob` package, with html/miniwob/*.html)",
                package.display()
            )
        })?
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            let stem = p.file_stem()?.to_str()?.to_string();
            (p.extension()? == "html").then_some(stem)
        })
        .collect();
    names.sort();
    Ok(names
        .into_iter()
        .map(|name| {
            Arc::new(TaskDef {
                id: format!("miniwob/{name}"),
                description: format!("MiniWoB++ {name}"),
                default_max_steps: MINIWOB_MAX_STEPS,
                settle: SettlePolicy::Browser,
                profile: WEB_PROFILE.into(),
                any_profile: false,
                family: TaskFamily::Web(WebPage {
                    root: html.clone(),
                    path: format!("miniwob/{name}.html"),
                }),
                screen: Some(MINIWOB_SCREEN),
            })
        })
        .collect())
}
