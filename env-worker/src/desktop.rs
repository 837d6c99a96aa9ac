//! The local desktop: an Xvfb, a client session on it, and the task family's part (a
//! [`crate::runner::Runner`]: the bundled task app, or a profile's sandboxed session
//! with no task, a declarative task or a web page), started and stopped together on
//! this host; and [`LocalBackend`], which starts them.

use std::time::{Duration, Instant};

use crate::Point;
use crate::a11y::{Limits, Live, Tree};
use crate::action::Action;
use crate::agent::{ExecSpec, Executed, FileChunk, Listing};
use crate::contract::{Backend, Desktop, Pace, Replayed, Seen, Sink};
use crate::error::{DesktopError, Result};
use crate::families::{self, DesktopConfig};
use crate::frame::Frame;
use crate::runner::{self, Ctx, Outcome, Runner, Session};
use crate::windows::WindowInfo;
use crate::x11::XSession;
use crate::xvfb::Xvfb;

/// How many times the original's own step time a replay waits, after a settled action,
/// for the screen the original showed: the replay is at most this much slower than
/// the run it rebuilds, step by step.
const PACE_TIMES: u32 = 2;
/// The least a replay waits for a frame: a step the original took 30 ms for can take
/// a little longer on a busy host without having gone elsewhere.
const PACE_FLOOR: Duration = Duration::from_millis(250);
/// How many recorded frames from an action's own a replay accepts as caught up.
const PACE_AHEAD: usize = 4;
/// Waits in a row that found another screen, after which a fast replay stops (it has
/// left the original's path: the caller replays settled).
const PACE_MISSES: u32 = 3;

/// The least time a key's screen stays unchanged before a replay stops waiting for
/// the original's frame (decision 212): an app answers a key at once, so a screen
/// still for this long after one will not turn into the frame the original caught
/// mid-draw, while the cumulative [`pace_bound`] could be seconds.
const STILL_FLOOR: Duration = Duration::from_millis(1000);
/// How often a wait that a still screen may end looks at the screen again.
const STILL_POLL: Duration = Duration::from_millis(200);

/// The shortest pause of the original's agent before an action that a replay gives
/// the apps as idle time ([`LocalDesktop::give_idle_time`]).
const IDLE_GAP: Duration = Duration::from_millis(300);

/// The most idle time a replay gives the apps before one action.
const IDLE_MAX: Duration = Duration::from_secs(5);

/// The most idle time one replay gives the apps in all: an app that never goes idle
/// (an animation) under an agent that pauses at every step costs a replay this much
/// more, not the original's whole time.
const IDLE_BUDGET: Duration = Duration::from_secs(15);

/// How long the original's agent paused before action `i`: from the end of the step
/// before (its clock reading and its time) to this action's clock reading; before the
/// first, from `now`, where the replica's clock stands after its reset (which started
/// on the original's reset time). Zero where the original had no clock.
fn paused_before(seen: &[Seen], i: usize, now: Option<u64>) -> Duration {
    let at = seen[i].clock_ms;
    let from = match i.checked_sub(1).map(|j| &seen[j]) {
        Some(prev) if prev.clock_ms != 0 => prev.clock_ms.saturating_add(u64::from(prev.ms)),
        Some(_) => at,
        None => now.unwrap_or(at),
    };
    Duration::from_millis(at.saturating_sub(from))
}

/// How long a replay may wait for a frame: what is left of [`PACE_TIMES`] the
/// original's time up to this step (`original_ms`) once the replay's own time so far
/// (`spent`) is counted, and at least [`PACE_FLOOR`]. Cumulative, so a replica that
/// starts an app more slowly than the original did (two replicas start at once) can
/// use the time its unsettled keys did not take.
fn pace_bound(original_ms: u64, spent: Duration) -> Duration {
    Duration::from_millis(original_ms.saturating_mul(u64::from(PACE_TIMES)))
        .saturating_sub(spent)
        .max(PACE_FLOOR)
}

