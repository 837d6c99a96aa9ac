//! Every task the server can run, in one registry: the bundled tasks (drawn by the task
//! app, `deskgym_worker::TASKS`) and declarative tasks (TOML: a profile, an instruction,
//! setup steps and a checker command; bundled in `server/tasks/`, more from
//! `--tasks-dir`) and web tasks (the `miniwob/<name>` pages of the installed `miniwob`
//! package, listed at start, never copied). A new family plugs in here without
//! touching the others.

use std::path::Path;
use std::sync::Arc;

use deskgym_worker::SettlePolicy;
use deskgym_worker::{RewardFrom, ScriptSpec, SetupStep};
use serde::Deserialize;

use crate::profiles::Catalog;

/// The bundled declarative tasks.
const BUNDLED: &[(&str, &str)] = &[("desktop.toml", include_str!("../tasks/desktop.toml"))];

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
    Web(WebPage),
}

impl TaskFamily {
    /// The web task's page, for the others `None`.
    pub(crate) fn page(&self) -> Option<&WebPage> {
        match self {
            Self::Web(page) => Some(page),
            _ => None,
        }
    }
}

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskFile {
    #[serde(default)]
    task: Vec<TaskToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskToml {
    id: String,
    profile: String,
    instruction: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default = "default_max_steps")]
    max_steps: u32,
    #[serde(default)]
    setup: Vec<SetupToml>,
    check: String,
    #[serde(default)]
    reward: RewardFrom,
}

