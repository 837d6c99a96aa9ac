//! One env: its desktop, its episode, and the blocking operations on them (reset, step,
//! observe, save, restore).
//!
//! One call in flight per env, structurally: a call first takes the env's *flight*
//! ([`Env::begin`], a compare-and-swap, on the async side, before any work is queued);
//! a second call meanwhile answers ABORTED naming the call in flight. The state mutex
//! is then uncontended: only pool shutdown also takes it, on the step pool.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use deskgym_proto::v1 as pb;
use deskgym_worker::{Action, DesktopError, Frame, Point, Seen, SettleReport};

use crate::a11y::{self, Planned, QueryMiss, Refs, Sel, Slot, TreeOpts};
use crate::encode::EncodeError;
use crate::frame_cache::{Blob, FrameCache};
use crate::pool_state::PoolState;
use crate::record::{self, EpisodeLog};
use crate::spec::{Invalid, PoolSpec};
use crate::sync::lock;
use deskgym_worker::ExecSpec;
use deskgym_worker::WindowInfo;
use deskgym_worker::{Desktop, Executed};

/// Why an operation on an env failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EnvError {
    /// A malformed request field (an action the desktop cannot perform as given).
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// Another call holds the env's flight.
    #[error(
        "env {env} is busy with a {call} call (one call at a time per env); retry after it returns"
    )]
    Busy {
        /// The env.
        env: String,
        /// The call in flight.
        call: &'static str,
    },
    /// Step or Save before the first Reset.
    #[error("env {env:?} has no episode: call Reset first")]
    NoEpisode {
        /// The env.
        env: String,
    },
    /// Step after the episode ended.
    #[error("the episode of env {env:?} has ended ({why}); call Reset to start a new one")]
    Ended {
        /// The env.
        env: String,
        /// Why it ended (`success`, `max_steps`...).
        why: &'static str,
    },
    /// The desktop failed earlier and was let go.
    #[error("env {env:?} lost its desktop; call Reset to restart it")]
    NoDesktop {
        /// The env.
        env: String,
    },
    /// The desktop died under this call (Xvfb or app gone); it is let go.
    #[error("{0}; call Reset to restart this env")]
    Down(DesktopError),
    /// A file request failed (missing, a directory, a resumed upload past the end).
    #[error("{message}")]
    File {
        /// Why.
        kind: deskgym_worker::FileErrorKind,
        /// What, for the user.
        message: String,
    },
    /// The clipboard cannot give or take this text.
    #[error("{0}")]
    Clipboard(String),
    /// The sandbox could not start a program (missing, bad cwd).
    #[error("{0}")]
    Refused(String),
    /// A limit of this env was reached (its memory, its agent's concurrent requests).
    #[error("{0}")]
    Limit(String),
    /// An element target or element verb cannot be carried out: `reason` is
    /// `stale_element_ref`, `element_not_found`, `ambiguous_element`,
    /// `element_unsupported` or `accessibility_unavailable`.
    #[error("{reason}: {message}")]
    Element {
        /// Machine-readable reason (also the message's prefix).
        reason: &'static str,
        /// What, for the user.
        message: String,
    },
    /// The desktop failed without dying (an X request error).
    #[error("{0}")]
    Desktop(DesktopError),
    /// A checkpoint of another task or screen size.
    #[error("{0}")]
    Incompatible(String),
    /// The frame could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// An invariant broke: a bug.
    #[error("{0}")]
    Bug(&'static str),
}

impl EnvError {
    /// True when the desktop is gone and must be restarted (by the next Reset).
    pub(crate) fn is_down(&self) -> bool {
        matches!(self, Self::Down(_))
    }
}

