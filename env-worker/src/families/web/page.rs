//! Web tasks: a page in Chromium (app window, no browser chrome) inside the env's
//! sandbox, driven over the DevTools protocol ([`super::cdp`]). The MiniWoB++ pages
//! are the one family today: their `core.js` seeds, starts and scores an episode, and
//! the page reports its own reward.
//!
//! Input goes through DevTools (`Input.dispatch*Event`), whose answer comes after the
//! page has handled the event; a step is then observed once Chromium reports the frame
//! committed after it presented (its swap completion), so the frame that shows the
//! page's answer is on the screen (the `browser` settle).
//!
//! Time: by default the page's episode clock advances by a fixed `step_ms` per step
//! and stands still between steps, so the 10 s timeout and MiniWoB's time-discounted
//! reward depend on the steps taken, not on how long the trainer thought: replays and
//! forks reproduce rewards exactly. `Clock::Real` keeps MiniWoB's wall-clock timing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::cdp::Cdp;
use crate::a11y::{ElementAction, Limits, Node, Tree};
use crate::action::{Action, Button, Point};
use crate::error::{DesktopError, Result};
use crate::keys::{self, Keysym};
use crate::runner::AppState;
use crate::sandbox::Sandbox;

mod dom;
mod input;
mod rules;

pub(crate) use rules::Score;
pub use rules::{Clock, Reward, WebSpec};
use rules::{SETTLE, START};

/// The DevTools port inside the sandbox (its own loopback: every env has its own).
pub(crate) const DEVTOOLS_PORT: u16 = 9222;
/// How long the browser may take to start and show the page.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// The browser window's least size: MiniWoB++'s `WINDOW_WIDTH` x `WINDOW_HEIGHT`.
const WINDOW: (u32, u32) = (500, 320);

/// Where a reset leaves the pointer: the window's last pixel, far from the task area.
const PARK: Point = Point {
    x: WINDOW.0 as i32 - 1,
    y: WINDOW.1 as i32 - 1,
};

/// A page in the env's browser.
#[derive(Debug)]
pub(crate) struct Page {
    cdp: Cdp,
    spec: Arc<WebSpec>,
    /// Steps taken in the episode.
    steps: u32,
    pointer: Point,
    /// Keys held by `KeyDown` (their DevTools modifier bits go with every event).
    held: Vec<Keysym>,
    /// The page has loaded (the browser opened it; a reload waits again).
    loaded: bool,
}

impl Page {
    /// Starts the browser on the page in `sandbox`, an app window at the origin
    /// covering the `width` x `height` screen, and attaches to it.
    pub(crate) fn open(
        sandbox: &Sandbox,
        spec: Arc<WebSpec>,
        width: u32,
        height: u32,
    ) -> Result<Self> {
        let mut argv = spec.browser.clone();
        argv.extend([
            format!("--app={}", spec.url),
            format!("--remote-debugging-port={DEVTOOLS_PORT}"),
            "--user-data-dir=/tmp/deskgym-browser".into(),
            "--window-position=0,0".into(),
            // MiniWoB++'s own window (500x320): the page lays out as it does there (a
            // narrower one scrolls sideways to show a focused dialog); the screen shows
            // its top-left corner, the task area.
            format!(
                "--window-size={},{}",
                width.max(WINDOW.0),
                height.max(WINDOW.1)
            ),
            "--force-device-scale-factor=1".into(),
            // The settle's signal: a frame's presentation (`SETTLE`).
            "--enable-gpu-benchmarking".into(),
            // Software compositing in the browser process (no GPU here; one process
            // less, ~12 MiB less per env), and no throttling of a window nobody looks
            // at. The page's frame clock stays at 60 Hz under Xvfb whatever the flags,
            // but without the frame-rate limit the display draws a commit as soon as
            // it arrives instead of at the next tick: the frame after an input is
            // presented one period sooner (measured: 29 -> 16 ms after a click).
            "--disable-frame-rate-limit".into(),
            "--disable-gpu".into(),
            "--in-process-gpu".into(),
            "--disable-background-timer-throttling".into(),
            "--disable-renderer-backgrounding".into(),
            "--disable-backgrounding-occluded-windows".into(),
            "--hide-scrollbars".into(),
            "--disable-extensions".into(),
            "--mute-audio".into(),
        ]);
        sandbox.launch(&argv)?;
        let cdp = Cdp::attach(sandbox, DEVTOOLS_PORT, START_TIMEOUT)?;
        Ok(Self {
            cdp,
            spec,
            steps: 0,
            pointer: Point::default(),
            held: Vec::new(),
            loaded: false,
        })
    }

    /// Where the pointer is (as the last action left it).
    pub(crate) fn pointer(&self) -> Point {
        self.pointer
    }

