//! What a pool is asked to run: the validated spec of a CreatePool request, the screen
//! geometry, and the desktop/pixel accounting unit. Depends on nothing else of the
//! server but its limits and the desktop backend (modules depend one way:
//! `spec -> record -> handle -> env -> pool -> service`).

use std::sync::Arc;
use std::time::Duration;

use deskgym_proto::v1 as pb;
use deskgym_worker::{DesktopConfig, DesktopError, Family, Settle, SettlePolicy};

use crate::capability::Capability;
use crate::config::Limits;
use crate::families::{Ask, TaskDef};
use crate::profiles::{Catalog, Profile};
use crate::tasks::Tasks;
use deskgym_worker::{Backend, Desktop};

pub(crate) use crate::invalid::{Invalid, quote};

/// Why a CreatePool request cannot be served as asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpecError {
    /// A malformed field.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// The profile needs programs this host lacks.
    #[error(
        "profile {profile} cannot run on this host: install the Debian packages {} \
         (`scripts/setup.sh --desktop` installs the bundled catalog's)",
        packages.join(" ")
    )]
    ProfileUnavailable {
        /// The profile.
        profile: String,
        /// What to install.
        packages: Vec<String>,
    },
    /// The server's policy does not grant this capability.
    #[error(
        "capability {0:?} is not allowed by this server (its operator can start it with \
         --allow-capabilities {0})"
    )]
    Denied(String),
    /// The capability needs a sandboxed profile.
    #[error(
        "capability {capability:?} needs a sandboxed profile; profile {profile} runs the \
         bundled task app (ask for profile \"desktop\")"
    )]
    Unsupported {
        /// The capability.
        capability: String,
        /// The profile asked for.
        profile: String,
    },
}

/// Capabilities every server allows (they act on the desktop as a user would, inside
/// the sandbox); the others (`exec`, `files`, `network`: outbound access from a network
/// stack of the env's own) only when `--allow-capabilities` lists them.
pub(crate) const ALLOWED_BY_DEFAULT: &[Capability] = &[
    Capability::LaunchApp,
    Capability::Windows,
    Capability::Clipboard,
];

/// What the server lets pools run: its profiles and the capabilities it grants.
#[derive(Debug, Default)]
pub(crate) struct Policy {
    /// The profile catalog.
    pub(crate) catalog: Catalog,
    /// Every task (bundled and declarative).
    pub(crate) tasks: Tasks,
    /// Capabilities pools may be granted.
    pub(crate) allow: Vec<String>,
    /// Host paths masked in every sandbox (token file, data dir).
    pub(crate) hide: Vec<std::path::PathBuf>,
    /// True when the server has tokens (principals): figures of the whole server
    /// (cache stats, capacity) are then scoped to the caller.
    pub(crate) tenants: bool,
    /// Names a `net.egress` proxy reaches without DNS (`--egress-hosts`).
    pub(crate) egress_hosts: std::sync::Arc<crate::egress::Pinned>,
    /// How long a capability request waits for a controller (`--ask-timeout-s`).
    pub(crate) ask_timeout: std::time::Duration,
}

/// Screen geometry a target is resolved against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Screen {
    /// Width in pixels.
    pub(crate) width: u32,
    /// Height in pixels.
    pub(crate) height: u32,
}

/// Server defaults applied where a request leaves a field at zero.
pub(crate) const DEFAULT_WIDTH: u32 = 1280;
/// See [`DEFAULT_WIDTH`].
pub(crate) const DEFAULT_HEIGHT: u32 = 720;