/// How long an unchanged screen after action `a` ends a replay's wait for the
/// original's frame: keys only ([`Action::answered_by_drawing`]), after [`PACE_TIMES`]
/// the original's own step time (`step_ms`: a command that ran that long before it
/// printed) and at least [`STILL_FLOOR`]. None for the rest: after a click an app
/// that is starting draws nothing for a while, then its window.
fn still_after(a: &Action, step_ms: u32) -> Option<Duration> {
    a.answered_by_drawing().then(|| {
        STILL_FLOOR.max(Duration::from_millis(
            u64::from(step_ms).saturating_mul(u64::from(PACE_TIMES)),
        ))
    })
}

/// Whether a replay at `pace` stops after `misses` waits in a row that found another
/// screen: a [`Pace::Fast`] one after [`PACE_MISSES`] (its caller replays settled from
/// a reset); the others never.
fn gives_up(pace: Pace, misses: u32) -> bool {
    pace == Pace::Fast && misses >= PACE_MISSES
}

/// Whether the screen has shown the same pixels for a while.
#[derive(Debug)]
struct Still {
    after: Duration,
    last: Option<(u128, Instant)>,
}

impl Still {
    fn new(after: Duration) -> Self {
        Self { after, last: None }
    }

    /// Whether `hash`, seen at `now`, is the screen every look since `after` ago saw.
    fn still(&mut self, hash: u128, now: Instant) -> bool {
        match self.last {
            Some((h, since)) if h == hash => now.saturating_duration_since(since) >= self.after,
            _ => {
                self.last = Some((hash, now));
                false
            }
        }
    }
}

/// Starts [`LocalDesktop`]s.
#[derive(Debug, Default)]
pub struct LocalBackend;

impl Backend for LocalBackend {
    fn start(&self, config: DesktopConfig) -> Result<Box<dyn Desktop>> {
        Ok(Box::new(LocalDesktop::start(config)?))
    }
}

/// A running desktop on this host. Fields drop in declaration order: the family's part (app or
/// sandbox), the clipboard owner, the X session, then Xvfb.
pub struct LocalDesktop {
    runner: Box<dyn Runner>,
    /// The thread owning the CLIPBOARD after a `set_clipboard`.
    clipboard: Option<crate::clipboard::Owner>,
    x: XSession,
    xvfb: Xvfb,
    config: DesktopConfig,
}

impl std::fmt::Debug for LocalDesktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalDesktop")
            .field("display", &self.xvfb.display())
            .field("config", &self.config)
            .finish()
    }
}

impl LocalDesktop {
    /// Starts Xvfb, connects, starts the family's part (order matters: each needs the last).
    pub fn start(config: DesktopConfig) -> Result<Self> {
        let xvfb = Xvfb::start(config.width, config.height)?;
        let mut x = XSession::connect(xvfb.display())?;
        let runner = families::start(&config, xvfb.display(), &mut x)?;
        Ok(Self {
            runner,
            clipboard: None,
            x,
            xvfb,
            config,
        })
    }

    /// Pid of the Xvfb process (tests kill it to simulate a crash).
    pub fn xvfb_pid(&self) -> u32 {
        self.xvfb.pid()
    }

    /// The Xauthority file with the display's cookie: the display refuses clients
    /// without it (an operator's tools set `XAUTHORITY` to this).
    pub fn xauthority(&self) -> &std::path::Path {
        self.xvfb.auth_file()
    }

    /// Pid of the task app, or of the sandbox (killing it ends every program in it).
    pub fn app_pid(&self) -> u32 {
        self.runner.pid()
    }

    /// True when captures use MIT-SHM.
    pub fn uses_shm(&self) -> bool {
        self.x.uses_shm()
    }

    /// Starts a program in the sandbox, detached; its pid inside the sandbox.
    pub fn launch(&mut self, argv: &[String]) -> Result<u32> {
        self.session()?.sandbox()?.launch(argv)
    }