impl From<DesktopError> for EnvError {
    fn from(e: DesktopError) -> Self {
        match e {
            DesktopError::InvalidAction { field, message } => {
                let field = if field.starts_with("action") {
                    field
                } else {
                    format!("action.{field}")
                };
                Self::Invalid(Invalid { field, message })
            }
            DesktopError::Exec(m) => Self::Refused(m),
            DesktopError::Limit(m) => Self::Limit(m),
            DesktopError::Clipboard(m) => Self::Clipboard(m),
            DesktopError::File {
                kind: deskgym_worker::FileErrorKind::Outside,
                message,
            } => Self::Invalid(Invalid::new("path", message)),
            DesktopError::File { kind, message } => Self::File { kind, message },
            DesktopError::Element { failure, message } => {
                use deskgym_worker::ElementFailure as Failure;
                let reason = match failure {
                    Failure::Gone => "stale_element_ref",
                    Failure::Unsupported => "element_unsupported",
                    Failure::Unavailable => "accessibility_unavailable",
                };
                Self::Element { reason, message }
            }
            e if e.is_fatal() => Self::Down(e),
            e => Self::Desktop(e),
        }
    }
}

/// The calls that take an env's flight (one at a time per env).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Call {
    Reset = 1,
    Step = 2,
    Observe = 3,
    Save = 4,
    Restore = 5,
    Exec = 6,
    ListWindows = 7,
    Files = 8,
    Clipboard = 9,
    Screenshot = 10,
}

impl Call {
    fn name(raw: u8) -> &'static str {
        match raw {
            1 => "Reset",
            2 => "Step",
            3 => "Observe",
            4 => "Save",
            5 => "Restore",
            6 => "Exec",
            7 => "ListWindows",
            8 => "file",
            9 => "clipboard",
            10 => "Screenshot",
            _ => "unknown",
        }
    }
}

/// Clears `Env::running` when a blocking operation ends, however it ends.
struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// An env's flight, held by the one call in flight on it; released on drop (also when
/// the job is skipped or panics).
#[derive(Debug)]
pub(crate) struct Flight(Arc<Env>);

impl Drop for Flight {
    fn drop(&mut self) {
        self.0.busy.store(0, Ordering::Release);
        // The lease runs again from the call's end: a client whose renewals were late
        // while its call ran (a loaded host) still has a whole lease to renew in.
        self.0.pool.touch();
        self.0.pool.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The seed of an env's `k`-th unseeded episode since its seed base `base` was set:
/// `base` itself for k = 0, then splitmix64 mixes, so episodes of one env and of its
/// neighbours (bases `s + i`) never share a seed in practice, and the same base
/// replays the same sequence. Kept below 2^63 for clients with signed 64-bit ints.
/// The Python client implements the same function (`deskgym.seeding`).
pub fn episode_seed(base: u64, k: u64) -> u64 {
    fn splitmix64(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    if k == 0 {
        base
    } else {
        splitmix64(splitmix64(base) ^ k) >> 1
    }
}

/// The running episode of an env.
#[derive(Clone, Debug)]
struct Episode {
    seed: u64,
    number: u64,
    step_index: u32,
    /// Reward reported by the app so far; a step's reward is the increase.
    reward_so_far: f64,
    instruction: String,
    /// Why the episode ended, once it has.
    ended: Option<&'static str>,
    /// Every action applied since reset: replaying them on a fresh desktop rebuilds
    /// this state (the bundled tasks are deterministic). Shared with checkpoints (a
    /// Save copies nothing; the next step copies once).
    actions: Arc<Vec<Action>>,
    /// The frame hash each action left (0 where its capture failed) and how long the
    /// step took: a replay waits for the same screen before the next action, as the
    /// agent did, bounded by a multiple of the original's time.
    seen: Arc<Vec<Seen>>,
    /// Hash of the last frame captured; `None` when an action was applied but the
    /// capture after it failed (Save captures afresh then).
    frame_hash: Option<u128>,
    /// What the recording needs (id, start time, return).
    log: EpisodeLog,
    /// The episodes table has this episode already.
    recorded: bool,
    /// An agent's own verdict (axstream `done`): success, and its reason.
    verdict: Option<(bool, String)>,
    /// What the desktop's clock read when the episode's reset began, in ms since the
    /// epoch (0: no clock of its own): a rebuild starts its apps on it (decision 199).
    clock_ms: u64,
}

#[derive(Debug, Default)]
pub(crate) struct EnvState {
    /// `None` before the first start and after the desktop died; Reset starts one.
    pub(crate) desktop: Option<Box<dyn Desktop>>,
    episode: Option<Episode>,
    episodes: u64,
    /// Seed base of the unseeded episodes (see [`episode_seed`]).
    seed_base: u64,
    /// Unseeded episodes started since `seed_base` was set.
    seed_k: u64,
    /// Element refs of the accessibility tree.
    refs: Refs,
}

/// An observation as the env produced it (the wire form is built in `convert`).
#[derive(Clone, Debug)]
pub(crate) struct Obs {
    /// Encoded pixels; empty when `not_modified`.
    pub(crate) frame: Bytes,
    pub(crate) encoding: pb::ImageEncoding,
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) hash: u128,
    pub(crate) pointer: Point,
    pub(crate) settle: SettleReport,
    /// The client holds this frame already: no pixels were sent.
    pub(crate) not_modified: bool,
    /// The accessibility tree, when asked for.
    pub(crate) tree: Option<pb::AccessibilityTree>,
    /// Where the frame's pixels come from on the screen.
    pub(crate) geometry: Geometry,
}

/// Where a frame's pixels come from (ACI's `display`): the screen's size and the part
/// of it the frame shows before scaling to `Obs::width` x `Obs::height`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Screen width and height.
    pub(crate) screen: (u32, u32),
    /// The source rectangle on the screen: x, y, width, height.
    pub(crate) source: [u32; 4],
}

impl Geometry {
    /// A frame of the whole screen at full size.
    pub(crate) fn whole(width: u32, height: u32) -> Self {
        Self {
            screen: (width, height),
            source: [0, 0, width, height],
        }
    }
}

/// What an observation shows when it is not the whole screen at full size (ACI's
/// screenshot levers, on a Screenshot or after a step).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Shape {
    /// `None`: the screen; `Some(None)`: the focused window; `Some(Some(id))`: a window.
    pub(crate) window: Option<Option<u32>>,
    /// Long edge at most this (0: full size).
    pub(crate) max_long_edge: u32,
    /// JPEG quality 1..=100 (0: the encoder's default, through the frame cache).
    pub(crate) jpeg_quality: u8,
}