/// What every env of a pool runs.
#[derive(Clone, Debug)]
pub(crate) struct PoolSpec {
    /// The task.
    pub task: Arc<TaskDef>,
    /// Screen size.
    pub screen: Screen,
    /// Base seed.
    pub seed: u64,
    /// Settle policy.
    pub settle: Settle,
    /// Episode bound.
    pub max_steps: u32,
    /// Default frame encoding.
    pub encoding: pb::ImageEncoding,
    /// Desktops to keep started beside the envs.
    pub warm_spares: u32,
    /// Lease TTL (see [`Pool::lease`]).
    pub lease: Option<Duration>,
    /// What starts its desktops.
    pub(crate) backend: Arc<dyn Backend>,
    /// The desktop profile.
    pub(crate) profile: Arc<Profile>,
    /// Its desktops' family with what it needs (the sandbox, the script, the page),
    /// resolved once from the task's family and the profile.
    pub(crate) family: Family,
    /// Capabilities granted to the pool.
    pub(crate) capabilities: Vec<Capability>,
}

/// Shortest lease: a client renews every TTL/3, so shorter would be mostly renewals.
const MIN_LEASE_MS: u32 = 1_000;
/// Longest lease (an hour); longer is what the idle timeout is for.
const MAX_LEASE_MS: u32 = 3_600_000;

impl PoolSpec {
    fn desktop_config(&self) -> DesktopConfig {
        DesktopConfig {
            task: self.task.id.to_string(),
            width: self.screen.width,
            height: self.screen.height,
            settle: self.settle,
            // The worker starts its runner from it.
            family: self.family.clone(),
        }
    }

    /// Starts a desktop; a spare is also reset to the task's initial state and captured
    /// once, so its first real use skips the first-draw and first-capture costs
    /// (measured at ~40 ms on a fresh desktop).
    pub(crate) fn start_desktop(&self, spare: bool) -> Result<Box<dyn Desktop>, DesktopError> {
        let mut d = self.backend.start(self.desktop_config())?;
        if spare {
            d.reset(self.seed)?;
            d.capture()?;
        }
        Ok(d)
    }
}

/// Desktops (and their pixels) held or being started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Desktops.
    pub(crate) desktops: u32,
    /// Their pixels (width x height summed).
    pub(crate) pixels: u64,
}

impl Usage {
    /// `desktops` desktops of `screen`.
    pub(crate) fn of(desktops: u32, screen: Screen) -> Self {
        // At most 2^32 desktops of 4096x4096: fits in u64.
        Self {
            desktops,
            pixels: u64::from(desktops) * u64::from(screen.width) * u64::from(screen.height),
        }
    }

    /// Checked sum: `None` on overflow (a hostile count), which the caller refuses.
    pub(crate) fn plus(self, o: Self) -> Option<Self> {
        Some(Self {
            desktops: self.desktops.checked_add(o.desktops)?,
            pixels: self.pixels.checked_add(o.pixels)?,
        })
    }
}

/// Validates a CreatePool request into a spec (every field, before anything starts;
/// the first bad field, in the order below, is the one refused).
pub(crate) fn validate(
    req: &pb::CreatePoolRequest,
    l: &Limits,
    backend: &Arc<dyn Backend>,
    policy: &Policy,
) -> Result<PoolSpec, SpecError> {
    let task = policy
        .tasks
        .get(&req.task)
        .cloned()
        .ok_or_else(|| policy.tasks.unknown(&req.task))?;
    if req.num_envs == 0 {
        return Err(Invalid::new("num_envs", "must be at least 1").into());
    }
    let profile = profile(req, &task, policy)?;
    let capabilities = capabilities(req, &profile, policy)?;
    if req.lease_ttl_ms != 0 && !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&req.lease_ttl_ms) {
        return Err(Invalid::new(
            "lease_ttl_ms",
            format!(
                "{} is outside {MIN_LEASE_MS}..={MAX_LEASE_MS} (0: no lease)",
                req.lease_ttl_ms
            ),
        )
        .into());
    }
    let screen = screen(req, &task, l)?;
    let settle = settle(req, &task, &profile, l)?;
    let encoding = pb::ImageEncoding::try_from(req.encoding)
        .map_err(|_| Invalid::new("encoding", format!("unknown encoding {}", req.encoding)))?;
    let max_steps = if req.max_steps == 0 {
        task.default_max_steps
    } else {
        req.max_steps
    };
    let rules = task.family.rules();
    let mut sandbox = profile.sandbox(
        &policy.hide,
        deskgym_worker::SandboxLimits {
            memory_mb: l.sandbox_memory_mb,
            disk_mb: l.sandbox_disk_mb,
            open_files: l.sandbox_open_files,
            processes: l.max_sandbox_processes,
        },
    );
    if let Some(sb) = sandbox.as_mut() {
        sb.shares.extend(rules.shares());
        sb.network |= capabilities.contains(&Capability::Network);
    }
    let family = rules.desktop(Ask {
        task: &task,
        profile: &profile,
        options: &req.task_options,
        sandbox,
    })?;
    Ok(PoolSpec {
        family,
        task,
        screen,
        seed: req.seed,
        settle,
        max_steps,
        encoding: if encoding == pb::ImageEncoding::Unspecified {
            pb::ImageEncoding::RawRgb
        } else {
            encoding
        },
        warm_spares: req.warm_spares,
        lease: (req.lease_ttl_ms > 0).then(|| Duration::from_millis(req.lease_ttl_ms.into())),
        backend: backend.clone(),
        profile,
        capabilities,
    })
}

