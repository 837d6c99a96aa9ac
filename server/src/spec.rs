//! What a pool is asked to run: the validated spec of a CreatePool request, the screen
//! geometry, and the desktop/pixel accounting unit. Depends on nothing else of the
//! server but its limits and the desktop backend (modules depend one way:
//! `spec -> record -> handle -> env -> pool -> service`).

use std::sync::Arc;
use std::time::Duration;

use deskgym_proto::v1 as pb;
use deskgym_worker::{DesktopConfig, DesktopError, Settle, SettlePolicy, TaskSpec};

use crate::backend::{Backend, Desktop};
use crate::config::Limits;

/// A request field that is malformed: which field (dotted path, e.g.
/// `action.click.target.point_px`) and how to fix it. Every layer's "bad request".
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub(crate) struct Invalid {
    /// Dotted path of the field.
    pub(crate) field: String,
    /// What is wrong and how to fix it.
    pub(crate) message: String,
}

impl Invalid {
    /// A bad `field`, and why.
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Longest piece of client input an error message quotes.
const QUOTE_CHARS: usize = 64;

/// Quotes client input for an error message: at most [`QUOTE_CHARS`] characters, so a
/// hostile 100,000-character value cannot turn into a 100 KB status message (which
/// clients' metadata limits would reject as RESOURCE_EXHAUSTED).
pub(crate) fn quote(s: &str) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(QUOTE_CHARS).collect();
    if chars.next().is_none() {
        format!("{head:?}")
    } else {
        format!("{head:?}... ({} chars)", s.chars().count())
    }
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
    /// The bundled task.
    pub task: &'static TaskSpec,
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

/// Validates a CreatePool request into a spec (every field, before anything starts).
pub(crate) fn validate(
    req: &pb::CreatePoolRequest,
    l: &Limits,
    backend: &Arc<dyn Backend>,
) -> Result<PoolSpec, Invalid> {
    let task = deskgym_worker::task_spec(&req.task).ok_or_else(|| {
        let known: Vec<_> = deskgym_worker::TASKS.iter().map(|t| t.id).collect();
        Invalid::new(
            "task",
            format!(
                "unknown task {}; known tasks: {}",
                quote(&req.task),
                known.join(", ")
            ),
        )
    })?;
    if req.num_envs == 0 {
        return Err(Invalid::new("num_envs", "must be at least 1"));
    }
    if req.lease_ttl_ms != 0 && !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&req.lease_ttl_ms) {
        return Err(Invalid::new(
            "lease_ttl_ms",
            format!(
                "{} is outside {MIN_LEASE_MS}..={MAX_LEASE_MS} (0: no lease)",
                req.lease_ttl_ms
            ),
        ));
    }
    let screen = req.screen.unwrap_or_default();
    let width = if screen.width == 0 {
        DEFAULT_WIDTH
    } else {
        screen.width
    };
    let height = if screen.height == 0 {
        DEFAULT_HEIGHT
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
            ));
        }
    }
    let settle_req = req.settle.unwrap_or_default();
    let default = Settle::default();
    let policy = match pb::SettlePolicy::try_from(settle_req.policy) {
        Ok(pb::SettlePolicy::Sync) => SettlePolicy::Sync,
        Ok(pb::SettlePolicy::Damage) => SettlePolicy::Damage,
        // A quiet window asked for means XDamage (its meaning before policies).
        Ok(pb::SettlePolicy::Unspecified) if settle_req.settle_ms.is_some() => SettlePolicy::Damage,
        Ok(pb::SettlePolicy::Unspecified) => task.settle,
        Err(_) => {
            return Err(Invalid::new(
                "settle.policy",
                format!("unknown settle policy {}", settle_req.policy),
            ));
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
        ));
    }
    let encoding = pb::ImageEncoding::try_from(req.encoding).map_err(|_| {
        Invalid::new("encoding", format!("unknown encoding {}", req.encoding))
    })?;
    Ok(PoolSpec {
        task,
        screen: Screen { width, height },
        seed: req.seed,
        settle,
        max_steps: if req.max_steps == 0 {
            task.default_max_steps
        } else {
            req.max_steps
        },
        encoding: if encoding == pb::ImageEncoding::Unspecified {
            pb::ImageEncoding::RawRgb
        } else {
            encoding
        },
        warm_spares: req.warm_spares,
        lease: (req.lease_ttl_ms > 0).then(|| Duration::from_millis(req.lease_ttl_ms.into())),
        backend: backend.clone(),
    })
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
}
