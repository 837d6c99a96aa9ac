//! Declarative tasks: TOML files (a profile, an instruction, setup steps, a checker
//! command; bundled in `server/tasks/`, more from `--tasks-dir`) run on a profile's
//! sandboxed session. They take no options and settle as the profile says.

use std::path::Path;
use std::sync::Arc;

use deskgym_worker::{Family, RewardFrom, ScriptSpec, SettlePolicy, SetupStep};
use serde::Deserialize;

use super::{Ask, Rules, TaskDef, TaskFamily, no_options};
use crate::invalid::Invalid;
use crate::profiles::Catalog;

/// The bundled declarative tasks.
const BUNDLED: &[(&str, &str)] = &[("desktop.toml", include_str!("../../../tasks/desktop.toml"))];

impl Rules for Arc<ScriptSpec> {
    fn desktop(&self, ask: Ask<'_>) -> Result<Family, Invalid> {
        no_options(&ask)?;
        Ok(ask
            .sandbox
            .map_or(Family::TaskApp, |sb| Family::Script(sb, Arc::clone(self))))
    }
}

/// Adds the bundled task files' tasks and every `*.toml` of `dir` (checked against
/// `profiles`) to `all`; an id already there is an error.
pub(crate) fn load(
    dir: Option<&Path>,
    profiles: &Catalog,
    all: &mut Vec<Arc<TaskDef>>,
) -> Result<(), String> {
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
            let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
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
    Ok(())
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