impl Shape {
    /// The whole screen at full size in the default quality: the cached path.
    pub(crate) fn is_whole(&self) -> bool {
        self.window.is_none() && self.max_long_edge == 0 && self.jpeg_quality == 0
    }
}

/// A shaped frame kept for the next look at the same screen: what it was cut from
/// (whole frame hash, source rectangle, long edge, encoding, quality), its size and
/// hash, its encoded bytes.
#[derive(Debug)]
pub(crate) struct ShapedMemo {
    key: (u128, [u32; 4], u32, i32, u8),
    dims: (u32, u32, u128),
    bytes: Bytes,
}

/// What a reset or step says about the episode.
#[derive(Clone, Debug)]
pub(crate) struct Info {
    pub(crate) instruction: String,
    pub(crate) task: String,
    pub(crate) step_index: u32,
    pub(crate) seed: u64,
    pub(crate) episode: u64,
    pub(crate) latency_ms: f64,
    pub(crate) extra: HashMap<String, String>,
}

/// A new episode's first observation.
#[derive(Clone, Debug)]
pub(crate) struct Reset {
    pub(crate) obs: Obs,
    pub(crate) info: Info,
}

/// One step's outcome (and, with same-step autoreset, the next episode's start).
#[derive(Clone, Debug)]
pub(crate) struct Stepped {
    pub(crate) obs: Obs,
    pub(crate) reward: f64,
    pub(crate) terminated: bool,
    pub(crate) truncated: bool,
    pub(crate) info: Info,
    pub(crate) reset: Option<Reset>,
    /// Why the capture `ObsOptions::shape` asked for could not be made (`obs` is then
    /// the whole screen).
    pub(crate) observe_error: Option<String>,
}

/// A restore's outcome: the rebuilt state and whether it matches the checkpoint.
#[derive(Clone, Debug)]
pub(crate) struct Restored {
    pub(crate) obs: Obs,
    pub(crate) info: Info,
    pub(crate) exact: bool,
    pub(crate) expected_hash: u128,
    /// How the replay followed the original's path.
    pub(crate) path: ReplayPath,
}