    /// [`Desktop::replay`]'s actions, each paced as its doc says.
    fn replay_paced(
        &mut self,
        actions: &[Action],
        seen: &[Seen],
        pace: Pace,
        out: Outcome,
    ) -> Result<Replayed> {
        let fast = pace.is_fast();
        let mut r = Replayed::new(out);
        let steer = self.runner.session_ref().is_some();
        let mut misses = 0;
        // The original's time up to this action (keys sent unsettled in a run took
        // their own settles in the original), and when the replay began.
        let mut original_ms: u64 = 0;
        let began = Instant::now();
        for (i, a) in actions.iter().enumerate() {
            original_ms += seen.get(i).map_or(0, |s| u64::from(s.ms));
            let unsettled = fast && Action::in_unsettled_run(actions, i);
            // The apps see the original's clock at each settled action. Not before a
            // key sent unsettled: the app reads the clock when it takes the key, which
            // may be after the next keys moved it on; the run's last key sets it.
            let at = seen.get(i).map_or(0, |s| s.clock_ms);
            // Before the first action the clock runs to its time and stands there, as
            // it does between the others: a parked replica's stood at its checkpoint
            // while it waited for this replay (decision 213).
            if i == 0 && at != 0 && steer {
                self.hold_clock(Some(at));
            }
            if at != 0 && steer && r.idle_waited < IDLE_BUDGET {
                let pause = paused_before(seen, i, self.clock_ms());
                r.idle_waited += self.give_idle_time(pause, IDLE_BUDGET - r.idle_waited);
            }
            // The action runs on a running clock (an app may need time to pass to
            // take it: Chromium answers a page's check once it has drawn a frame).
            if at != 0 && !unsettled && !self.advance_clock(at)? {
                r.clock_late += 1;
            }
            if unsettled {
                self.check_alive()?;
                let cx = ctx(&mut self.x, &self.xvfb, &self.config);
                if let Some(done) = self.runner.act_only(cx, a) {
                    done?;
                    r.unsettled += 1;
                    continue;
                }
            }
            r.outcome = self.step(a)?;
            // Then, until the next action goes, the apps see at most the time the
            // original's saw before it came (decision 211): a timer that waits for a
            // pause in the input fires where the original's did, however long this
            // replay waits for a frame.
            let next = seen.get(i + 1).map_or(0, |s| s.clock_ms);
            if at != 0 && next != 0 && i + 1 < actions.len() {
                self.hold_clock(Some(next));
            }
            // The frame this action left, or one of the next few: a settle that ended
            // early (a terminal echoing keys after the quiet window) recorded states a
            // step or more late. (After the last action the caller compares the frame
            // itself.)
            let want: Vec<u128> = seen[i.min(seen.len())..(i + PACE_AHEAD).min(seen.len())]
                .iter()
                .map(|s| s.hash)
                .collect();
            let bound = pace_bound(original_ms, began.elapsed());
            if steer && want.first().is_some_and(|h| *h != 0) && i + 1 < actions.len() {
                let t = Instant::now();
                let still = still_after(a, seen[i].ms);
                let matched = self.wait_for_frame(&want, bound, still)?;
                r.waited += t.elapsed();
                r.checked += 1;
                tracing::debug!(
                    step = i,
                    ?a,
                    matched,
                    fast,
                    bound_ms = bound.as_millis() as u64,
                    waited_ms = t.elapsed().as_millis() as u64,
                    "replay paced"
                );
                if matched {
                    misses = 0;
                    r.last_on_path = Some(i);
                } else {
                    misses += 1;
                    r.missed += 1;
                    if gives_up(pace, misses) {
                        r.stopped = true;
                        return Ok(r);
                    }
                }
            }
        }
        Ok(r)
    }

    /// Waits (at most `bound`) until the screen's hash is one of `want` (0: none);
    /// false when it was not. The screen is compared again after each burst of
    /// drawing. A screen unchanged for `still` ends the wait too ([`still_after`]);
    /// without it a still screen does not: an app that is starting draws nothing for
    /// a while, then its window (LibreOffice after its splash).
    fn wait_for_frame(
        &mut self,
        want: &[u128],
        bound: Duration,
        still: Option<Duration>,
    ) -> Result<bool> {
        let start = Instant::now();
        let mut screen = still.map(Still::new);
        loop {
            let hash = self.x.capture()?.hash;
            if hash != 0 && want.contains(&hash) {
                return Ok(true);
            }
            let left = bound.saturating_sub(start.elapsed());
            if left.is_zero()
                || screen
                    .as_mut()
                    .is_some_and(|s| s.still(hash, Instant::now()))
            {
                return Ok(false);
            }
            let max = if screen.is_some() {
                left.min(STILL_POLL)
            } else {
                left
            };
            self.x.settle(crate::Settle {
                policy: crate::SettlePolicy::Damage,
                settle_ms: 20,
                settle_max_ms: max.as_millis().max(20) as u32,
            })?;
        }
    }