/// The pool's profile: the one asked for, else the task's; known, able to run the task
/// and installed on this host.
fn profile(
    req: &pb::CreatePoolRequest,
    task: &TaskDef,
    policy: &Policy,
) -> Result<Arc<Profile>, SpecError> {
    let profile_name = if req.profile.is_empty() {
        task.profile.as_str()
    } else {
        req.profile.as_str()
    };
    let profile = policy.catalog.get(profile_name).cloned().ok_or_else(|| {
        let known: Vec<_> = policy.catalog.iter().map(|p| p.name.as_str()).collect();
        Invalid::new(
            "profile",
            format!(
                "unknown profile {}; known profiles: {}",
                quote(profile_name),
                known.join(", ")
            ),
        )
    })?;
    if !task.any_profile && task.profile != profile.name {
        return Err(Invalid::new(
            "profile",
            format!(
                "task {} runs on profile {}, not {} (task \"blank\" runs on every profile)",
                task.id, task.profile, profile.name
            ),
        )
        .into());
    }
    if !profile.available() {
        return Err(SpecError::ProfileUnavailable {
            profile: profile.name.clone(),
            packages: profile.missing.clone(),
        });
    }
    Ok(profile)
}

/// The capabilities asked for, each known, allowed by the server and usable on the
/// profile (a sandboxed one), without repeats.
fn capabilities(
    req: &pb::CreatePoolRequest,
    profile: &Profile,
    policy: &Policy,
) -> Result<Vec<Capability>, SpecError> {
    let mut capabilities = Vec::new();
    for (i, c) in req.capabilities.iter().enumerate() {
        let Some(cap) = Capability::parse(c) else {
            let known: Vec<_> = Capability::ALL.iter().map(|c| c.as_str()).collect();
            return Err(Invalid::new(
                format!("capabilities[{i}]"),
                format!(
                    "unknown capability {}; known: {}",
                    quote(c),
                    known.join(", ")
                ),
            )
            .into());
        };
        if !policy.allow.iter().any(|a| a == c) {
            return Err(SpecError::Denied(c.clone()));
        }
        if !profile.sandboxed() {
            return Err(SpecError::Unsupported {
                capability: c.clone(),
                profile: profile.name.clone(),
            });
        }
        if !capabilities.contains(&cap) {
            capabilities.push(cap);
        }
    }
    Ok(capabilities)
}

/// The screen asked for, else the task's, else the server's default; each side within
/// the limits.
fn screen(req: &pb::CreatePoolRequest, task: &TaskDef, l: &Limits) -> Result<Screen, SpecError> {
    let screen = req.screen.unwrap_or_default();
    let (default_w, default_h) = task.screen.unwrap_or((DEFAULT_WIDTH, DEFAULT_HEIGHT));
    let width = if screen.width == 0 {
        default_w
    } else {
        screen.width
    };
    let height = if screen.height == 0 {
        default_h
    } else {
        screen.height
    };
    for (field, v) in [("screen.width", width), ("screen.height", height)] {
        if !(l.min_screen_side..=l.max_screen_side).contains(&v) {
            return Err(Invalid::new(
                field,
                format!(
                    "{v} is outside {}..={}",
                    l.min_screen_side, l.max_screen_side
                ),
            )
            .into());
        }
    }
    Ok(Screen { width, height })
}

