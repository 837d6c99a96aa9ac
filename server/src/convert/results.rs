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
        observation: Some(observation(r.obs)),
        info: Some(step_info(r.info)),
        fidelity: fidelity(r.exact),
        expected_hash: deskgym_worker::hash_hex(r.expected_hash),
    }
}

/// One replica of a Fork reply.
pub(crate) fn replica(env_id: String, r: Restored) -> pb::Replica {
    pb::Replica {
        env_id,
        fidelity: fidelity(r.exact),
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
    }
}
