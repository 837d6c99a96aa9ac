//! MiniWoB++'s rules: the episode clock, the reward processors (its `reward.py`), and
//! the page-side scripts that start an episode and read its score.

/// How a web episode's clock runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// Each step advances the page's episode clock by `step_ms`; it stands still
    /// between steps (deterministic rewards and timeouts). 0: no timeout, no discount.
    Steps {
        /// Episode milliseconds one step counts for.
        step_ms: u32,
    },
    /// MiniWoB++'s own: wall-clock time, the timeout fires whenever it is due.
    Real,
}

/// Which of MiniWoB++'s reward processors scores an episode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reward {
    /// `get_original_reward`: the page's reward, time-discounted (MiniWoB's default).
    #[default]
    Original,
    /// `get_raw_reward`: without the time discount.
    Raw,
    /// `get_binary_reward`: 1 when the raw reward is 1, else -1 (0 before the end).
    Binary,
}

impl Reward {
    /// The name in pool options (`original`, `raw`, `binary`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Original => "original",
            Self::Raw => "raw",
            Self::Binary => "binary",
        }
    }
}

/// What a web desktop shows and how it scores.
#[derive(Clone, Debug, PartialEq)]
pub struct WebSpec {
    /// The page (`file://` URL).
    pub url: String,
    /// The browser's argv before the flags this module adds (the profile's `chromium`).
    pub browser: Vec<String>,
    /// The episode clock.
    pub clock: Clock,
    /// The reward processor.
    pub reward: Reward,
    /// How long a page may take to say `WOB_TASK_READY` after an episode starts.
    pub ready_ms: u32,
    /// MiniWoB's data mode (`train` in its own environment).
    pub data_mode: String,
    /// Load the page afresh at every reset (else, as MiniWoB++'s own environment does,
    /// the running episode is stopped and the next one started in the same page).
    pub reload: bool,
}

/// What the page says after a step.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Score {
    /// `WOB_DONE_GLOBAL`.
    pub done: bool,
    /// `WOB_REWARD_GLOBAL` (time-discounted).
    pub env_reward: f64,
    /// `WOB_RAW_REWARD_GLOBAL`.
    pub raw_reward: f64,
    /// `WOB_REWARD_REASON`, when the page gave one.
    pub reason: Option<String>,
}

impl Score {
    /// The reward the spec's processor gives (MiniWoB's `reward.py`).
    pub(crate) fn reward(&self, r: Reward) -> f64 {
        match r {
            Reward::Original => self.env_reward,
            Reward::Raw => self.raw_reward,
            Reward::Binary if !self.done => 0.0,
            Reward::Binary if self.raw_reward == 1.0 => 1.0,
            Reward::Binary => -1.0,
        }
    }

    /// What `info` carries beside the reward.
    pub(crate) fn extra(&self) -> Vec<(String, String)> {
        vec![
            ("raw_reward".into(), self.raw_reward.to_string()),
            ("env_reward".into(), self.env_reward.to_string()),
            ("reason".into(), self.reason.clone().unwrap_or_default()),
        ]
    }
}

/// The page's state after an episode started: the instruction and its readiness.
pub(super) const START: &str = r#"(() => {
  Math.seedrandom(__SEED__);
  core.setDataMode(__MODE__);
  core.startEpisodeReal();
  if (__STEPS__) {
    // The episode clock: only endEpisode reads it (the discount), at __dg.now.
    const g = window.__dg = window.__dg || {now: 0};
    if (!g.wrapped) {
      const RealDate = Date;
      class StepDate extends RealDate {
        constructor(...a) { if (a.length) super(...a); else super(g.now); }
        static now() { return g.now; }
      }
      const end = core.endEpisode;
      core.endEpisode = function () {
        window.Date = StepDate;
        try { return end.apply(this, arguments); } finally { window.Date = RealDate; }
      };
      g.wrapped = true;
    }
    core.ept0 = 0;
    // A timer that never fires keeps endEpisode accepting a reward; the timeout is ours.
    clearTimeout(core.EP_TIMER);
    core.EP_TIMER = setTimeout(function () {}, 2147483647);
  }
  return [WOB_TASK_READY, core.getUtterance()];
})()"#;

/// After step K: the step clock's timeout, then the score once the frame that
/// shows everything the page did so far has been presented (Chromium's swap
/// completion, `--enable-gpu-benchmarking`: a promise on the next commit, kept when
/// its frame is on the screen). Without it, two animation frames (not exact: a
/// frame may still be drawing).
pub(super) const SETTLE: &str = r#"(() => {
  if (__STEPS__ && __STEP_MS__ > 0 && !WOB_DONE_GLOBAL && __K__ * __STEP_MS__ >= core.EPISODE_MAX_TIME) {
    core.endEpisode(-1, false, 'timed out');
  }
  if (window.__dg) __dg.now = (__K__ + 1) * __STEP_MS__;
  const score = () => [WOB_DONE_GLOBAL, WOB_REWARD_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON];
  const g = window.chrome && chrome.gpuBenchmarking;
  if (g && g.addSwapCompletionEventListener) {
    return new Promise(r => g.addSwapCompletionEventListener(() => r(score())));
  }
  return new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(score()))));
})()"#;