    /// Lets the apps finish what they were doing before an action the original's
    /// agent sent after a `pause`, for at most that pause, [`IDLE_MAX`] and `left` of
    /// the replay's [`IDLE_BUDGET`], as the original's apps could (decision 203). A
    /// replay sends actions back to back, and an app still busy (a presentation laying
    /// out its slide) takes the same click differently, while its pixels may already
    /// look done. Pauses under [`IDLE_GAP`] (an agent's keys in a row) are not waited
    /// for. The time waited.
    fn give_idle_time(&mut self, pause: Duration, left: Duration) -> Duration {
        let root = self.runner.session_ref().map_or(0, Session::pid);
        if pause < IDLE_GAP || root == 0 {
            return Duration::ZERO;
        }
        let t = Instant::now();
        let idle = crate::idle::wait_idle(root, pause.min(IDLE_MAX).min(left));
        tracing::debug!(
            pause_ms = pause.as_millis() as u64,
            idle,
            waited_ms = t.elapsed().as_millis() as u64,
            "replay gave the apps idle time"
        );
        t.elapsed()
    }

    /// The session, for the sandbox verbs; the `tasks` profile has none.
    fn session(&mut self) -> Result<&mut Session> {
        self.check_alive()?;
        self.runner.session().ok_or_else(runner::no_sandbox)
    }
}

impl Desktop for LocalDesktop {
    fn display(&self) -> u32 {
        self.xvfb.display()
    }

    fn pids(&self) -> Vec<u32> {
        vec![self.xvfb_pid(), self.app_pid()]
    }

    /// A port tunnel's connections outlive one call ([`crate::agent::Request::Connect`]).
    fn agent_socket(&self) -> Option<crate::sandbox::AgentPeer> {
        let s = self.runner.session_ref()?;
        s.sandbox_unchanged()
            .ok()
            .map(crate::sandbox::Sandbox::agent)
    }

    /// True when a reset would restart the sandbox (something ran in it since it
    /// started); the task app and a fresh sandbox reset in place.
    fn restarts_to_reset(&self) -> bool {
        self.runner.session_ref().is_some_and(Session::used)
    }

    fn pointer(&self) -> Point {
        self.runner.pointer(&self.x)
    }

    fn check_alive(&mut self) -> Result<()> {
        if !self.xvfb.is_alive() {
            return Err(DesktopError::DisplayGone {
                display: self.xvfb.display(),
                reason: format!("Xvfb exited; it said: {}", self.xvfb.stderr()),
            });
        }
        self.runner.check_alive()
    }

    /// Starts a new episode: releases held buttons, parks the pointer, lays out `seed`.
    fn reset(&mut self, seed: u64) -> Result<Outcome> {
        self.check_alive()?;
        if self.restarts_to_reset() {
            // Our clipboard text goes with the session: the initial state has none.
            self.clipboard = None;
        }
        let out = self
            .runner
            .reset(ctx(&mut self.x, &self.xvfb, &self.config), seed);
        // A start asked for applies to this reset only (a family whose reset keeps its
        // apps running did not use it).
        if let Some(c) = self.runner.session().and_then(Session::clock) {
            c.start_at(None);
        }
        out
    }

    /// Performs one action, lets the app handle it, and waits for the screen to settle.
    fn step(&mut self, action: &Action) -> Result<Outcome> {
        if let Action::TypeText(t) = action
            && t.is_empty()
        {
            return Err(DesktopError::invalid("type_text.text", "text is empty"));
        }
        self.check_alive()?;
        self.runner
            .step(ctx(&mut self.x, &self.xvfb, &self.config), action)
    }