/// How a rebuild's replay followed the screens of the run it rebuilds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReplayPath {
    /// Steps after which the replay looked for the original's frame.
    pub(crate) checked: u32,
    /// Of those, the ones whose frame did not come within the bound.
    pub(crate) missed: u32,
    /// 1-based: the first step after the last one whose frame the replica showed, when
    /// the rebuild ended on another frame than the checkpoint's; 0 when it did not.
    pub(crate) left_at_step: u32,
    /// The fast replay left the path, so the rebuild was done again, every action
    /// settled.
    pub(crate) settled_again: bool,
    /// Milliseconds the replay waited for the original's frames.
    pub(crate) waited_ms: u32,
    /// The step the replay began at: 0 after a reset, more on a parked replica.
    pub(crate) from_step: u32,
    /// Settled steps before which the replica's clock already read later than the
    /// original's had (decision 199).
    pub(crate) clock_late: u32,
    /// Milliseconds the replay let the apps go idle where the original paused
    /// (decision 203).
    pub(crate) idle_ms: u32,
}

/// A duration in whole milliseconds, saturating.
fn millis(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// Per-call observation options: encoding and the hashes the client already holds.
#[derive(Clone, Debug, Default)]
pub(crate) struct ObsOptions {
    /// Wire encoding (`Unspecified` = the pool's).
    pub encoding: i32,
    /// Parsed `if_none_match` hashes.
    pub known: Vec<u128>,
    /// Read the accessibility tree too.
    pub tree: Option<TreeOpts>,
    /// What a step's observation shows (observe-after-act); default: the whole screen.
    pub shape: Shape,
    /// Observe only: wait for this many quiet milliseconds first (0: capture at once).
    pub settle_ms: u32,
}

/// One env: a desktop slot of a pool.
#[derive(Debug)]
pub(crate) struct Env {
    /// Opaque id.
    pub id: String,
    /// The owning pool.
    pub pool: Arc<PoolState>,
    state: Mutex<EnvState>,
    /// The call in flight (`Call as u8`), 0 when idle.
    busy: AtomicU8,
    /// True while a blocking operation runs on the desktop (not merely queued): a
    /// deadline kills the desktop only then.
    running: AtomicBool,
    /// Pids of the desktop's Xvfb and task app (0: none), readable without the state
    /// lock so a deadline can kill a stalled desktop while a thread is stuck on it.
    xvfb_pid: AtomicU32,
    app_pid: AtomicU32,
    /// The sandbox agent's socket for tunnels, kept beside the state so opening a
    /// tunnel never waits for the call in flight (held only to copy a path).
    agent_socket: Mutex<Option<deskgym_worker::AgentPeer>>,
    /// The last shaped frame (scaled, or of a window) this env delivered.
    shaped_memo: Mutex<Option<ShapedMemo>>,
    /// Who drives the env (agent or console), and its summary and feed for the console.
    pub(crate) control: control::Control,
    /// Its event log on the way to the recording and to `WatchEvents` watchers.
    pub(crate) events: events::Events,
    /// True while a started desktop is installed (GetEnv's `alive`, read without the
    /// state lock so it never waits for the call in flight).
    live: AtomicBool,
    /// Powers unlocked on this env for a while (`Unlock`), beside its pool's grants.
    pub(crate) unlocks: crate::unlock::Grants,
    /// Capability requests waiting for a controller's answer (AnswerCapability).
    pub(crate) asks: crate::unlock::Asks,
    /// Test hook: the next capture after an action fails (as an X error would).
    #[cfg(test)]
    pub(crate) fail_next_capture: std::sync::atomic::AtomicBool,
}

/// Stops a desktop on its own thread: a reset that swapped it for a spare does not
/// wait for its Xvfb and sandbox to exit.
fn stop_in_background(d: Box<dyn Desktop>) {
    let spawned = std::thread::Builder::new()
        .name("deskgym-stop".into())
        .spawn(move || drop(d));
    // Without a thread the closure, and the desktop with it, dropped inline already.
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread to stop a desktop on; stopped it inline");
    }
}

