//! Every task the server can run, in one registry: the bundled tasks (drawn by the task
//! app, `deskgym_worker::TASKS`) and declarative tasks (TOML: a profile, an instruction,
//! setup steps and a checker command; bundled in `server/tasks/`, more from
//! `--tasks-dir`). A new family plugs in here without touching the others.

use std::path::Path;
use std::sync::Arc;

use deskgym_worker::SettlePolicy;
use deskgym_worker::script::{RewardFrom, ScriptSpec, SetupStep};
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
    /// A declarative task's setup and checker (app names resolved), `None` for bundled.
    pub(crate) script: Option<Arc<ScriptSpec>>,
}

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
                script: None,
            })
        })
        .collect()
}

impl Tasks {
    /// The bundled tasks plus every `*.toml` of `dir`, checked against `profiles`.
    pub(crate) fn load(dir: Option<&Path>, profiles: &Catalog) -> Result<Self, String> {
        let mut all = bundled_app_tasks();
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

    /// Every task, bundled first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<TaskDef>> {
        self.all.iter()
    }
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
        script: Some(Arc::new(ScriptSpec {
            instruction: t.instruction,
            setup,
            check: t.check,
            reward: t.reward,
        })),
        id: t.id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_tasks_load_with_their_apps_resolved() {
        let profiles = Catalog::load(None).unwrap();
        let tasks = Tasks::load(None, &profiles).unwrap();
        assert!(tasks.get("click-target").unwrap().script.is_none());
        let t = tasks.get("desktop/editor-save").unwrap();
        let s = t.script.as_ref().unwrap();
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
            let e = Tasks::load(Some(&dir), &profiles).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
