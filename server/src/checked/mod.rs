//! Request checking: each wire request turned, in one place, into the command the env
//! runs. Every rejection names its field ([`Field`]), so a batch item, a stream message
//! and a lone request report the same problem at their own paths.
//!
//! Above `env`, `a11y`, `ring` and `pool` (whose types the commands carry), below the
//! service, the axstream driver and the console, which all check through here.

use std::collections::BTreeMap;
use std::sync::Arc;

use deskgym_proto::v1 as pb;

use crate::a11y::{Planned, TreeOpts};
use crate::capability::Capability;
use crate::config::Limits;
use crate::env::{Env, ObsOptions, Shape};
use crate::pool::PoolError;
use crate::profiles::AppArgs;
use crate::ring::{Ring, Rings};
use crate::spec::{Invalid, quote};

mod action;
mod exec;
mod field;
mod target;
mod tree;

pub(crate) use action::{VERBS, action, capability_of, locate};
pub(crate) use exec::exec_spec;
pub(crate) use field::Field;
pub(crate) use target::MAX_CHORD_BYTES;
pub(crate) use tree::tree_path;

/// Default line budget of the tree's text rendering.
const DEFAULT_LINES: u32 = 400;
/// Largest line budget a request may ask for.
const MAX_LINES: u32 = 10_000;
/// Default and largest walk bound of a tree read.
const DEFAULT_TREE_MS: u32 = 5000;
const MAX_TREE_MS: u32 = 30_000;
/// Longest quiet wait an Observe may ask for before it captures.
const MAX_OBSERVE_SETTLE_MS: u32 = 1000;

/// ACI's observe levers (`StepRequest.observe`, `ScreenshotRequest`) under `field`;
/// `None` is the whole screen.
pub(crate) fn shape(
    field: &Field,
    scope: i32,
    window: u32,
    max_long_edge: u32,
    jpeg_quality: u32,
) -> Result<Shape, Invalid> {
    let window = match pb::ScreenshotScope::try_from(scope) {
        Ok(pb::ScreenshotScope::Screen) => None,
        Ok(pb::ScreenshotScope::ActiveWindow) => Some(None),
        Ok(pb::ScreenshotScope::Window) => Some(Some(window)),
        Err(_) => {
            return Err(Invalid::new(
                field.at("scope"),
                format!("unknown scope {scope}"),
            ));
        }
    };
    if jpeg_quality > 100 {
        return Err(Invalid::new(
            field.at("jpeg_quality"),
            format!("{jpeg_quality} is outside 1..=100 (0: the default)"),
        ));
    }
    Ok(Shape {
        window,
        max_long_edge,
        jpeg_quality: jpeg_quality as u8,
    })
}

/// The levers of an `ObserveLevers` message, if the request set one.
fn levers(o: Option<&pb::ObserveSpec>, field: &Field) -> Result<Shape, Invalid> {
    match o {
        Some(o) => shape(field, o.scope, o.window, o.max_long_edge, o.jpeg_quality),
        None => Ok(Shape::default()),
    }
}

/// A wire frame hash (32 lowercase hex characters).
pub(crate) fn hash(field: &Field, s: &str) -> Result<u128, Invalid> {
    if s.len() != 32
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(Invalid::new(
            field,
            format!(
                "{} is not a frame hash (32 lowercase hex characters)",
                quote(s)
            ),
        ));
    }
    u128::from_str_radix(s, 16).map_err(|e| Invalid::new(field, e.to_string()))
}

/// A list of frame hashes (`if_none_match`, `GetFrames.hashes`), at most `max`.
pub(crate) fn hashes(field: &Field, list: &[String], max: u32) -> Result<Vec<u128>, Invalid> {
    if list.len() > max as usize {
        return Err(Invalid::new(
            field,
            format!("{} hashes is more than the limit of {max}", list.len()),
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, s)| hash(&field.index(i), s))
        .collect()
}

/// A `TreeRequest`; `None` when the request does not ask for the tree.
pub(crate) fn tree(
    t: Option<&pb::TreeRequest>,
    field: &Field,
) -> Result<Option<TreeOpts>, Invalid> {
    let Some(t) = t.filter(|t| t.enabled) else {
        return Ok(None);
    };
    if t.line_budget > MAX_LINES {
        return Err(Invalid::new(
            field.at("line_budget"),
            format!("{} is more than the limit of {MAX_LINES}", t.line_budget),
        ));
    }
    if t.timeout_ms > MAX_TREE_MS {
        return Err(Invalid::new(
            field.at("timeout_ms"),
            format!(
                "{} ms is more than the limit of {MAX_TREE_MS}",
                t.timeout_ms
            ),
        ));
    }
    let or = |v: u32, default: u32| if v == 0 { default } else { v };
    Ok(Some(TreeOpts {
        osworld_xml: t.osworld_xml,
        line_budget: or(t.line_budget, DEFAULT_LINES),
        diff_from: t.diff_from,
        timeout_ms: or(t.timeout_ms, DEFAULT_TREE_MS),
        omit_elements: t.omit_elements,
    }))
}

/// What an observation of the request at `at` carries: the encoding, the frames the
/// caller holds (its own `if_none_match` and a batch's `shared` ones), the tree.
pub(crate) fn observation(
    at: &Field,
    encoding: i32,
    own: &[String],
    shared: &[u128],
    tree_request: Option<&pb::TreeRequest>,
    limits: &Limits,
) -> Result<ObsOptions, Invalid> {
    let mut known = hashes(&at.at("if_none_match"), own, limits.max_if_none_match)?;
    known.extend_from_slice(shared);
    Ok(ObsOptions {
        encoding,
        known,
        tree: tree(tree_request, &at.at("tree"))?,
        ..Default::default()
    })
}

/// What checking a request against one env needs.
pub(crate) struct On<'a> {
    /// The env the request names.
    pub env: &'a Env,
    /// The server's limits.
    pub limits: &'a Limits,
    /// The frame rings a request may name.
    pub rings: &'a Rings,
    /// Frames a whole batch holds, beside each item's own.
    pub shared: &'a [u128],
}