fn encoding_or(pool: &PoolSpec, raw: i32) -> Result<pb::ImageEncoding, Invalid> {
    match pb::ImageEncoding::try_from(raw) {
        Ok(pb::ImageEncoding::Unspecified) => Ok(pool.encoding),
        Ok(e) => Ok(e),
        Err(_) => Err(Invalid::new("encoding", format!("unknown encoding {raw}"))),
    }
}

impl Env {
    /// A new env around an already started desktop.
    pub(crate) fn new(
        id: String,
        pool: Arc<PoolState>,
        desktop: Option<Box<dyn Desktop>>,
        seed_base: u64,
    ) -> Self {
        let env = Self {
            id,
            pool,
            state: Mutex::new(EnvState {
                seed_base,
                ..Default::default()
            }),
            busy: AtomicU8::new(0),
            running: AtomicBool::new(false),
            xvfb_pid: AtomicU32::new(0),
            app_pid: AtomicU32::new(0),
            agent_socket: Mutex::new(None),
            shaped_memo: Mutex::new(None),
            control: control::Control::default(),
            events: events::Events::default(),
            live: AtomicBool::new(false),
            unlocks: crate::unlock::Grants::default(),
            asks: crate::unlock::Asks::default(),
            #[cfg(test)]
            fail_next_capture: Default::default(),
        };
        if let Some(d) = desktop {
            env.set_desktop(&mut lock(&env.state), d);
        }
        env
    }

