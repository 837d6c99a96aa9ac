//! Web tasks: a page in Chromium (app window, no browser chrome) inside the env's
//! sandbox, driven over the DevTools protocol ([`crate::cdp`]). The MiniWoB++ pages
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

use crate::a11y::{ElementAction, Limits, Node, Tree};
use crate::action::{Action, Button, Point};
use crate::cdp::Cdp;
use crate::error::{DesktopError, Result};
use crate::keys::{self, Keysym};
use crate::sandbox::Sandbox;
use crate::task_app::AppState;

/// The DevTools port inside the sandbox (its own loopback: every env has its own).
pub const DEVTOOLS_PORT: u16 = 9222;
/// How long the browser may take to start and show the page.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// The browser window's least size: MiniWoB++'s `WINDOW_WIDTH` x `WINDOW_HEIGHT`.
const WINDOW: (u32, u32) = (500, 320);
/// Pixels one wheel click scrolls (Chromium's step for an X wheel click).
const WHEEL_PX: i32 = 53;

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
pub struct Score {
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
    pub fn reward(&self, r: Reward) -> f64 {
        match r {
            Reward::Original => self.env_reward,
            Reward::Raw => self.raw_reward,
            Reward::Binary if !self.done => 0.0,
            Reward::Binary if self.raw_reward == 1.0 => 1.0,
            Reward::Binary => -1.0,
        }
    }

    /// What `info` carries beside the reward.
    pub fn extra(&self) -> Vec<(String, String)> {
        vec![
            ("raw_reward".into(), self.raw_reward.to_string()),
            ("env_reward".into(), self.env_reward.to_string()),
            ("reason".into(), self.reason.clone().unwrap_or_default()),
        ]
    }
}

/// The page's state after an episode started: the instruction and its readiness.
const START: &str = r#"(() => {
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
const SETTLE: &str = r#"(() => {
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

/// Flattens `core.getDOMInfo()` (ref, tag, text, value, bounds), depth first; the last
/// column is the node as MiniWoB++ gave it, less its children, as JSON (what
/// MiniWoB++'s own `DOMElement` reads: exact bounds, colors, flags).
const DOM: &str = r#"(() => {
  const out = [];
  const walk = (n, parent) => {
    const i = out.length;
    out.push([n.ref, parent, n.tag, n.text === undefined ? null : n.text,
      n.value === undefined ? null : n.value, n.left, n.top, n.width, n.height,
      !!n.focused, n.id || '', typeof n.classes === 'string' ? n.classes : '',
      JSON.stringify(Object.assign({}, n, {children: undefined}))]);
    (n.children || []).forEach(c => walk(c, i));
  };
  // Reading a finished episode's page must not number its elements: MiniWoB++ reads
  // none then, and refs handed out now would carry into the next episode.
  const done = WOB_DONE_GLOBAL;
  const kept = done ? [...document.querySelectorAll('*')]
    .map(e => [e, e.dataset.wob_ref, e.dataset.wob_eps]) : [];
  const codes = [core.nextRefCode, core.nextTextRefCode];
  walk(core.getDOMInfo(), null);
  if (done) {
    [core.nextRefCode, core.nextTextRefCode] = codes;
    for (const [e, r, p] of kept) {
      if (r === undefined) delete e.dataset.wob_ref; else e.dataset.wob_ref = r;
      if (p === undefined) delete e.dataset.wob_eps; else e.dataset.wob_eps = p;
    }
  }
  return out;
})()"#;

/// Where a reset leaves the pointer: the window's last pixel, far from the task area.
const PARK: Point = Point {
    x: WINDOW.0 as i32 - 1,
    y: WINDOW.1 as i32 - 1,
};

/// Longest `wob` attribute kept (MiniWoB++'s own observation caps texts at 256).
const WOB_JSON_MAX: usize = 16 * 1024;