impl On<'_> {
    /// The ring a request names in `field` (0: none), which must be the env owner's.
    pub(crate) fn ring(&self, id: u64, field: &Field) -> Result<Option<Arc<Ring>>, Invalid> {
        if id == 0 {
            return Ok(None);
        }
        self.rings
            .get(id, &self.env.pool.owner, field.as_str())
            .map(Some)
    }
}

/// A checked `StepRequest`.
#[derive(Debug)]
pub(crate) struct Step {
    /// The action, its element targets resolved when it runs.
    pub action: Planned,
    /// What the observation after it carries.
    pub opts: ObsOptions,
    /// Where its frame goes too, if anywhere.
    pub ring: Option<Arc<Ring>>,
    /// Start the next episode at once when this one ends.
    pub autoreset: bool,
}

/// A checked request that observes: a reset or an observe.
#[derive(Debug)]
pub(crate) struct Looking {
    /// What the observation carries.
    pub opts: ObsOptions,
    /// Where its frame goes too, if anywhere.
    pub ring: Option<Arc<Ring>>,
}

/// A `StepRequest` at `at`, in the order its errors are reported: grants, the action,
/// the observation, the ring.
pub(crate) fn step(req: &pb::StepRequest, at: &Field, on: &On<'_>) -> Result<Step, PoolError> {
    if let Some(capability) = capability_of(req.action.as_ref()) {
        grant(on.env, capability)?;
    }
    let profile = &on.env.pool.spec.profile;
    let widened = program_launch(on.env, req.action.as_ref())?;
    let (apps, app_args) = match &widened {
        Some((apps, args)) => (apps, args),
        None => (&profile.apps, &profile.app_args),
    };
    let action = action(
        req.action.as_ref(),
        on.env.pool.spec.screen,
        on.limits,
        apps,
        app_args,
    )?;
    let mut opts = observation(
        at,
        req.encoding,
        &req.if_none_match,
        on.shared,
        req.tree.as_ref(),
        on.limits,
    )?;
    if req.observe.is_some() {
        opts.shape = levers(req.observe.as_ref(), &at.at("observe"))?;
    }
    Ok(Step {
        action,
        opts,
        ring: on.ring(req.frame_ring, &at.at("frame_ring"))?,
        autoreset: req.autoreset,
    })
}

/// A `ResetRequest` at `at`.
pub(crate) fn reset(req: &pb::ResetRequest, at: &Field, on: &On<'_>) -> Result<Looking, Invalid> {
    let opts = observation(
        at,
        req.encoding,
        &req.if_none_match,
        on.shared,
        req.tree.as_ref(),
        on.limits,
    )?;
    Ok(Looking {
        opts,
        ring: on.ring(req.frame_ring, &at.at("frame_ring"))?,
    })
}

/// An `ObserveRequest`.
pub(crate) fn observe(req: &pb::ObserveRequest, on: &On<'_>) -> Result<Looking, Invalid> {
    let at = Field::root();
    let mut opts = observation(
        &at,
        req.encoding,
        &req.if_none_match,
        &[],
        req.tree.as_ref(),
        on.limits,
    )?;
    if req.settle_ms > MAX_OBSERVE_SETTLE_MS {
        return Err(Invalid::new(
            "settle_ms",
            format!(
                "{} is over {MAX_OBSERVE_SETTLE_MS} (0: capture at once)",
                req.settle_ms
            ),
        ));
    }
    opts.settle_ms = req.settle_ms;
    Ok(Looking {
        opts,
        ring: on.ring(req.frame_ring, &at.at("frame_ring"))?,
    })
}

/// A `ScreenshotRequest`: what to capture, and the frames the caller holds.
pub(crate) fn screenshot(
    r: &pb::ScreenshotRequest,
    limits: &Limits,
) -> Result<(Shape, Vec<u128>), Invalid> {
    let at = Field::root();
    let shape = shape(&at, r.scope, r.window, r.max_long_edge, r.jpeg_quality)?;
    let known = hashes(
        &at.at("if_none_match"),
        &r.if_none_match,
        limits.max_if_none_match,
    )?;
    Ok((shape, known))
}