    /// With a fast `pace`, a key in a run of keys ([`Action::replays_unsettled`]) is sent
    /// without waiting for the screen (nor, in a scripted task, its check): the run's
    /// first one waits for the app to take it and its last one for it all. Keys reach
    /// the focused window in order either way; an app that reads input timing, or one
    /// slower than in the original, can still differ, so the caller compares the final
    /// frame and replays settled when it differs.
    ///
    /// In a sandboxed session, after each settled action whose frame the original
    /// showed (`seen[i].hash`, 0: unknown) the replay waits until the screen shows that
    /// frame (or one of the next few) again, within [`PACE_TIMES`] the original's own
    /// time up to that action ([`pace_bound`]): apps start
    /// and answer at their own speed, and an agent acted on what it saw, so keys sent
    /// to a terminal still opening are lost in a replay but were not in the original.
    /// After [`PACE_MISSES`] misses in a row a [`Pace::Fast`] replay stops (`stopped`:
    /// the caller replays settled); the others go on waiting at each step, so one costs at
    /// most [`PACE_TIMES`] the original run (a miss alone is often a passing state the
    /// original caught, such as a splash screen's progress).
    ///
    /// Where the desktop has a clock, it reads the original's time as each settled
    /// action goes (where the replay is not already later), runs while the action
    /// does, then stands still once it reads the next action's time until that goes
    /// ([`crate::clock::DesktopClock::hold_at`], decision 211); after the last, it
    /// runs on.
    fn replay(
        &mut self,
        actions: &[Action],
        seen: &[Seen],
        pace: Pace,
        out: Outcome,
    ) -> Result<Replayed> {
        let replayed = self.replay_paced(actions, seen, pace, out);
        // The clock runs on from where it stands, held or not: the replica is live.
        self.hold_clock(None);
        replayed
    }

    /// The accessibility tree: AT-SPI in a sandboxed session, the page's elements in
    /// a web task, the task app's widgets otherwise.
    fn tree(&mut self, limits: &Limits) -> Result<Tree> {
        self.check_alive()?;
        self.runner.tree(limits)
    }

    fn live(&mut self, id: &str) -> Result<Live> {
        self.check_alive()?;
        self.runner.live(id)
    }

    fn quiesce(&mut self, quiet_ms: u32, max_ms: u32) -> Result<crate::SettleReport> {
        self.check_alive()?;
        self.x.settle(crate::Settle {
            policy: crate::SettlePolicy::Damage,
            settle_ms: quiet_ms,
            settle_max_ms: max_ms,
        })
    }

    fn clock_ms(&self) -> Option<u64> {
        self.runner.session_ref().and_then(Session::clock_ms)
    }

    fn start_clock(&mut self, at_ms: Option<u64>) {
        if let Some(c) = self.runner.session().and_then(Session::clock) {
            c.start_at(at_ms);
        }
    }

    fn advance_clock(&mut self, at_ms: u64) -> Result<bool> {
        match self.runner.session().and_then(Session::clock) {
            Some(c) => c.advance_to(at_ms),
            None => Ok(false),
        }
    }

    fn hold_clock(&mut self, until_ms: Option<u64>) {
        if let Some(c) = self.runner.session().and_then(Session::clock) {
            c.hold_at(until_ms);
        }
    }

    fn capture(&mut self) -> Result<Frame> {
        self.x.capture()
    }

    fn exec(&mut self, spec: &ExecSpec, stdin: &[u8], sink: Option<Sink<'_>>) -> Result<Executed> {
        let sandbox = self.session()?.sandbox()?;
        match sink {
            None => sandbox.exec(spec, stdin, &mut |_, _| {}),
            Some(sink) => {
                let spec = ExecSpec {
                    stream: true,
                    ..spec.clone()
                };
                let end = sandbox.exec(&spec, stdin, sink)?.end;
                Ok(Executed {
                    end,
                    ..Default::default()
                })
            }
        }
    }

    fn read_file(&mut self, path: &str, offset: u64, max: u64) -> Result<FileChunk> {
        self.session()?
            .sandbox_unchanged()?
            .read_file(path, offset, max)
    }

    fn write_file(&mut self, path: &str, offset: u64, mode: u32, data: &[u8]) -> Result<u64> {
        self.session()?
            .sandbox()?
            .write_file(path, offset, mode, data)
    }

    fn make_dir(&mut self, path: &str, mode: u32) -> Result<()> {
        self.session()?.sandbox()?.make_dir(path, mode)
    }