fn default_max_steps() -> u32 {
    30
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetupToml {
    #[serde(default)]
    exec: Option<String>,
    #[serde(default)]
    launch: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    file: Option<String>,
    #[serde(default)]
    content: Option<String>,
}

/// Every task of this server.
#[derive(Debug)]
pub(crate) struct Tasks {
    all: Vec<Arc<TaskDef>>,
}

impl Default for Tasks {
    fn default() -> Self {
        Self {
            all: bundled_app_tasks(),
        }
    }
}

fn bundled_app_tasks() -> Vec<Arc<TaskDef>> {
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

impl Tasks {
    /// The bundled tasks, every `*.toml` of `dir` (checked against `profiles`), and
    /// the MiniWoB++ pages of the `miniwob` package at `miniwob` when the catalog has
    /// the `web` profile.
    pub(crate) fn load(
        dir: Option<&Path>,
        miniwob: Option<&Path>,
        profiles: &Catalog,
    ) -> Result<Self, String> {
        let mut all = bundled_app_tasks();
        if let (Some(d), Some(_)) = (miniwob, profiles.get(WEB_PROFILE)) {
            all.extend(miniwob_tasks(d)?);
        }
        let mut files: Vec<(String, String)> = BUNDLED
            .iter()
            .map(|(n, t)| (format!("bundled {n}"), t.to_string()))
            .collect();
        if let Some(dir) = dir {
            let mut paths: Vec<_> = std::fs::read_dir(dir)
                .map_err(|e| format!("tasks dir {}: {e}", dir.display()))?
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "toml"))
                .collect();
            paths.sort();
            for p in paths {
                let text =
                    std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                files.push((p.display().to_string(), text));
            }
        }
        for (what, text) in files {
            let file: TaskFile =
                toml::from_str(&text).map_err(|e| format!("{what}: not a task file: {e}"))?;
            for t in file.task {
                let def = declare(t, profiles).map_err(|e| format!("{what}: {e}"))?;
                if all.iter().any(|o| o.id == def.id) {
                    return Err(format!("{what}: task {} is defined twice", def.id));
                }
                all.push(Arc::new(def));
            }
        }
        Ok(Self { all })
    }

    /// A task by id.
    pub(crate) fn get(&self, id: &str) -> Option<&Arc<TaskDef>> {
        self.all.iter().find(|t| t.id == id)
    }

    /// Up to five known ids closest to a mistyped `id` (edit distance), for the error.
    pub(crate) fn close_to(&self, id: &str) -> Vec<&str> {
        let mut scored: Vec<(usize, &str)> = self
            .all
            .iter()
            .map(|t| (edit_distance(id, &t.id), t.id.as_str()))
            .filter(|(d, t)| *d <= (t.len() / 3).max(3))
            .collect();
        scored.sort();
        scored.into_iter().take(5).map(|(_, t)| t).collect()
    }

    /// Every task, bundled first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<TaskDef>> {
        self.all.iter()
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

/// Levenshtein distance (ids are short; quadratic is fine).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

fn declare(t: TaskToml, profiles: &Catalog) -> Result<TaskDef, String> {
    let ok_id = !t.id.is_empty()
        && t.id.len() <= 64
        && t.id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_/.".contains(&b));
    if !ok_id {
        return Err(format!(
            "task id {:?} must be 1..=64 of lowercase letters, digits, '-', '_', '/', '.'",
            t.id
        ));
    }
    let profile = profiles
        .get(&t.profile)
        .ok_or_else(|| format!("task {}: unknown profile {:?}", t.id, t.profile))?;
    if !profile.sandboxed() {
        return Err(format!(
            "task {}: profile {} has no sandbox for setup and checker commands",
            t.id, t.profile
        ));
    }
    let mut setup = Vec::new();
    for (i, s) in t.setup.into_iter().enumerate() {
        let step = match (s.exec, s.launch, s.file) {
            (Some(line), None, None) if s.args.is_empty() && s.content.is_none() => {
                SetupStep::Exec(line)
            }
            (None, Some(app), None) if s.content.is_none() => {
                let argv = profile.apps.get(&app).ok_or_else(|| {
                    format!(
                        "task {}: setup[{i}]: profile {} has no app {app:?}",
                        t.id, t.profile
                    )
                })?;
                SetupStep::Launch(argv.iter().chain(&s.args).cloned().collect())
            }
            (None, None, Some(path)) if s.args.is_empty() => SetupStep::File {
                path,
                content: s.content.unwrap_or_default(),
            },
            _ => {
                return Err(format!(
                    "task {}: setup[{i}] needs exactly one of exec, launch (+ args), file (+ content)",
                    t.id
                ));
            }
        };
        setup.push(step);
    }
    if t.max_steps == 0 {
        return Err(format!("task {}: max_steps must be at least 1", t.id));
    }
    Ok(TaskDef {
        description: t.description.unwrap_or_else(|| t.instruction.clone()),
        default_max_steps: t.max_steps,
        settle: SettlePolicy::Damage,
        profile: t.profile,
        any_profile: false,
        family: TaskFamily::Script(Arc::new(ScriptSpec {
            instruction: t.instruction,
            setup,
            check: t.check,
            reward: t.reward,
        })),
        screen: None,
        id: t.id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_tasks_load_with_their_apps_resolved() {
        let profiles = Catalog::load(None).unwrap();
        let tasks = Tasks::load(None, None, &profiles).unwrap();
        assert!(matches!(
            tasks.get("click-target").unwrap().family,
            TaskFamily::Bundled
        ));
        let t = tasks.get("desktop/editor-save").unwrap();
        let TaskFamily::Script(s) = &t.family else {
            panic!("{t:?} is not a declarative task")
        };
        assert!(
            s.setup
                .iter()
                .any(|st| matches!(st, SetupStep::Launch(argv) if argv[0] == "mousepad")),
            "{s:?}"
        );
        assert_eq!(
            tasks
                .iter()
                .filter(|t| t.id.starts_with("desktop/"))
                .count(),
            5
        );
    }

    #[test]
    fn miniwob_pages_become_tasks_and_typos_find_them() {
        let profiles = Catalog::load(None).unwrap();
        let dir = std::env::temp_dir().join(format!("deskgym-miniwob-{}", std::process::id()));
        let pages = dir.join("html").join("miniwob");
        std::fs::create_dir_all(&pages).unwrap();
        for p in ["click-button.html", "click-checkboxes.html", "notes.txt"] {
            std::fs::write(pages.join(p), "").unwrap();
        }
        let tasks = Tasks::load(None, Some(&dir), &profiles).unwrap();
        let t = tasks.get("miniwob/click-button").unwrap();
        assert_eq!(t.profile, WEB_PROFILE);
        assert_eq!(t.screen, Some((160, 210)));
        assert_eq!(t.family.page().unwrap().path, "miniwob/click-button.html");
        assert!(tasks.get("miniwob/notes").is_none());
        assert_eq!(
            tasks.close_to("miniwob/click-buton")[0],
            "miniwob/click-button"
        );
        assert!(tasks.close_to("zzzzzzzzzzzzzzzzzzzzzzzzzz").is_empty());
        let e = Tasks::load(None, Some(&dir.join("nope")), &profiles).unwrap_err();
        assert!(e.contains("html/miniwob"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_task_files_say_why() {
        let profiles = Catalog::load(None).unwrap();
        let dir = std::env::temp_dir().join(format!("deskgym-tasks-{}", std::process::id()));
        for (text, why) in [
            (
                "[[task]]\nid='x'\nprofile='moon'\ninstruction='i'\ncheck='true'",
                "unknown profile",
            ),
            (
                "[[task]]\nid='x'\nprofile='tasks'\ninstruction='i'\ncheck='true'",
                "no sandbox",
            ),
            (
                "[[task]]\nid='x'\nprofile='desktop'\ninstruction='i'\ncheck='true'\nsetup=[{launch='nope'}]",
                "no app",
            ),
            (
                "[[task]]\nid='x'\nprofile='desktop'\ninstruction='i'\ncheck='true'\nsetup=[{exec='a', file='b'}]",
                "exactly one",
            ),
            (
                "[[task]]\nid='click-target'\nprofile='desktop'\ninstruction='i'\ncheck='true'",
                "twice",
            ),
            (
                "[[task]]\nid='Bad Id'\nprofile='desktop'\ninstruction='i'\ncheck='true'",
                "lowercase",
            ),
        ] {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("t.toml"), text).unwrap();
            let e = Tasks::load(Some(&dir), None, &profiles).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