/// A page in the env's browser.
#[derive(Debug)]
pub struct Page {
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
    pub fn open(sandbox: &Sandbox, spec: Arc<WebSpec>, width: u32, height: u32) -> Result<Self> {
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
            // at. (`--disable-frame-rate-limit` and `--disable-gpu-vsync` leave the
            // frame clock at 60 Hz under Xvfb: measured, not used.)
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
    pub fn pointer(&self) -> Point {
        self.pointer
    }

    /// Starts an episode from `seed` as MiniWoB's own `reset` does: the running
    /// episode stopped (`core.endEpisode(0)`), seed, data mode, `startEpisodeReal`,
    /// wait for `WOB_TASK_READY`; with `reload`, in a freshly loaded page.
    pub fn reset(&mut self, seed: u64) -> Result<AppState> {
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
    pub fn step(&mut self, action: &Action) -> Result<AppState> {
        self.steps = self.steps.saturating_add(1);
        self.act(action)?;
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

    fn modifiers(&self) -> u32 {
        self.held.iter().fold(0, |m, k| m | modifier_bit(*k))
    }

    fn mouse(&mut self, kind: &str, at: Point, button: Option<Button>, clicks: u32) -> Result<()> {
        self.pointer = at;
        let (name, buttons) = match button {
            None => ("none", 0),
            Some(Button::Left) => ("left", 1),
            Some(Button::Right) => ("right", 2),
            Some(Button::Middle) => ("middle", 4),
        };
        let buttons = if kind == "mouseReleased" { 0 } else { buttons };
        self.cdp.call(
            "Input.dispatchMouseEvent",
            json!({"type": kind, "x": at.x, "y": at.y, "button": name, "buttons": buttons,
                   "clickCount": clicks, "modifiers": self.modifiers()}),
        )?;
        Ok(())
    }

    fn key_event(&mut self, kind: &str, k: Keysym) -> Result<()> {
        let Some(def) = key_def(k) else {
            return Err(DesktopError::invalid(
                "key",
                format!("key 0x{k:x} has no DOM key in a web task"),
            ));
        };
        let mods = self.modifiers();
        // Text only for a printable key without Ctrl/Alt/Meta (as a browser does).
        let text = (kind == "keyDown" && mods & 0b111 == 0)
            .then_some(def.text)
            .flatten();
        let kind = if kind == "keyDown" && text.is_none() {
            "rawKeyDown"
        } else {
            kind
        };
        let mut p = json!({"type": kind, "key": def.key, "code": def.code,
                           "windowsVirtualKeyCode": def.vk, "modifiers": mods});
        if let Some(t) = text {
            p["text"] = json!(t);
            p["unmodifiedText"] = json!(t);
        }
        self.cdp.call("Input.dispatchKeyEvent", p)?;
        Ok(())
    }

    fn chord(&mut self, chord: &str, down: bool, up: bool) -> Result<()> {
        let syms = keys::parse_chord(chord).map_err(|m| DesktopError::invalid("key", m))?;
        if down {
            for &k in &syms {
                self.key_event("keyDown", k)?;
                self.held.push(k);
            }
        }
        if up {
            for &k in syms.iter().rev() {
                if let Some(i) = self.held.iter().rposition(|h| *h == k) {
                    self.held.remove(i);
                }
                self.key_event("keyUp", k)?;
            }
        }
        Ok(())
    }

    fn type_text(&mut self, text: &str) -> Result<()> {
        for c in text.chars() {
            let k = match c {
                '\n' | '\r' => keys::RETURN,
                '\t' => keys::TAB,
                c => keys::char_keysym(c),
            };
            if key_def(k).is_some() {
                self.key_event("keyDown", k)?;
                self.key_event("keyUp", k)?;
            } else {
                // Beyond the key table (non-ASCII): the text arrives as an IME would.
                self.cdp
                    .call("Input.insertText", json!({"text": c.to_string()}))?;
            }
        }
        Ok(())
    }

    fn clicks(&mut self, at: Point, button: Button, count: u32) -> Result<()> {
        self.mouse("mouseMoved", at, None, 0)?;
        for i in 1..=count {
            self.mouse("mousePressed", at, Some(button), i)?;
            self.mouse("mouseReleased", at, Some(button), i)?;
        }
        Ok(())
    }

    fn click(&mut self, at: Point) -> Result<()> {
        self.clicks(at, Button::Left, 1)
    }

    fn act(&mut self, action: &Action) -> Result<()> {
        match action {
            Action::Click { at, button, count } => self.clicks(*at, *button, *count)?,
            Action::Move { to } => self.mouse("mouseMoved", *to, None, 0)?,
            Action::Scroll { at, dx, dy } => {
                self.mouse("mouseMoved", *at, None, 0)?;
                self.cdp.call(
                    "Input.dispatchMouseEvent",
                    json!({"type": "mouseWheel", "x": at.x, "y": at.y,
                           "deltaX": dx.saturating_mul(WHEEL_PX), "deltaY": dy.saturating_mul(WHEEL_PX),
                           "modifiers": self.modifiers()}),
                )?;
            }
            Action::Drag {
                from,
                to,
                button,
                duration_ms,
                modifiers,
            } => {
                if !modifiers.is_empty() {
                    self.chord(modifiers, true, false)?;
                }
                self.mouse("mouseMoved", *from, None, 0)?;
                self.mouse("mousePressed", *from, Some(*button), 1)?;
                const STEPS: i32 = 8;
                let pause = Duration::from_millis(u64::from(*duration_ms) / STEPS as u64);
                for i in 1..=STEPS {
                    let p = Point {
                        x: from.x + (to.x - from.x) * i / STEPS,
                        y: from.y + (to.y - from.y) * i / STEPS,
                    };
                    std::thread::sleep(pause);
                    self.mouse("mouseMoved", p, Some(*button), 0)?;
                }
                self.mouse("mouseReleased", *to, Some(*button), 1)?;
                if !modifiers.is_empty() {
                    self.chord(modifiers, false, true)?;
                }
            }
            Action::MouseDown { at, button } => {
                let at = at.unwrap_or(self.pointer);
                self.mouse("mousePressed", at, Some(*button), 1)?;
            }
            Action::MouseUp { at, button } => {
                let at = at.unwrap_or(self.pointer);
                self.mouse("mouseReleased", at, Some(*button), 1)?;
            }
            Action::TypeText(t) => self.type_text(t)?,
            Action::Key(c) => self.chord(c, true, true)?,
            Action::KeyDown(c) => self.chord(c, true, false)?,
            Action::KeyUp(c) => self.chord(c, false, true)?,
            Action::Wait(ms) => std::thread::sleep(Duration::from_millis((*ms).into())),
            Action::Noop => {}
            Action::InvokeAction { element, action } => {
                if !(action.is_empty() || action.eq_ignore_ascii_case("click")) {
                    return Err(DesktopError::element(
                        crate::error::ElementFailure::Unsupported,
                        format!("the element has no action {action:?}; it offers [\"click\"]"),
                    ));
                }
                self.element_click(element)?;
            }
            Action::SetValue { element, value } => {
                let at = self.target(element)?;
                self.click(at)?;
                // Select what the field holds, so the new text replaces it.
                self.cdp.eval(
                    "(() => { const e = document.activeElement; if (e && e.select) e.select(); })()",
                )?;
                if value.is_empty() {
                    self.chord("BackSpace", true, true)?;
                } else {
                    self.type_text(value)?;
                }
            }
            Action::LaunchApp(_)
            | Action::ActivateWindow(_)
            | Action::CloseWindow(_)
            | Action::MoveWindow { .. }
            | Action::ResizeWindow { .. } => {
                return Err(DesktopError::invalid(
                    "action",
                    "a web task shows one page: window and application actions do not apply",
                ));
            }
        }
        Ok(())
    }

    /// The element's own click, as MiniWoB++'s `CLICK_ELEMENT` does it
    /// (`core.elementClick`: the DOM's `click()` and `focus()`, an element drawn over it
    /// or not); no pointer event, as an accessibility action is none.
    fn element_click(&mut self, id: &str) -> Result<()> {
        // No re-reading here: each `core.getDOMInfo()` numbers the text runs anew, and
        // `core.elementClick` looks up the elements the last reading (the ref's) saw.
        let wob: i64 = id
            .strip_prefix("wob:")
            .and_then(|r| r.parse().ok())
            .filter(|r| *r > 0)
            .ok_or_else(|| {
                DesktopError::element(
                    crate::error::ElementFailure::Unsupported,
                    "a text run has no click of its own: click its element, or a point",
                )
            })?;
        let click = format!("core.previousDOMInfo[{wob}] ? core.elementClick({wob}) : 'unread'");
        let mut answer = self.cdp.eval(&click)?;
        if answer.as_str() == Some("unread") {
            // Not on the page at the last reading (hidden then, say): read it now.
            self.live(id)?;
            answer = self.cdp.eval(&click)?;
        }
        match answer {
            Value::Bool(true) => Ok(()),
            other => Err(DesktopError::element(
                crate::error::ElementFailure::Gone,
                format!(
                    "the page refused the click: {}",
                    crate::error::quote(&other.to_string())
                ),
            )),
        }
    }

    /// What element `id` of the page is now (re-read: refs are per episode).
    pub fn live(&mut self, id: &str) -> Result<crate::a11y::Live> {
        let n = self.tree(&Limits::default())?.take(id)?;
        Ok(crate::a11y::Live::from(&n))
    }

    /// Where a pointer action on element `id` lands (its centre), if it shows.
    fn target(&mut self, id: &str) -> Result<Point> {
        self.live(id)?.target().ok_or_else(|| {
            DesktopError::element(
                crate::error::ElementFailure::Gone,
                "the element is not showing",
            )
        })
    }

    /// The page's elements as MiniWoB++'s `core.getDOMInfo()` sees them: id `wob:<ref>`,
    /// role the tag (`button`, `input_text`...), name the text, `text` an input's value;
    /// at most `limits.max_nodes` of them (a prefix: parents come first), texts cut at
    /// `limits.max_text` bytes.
    pub fn tree(&mut self, limits: &Limits) -> Result<Tree> {
        let rows = self.cdp.eval(DOM)?;
        let mut rows = match rows {
            Value::Array(rows) => rows,
            _ => Vec::new(),
        };
        let cap = limits.max_nodes as usize;
        let partial = rows.len() > cap;
        rows.truncate(cap);
        let max_text = limits.max_text as usize;
        let mut nodes = Vec::with_capacity(rows.len());
        for r in rows {
            let s = |i: usize| {
                let t = r.get(i).and_then(Value::as_str).unwrap_or("");
                let mut end = t.len().min(max_text);
                while !t.is_char_boundary(end) {
                    end -= 1;
                }
                t[..end].to_string()
            };
            let f = |i: usize| r.get(i).and_then(Value::as_f64).unwrap_or(0.0);
            let tag = s(2).to_ascii_lowercase();
            let mut states: Vec<String> = ["showing", "visible", "enabled", "sensitive"]
                .map(String::from)
                .into();
            if r.get(9).and_then(Value::as_bool) == Some(true) {
                states.push("focused".into());
            }
            // A checkbox's or radio's value is whether it is checked; a field's, its text.
            if r.get(4) == Some(&Value::Bool(true)) {
                states.push("checked".into());
            }
            let editable = matches!(
                tag.as_str(),
                "input_text"
                    | "input_password"
                    | "input_email"
                    | "input_number"
                    | "input_search"
                    | "input_tel"
                    | "input_url"
                    | "textarea"
            );
            let wob_ref = r.get(0).and_then(Value::as_i64).unwrap_or(0);
            nodes.push(Node {
                id: format!("wob:{wob_ref}"),
                parent: r.get(1).and_then(Value::as_u64).map(|p| p as u32),
                name: s(3),
                text: r.get(4).and_then(Value::as_str).map(|_| s(4)),
                states,
                bounds: Some([
                    f(5).round() as i32,
                    f(6).round() as i32,
                    f(7).round() as i32,
                    f(8).round() as i32,
                ]),
                actions: vec![ElementAction {
                    name: "click".into(),
                    ..Default::default()
                }],
                attributes: vec![
                    ("tag".into(), s(2)),
                    ("ref".into(), wob_ref.to_string()),
                    ("id".into(), s(10)),
                    ("classes".into(), s(11)),
                    // Whole or not at all: a cut JSON text would not parse.
                    (
                        "wob".into(),
                        r.get(12)
                            .and_then(Value::as_str)
                            .filter(|j| j.len() <= WOB_JSON_MAX)
                            .unwrap_or("")
                            .to_string(),
                    ),
                ],
                editable,
                role: tag,
                ..Default::default()
            });
        }
        Ok(Tree {
            nodes,
            partial,
            notes: if partial {
                vec![format!("the page has more than {cap} elements (max_nodes)")]
            } else {
                Vec::new()
            },
        })
    }
}

/// A key as DevTools dispatches it.
struct KeyDef {
    key: String,
    code: String,
    vk: u32,
    text: Option<String>,
}

fn modifier_bit(k: Keysym) -> u32 {
    match k {
        0xffe9 | 0xffea => 1,          // Alt
        0xffe3 | 0xffe4 => 2,          // Control
        0xffe7 | 0xffeb | 0xffec => 4, // Meta / Super
        0xffe1 | 0xffe2 => 8,          // Shift
        _ => 0,
    }
}

/// The DOM key, code and Windows virtual key code of an X keysym: printable ASCII and
/// the named keys MiniWoB++'s tasks read.
fn key_def(k: Keysym) -> Option<KeyDef> {
    let named = |key: &str, code: &str, vk: u32, text: Option<&str>| KeyDef {
        key: key.into(),
        code: code.into(),
        vk,
        text: text.map(str::to_string),
    };
    Some(match k {
        0xff08 => named("Backspace", "Backspace", 8, None),
        0xff09 => named("Tab", "Tab", 9, None),
        0xff0d => named("Enter", "Enter", 13, Some("\r")),
        0xff8d => named("Enter", "NumpadEnter", 13, Some("\r")),
        0xff1b => named("Escape", "Escape", 27, None),
        0xffff => named("Delete", "Delete", 46, None),
        0xff50 => named("Home", "Home", 36, None),
        0xff51 => named("ArrowLeft", "ArrowLeft", 37, None),
        0xff52 => named("ArrowUp", "ArrowUp", 38, None),
        0xff53 => named("ArrowRight", "ArrowRight", 39, None),
        0xff54 => named("ArrowDown", "ArrowDown", 40, None),
        0xff55 => named("PageUp", "PageUp", 33, None),
        0xff56 => named("PageDown", "PageDown", 34, None),
        0xff57 => named("End", "End", 35, None),
        0xffe1 => named("Shift", "ShiftLeft", 16, None),
        0xffe2 => named("Shift", "ShiftRight", 16, None),
        0xffe3 => named("Control", "ControlLeft", 17, None),
        0xffe4 => named("Control", "ControlRight", 17, None),
        0xffe9 => named("Alt", "AltLeft", 18, None),
        0xffea => named("Alt", "AltRight", 18, None),
        0xffe7 | 0xffeb => named("Meta", "MetaLeft", 91, None),
        0xffec => named("Meta", "MetaRight", 92, None),
        0xff63 => named("Insert", "Insert", 45, None),
        // F1..F12.
        0xffbe..=0xffc9 => {
            let n = k - 0xffbe + 1;
            let f = format!("F{n}");
            named(&f, &f, 111 + n, None)
        }
        // The keypad, as WebDriver's numpad keys (MiniWoB++'s `<Numpad0>`...) send it.
        0xffb0..=0xffb9 => {
            let d = char::from_digit(k - 0xffb0, 10)?.to_string();
            named(&d, &format!("Numpad{d}"), 96 + k - 0xffb0, Some(&d))
        }
        0xffaa => named("*", "NumpadMultiply", 106, Some("*")),
        0xffab => named("+", "NumpadAdd", 107, Some("+")),
        0xffac => named(",", "NumpadComma", 108, Some(",")),
        0xffad => named("-", "NumpadSubtract", 109, Some("-")),
        0xffae => named(".", "NumpadDecimal", 110, Some(".")),
        0xffaf => named("/", "NumpadDivide", 111, Some("/")),
        0x20..=0x7e => {
            let c = char::from_u32(k)?;
            let (code, vk) = match c {
                'a'..='z' => (
                    format!("Key{}", c.to_ascii_uppercase()),
                    c.to_ascii_uppercase() as u32,
                ),
                'A'..='Z' => (format!("Key{c}"), c as u32),
                '0'..='9' => (format!("Digit{c}"), c as u32),
                ' ' => ("Space".into(), 32),
                _ => (String::new(), 0),
            };
            KeyDef {
                key: c.to_string(),
                code,
                vk,
                text: Some(c.to_string()),
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reward_processors_match_miniwob() {
        let s = Score {
            done: true,
            env_reward: 0.8,
            raw_reward: 1.0,
            reason: None,
        };
        assert_eq!(s.reward(Reward::Original), 0.8);
        assert_eq!(s.reward(Reward::Raw), 1.0);
        assert_eq!(s.reward(Reward::Binary), 1.0);
        let partial = Score {
            raw_reward: 0.5,
            ..s.clone()
        };
        assert_eq!(partial.reward(Reward::Binary), -1.0);
        let running = Score::default();
        assert_eq!(running.reward(Reward::Binary), 0.0);
    }

    #[test]
    fn keys_have_dom_names() {
        let enter = key_def(keys::RETURN).unwrap();
        assert_eq!((enter.key.as_str(), enter.vk), ("Enter", 13));
        let a = key_def(u32::from('a')).unwrap();
        assert_eq!(
            (a.code.as_str(), a.vk, a.text.as_deref()),
            ("KeyA", 65, Some("a"))
        );
        assert!(key_def(0x0100_00e9).is_none());
        assert_eq!(modifier_bit(0xffe3) | modifier_bit(0xffe1), 10);
    }

    #[test]
    fn keypad_and_function_keys_are_webdrivers() {
        // As WebDriver's `<Numpad5>`, `<NumpadAdd>`, `<NumpadEnter>` and `<F12>` send them.
        let five = key_def(0xffb5).unwrap();
        assert_eq!(
            (
                five.key.as_str(),
                five.code.as_str(),
                five.vk,
                five.text.as_deref()
            ),
            ("5", "Numpad5", 101, Some("5"))
        );
        let add = key_def(0xffab).unwrap();
        assert_eq!((add.code.as_str(), add.vk), ("NumpadAdd", 107));
        let enter = key_def(0xff8d).unwrap();
        assert_eq!(
            (enter.key.as_str(), enter.code.as_str()),
            ("Enter", "NumpadEnter")
        );
        let f12 = key_def(0xffc9).unwrap();
        assert_eq!((f12.key.as_str(), f12.vk, f12.text), ("F12", 123, None));
    }
}