    fn list_dir(&mut self, path: &str, depth: u32, max: usize) -> Result<Listing> {
        self.session()?
            .sandbox_unchanged()?
            .list_dir(path, depth, max)
    }

    fn clipboard(&mut self) -> Result<String> {
        self.check_alive()?;
        crate::clipboard::get(self.xvfb.display())
    }

    /// Makes `text` the CLIPBOARD (a thread of ours owns it and serves pastes).
    fn set_clipboard(&mut self, text: &str) -> Result<()> {
        self.check_alive()?;
        if let Some(s) = self.runner.session() {
            s.touch();
        }
        // The previous owner thread stops; the new one takes the selection.
        self.clipboard = Some(crate::clipboard::set(self.xvfb.display(), text)?);
        Ok(())
    }

    fn windows(&mut self) -> Result<Vec<WindowInfo>> {
        self.check_alive()?;
        self.x.windows()
    }
}

/// What the runner works with (borrowed field by field: the runner is borrowed too).
fn ctx<'a>(x: &'a mut XSession, xvfb: &Xvfb, config: &DesktopConfig) -> Ctx<'a> {
    Ctx {
        x,
        display: xvfb.display(),
        settle: config.settle,
        width: config.width,
        height: config.height,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(clock_ms: u64, ms: u32) -> Seen {
        Seen {
            hash: 1,
            ms,
            clock_ms,
        }
    }

    #[test]
    fn a_pause_is_the_time_between_a_steps_end_and_the_next_action() {
        // A step sent at 10_000 took 200 ms; the agent sent the next at 11_700.
        let s = [seen(10_000, 200), seen(11_700, 50), seen(11_760, 40)];
        assert_eq!(paused_before(&s, 1, None), Duration::from_millis(1_500));
        assert_eq!(paused_before(&s, 2, None), Duration::from_millis(10));
        // The first action: from where the replica's clock stands after its reset.
        assert_eq!(
            paused_before(&s, 0, Some(9_000)),
            Duration::from_millis(1_000)
        );
        assert_eq!(
            paused_before(&s, 0, Some(10_500)),
            Duration::ZERO,
            "late: no pause"
        );
        assert_eq!(paused_before(&s, 0, None), Duration::ZERO, "no clock");
        // An original without a clock before: no pause known.
        let s = [seen(0, 200), seen(11_700, 50)];
        assert_eq!(paused_before(&s, 1, None), Duration::ZERO);
    }

    #[test]
    fn only_a_fast_replay_gives_up_after_misses_in_a_row() {
        assert!(!gives_up(Pace::Fast, PACE_MISSES - 1));
        assert!(gives_up(Pace::Fast, PACE_MISSES));
        for pace in [Pace::FastToEnd, Pace::Settled] {
            assert!(!gives_up(pace, PACE_MISSES));
            assert!(!gives_up(pace, 100));
        }
        assert!(Pace::FastToEnd.is_fast() && Pace::Fast.is_fast() && !Pace::Settled.is_fast());
    }

    #[test]
    fn a_key_s_wait_ends_on_a_screen_still_for_twice_its_step_and_a_click_s_never() {
        let ms = Duration::from_millis;
        let key = Action::Key("a".into());
        assert_eq!(still_after(&key, 40), Some(STILL_FLOOR));
        assert_eq!(still_after(&key, 3_000), Some(ms(6_000)), "a slow command");
        let click = Action::Click {
            at: crate::action::Point { x: 1, y: 1 },
            button: crate::action::Button::Left,
            count: 1,
        };
        assert_eq!(still_after(&click, 40), None, "an app may be starting");
        assert_eq!(still_after(&Action::Key("Shift".into()), 40), None);

        let t0 = Instant::now();
        let mut s = Still::new(ms(1_000));
        assert!(!s.still(7, t0), "the first look starts the count");
        assert!(!s.still(7, t0 + ms(900)));
        // The screen changed: the count starts again from there.
        assert!(!s.still(8, t0 + ms(950)));
        assert!(!s.still(8, t0 + ms(1_900)));
        assert!(s.still(8, t0 + ms(1_950)));
    }
}
