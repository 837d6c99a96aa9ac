//! Declarative tasks (`desktop/...` TOML files) on a profile's session: setup steps at
//! reset, a checker command after each step for the reward and the episode's end.

use std::sync::Arc;

use crate::action::Action;
use crate::agent::{ExecSpec, Executed};
use crate::error::{DesktopError, Result};
use crate::runner::{AppState, Ctx, Outcome, Runner, Session, session_methods};
use crate::sandbox::SandboxConfig;

mod spec;

pub use spec::{RewardFrom, ScriptSpec, SetupStep};
use spec::{judge, seed_env};

/// Time bound of one setup command of a declarative task.
const SETUP_STEP_MS: u64 = 60_000;
/// Time bound of a declarative task's checker.
const CHECK_MS: u64 = 10_000;

/// A session with a declarative task.
pub(crate) struct ScriptRunner {
    session: Session,
    script: Arc<ScriptSpec>,
    /// The running episode's seed (setup and checker commands see it).
    seed: u64,
}

impl ScriptRunner {
    /// Starts the profile's session on `display` for `script`.
    pub(crate) fn start(
        config: &SandboxConfig,
        script: Arc<ScriptSpec>,
        display: u32,
    ) -> Result<Self> {
        Ok(Self {
            session: Session::start(config, display)?,
            script,
            seed: 0,
        })
    }

    /// A shell line in the sandbox with the episode's seed in its environment.
    fn run_line(&mut self, line: &str, timeout_ms: u64) -> Result<Executed> {
        let spec = ExecSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), line.into()],
            env: seed_env(self.seed),
            timeout_ms,
            max_output: 64 << 10,
            ..Default::default()
        };
        self.session.sandbox()?.exec(&spec, &[], &mut |_, _| {})
    }

    /// Runs the setup; a failing step fails the reset (the task's fault:
    /// FAILED_PRECONDITION with the step's stderr, not a dead desktop).
    fn set_up(&mut self, cx: &mut Ctx<'_>) -> Result<()> {
        let script = Arc::clone(&self.script);
        for (i, step) in script.setup.iter().enumerate() {
            match step {
                SetupStep::Exec(line) => {
                    let Executed {
                        end, stderr: err, ..
                    } = self.run_line(line, SETUP_STEP_MS)?;
                    if end.exit_code != Some(0) {
                        return Err(DesktopError::Exec(format!(
                            "setup step {i} ({line:?}) failed ({}): {}",
                            end.exit_code
                                .map_or_else(|| "killed".to_string(), |c| format!("exit {c}")),
                            String::from_utf8_lossy(&err).trim()
                        )));
                    }
                }
                SetupStep::Launch(argv) => self.session.launch_and_wait(cx.x, argv)?,
                SetupStep::File { path, content } => {
                    self.session
                        .sandbox()?
                        .write_file(path, 0, 0o644, content.as_bytes())?;
                }
            }
        }
        Ok(())
    }

    /// Runs the checker: the reward so far and whether the episode ended.
    fn check(&mut self) -> Result<AppState> {
        let line = self.script.check.clone();
        let Executed {
            end, stdout: out, ..
        } = self.run_line(&line, CHECK_MS)?;
        let (reward, done) = judge(self.script.reward, end.exit_code, &out);
        Ok(AppState {
            reward,
            done,
            instruction: self.script.instruction.clone(),
            extra: Vec::new(),
        })
    }
}

impl Runner for ScriptRunner {
    fn reset(&mut self, mut cx: Ctx<'_>, seed: u64) -> Result<Outcome> {
        cx.x.release_all(Session::park(&cx))?;
        self.session.restart_if_used(cx.display)?;
        self.seed = seed;
        self.set_up(&mut cx)?;
        let settle = cx.x.settle(cx.settle)?;
        Ok(Outcome {
            app: AppState {
                instruction: self.script.instruction.clone(),
                ..AppState::idle()
            },
            settle,
        })
    }

    fn step(&mut self, cx: Ctx<'_>, action: &Action) -> Result<Outcome> {
        let settle = self.session.act_settled(cx.x, cx.settle, action)?;
        Ok(Outcome {
            app: self.check()?,
            settle,
        })
    }

    session_methods!(session, acts);
}
