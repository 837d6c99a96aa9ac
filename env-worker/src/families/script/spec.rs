//! Declarative tasks on a sandboxed desktop: setup steps run at every reset, and a
//! checker command, run in the sandbox after every step, that gives the reward.

use serde::{Deserialize, Serialize};

/// One setup step, run in order after the sandbox (re)starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SetupStep {
    /// A shell line (`sh -c`), which must exit 0.
    Exec(String),
    /// A program (argv, resolved from the profile's apps), waited for until it shows a
    /// window.
    Launch(Vec<String>),
    /// A file written under the home (or /tmp).
    File {
        /// Path (relative to the home, or absolute inside the sandbox's view).
        path: String,
        /// Its text.
        content: String,
    },
}

/// How the checker's result becomes a reward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardFrom {
    /// Exit status 0: reward 1 and the episode ends; anything else: reward 0.
    #[default]
    Exit,
    /// The last line of stdout is the reward (a number); exit status 0 ends the episode.
    Stdout,
}

/// A declarative task as the desktop runs it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScriptSpec {
    /// What the agent is asked to do.
    pub instruction: String,
    /// Run at every reset, in order.
    pub setup: Vec<SetupStep>,
    /// The checker: a shell line run after every step.
    pub check: String,
    /// How its result becomes the reward.
    pub reward: RewardFrom,
}

/// Environment of setup and checker commands: the episode's seed, so a task can vary
/// its files and names with it.
pub(crate) fn seed_env(seed: u64) -> Vec<(String, String)> {
    vec![("DESKGYM_SEED".into(), seed.to_string())]
}

/// The reward and whether the episode ended, from the checker's exit code and stdout.
pub(crate) fn judge(reward: RewardFrom, exit_code: Option<i32>, stdout: &[u8]) -> (f64, bool) {
    let ok = exit_code == Some(0);
    match reward {
        RewardFrom::Exit => (if ok { 1.0 } else { 0.0 }, ok),
        RewardFrom::Stdout => {
            let text = String::from_utf8_lossy(stdout);
            let r = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .and_then(|l| l.trim().parse::<f64>().ok())
                .filter(|r| r.is_finite())
                .unwrap_or(0.0);
            (r, ok)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_follow_the_checker() {
        assert_eq!(judge(RewardFrom::Exit, Some(0), b""), (1.0, true));
        assert_eq!(judge(RewardFrom::Exit, Some(1), b""), (0.0, false));
        assert_eq!(judge(RewardFrom::Exit, None, b""), (0.0, false));
        assert_eq!(
            judge(RewardFrom::Stdout, Some(1), b"x\n0.5\n\n"),
            (0.5, false)
        );
        assert_eq!(judge(RewardFrom::Stdout, Some(0), b"1\n"), (1.0, true));
        assert_eq!(judge(RewardFrom::Stdout, Some(0), b"NaN\n"), (0.0, true));
    }
}
