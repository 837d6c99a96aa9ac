//! Worker and env results → wire messages (the one place that builds them).

use deskgym_proto::v1 as pb;
use deskgym_worker::{Point, SettlePolicy};

use crate::env::{Checkpoint, Geometry, Info, Obs, Reset, Restored, Stepped};

/// An observation on the wire.
pub(crate) fn observation(o: Obs) -> pb::Observation {
    pb::Observation {
        frame: o.frame,
        encoding: o.encoding as i32,
        width: o.width,
        height: o.height,
        frame_hash: deskgym_worker::hash_hex(o.hash),
        pointer: Some(pb::PointPx {
            x: o.pointer.x,
            y: o.pointer.y,
        }),
        settle: Some(pb::SettleReport {
            policy: match o.settle.policy {
                SettlePolicy::Sync => pb::SettlePolicy::Sync,
                SettlePolicy::Damage => pb::SettlePolicy::Damage,
                SettlePolicy::Browser => pb::SettlePolicy::Browser,
            } as i32,
            waited_ms: o.settle.waited_ms,
            quiesced: o.settle.quiesced,
            damage_events: o.settle.damage_events,
        }),
        not_modified: o.not_modified,
        tree: o.tree,
        frame_pointer: frame_point(o.geometry, (o.width, o.height), o.pointer),
        display: Some(geometry(o.geometry, o.width, o.height)),
        // Set by the caller's frame ring, after the step (`ring::deliver`).
        slot: None,
    }
}

/// ACI's frame descriptor of a frame `width` x `height` cut from `g`.
fn geometry(g: Geometry, width: u32, height: u32) -> pb::FrameGeometry {
    let [x, y, w, h] = g.source;
    pb::FrameGeometry {
        screen_width: g.screen.0,
        screen_height: g.screen.1,
        dpr: 1.0,
        source_rect: Some(pb::Rect {
            x: x as i32,
            y: y as i32,
            width: w as i32,
            height: h as i32,
        }),
        delivered_width: width,
        delivered_height: height,
    }
}

/// A screen point in a delivered frame's pixels: the pixel whose source span holds it
/// (the inverse of `source + floor(p * source / delivered)`); `None` outside the source.
pub(crate) fn frame_point(g: Geometry, delivered: (u32, u32), p: Point) -> Option<pb::PointPx> {
    let [sx, sy, sw, sh] = g.source.map(i64::from);
    let (px, py) = (i64::from(p.x) - sx, i64::from(p.y) - sy);
    if px < 0 || py < 0 || px >= sw || py >= sh {
        return None;
    }
    let (dw, dh) = (i64::from(delivered.0), i64::from(delivered.1));
    // The largest d with floor(d * s / dw) <= p: every delivered pixel maps back to a
    // point at or before p, and the next one past it.
    let axis = |p: i64, s: i64, d: i64| ((p * d + d - 1) / s).min(d - 1).max(0);
    let (fx, fy) = (axis(px, sw, dw), axis(py, sh, dh));
    Some(pb::PointPx {
        x: fx as i32,
        y: fy as i32,
    })
}

/// An episode's info on the wire.
pub(crate) fn step_info(i: Info) -> pb::StepInfo {
    pb::StepInfo {
        instruction: i.instruction,
        task: i.task.to_string(),
        step_index: i.step_index,
        seed: i.seed,
        episode: i.episode,
        latency_ms: i.latency_ms,
        extra: i.extra,
    }
}

/// A Reset reply.
pub(crate) fn reset_response(r: Reset) -> pb::ResetResponse {
    pb::ResetResponse {
        observation: Some(observation(r.obs)),
        info: Some(step_info(r.info)),
    }
}

/// A Step reply.
pub(crate) fn step_result(s: Stepped) -> pb::StepResult {
    pb::StepResult {
        observation: Some(observation(s.obs)),
        reward: s.reward,
        terminated: s.terminated,
        truncated: s.truncated,
        info: Some(step_info(s.info)),
        reset: s.reset.map(reset_response),
        observe_error: s.observe_error.unwrap_or_default(),
    }
}

fn fidelity(exact: bool) -> i32 {
    if exact {
        pb::Fidelity::Exact as i32
    } else {
        pb::Fidelity::Diverged as i32
    }
}