/// A checked `ScreencastRequest`.
#[derive(Debug)]
pub(crate) struct Screencast {
    /// What each frame shows.
    pub shape: Shape,
    /// Frames a second.
    pub fps: f64,
    /// H.264 rather than JPEG frames.
    pub h264: bool,
}

/// A `ScreencastRequest`.
pub(crate) fn screencast(r: &pb::ScreencastRequest) -> Result<Screencast, Invalid> {
    let fps = if r.fps == 0.0 { 5.0 } else { r.fps };
    if !(0.1..=30.0).contains(&fps) {
        return Err(Invalid::new(
            "fps",
            format!("{} is outside 0.1..=30 (0: 5)", r.fps),
        ));
    }
    let shape = shape(
        &Field::root(),
        r.scope,
        r.window,
        r.max_long_edge,
        r.jpeg_quality,
    )?;
    let h264 = match pb::ScreencastCodec::try_from(r.codec) {
        Ok(pb::ScreencastCodec::H264) => true,
        Ok(_) => false,
        Err(_) => {
            return Err(Invalid::new(
                "codec",
                format!("{} is not a ScreencastCodec (JPEG 1, H264 2)", r.codec),
            ));
        }
    };
    Ok(Screencast { shape, fps, h264 })
}

/// What the observations of a Drive carry, from its first message.
pub(crate) fn drive(first: &pb::DriveRequest, limits: &Limits) -> Result<ObsOptions, Invalid> {
    let at = Field::root();
    let mut opts = observation(&at, first.encoding, &[], &[], first.tree.as_ref(), limits)?;
    if first.observe.is_some() {
        opts.shape = levers(first.observe.as_ref(), &at.at("observe"))?;
    }
    Ok(opts)
}

/// A KeepAlive's pool ids, at most one per env the server may run.
pub(crate) fn pool_ids(ids: &[String], limits: &Limits) -> Result<(), Invalid> {
    let max = limits.max_envs as usize;
    if ids.len() > max {
        return Err(Invalid::new(
            "pool_ids",
            format!("{} ids is more than the limit of {max}", ids.len()),
        ));
    }
    Ok(())
}

/// A SetClipboard's text, within the clipboard's limit.
pub(crate) fn clipboard_text(text: &str) -> Result<(), Invalid> {
    let max = deskgym_worker::MAX_CLIPBOARD_BYTES;
    if text.len() > max {
        return Err(Invalid::new(
            "text",
            format!("{} bytes is over the clipboard limit of {max}", text.len()),
        ));
    }
    Ok(())
}

/// A tunnel's TCP port.
pub(crate) fn port(port: u32) -> Result<u16, Invalid> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| Invalid::new("port", format!("{port} is not a TCP port (1-65535)")))
}

/// PERMISSION_DENIED unless the env's pool was granted `capability`.
pub(crate) fn grant(env: &Env, capability: Capability) -> Result<(), PoolError> {
    if env.pool.spec.capabilities.contains(&capability) || env.unlocks.holds(capability) {
        Ok(())
    } else {
        Err(PoolError::NotGranted {
            env: env.id.clone(),
            capability: capability.as_str(),
        })
    }
}

/// A profile's app catalog: what each app runs, and what arguments it takes.
type Catalog = (BTreeMap<String, Vec<String>>, BTreeMap<String, AppArgs>);

/// The catalog a `launch_app` of a program outside the profile's catalog runs against:
/// ACI's PATH name or absolute path, arguments verbatim. Starting any program is what
/// `exec` grants, so only a pool holding it gets this; `None` for any other action.
fn program_launch(env: &Env, action: Option<&pb::Action>) -> Result<Option<Catalog>, PoolError> {
    let Some(pb::action::Verb::LaunchApp(l)) = action.and_then(|a| a.verb.as_ref()) else {
        return Ok(None);
    };
    let profile = &env.pool.spec.profile;
    if profile.apps.contains_key(&l.app) || grant(env, Capability::Exec).is_err() {
        // A catalog app, or no grant: the catalog's own rules (and its error) apply.
        return Ok(None);
    }
    let p = &l.app;
    let bare = !p.is_empty() && !p.contains('/') && !p.starts_with('-');
    if !(bare || p.starts_with('/')) || p.contains('\0') || p.len() > 4096 {
        return Err(Invalid::new(
            "action.launch_app.app",
            format!(
                "{} is neither an app of the profile, a program name on PATH nor an absolute path",
                quote(p)
            ),
        )
        .into());
    }
    let mut apps = profile.apps.clone();
    let mut args = profile.app_args.clone();
    apps.insert(p.clone(), vec![p.clone()]);
    args.insert(p.clone(), AppArgs::Verbatim);
    Ok(Some((apps, args)))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;
