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
use deskgym_worker::{Action, DesktopError, Frame, Point, SettleReport};

use crate::a11y::{self, Planned, QueryMiss, Refs, Sel, Slot, TreeOpts};
use crate::backend::{Desktop, Executed};
use crate::encode::EncodeError;
use crate::frame_cache::{Blob, FrameCache};
use crate::handle::Pool;
use crate::record::{self, EpisodeLog};
use crate::spec::{Invalid, PoolSpec};
use crate::sync::lock;
use deskgym_worker::agent::ExecSpec;
use deskgym_worker::windows::WindowInfo;

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
        kind: deskgym_worker::error::FileErrorKind,
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
                kind: deskgym_worker::error::FileErrorKind::Outside,
                message,
            } => Self::Invalid(Invalid::new("path", message)),
            DesktopError::File { kind, message } => Self::File { kind, message },
            DesktopError::Element { failure, message } => {
                use deskgym_worker::error::ElementFailure as Failure;
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
    /// Hash of the last frame captured; `None` when an action was applied but the
    /// capture after it failed (Save captures afresh then).
    frame_hash: Option<u128>,
    /// What the recording needs (id, start time, return).
    log: EpisodeLog,
    /// The episodes table has this episode already.
    recorded: bool,
    /// An agent's own verdict (axstream `done`): success, and its reason.
    verdict: Option<(bool, String)>,
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

/// A saved state: what is needed to rebuild it by replay.
#[derive(Debug)]
pub(crate) struct Checkpoint {
    /// Opaque id.
    pub id: String,
    /// The owning pool (its spec is what a rebuild needs).
    pub pool: Arc<Pool>,
    /// The env it was saved from.
    pub env_id: String,
    episode: Episode,
    /// Approximate bytes held (the action log), counted against
    /// `Limits::max_checkpoint_bytes`.
    bytes: u64,
}

impl Checkpoint {
    /// Approximate bytes this checkpoint holds.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of actions a rebuild replays.
    pub(crate) fn actions_len(&self) -> usize {
        self.episode.actions.len()
    }

    /// The seed of the saved episode.
    pub(crate) fn seed(&self) -> u64 {
        self.episode.seed
    }

    /// Steps taken in the saved episode.
    pub(crate) fn step_index(&self) -> u32 {
        self.episode.step_index
    }

    /// The frame hash at save time (Save refreshes a stale one before it builds this).
    pub(crate) fn frame_hash(&self) -> u128 {
        self.episode.frame_hash.unwrap_or_default()
    }
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
}

/// A restore's outcome: the rebuilt state and whether it matches the checkpoint.
#[derive(Clone, Debug)]
pub(crate) struct Restored {
    pub(crate) obs: Obs,
    pub(crate) info: Info,
    pub(crate) exact: bool,
    pub(crate) expected_hash: u128,
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
}

/// One env: a desktop slot of a pool.
#[derive(Debug)]
pub(crate) struct Env {
    /// Opaque id.
    pub id: String,
    /// The owning pool.
    pub pool: Arc<Pool>,
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
    agent_socket: Mutex<Option<deskgym_worker::sandbox::AgentPeer>>,
    /// Test hook: the next capture after an action fails (as an X error would).
    #[cfg(test)]
    pub(crate) fail_next_capture: std::sync::atomic::AtomicBool,
}

/// Approximate heap bytes of an action log.
fn log_bytes(actions: &[Action]) -> u64 {
    let text: usize = actions
        .iter()
        .map(|a| match a {
            Action::TypeText(t) | Action::Key(t) => t.len(),
            _ => 0,
        })
        .sum();
    (std::mem::size_of_val(actions) + text) as u64
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
    /// Builds the wire observation through the fleet cache: pixels only when the client
    /// does not hold this frame already.
    #[allow(clippy::too_many_arguments)]
    fn observation(
        &self,
        cache: &FrameCache,
        frame: Frame,
        pointer: Point,
        settle: SettleReport,
        enc: pb::ImageEncoding,
        known: &[u128],
        episode: Option<&str>,
    ) -> Result<Obs, EnvError> {
        let (width, height, hash) = (frame.width, frame.height, frame.hash);
        let raw = Blob::new(width, height, Bytes::from(frame.rgb), &self.pool.owner);
        // The recorder shares the buffer and stores each distinct frame once, on its thread.
        self.pool.record(|| {
            record::frame(
                &deskgym_worker::hash_hex(hash),
                width,
                height,
                raw.bytes.clone(),
                &self.id,
                episode,
            )
        });
        let not_modified = known.contains(&hash);
        let bytes = if not_modified {
            // Keep the raw frame cached for GetFrames; count what was not sent.
            let saved = match enc {
                pb::ImageEncoding::RawRgb | pb::ImageEncoding::Unspecified => {
                    raw.bytes.len() as u64
                }
                e => cache
                    .get(hash, e, &self.pool.owner)?
                    .map_or(0, |b| b.bytes.len() as u64),
            };
            cache.put(hash, raw, pb::ImageEncoding::RawRgb)?;
            cache.record_not_modified(saved, &self.pool.owner);
            Bytes::new()
        } else {
            cache.put(hash, raw, enc)?.bytes
        };
        Ok(Obs {
            frame: bytes,
            encoding: enc,
            width,
            height,
            hash,
            pointer,
            settle,
            not_modified,
            tree: None,
        })
    }

    /// Reads the tree and renders it. A tree that cannot be read (no accessibility bus,
    /// an application that does not answer) comes back partial with the reason: the
    /// step or observation it rides on still succeeds.
    fn read_tree(
        d: &mut Box<dyn Desktop>,
        refs: &mut Refs,
        opts: &TreeOpts,
    ) -> Result<pb::AccessibilityTree, EnvError> {
        let started = Instant::now();
        match d.tree(&opts.limits()) {
            Ok(tree) => {
                let reading = refs.assign(&tree);
                let ms = started.elapsed().as_secs_f64() * 1e3;
                Ok(refs.render(&reading, opts, ms))
            }
            Err(e) => match EnvError::from(e) {
                EnvError::Element { message, .. } => Ok(pb::AccessibilityTree {
                    partial: true,
                    partial_reasons: vec![message],
                    capture_ms: started.elapsed().as_secs_f64() * 1e3,
                    ..Default::default()
                }),
                other => Err(other),
            },
        }
    }

    /// Resolves an action's element targets against the live desktop: a ref to the
    /// element it names (gone: `stale_element_ref`), a query to the one element it
    /// matches; a pointer target to the centre of the element's visible bounds.
    fn resolve(
        d: &mut Box<dyn Desktop>,
        refs: &mut Refs,
        planned: &Planned,
        screen: (u32, u32),
    ) -> Result<Action, EnvError> {
        let mut action = planned.action.clone();
        let stale = |sel: &Sel, why: &str| EnvError::Element {
            reason: "stale_element_ref",
            message: format!("{sel} {why}; observe the tree again and use a current ref"),
        };
        for (slot, sel, _field) in &planned.elements {
            let id = match sel {
                Sel::Ref(r) => refs
                    .identity(*r)
                    .ok_or_else(|| stale(sel, "is not in the tree (gone, or never seen)"))?
                    .to_string(),
                Sel::Query { role, name } => {
                    let tree = d.tree(&deskgym_worker::a11y::Limits::default())?;
                    match a11y::resolve_query(&tree, role, name) {
                        Ok(n) => {
                            refs.ref_of(n);
                            n.id.clone()
                        }
                        Err(QueryMiss::None) => {
                            return Err(EnvError::Element {
                                reason: "element_not_found",
                                message: format!("no element of the live tree matches {sel}"),
                            });
                        }
                        Err(QueryMiss::Many(c)) => {
                            return Err(EnvError::Element {
                                reason: "ambiguous_element",
                                message: format!(
                                    "{} elements match {sel}: {}; name one more precisely or use its ref",
                                    c.len(),
                                    c.join("; ")
                                ),
                            });
                        }
                    }
                }
            };
            let point = if *slot == Slot::Element {
                Point::default()
            } else {
                let live = d.live(&id).map_err(|e| match EnvError::from(e) {
                    EnvError::Element {
                        reason: "stale_element_ref",
                        ..
                    } => stale(sel, "no longer exists"),
                    other => other,
                })?;
                let p = live.target().ok_or_else(|| stale(sel, "is not showing"))?;
                let (w, h) = screen;
                if p.x < 0 || p.y < 0 || p.x as u32 >= w || p.y as u32 >= h {
                    return Err(stale(sel, "is off the screen"));
                }
                p
            };
            a11y::place(&mut action, *slot, point, &id);
        }
        Ok(action)
    }

    /// A new env around an already started desktop.
    pub(crate) fn new(
        id: String,
        pool: Arc<Pool>,
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
            Ok(_) => Ok(Flight(self.clone())),
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
        s.desktop.insert(d)
    }

    /// Remembers where the desktop's agent listens (it moves when a reset restarts
    /// the sandbox).
    fn note_socket(&self, d: Option<&dyn Desktop>) {
        *lock(&self.agent_socket) = d.and_then(|d| d.agent_socket());
    }

    /// Blocking (a short lock): where a tunnel into this env connects.
    pub(crate) fn agent_socket(&self) -> Result<deskgym_worker::sandbox::AgentPeer, EnvError> {
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

    /// Takes the desktop out (closing the env).
    pub(crate) fn take_desktop(&self) -> Option<Box<dyn Desktop>> {
        let mut s = lock(&self.state);
        s.episode = None;
        self.drop_desktop(&mut s)
    }

    fn info(&self, ep: &Episode, started: Instant, display: Option<u32>) -> Info {
        let mut extra = HashMap::from([("ended".to_string(), ep.ended.unwrap_or("").to_string())]);
        if let Some(d) = display {
            // Lets an operator (and the crash tests) find the env's X server.
            extra.insert("display".to_string(), format!(":{d}"));
        }
        if let Some((success, reason)) = &ep.verdict {
            let status = if *success { "success" } else { "failure" };
            extra.insert("agent_status".to_string(), status.to_string());
            extra.insert("agent_reason".to_string(), reason.clone());
        }
        Info {
            instruction: ep.instruction.clone(),
            task: self.pool.spec.task.id.clone(),
            step_index: ep.step_index,
            seed: ep.seed,
            episode: ep.number,
            latency_ms: started.elapsed().as_secs_f64() * 1e3,
            extra,
        }
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
        self.pool.record(|| {
            record::event(
                "env_started",
                &self.id,
                serde_json::json!({"display": d.display(), "warm_spare": warm_spare}),
            )
        });
        self.set_desktop(s, d)
    }

    /// Blocking: starts a new episode (restarting a dead desktop first).
    pub(crate) fn reset(
        &self,
        cache: &FrameCache,
        seed: Option<u64>,
        opts: &ObsOptions,
    ) -> Result<Reset, EnvError> {
        let _running = self.enter();
        let started = Instant::now();
        let enc = encoding_or(&self.pool.spec, opts.encoding)?;
        let mut guard = lock(&self.state);
        self.reset_locked(&mut guard, cache, seed, enc, opts, started)
    }

    fn reset_locked(
        &self,
        s: &mut EnvState,
        cache: &FrameCache,
        seed: Option<u64>,
        enc: pb::ImageEncoding,
        opts: &ObsOptions,
        started: Instant,
    ) -> Result<Reset, EnvError> {
        let (seed, base, k) = match seed {
            Some(seed) => (seed, seed, 1),
            None => (
                episode_seed(s.seed_base, s.seed_k),
                s.seed_base,
                s.seed_k.saturating_add(1),
            ),
        };
        let result = (|| {
            let d = self.live_desktop(s, true)?;
            let out = d.reset(seed)?;
            self.note_socket(Some(&**d));
            let frame = d.capture()?;
            Ok::<_, EnvError>((out, frame, d.pointer()))
        })();
        let (out, frame, pointer) = result.inspect_err(|e| self.on_error(s, e))?;
        self.end_episode(s, "reset");
        s.episodes += 1;
        (s.seed_base, s.seed_k) = (base, k);
        let ep = Episode {
            seed,
            number: s.episodes,
            step_index: 0,
            reward_so_far: out.app.reward,
            instruction: out.app.instruction,
            ended: None,
            actions: Arc::default(),
            frame_hash: Some(frame.hash),
            log: self.new_log(s.episodes),
            recorded: false,
            verdict: None,
        };
        self.pool.record(|| {
            record::event(
                "reset",
                &self.id,
                serde_json::json!({
                    "episode_id": ep.log.episode_id, "seed": seed, "instruction": ep.instruction,
                    "frame_hash": deskgym_worker::hash_hex(frame.hash),
                }),
            )
        });
        let mut observation = self.observation(
            cache,
            frame,
            pointer,
            out.settle,
            enc,
            &opts.known,
            Some(&ep.log.episode_id),
        )?;
        // A new episode's elements are new elements.
        s.refs.clear();
        if let (Some(t), Some(d)) = (&opts.tree, s.desktop.as_mut()) {
            match Self::read_tree(d, &mut s.refs, t) {
                Ok(tree) => observation.tree = Some(tree),
                Err(e) => {
                    self.on_error(s, &e);
                    return Err(e);
                }
            }
        }
        let mut info = self.info(&ep, started, s.desktop.as_ref().map(|d| d.display()));
        info.extra.extend(out.app.extra);
        s.episode = Some(ep);
        crate::metrics::METRICS.reset();
        Ok(Reset {
            obs: observation,
            info,
        })
    }

    /// Forgets a desktop that failed fatally, so the next Reset restarts it; the running
    /// episode is recorded as ended by the crash.
    fn on_error(&self, s: &mut EnvState, e: &EnvError) {
        self.pool.record(|| {
            record::event(
                "error",
                &self.id,
                serde_json::json!({"code": e.code_name(), "message": e.to_string()}),
            )
        });
        if e.is_down() {
            tracing::warn!(env = %self.id, error = %e, "desktop failed");
            self.pool.record(|| {
                record::event(
                    "env_crash",
                    &self.id,
                    serde_json::json!({"message": e.to_string()}),
                )
            });
            self.end_episode(s, "env_crash");
            drop(self.drop_desktop(s));
        }
    }

    fn new_log(&self, number: u64) -> EpisodeLog {
        EpisodeLog {
            episode_id: format!("{}/{number}", self.id),
            start_ms: deskgym_datasets::writer::now_ms(),
            ret: 0.0,
        }
    }

    /// Writes the episodes-table row of the current episode (once), with `why` unless
    /// the episode already ended for its own reason.
    fn end_episode(&self, s: &mut EnvState, why: &str) {
        let Some(ep) = s.episode.as_mut() else { return };
        if ep.recorded {
            return;
        }
        ep.recorded = true;
        let termination = ep.ended.unwrap_or(why);
        let task = &self.pool.spec.task.id;
        self.pool.record(|| {
            record::episode_row(
                &ep.log,
                &self.id,
                task,
                &ep.instruction,
                ep.seed,
                ep.step_index,
                termination,
            )
        });
    }

    /// Records the running episode as ended (pool closing).
    pub(crate) fn finish_recording(&self, why: &str) {
        let mut s = lock(&self.state);
        self.end_episode(&mut s, why);
    }

    /// Blocking: one action, settle, capture. With `autoreset`, an episode that ends
    /// here is followed at once by the next one (Gymnasium's same-step autoreset); a
    /// failed autoreset is reported in `info.extra["autoreset_error"]`.
    pub(crate) fn step(
        &self,
        cache: &FrameCache,
        planned: &Planned,
        opts: &ObsOptions,
        autoreset: bool,
    ) -> Result<Stepped, EnvError> {
        let _running = self.enter();
        let started = Instant::now();
        let enc = encoding_or(&self.pool.spec, opts.encoding)?;
        let mut guard = lock(&self.state);
        let s = &mut *guard;
        let Some(ep) = s.episode.as_mut() else {
            return Err(EnvError::NoEpisode {
                env: self.id.clone(),
            });
        };
        if let Some(why) = ep.ended {
            return Err(EnvError::Ended {
                env: self.id.clone(),
                why,
            });
        }
        let Some(d) = s.desktop.as_mut() else {
            return Err(EnvError::NoDesktop {
                env: self.id.clone(),
            });
        };
        let display = d.display();
        // Element targets become pixels (or element identities) now: the log keeps what
        // ran, so a replay does not depend on this env's refs.
        let resolved;
        let action = if planned.elements.is_empty() {
            &planned.action
        } else {
            let screen = (self.pool.spec.screen.width, self.pool.spec.screen.height);
            resolved = match Self::resolve(d, &mut s.refs, planned, screen) {
                Ok(a) => a,
                Err(e) => {
                    // A desktop that died while its tree was read is let go as usual.
                    self.on_error(s, &e);
                    return Err(e);
                }
            };
            &resolved
        };
        let t_start = deskgym_datasets::writer::now_ms();
        // Hex strings only when recording (the closures below run only then).
        let before = ep.frame_hash.unwrap_or_default();
        // From the moment input may have reached the desktop, the action belongs in the
        // replay log whatever fails after it: a Save/Fork must rebuild what is on screen.
        let mut sent = false;
        let result = d.check_alive().and_then(|()| {
            sent = true;
            let out = d.step(action)?;
            Ok((out, self.capture(d)?, d.pointer()))
        });
        let (out, frame, pointer) = match result {
            Ok(r) => r,
            Err(e) => {
                let applied = sent
                    && !matches!(
                        e,
                        DesktopError::InvalidAction { .. } | DesktopError::Element { .. }
                    );
                let err = EnvError::from(e);
                if applied {
                    ep.step_index += 1;
                    Arc::make_mut(&mut ep.actions).push(action.clone());
                    ep.frame_hash = None;
                }
                // The index this step has (applied) or would have had.
                let step_index = ep.step_index + u32::from(!applied);
                let episode_id = ep.log.episode_id.clone();
                self.pool.record(|| {
                    deskgym_datasets::Record::Step(deskgym_datasets::StepRow {
                        episode_id,
                        env_id: self.id.clone(),
                        step_index,
                        t_start_ms: t_start,
                        t_end_ms: deskgym_datasets::writer::now_ms(),
                        frame_hash_before: deskgym_worker::hash_hex(before),
                        error_code: Some(err.code_name().to_string()),
                        latency_ms: started.elapsed().as_secs_f64() * 1e3,
                        ..record::step_row(action)
                    })
                });
                self.on_error(s, &err);
                return Err(err);
            }
        };
        ep.step_index += 1;
        Arc::make_mut(&mut ep.actions).push(action.clone());
        ep.frame_hash = Some(frame.hash);
        let reward = out.app.reward - ep.reward_so_far;
        ep.reward_so_far = out.app.reward;
        let terminated = out.app.done;
        let truncated = !terminated && ep.step_index >= self.pool.spec.max_steps;
        ep.ended = if terminated {
            Some(if out.app.reward > 0.0 {
                "success"
            } else {
                "failure"
            })
        } else if truncated {
            Some("max_steps")
        } else {
            None
        };
        ep.log.ret += reward;
        let after = frame.hash;
        let episode_id = ep.log.episode_id.clone();
        let mut observation = self.observation(
            cache,
            frame,
            pointer,
            out.settle,
            enc,
            &opts.known,
            Some(&episode_id),
        )?;
        if let Some(t) = &opts.tree {
            match Self::read_tree(d, &mut s.refs, t) {
                Ok(tree) => observation.tree = Some(tree),
                Err(e) => {
                    self.on_error(s, &e);
                    return Err(e);
                }
            }
        }
        let mut info = self.info(ep, started, Some(display));
        info.extra.extend(out.app.extra);
        self.pool.record(|| {
            deskgym_datasets::Record::Step(deskgym_datasets::StepRow {
                episode_id: ep.log.episode_id.clone(),
                env_id: self.id.clone(),
                step_index: ep.step_index,
                t_start_ms: t_start,
                t_end_ms: deskgym_datasets::writer::now_ms(),
                reward,
                terminated,
                truncated,
                frame_hash_before: deskgym_worker::hash_hex(before),
                frame_hash_after: Some(deskgym_worker::hash_hex(after)),
                settle_ms: out.settle.waited_ms,
                latency_ms: info.latency_ms,
                ..record::step_row(action)
            })
        });
        if terminated || truncated {
            self.end_episode(s, "");
        }
        let reset = if autoreset && (terminated || truncated) {
            match self.reset_locked(s, cache, None, enc, opts, Instant::now()) {
                Ok(r) => Some(r),
                Err(e) => {
                    info.extra.insert("autoreset_error".into(), e.to_string());
                    None
                }
            }
        } else {
            None
        };
        crate::metrics::METRICS.step(started.elapsed());
        Ok(Stepped {
            obs: observation,
            reward,
            terminated,
            truncated,
            info,
            reset,
        })
    }

    /// Blocking: a capture without acting.
    pub(crate) fn observe(&self, cache: &FrameCache, opts: &ObsOptions) -> Result<Obs, EnvError> {
        let _running = self.enter();
        let enc = encoding_or(&self.pool.spec, opts.encoding)?;
        let mut s = lock(&self.state);
        let Some(d) = s.desktop.as_mut() else {
            return Err(EnvError::NoDesktop {
                env: self.id.clone(),
            });
        };
        let captured = d
            .check_alive()
            .and_then(|_| Ok((d.capture()?, d.pointer())));
        match captured {
            Ok((frame, pointer)) => {
                let settle = SettleReport {
                    quiesced: true,
                    ..Default::default()
                };
                let mut obs =
                    self.observation(cache, frame, pointer, settle, enc, &opts.known, None)?;
                if let Some(t) = &opts.tree {
                    let s = &mut *s;
                    let d = s
                        .desktop
                        .as_mut()
                        .ok_or(EnvError::Bug("desktop vanished"))?;
                    match Self::read_tree(d, &mut s.refs, t) {
                        Ok(tree) => obs.tree = Some(tree),
                        Err(e) => {
                            self.on_error(s, &e);
                            return Err(e);
                        }
                    }
                }
                Ok(obs)
            }
            Err(e) => {
                let err = EnvError::from(e);
                self.on_error(&mut s, &err);
                Err(err)
            }
        }
    }

    /// Blocking: resolves an action's element targets against the live desktop without
    /// acting (an axstream `assert`): `Ok` when every target names one showing element.
    pub(crate) fn locate(&self, planned: &Planned) -> Result<(), EnvError> {
        let _running = self.enter();
        let mut guard = lock(&self.state);
        let s = &mut *guard;
        let Some(d) = s.desktop.as_mut() else {
            return Err(EnvError::NoDesktop {
                env: self.id.clone(),
            });
        };
        let screen = (self.pool.spec.screen.width, self.pool.spec.screen.height);
        let r = d
            .check_alive()
            .map_err(EnvError::from)
            .and_then(|()| Self::resolve(d, &mut s.refs, planned, screen));
        r.map(drop).inspect_err(|e| self.on_error(s, e))
    }

    /// Blocking: records an agent's verdict on the current episode (axstream `done`): in
    /// the event log, and in `info.extra` (`agent_status`, `agent_reason`) of what the
    /// episode returns from now on. Returns the episode's info.
    pub(crate) fn agent_done(&self, success: bool, reason: &str) -> Result<Info, EnvError> {
        let started = Instant::now();
        let mut s = lock(&self.state);
        let ep = s.episode.as_mut().ok_or_else(|| EnvError::NoEpisode {
            env: self.id.clone(),
        })?;
        ep.verdict = Some((success, reason.to_string()));
        let (episode_id, step_index) = (ep.log.episode_id.clone(), ep.step_index);
        self.pool.record(|| {
            record::event(
                "agent_done",
                &self.id,
                serde_json::json!({
                    "episode_id": episode_id, "step_index": step_index,
                    "status": if success { "success" } else { "failure" }, "reason": reason,
                }),
            )
        });
        let ep = s
            .episode
            .as_ref()
            .ok_or(EnvError::Bug("episode vanished"))?;
        Ok(self.info(ep, started, None))
    }

    /// Blocking: snapshots what is needed to rebuild the current state.
    pub(crate) fn save(&self, id: String) -> Result<Checkpoint, EnvError> {
        let _running = self.enter();
        let mut guard = lock(&self.state);
        let s = &mut *guard;
        if s.episode.is_none() {
            return Err(EnvError::NoEpisode {
                env: self.id.clone(),
            });
        }
        // An action was applied but the capture after it failed: capture now, so the
        // checkpoint's hash is of the screen its replay rebuilds.
        if s.episode.as_ref().is_some_and(|e| e.frame_hash.is_none()) {
            let Some(d) = s.desktop.as_mut() else {
                return Err(EnvError::NoDesktop {
                    env: self.id.clone(),
                });
            };
            let hash = d.check_alive().and_then(|()| self.capture(d));
            match hash {
                Ok(f) => {
                    if let Some(ep) = s.episode.as_mut() {
                        ep.frame_hash = Some(f.hash);
                    }
                }
                Err(e) => {
                    let err = EnvError::from(e);
                    self.on_error(s, &err);
                    return Err(err);
                }
            }
        }
        let episode = s.episode.clone().ok_or_else(|| EnvError::NoEpisode {
            env: self.id.clone(),
        })?;
        Ok(Checkpoint {
            id,
            pool: self.pool.clone(),
            env_id: self.id.clone(),
            bytes: log_bytes(&episode.actions),
            episode,
        })
    }

    /// Blocking: runs `f` on the env's live desktop (NO_DESKTOP without one); a failure
    /// is handled like any other (a dead desktop is let go).
    fn on_desktop<T>(
        &self,
        f: impl FnOnce(&mut Box<dyn Desktop>) -> Result<T, EnvError>,
    ) -> Result<T, EnvError> {
        let _running = self.enter();
        let mut s = lock(&self.state);
        let Some(d) = s.desktop.as_mut() else {
            return Err(EnvError::NoDesktop {
                env: self.id.clone(),
            });
        };
        f(d).inspect_err(|err| self.on_error(&mut s, err))
    }

    /// Blocking: runs a command in the env's sandbox and waits for it; the command and
    /// how it ended go to the event log.
    pub(crate) fn exec(&self, spec: &ExecSpec, stdin: &[u8]) -> Result<Executed, EnvError> {
        let r = self.on_desktop(|d| Ok(d.check_alive().and_then(|()| d.exec(spec, stdin))?))?;
        self.pool.record(|| {
            let argv: Vec<String> = spec
                .argv
                .iter()
                .take(16)
                .map(|a| crate::spec::quote(a))
                .collect();
            record::event(
                "exec",
                &self.id,
                serde_json::json!({
                    "argv": argv, "exit_code": r.0.exit_code, "signal": r.0.signal,
                    "timed_out": r.0.timed_out, "duration_ms": r.0.duration_ms,
                    "stdout_bytes": r.0.stdout_len, "stderr_bytes": r.0.stderr_len,
                }),
            )
        });
        Ok(r)
    }

    /// Blocking: a file request (`op` on `path`) on the env's sandbox; it goes to the
    /// event log with its outcome.
    pub(crate) fn files<T>(
        &self,
        op: &'static str,
        path: &str,
        f: impl FnOnce(&mut Box<dyn Desktop>) -> deskgym_worker::Result<T>,
    ) -> Result<T, EnvError> {
        self.on_desktop(|d| {
            let r = f(d).map_err(EnvError::from);
            self.pool.record(|| {
                record::event(
                    op,
                    &self.id,
                    serde_json::json!({
                        "path": crate::spec::quote(path),
                        "code": r.as_ref().err().map_or("OK", |e| e.code_name()),
                    }),
                )
            });
            r
        })
    }

    /// Blocking: a screenshot of the screen, the active window (`Some(None)`) or one
    /// window (`Some(Some(id))`), scaled down to `max_long_edge` and encoded with
    /// `jpeg_quality` (0: the default). Bypasses the frame cache (the quality is not part
    /// of its key).
    pub(crate) fn screenshot(
        &self,
        window: Option<Option<u32>>,
        max_long_edge: u32,
        encoding: i32,
        jpeg_quality: u8,
    ) -> Result<Obs, EnvError> {
        let enc = encoding_or(&self.pool.spec, encoding)?;
        let (frame, pointer) = self.on_desktop(|d| {
            let shot = (|| {
                d.check_alive()?;
                let full = d.capture()?;
                let frame = match window {
                    None => full,
                    Some(which) => {
                        let ws = d.windows()?;
                        let w = match which {
                            None => ws.iter().find(|w| w.focused).ok_or_else(|| {
                                DesktopError::Exec("no window is focused on this desktop".into())
                            })?,
                            Some(id) => ws.iter().find(|w| w.id == id).ok_or_else(|| {
                                DesktopError::invalid(
                                    "window",
                                    format!(
                                        "no window {id:#x} on this desktop; ListWindows gives \
                                         the live ones"
                                    ),
                                )
                            })?,
                        };
                        full.crop(w.x, w.y, w.width, w.height).ok_or_else(|| {
                            DesktopError::Exec(format!("window {:#x} is off screen", w.id))
                        })?
                    }
                };
                Ok::<_, DesktopError>((frame.downscale(max_long_edge), d.pointer()))
            })();
            shot.map_err(|e| match EnvError::from(e) {
                // A window id is a request field, not an action's.
                EnvError::Invalid(i) => EnvError::Invalid(Invalid::new(
                    i.field.trim_start_matches("action."),
                    i.message,
                )),
                other => other,
            })
        })?;
        // Encoded after the env's state is released.
        let (width, height, hash) = (frame.width, frame.height, frame.hash);
        let bytes = crate::encode::encode_with(frame, enc, jpeg_quality)?;
        Ok(Obs {
            frame: Bytes::from(bytes),
            encoding: enc,
            width,
            height,
            hash,
            pointer,
            tree: None,
            settle: SettleReport {
                quiesced: true,
                ..Default::default()
            },
            not_modified: false,
        })
    }

    /// Blocking: the desktop's clipboard, read (`None`) or set.
    pub(crate) fn clipboard(&self, set: Option<&str>) -> Result<String, EnvError> {
        let Some(text) = set else {
            return self.on_desktop(|d| Ok(d.clipboard()?));
        };
        self.on_desktop(|d| Ok(d.set_clipboard(text)?))?;
        self.pool.record(|| {
            record::event(
                "set_clipboard",
                &self.id,
                serde_json::json!({"bytes": text.len()}),
            )
        });
        Ok(text.to_string())
    }

    /// Blocking: the desktop's top-level windows.
    pub(crate) fn windows(&self) -> Result<Vec<WindowInfo>, EnvError> {
        self.on_desktop(|d| Ok(d.windows()?))
    }

    /// Captures the screen (the one place a test can make a capture fail).
    fn capture(&self, d: &mut Box<dyn Desktop>) -> Result<Frame, DesktopError> {
        #[cfg(test)]
        if self.fail_next_capture.swap(false, Ordering::AcqRel) {
            return Err(DesktopError::X11("injected capture failure".into()));
        }
        d.capture()
    }

    /// Blocking: rebuilds `cp` on this env by replaying its actions on a freshly reset
    /// desktop, and reports whether the result looks exactly like the checkpoint.
    pub(crate) fn restore(
        &self,
        cache: &FrameCache,
        cp: &Checkpoint,
        opts: &ObsOptions,
    ) -> Result<Restored, EnvError> {
        let _running = self.enter();
        let started = Instant::now();
        let (ours, theirs) = (&self.pool.spec, &cp.pool.spec);
        if ours.task.id != theirs.task.id || ours.screen != theirs.screen {
            return Err(EnvError::Incompatible(format!(
                "checkpoint {:?} is of task {} at {}x{}, env {:?} runs {} at {}x{}",
                cp.id,
                theirs.task.id,
                theirs.screen.width,
                theirs.screen.height,
                self.id,
                ours.task.id,
                ours.screen.width,
                ours.screen.height
            )));
        }
        let enc = encoding_or(ours, opts.encoding)?;
        let mut guard = lock(&self.state);
        let s = &mut *guard;
        let result = (|| {
            let d = self.live_desktop(s, true)?;
            let mut out = d.reset(cp.episode.seed)?;
            self.note_socket(Some(&**d));
            for a in cp.episode.actions.iter() {
                out = d.step(a)?;
            }
            let frame = d.capture()?;
            Ok::<_, EnvError>((out, frame, d.pointer(), d.display()))
        })();
        let (out, frame, pointer, display) = result.inspect_err(|e| {
            self.on_error(s, e);
            s.episode = None;
        })?;
        let exact = frame.hash == cp.frame_hash();
        if !exact {
            tracing::warn!(env = %self.id, checkpoint = %cp.id, "rebuild diverged from its checkpoint");
        }
        self.end_episode(s, "restore");
        s.episodes += 1;
        (s.seed_base, s.seed_k) = (cp.episode.seed, 1);
        let log = EpisodeLog {
            ret: cp.episode.log.ret,
            ..self.new_log(s.episodes)
        };
        let ep = Episode {
            number: s.episodes,
            frame_hash: Some(frame.hash),
            log,
            recorded: false,
            verdict: None,
            ..cp.episode.clone()
        };
        self.pool.record(|| {
            record::event(
                "restore",
                &self.id,
                serde_json::json!({
                    "checkpoint": cp.id, "episode_id": ep.log.episode_id, "exact": exact,
                }),
            )
        });
        let observation = self.observation(
            cache,
            frame,
            pointer,
            out.settle,
            enc,
            &opts.known,
            Some(&ep.log.episode_id),
        )?;
        let info = self.info(&ep, started, Some(display));
        s.episode = Some(ep);
        Ok(Restored {
            obs: observation,
            info,
            exact,
            expected_hash: cp.frame_hash(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Limits;
    use crate::pool::PoolManager;
    use crate::record::RecordSettings;

    fn manager() -> Arc<PoolManager> {
        let record = RecordSettings::for_tests();
        Arc::new(PoolManager::new(Limits::default(), 4, record).expect("manager"))
    }

    #[test]
    fn episode_seeds_are_distinct_and_reproducible() {
        let mut all = std::collections::HashSet::new();
        for base in 0..64u64 {
            assert_eq!(episode_seed(base, 0), base);
            for k in 1..64 {
                let s = episode_seed(base, k);
                assert!(s < 1 << 63);
                assert_eq!(s, episode_seed(base, k));
                assert!(all.insert(s), "seed {s} repeated");
            }
        }
        // Pinned so the Python twin (deskgym.seeding) can be checked against it.
        assert_eq!(episode_seed(0, 1), 0x045a_7ed4_6449_5a87);
    }

    /// The replay log keeps an action whose input reached the desktop even when the
    /// capture after it failed: Save then Fork rebuilds the screen exactly.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_applied_action_survives_a_failed_capture() {
        let mgr = manager();
        let who = crate::auth::Principal::local(mgr.limits());
        let req = pb::CreatePoolRequest {
            task: "type-word".into(),
            num_envs: 1,
            screen: Some(pb::ScreenSize {
                width: 320,
                height: 240,
            }),
            ..Default::default()
        };
        let pool = mgr
            .create_pool(mgr.spec(&req).expect("spec"), 1, None, &who)
            .await
            .expect("pool (needs xvfb)");
        let env = mgr.env(&pool.env_ids[0], &who).expect("env");
        let opts = ObsOptions {
            encoding: pb::ImageEncoding::RawRgb as i32,
            known: Vec::new(),
            ..Default::default()
        };
        let before = env.reset(&mgr.cache, Some(3), &opts).expect("reset");
        let before = deskgym_worker::hash_hex(before.obs.hash);
        // Clicking the field focuses it (its border turns blue): a visible change.
        let (x, y) = deskgym_worker::tasks::Episode::new("type-word", 3, 320, 240)
            .expect("layout")
            .hint()[0];
        let focus = Action::Click {
            at: deskgym_worker::Point { x, y },
            button: deskgym_worker::Button::Left,
            count: 1,
        };
        env.fail_next_capture.store(true, Ordering::Release);
        let e = env
            .step(&mgr.cache, &focus.into(), &opts, false)
            .expect_err("the injected capture failure");
        assert_eq!(e.code(), tonic::Code::Internal, "{e}");
        let cp = mgr.save(&env.id, &who).await.expect("save");
        assert_eq!(cp.actions_len(), 1, "the click is in the replay log");
        assert_ne!(
            deskgym_worker::hash_hex(cp.frame_hash()),
            before,
            "the checkpoint's hash is of the screen after the click"
        );
        let fork = mgr.fork(&cp.id, 1, 0, &who).await.expect("fork");
        assert!(fork.replicas[0].1.exact);
        mgr.close_all().await;
    }
}