/// The settle policy and its windows: the policy asked for (the browser's only where
/// the task's family has one), else XDamage when a quiet window is asked for, else the
/// family's default; the windows within the limits.
fn settle(
    req: &pb::CreatePoolRequest,
    task: &TaskDef,
    profile: &Profile,
    l: &Limits,
) -> Result<Settle, SpecError> {
    let settle_req = req.settle.unwrap_or_default();
    let default = Settle::default();
    let rules = task.family.rules();
    let policy = match pb::SettlePolicy::try_from(settle_req.policy) {
        Ok(pb::SettlePolicy::Sync) => SettlePolicy::Sync,
        Ok(pb::SettlePolicy::Damage) => SettlePolicy::Damage,
        Ok(pb::SettlePolicy::Browser) if rules.browser_settle() => SettlePolicy::Browser,
        Ok(pb::SettlePolicy::Browser) => {
            return Err(Invalid::new(
                "settle.policy",
                format!(
                    "SETTLE_POLICY_BROWSER needs a web task (miniwob/...); task {} is not one",
                    task.id
                ),
            )
            .into());
        }
        // A quiet window asked for means XDamage (its meaning before policies).
        Ok(pb::SettlePolicy::Unspecified) if settle_req.settle_ms.is_some() => SettlePolicy::Damage,
        Ok(pb::SettlePolicy::Unspecified) => rules.settle_default(task, profile),
        Err(_) => {
            return Err(Invalid::new(
                "settle.policy",
                format!("unknown settle policy {}", settle_req.policy),
            )
            .into());
        }
    };
    let settle = Settle {
        policy,
        settle_ms: settle_req.settle_ms.unwrap_or(default.settle_ms),
        settle_max_ms: if settle_req.settle_max_ms == 0 {
            default.settle_max_ms
        } else {
            settle_req.settle_max_ms
        },
    };
    if settle.settle_max_ms > l.max_settle_ms || settle.settle_ms > l.max_settle_ms {
        return Err(Invalid::new(
            "settle",
            format!(
                "settle_ms and settle_max_ms must be at most {} ms",
                l.max_settle_ms
            ),
        )
        .into());
    }
    Ok(settle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_bounded() {
        assert_eq!(quote("ctrl+s"), "\"ctrl+s\"");
        let q = quote(&"a".repeat(100_000));
        assert!(q.len() < 100, "{q}");
        assert!(q.ends_with("(100000 chars)"), "{q}");
    }

    #[test]
    fn web_only_settings_are_refused_on_other_tasks() {
        let policy = Policy {
            catalog: Catalog::load(None).unwrap(),
            ..Policy::default()
        };
        let backend: Arc<dyn Backend> = Arc::new(deskgym_worker::fake::FakeBackend::new());
        let field_of = |req: pb::CreatePoolRequest| match validate(
            &req,
            &Limits::default(),
            &backend,
            &policy,
        ) {
            Err(SpecError::Invalid(i)) => i.field,
            other => panic!("{other:?}"),
        };
        let base = pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 1,
            ..Default::default()
        };
        let options = pb::CreatePoolRequest {
            task_options: [("reward".to_string(), "raw".to_string())].into(),
            ..base.clone()
        };
        assert_eq!(field_of(options), "task_options.\"reward\"");
        let browser = pb::CreatePoolRequest {
            settle: Some(pb::SettleConfig {
                policy: pb::SettlePolicy::Browser as i32,
                ..Default::default()
            }),
            ..base
        };
        assert_eq!(field_of(browser), "settle.policy");
    }
}
