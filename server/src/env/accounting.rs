//! An episode's accounting, pure: a step's reward (the increase of what the task
//! reports), its count, and whether it ended the episode and why.

use super::Episode;

/// What one step did to its episode.
#[derive(Debug, PartialEq)]
pub(super) struct Advance {
    /// The step's reward: what the task reports now less what it reported before.
    pub(super) reward: f64,
    /// The task says the episode is over.
    pub(super) terminated: bool,
    /// The step bound ended it (never together with `terminated`).
    pub(super) truncated: bool,
}

impl Episode {
    /// Counts one applied step after which the task reports `reward` so far and `done`;
    /// `max_steps` bounds the episode.
    pub(super) fn advance(&mut self, reward: f64, done: bool, max_steps: u32) -> Advance {
        self.step_index += 1;
        let gained = reward - self.reward_so_far;
        self.reward_so_far = reward;
        let truncated = !done && self.step_index >= max_steps;
        self.ended = if done {
            Some(if reward > 0.0 { "success" } else { "failure" })
        } else if truncated {
            Some("max_steps")
        } else {
            None
        };
        self.log.ret += gained;
        Advance {
            reward: gained,
            terminated: done,
            truncated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn episode() -> Episode {
        Episode {
            seed: 0,
            number: 1,
            step_index: 0,
            reward_so_far: 0.0,
            instruction: String::new(),
            ended: None,
            actions: Default::default(),
            seen: Default::default(),
            frame_hash: None,
            log: Default::default(),
            recorded: false,
            verdict: None,
            clock_ms: 0,
        }
    }

    #[test]
    fn a_steps_reward_is_the_increase_and_the_return_adds_up() {
        let mut ep = episode();
        assert_eq!(ep.advance(0.25, false, 10).reward, 0.25);
        assert_eq!(ep.advance(0.25, false, 10).reward, 0.0);
        let last = ep.advance(1.0, true, 10);
        assert_eq!(
            (last.reward, last.terminated, last.truncated),
            (0.75, true, false)
        );
        assert_eq!(
            (ep.step_index, ep.log.ret, ep.ended),
            (3, 1.0, Some("success"))
        );
    }

    #[test]
    fn the_step_bound_truncates_unless_the_task_ended() {
        let mut ep = episode();
        ep.advance(0.0, false, 2);
        let bound = ep.advance(0.0, false, 2);
        assert_eq!(
            (bound.terminated, bound.truncated, ep.ended),
            (false, true, Some("max_steps"))
        );
        // Ending on the last allowed step is termination, and a zero reward a failure.
        let mut ep = episode();
        let end = ep.advance(0.0, true, 1);
        assert_eq!(
            (end.terminated, end.truncated, ep.ended),
            (true, false, Some("failure"))
        );
        // A task that lowers what it reports gives a negative step reward.
        let mut ep = episode();
        ep.advance(0.5, false, 9);
        assert!((ep.advance(0.2, false, 9).reward + 0.3).abs() < 1e-12);
    }
}