    /// Starts an episode from `seed` as MiniWoB's own `reset` does: the running
    /// episode stopped (`core.endEpisode(0)`), seed, data mode, `startEpisodeReal`,
    /// wait for `WOB_TASK_READY`; with `reload`, in a freshly loaded page.
    pub(crate) fn reset(&mut self, seed: u64) -> Result<AppState> {
        self.steps = 0;
        self.held.clear();
        if self.spec.reload && self.loaded {
            self.cdp.eval("window.__dg_old = 1")?;
            self.cdp
                .call("Page.navigate", json!({"url": self.spec.url}))?;
            self.loaded = false;
        }
        if self.loaded {
            self.cdp.eval("core.endEpisode(0)")?;
        } else {
            self.wait_loaded()?;
            self.loaded = true;
        }
        if self.pointer != PARK {
            // Off the task area before the episode draws: an element born under the
            // last episode's pointer would show hovered, so the same seed would not
            // show the same pixels (MiniWoB++'s own shows none).
            self.mouse("mouseMoved", PARK, None, 0)?;
        }
        let (steps, _) = self.clock();
        // The clock's first reading (step 1) is set by the settle below.
        let start = START
            .replace("__SEED__", &seed.to_string())
            .replace("__MODE__", &json!(self.spec.data_mode).to_string())
            .replace("__STEPS__", if steps { "true" } else { "false" });
        let v = self.cdp.eval(&start)?;
        let mut ready = v.get(0).and_then(Value::as_bool).unwrap_or(false);
        let mut utterance = v.get(1).and_then(Value::as_str).unwrap_or("").to_string();
        let deadline = Instant::now() + Duration::from_millis(self.spec.ready_ms.into());
        while !ready {
            if Instant::now() >= deadline {
                return Err(DesktopError::NotReady(format!(
                    "the page {} did not become ready (WOB_TASK_READY) within {} ms",
                    self.spec.url, self.spec.ready_ms
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
            let v = self.cdp.eval("[WOB_TASK_READY, core.getUtterance()]")?;
            ready = v.get(0).and_then(Value::as_bool).unwrap_or(false);
            utterance = v.get(1).and_then(Value::as_str).unwrap_or("").to_string();
        }
        // Two presented frames, not one: under load the first one Chromium called
        // presented could come before the frame that hides the cover, and the X server
        // still showed the cover when the reset read the screen (a seeded replica of a
        // group of eight on a loaded host, about one group in five). The second frame is
        // presented after the first was drawn.
        self.settle_and_score()?;
        let score = self.settle_and_score()?;
        Ok(AppState {
            reward: score.reward(self.spec.reward),
            done: score.done,
            instruction: utterance,
            extra: score.extra(),
        })
    }

    /// Waits for the page (the one the browser opened, or a reload) to load and show
    /// MiniWoB's start cover.
    fn wait_loaded(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let loaded = self.cdp.eval(
                "!window.__dg_old && document.readyState === 'complete' && \
                 typeof core === 'object' && !!core.cover_div",
            );
            match loaded {
                Ok(Value::Bool(true)) => return Ok(()),
                // The browser is gone: no use waiting.
                Err(e @ DesktopError::App(_)) => return Err(e),
                // A page between documents may throw; only the deadline ends the wait.
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(DesktopError::NotReady(format!(
                    "the page {} did not load within {} s (is it a MiniWoB++ page?)",
                    self.spec.url,
                    START_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn clock(&self) -> (bool, u32) {
        match self.spec.clock {
            Clock::Steps { step_ms } => (true, step_ms),
            Clock::Real => (false, 0),
        }
    }

    /// Performs one action through DevTools, then waits for the page's frame and
    /// reads its score.
    pub(crate) fn step(&mut self, action: &Action) -> Result<AppState> {
        self.steps = self.steps.saturating_add(1);
        if let Err(e) = self.act(action) {
            // What the action posted before it failed is answered within this step, so
            // an error in it is not the next step's.
            let _ = self.cdp.collect();
            return Err(e);
        }
        let score = self.settle_and_score()?;
        Ok(AppState {
            reward: score.reward(self.spec.reward),
            done: score.done,
            instruction: String::new(),
            extra: score.extra(),
        })
    }

    fn settle_and_score(&mut self) -> Result<Score> {
        let (steps, step_ms) = self.clock();
        let script = SETTLE
            .replace("__STEPS__", if steps { "true" } else { "false" })
            .replace("__STEP_MS__", &step_ms.to_string())
            .replace("__K__", &self.steps.to_string());
        let v = self.cdp.eval(&script)?;
        let num = |i: usize| v.get(i).and_then(Value::as_f64).unwrap_or(0.0);
        Ok(Score {
            done: v.get(0).and_then(Value::as_bool).unwrap_or(false),
            env_reward: num(1),
            raw_reward: num(2),
            reason: v.get(3).and_then(|r| match r {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                other => Some(other.to_string()),
            }),
        })
    }
}

#[cfg(test)]
mod tests;