    /// Takes this env's flight for `call`, or answers ABORTED naming the call in flight.
    pub(crate) fn begin(self: &Arc<Self>, call: Call) -> Result<Flight, EnvError> {
        match self
            .busy
            .compare_exchange(0, call as u8, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                self.pool.in_flight.fetch_add(1, Ordering::AcqRel);
                Ok(Flight(self.clone()))
            }
            Err(other) => Err(EnvError::Busy {
                env: self.id.clone(),
                call: Call::name(other),
            }),
        }
    }

    fn set_desktop<'a>(
        &self,
        s: &'a mut EnvState,
        d: Box<dyn Desktop>,
    ) -> &'a mut Box<dyn Desktop> {
        let pids = d.pids();
        self.xvfb_pid
            .store(pids.first().copied().unwrap_or(0), Ordering::Release);
        self.app_pid
            .store(pids.get(1).copied().unwrap_or(0), Ordering::Release);
        self.note_socket(Some(&*d));
        self.live.store(true, Ordering::Release);
        s.desktop.insert(d)
    }

    /// Remembers where the desktop's agent listens (it moves when a reset restarts
    /// the sandbox).
    fn note_socket(&self, d: Option<&dyn Desktop>) {
        *lock(&self.agent_socket) = d.and_then(|d| d.agent_socket());
    }

    /// Blocking (a short lock): where a tunnel into this env connects.
    pub(crate) fn agent_socket(&self) -> Result<deskgym_worker::AgentPeer, EnvError> {
        lock(&self.agent_socket).clone().ok_or_else(|| {
            EnvError::Refused(format!(
                "env {:?} has no sandbox (profile {:?}): tunnels reach sandboxed desktops only",
                self.id, self.pool.spec.profile.name
            ))
        })
    }

    fn drop_desktop(&self, s: &mut EnvState) -> Option<Box<dyn Desktop>> {
        // Forget the pids first: once the desktop is reaped they may be reused.
        self.xvfb_pid.store(0, Ordering::Release);
        self.app_pid.store(0, Ordering::Release);
        self.note_socket(None);
        self.live.store(false, Ordering::Release);
        s.desktop.take()
    }

    /// Kills the desktop's processes (its call overran its deadline). The thread stuck
    /// on the desktop then gets an error, the env's episode ends as a crash and the
    /// next Reset starts a fresh desktop. Both are our children and are reaped only
    /// when their `Desktop` drops, so the pids cannot have been reused.
    pub(crate) fn kill_stalled(&self) {
        if !self.running.load(Ordering::Acquire) {
            // Still queued: the job is skipped (its caller is gone), the desktop is fine.
            tracing::warn!(env = %self.id, "deadline passed before the call started");
            return;
        }
        for pid in [&self.xvfb_pid, &self.app_pid] {
            let pid = pid.load(Ordering::Acquire);
            if pid != 0 {
                // SAFETY: kill(2) with a pid of our own unreaped child.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
        tracing::warn!(env = %self.id, "call overran op_timeout: desktop killed");
    }

    /// Marks a blocking operation as running until the guard drops.
    fn enter(&self) -> Running<'_> {
        self.running.store(true, Ordering::Release);
        Running(&self.running)
    }

    /// True while a started desktop is installed and the pool is open (see
    /// `EnvInfo.alive`).
    pub(crate) fn alive(&self) -> bool {
        self.live.load(Ordering::Acquire) && !self.pool.closed.load(Ordering::Relaxed)
    }

    /// Takes the desktop out (closing the env).
    pub(crate) fn take_desktop(&self) -> Option<Box<dyn Desktop>> {
        let mut s = lock(&self.state);
        s.episode = None;
        self.drop_desktop(&mut s)
    }

    /// Gives back the desktop, restarting it (from a warm spare when the pool has one)
    /// when it is missing or dead. `for_reset`: a desktop that could only be reset by a
    /// restart (a used sandbox) is swapped for a warm spare when the pool has one.
    fn live_desktop<'a>(
        &self,
        s: &'a mut EnvState,
        for_reset: bool,
    ) -> Result<&'a mut Box<dyn Desktop>, EnvError> {
        if let Some(d) = s.desktop.as_mut() {
            let alive = d.check_alive().is_ok();
            let swap = alive && for_reset && d.restarts_to_reset();
            if alive && !swap {
                return s.desktop.as_mut().ok_or(EnvError::Bug("desktop vanished"));
            }
            if swap {
                let Some(spare) = self.pool.take_spare() else {
                    // No spare: the desktop restarts its session in place.
                    return s.desktop.as_mut().ok_or(EnvError::Bug("desktop vanished"));
                };
                if let Some(old) = self.drop_desktop(s) {
                    stop_in_background(old);
                }
                return Ok(self.started(s, spare, true));
            }
            tracing::warn!(env = %self.id, "desktop died; restarting it");
            drop(self.drop_desktop(s));
        }
        let (d, warm_spare) = match self.pool.take_spare() {
            Some(d) => (d, true),
            None => (self.pool.spec.start_desktop(false)?, false),
        };
        Ok(self.started(s, d, warm_spare))
    }

    /// Installs a newly started (or spare) desktop and says so in the log and events.
    fn started<'a>(
        &self,
        s: &'a mut EnvState,
        d: Box<dyn Desktop>,
        warm_spare: bool,
    ) -> &'a mut Box<dyn Desktop> {
        tracing::info!(env = %self.id, display = d.display(), warm_spare, "desktop (re)started");
        self.event(
            "env_started",
            || serde_json::json!({"display": d.display(), "warm_spare": warm_spare}),
        );
        self.set_desktop(s, d)
    }

    /// Forgets a desktop that failed fatally, so the next Reset restarts it; the running
    /// episode is recorded as ended by the crash.
    fn on_error(&self, s: &mut EnvState, e: &EnvError) {
        self.event(
            "error",
            || serde_json::json!({"code": e.code_name(), "message": e.to_string()}),
        );
        if e.is_down() {
            tracing::warn!(env = %self.id, error = %e, "desktop failed");
            self.event(
                "env_crash",
                || serde_json::json!({"message": e.to_string()}),
            );
            self.end_episode(s, "env_crash");
            drop(self.drop_desktop(s));
        }
    }
}

mod accounting;
mod boundary;
mod checkpoint;
mod control;
mod events;
pub(crate) use control::HOLD_LEASE;
mod episode;
mod observe;
pub(crate) use observe::WatchKey;

pub(crate) use checkpoint::{Checkpoint, Start};

#[cfg(test)]
mod tests;