/// A Restore reply.
pub(crate) fn restore_response(r: Restored) -> pb::RestoreResponse {
    pb::RestoreResponse {
        path: Some(replay_path(&r)),
        observation: Some(observation(r.obs)),
        info: Some(step_info(r.info)),
        fidelity: fidelity(r.exact),
        expected_hash: deskgym_worker::hash_hex(r.expected_hash),
    }
}

/// How a rebuild went along the original's path.
fn replay_path(r: &Restored) -> pb::ReplayPath {
    pb::ReplayPath {
        checked_steps: r.path.checked,
        missed_steps: r.path.missed,
        left_at_step: r.path.left_at_step,
        settled_again: r.path.settled_again,
        waited_ms: r.path.waited_ms,
        replayed_from_step: r.path.from_step,
        clock_late_steps: r.path.clock_late,
        idle_ms: r.path.idle_ms,
    }
}

/// One replica of a Fork reply.
pub(crate) fn replica(env_id: String, r: Restored) -> pb::Replica {
    pb::Replica {
        env_id,
        fidelity: fidelity(r.exact),
        path: Some(replay_path(&r)),
        observation: Some(observation(r.obs)),
        info: Some(step_info(r.info)),
    }
}

/// A checkpoint on the wire.
pub(crate) fn checkpoint(c: &Checkpoint) -> pb::Checkpoint {
    let spec = &c.pool.spec;
    pb::Checkpoint {
        checkpoint_id: c.id.clone(),
        pool_id: c.pool.id.clone(),
        task: spec.task.id.to_string(),
        seed: c.seed(),
        screen: Some(pb::ScreenSize {
            width: spec.screen.width,
            height: spec.screen.height,
        }),
        step_index: c.step_index(),
        frame_hash: deskgym_worker::hash_hex(c.frame_hash()),
        env_id: c.env_id.clone(),
        snapshot_kind: spec.profile.snapshot_kind().into(),
        chain: Some(checkpoint_chain(c)),
    }
}

/// A checkpoint's parent and parked replicas, as they are now.
fn checkpoint_chain(c: &Checkpoint) -> pb::CheckpointChain {
    let parked = crate::sync::lock(&c.pool.parked);
    let (ready, building) = parked.of(&c.id);
    let asked = parked.asked.get(&c.id).cloned().unwrap_or_default();
    pb::CheckpointChain {
        parent_checkpoint_id: c.parent.clone().unwrap_or_default(),
        parked: ready,
        parking: building,
        park: asked.n,
        parked_from_step: asked.from_step,
        note: asked.note,
    }
}

/// What an env is (GetEnv), read without waiting for its call in flight.
pub(crate) fn env_info(e: &crate::env::Env) -> pb::EnvInfo {
    let (pool, spec) = (&e.pool, &e.pool.spec);
    pb::EnvInfo {
        env_id: e.id.clone(),
        pool_id: pool.id.clone(),
        task: spec.task.id.to_string(),
        profile: spec.profile.name.clone(),
        capabilities: spec.capabilities.iter().map(|c| c.to_string()).collect(),
        screen: Some(pb::ScreenSize {
            width: spec.screen.width,
            height: spec.screen.height,
        }),
        alive: e.alive(),
        snapshot_kind: spec.profile.snapshot_kind().into(),
        record: pool
            .recording_path
            .as_ref()
            .and_then(|p| {
                p.file_name()?
                    .to_str()?
                    .strip_suffix(deskgym_datasets::BUNDLE_SUFFIX)
            })
            .unwrap_or_default()
            .to_string(),
        max_steps: spec.max_steps,
        lease_ttl_ms: pool
            .lease
            .map_or(0, |l| u32::try_from(l.as_millis()).unwrap_or(u32::MAX)),
        pool_env_ids: pool.env_ids.clone(),
        pending_capabilities: e
            .asks
            .pending()
            .into_iter()
            .map(|p| pb::CapabilityRequest {
                token: p.token,
                capability: p.power.as_str().into(),
                scope: p.scope,
                reason: p.reason,
                action: p.action.into(),
                timeout_ms: u32::try_from(p.left_ms).unwrap_or(u32::MAX),
            })
            .collect(),
    }
}
