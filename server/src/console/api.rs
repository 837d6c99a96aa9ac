//! What the console reads: the fleet, one env, a thumbnail, live frames, the feed.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use deskgym_proto::v1 as pb;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use super::{Console, EnvOf, Refusal};
use crate::auth::Principal;
use crate::env::{Env, Shape};
use crate::invalid::quote;

/// A thumbnail's long edge.
const THUMB_EDGE: u32 = 320;
/// A thumbnail's JPEG quality.
const THUMB_QUALITY: u8 = 60;
/// How often a quiet feed sends a comment, so proxies and the browser keep it open.
const FEED_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `GET /api/fleet`: the caller's pools and envs, and the server's capacity and counters.
pub(super) async fn fleet(
    State(c): State<Console>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let who = c.who(&headers)?;
    let pools: Vec<_> = c
        .mgr
        .pools_of(&who)
        .into_iter()
        .map(|(pool, envs)| {
            json!({
                "id": pool.id,
                "task": pool.spec.task.id,
                "profile": pool.spec.profile.name,
                "screen": [pool.spec.screen.width, pool.spec.screen.height],
                "recording": pool.recording_path.is_some(),
                "envs": envs.iter().map(|e| env_json(e)).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(axum::Json(json!({
        "principal": &*who.name,
        "pools": pools,
        "server": figures(&c, &who),
    }))
    .into_response())
}

/// The fleet page's counters. On a server with tokens they are the caller's own
/// (its desktops of its quota, its steps and resets, its cache figures, its share of
/// the screencast slots) and errors are left out (they are counted by code only, for
/// the operator's `/metrics`); without tokens, the one principal's are the server's.
fn figures(c: &Console, who: &Principal) -> serde_json::Value {
    if !c.mgr.policy().tenants {
        let (steps, resets, errors, mean_ms) = crate::metrics::METRICS.totals();
        let cache = c.mgr.cache.stats();
        return json!({
            "envs": c.mgr.env_count(),
            "max_envs": c.mgr.limits().max_envs,
            "max_screencasts": c.mgr.limits().max_screencasts,
            "steps": steps, "resets": resets, "errors": errors,
            "step_mean_ms": mean_ms,
            "cache_hits": cache.hits, "cache_misses": cache.misses,
        });
    }
    let (steps, resets, mean_ms) = crate::metrics::METRICS.totals_of(&who.name);
    let cache = c.mgr.cache.stats_of(&who.name);
    json!({
        "envs": c.mgr.usage_of(&who.name).desktops,
        "max_envs": who.max_desktops,
        "max_screencasts": who.max_screencasts,
        "steps": steps, "resets": resets,
        "step_mean_ms": mean_ms,
        "cache_hits": cache.hits, "cache_misses": cache.misses,
    })
}

/// One env as the console lists it.
fn env_json(e: &Env) -> serde_json::Value {
    let s = e.control.summary();
    json!({
        "id": e.id,
        "episode": s.episode,
        "step": s.step,
        "last_reward": s.last_reward,
        "episode_return": s.episode_return,
        "state": s.state,
        "instruction": s.instruction,
        "held_by": e.control.holder().as_deref(),
    })
}

/// `GET /api/envs/{id}`: one env, with its pool's task and screen.
pub(super) async fn env(
    State(c): State<Console>,
    EnvOf { who, env: e }: EnvOf<false>,
) -> Result<Response, Refusal> {
    let mut v = env_json(&e);
    v["pool"] = json!(e.pool.id);
    v["task"] = json!(e.pool.spec.task.id);
    v["profile"] = json!(e.pool.spec.profile.name);
    v["screen"] = json!([e.pool.spec.screen.width, e.pool.spec.screen.height]);
    v["you"] = json!(&*who.name);
    v["demo"] = json!(c.demos.is(&e.pool.id, &who.name));
    Ok(axum::Json(v).into_response())
}

/// `GET /api/envs/{id}/thumb.jpg`: the screen now, small (never a step, never recorded).
pub(super) async fn thumb(EnvOf { env: e, .. }: EnvOf<false>) -> Result<Response, Refusal> {
    let shape = Shape {
        window: None,
        max_long_edge: THUMB_EDGE,
        jpeg_quality: THUMB_QUALITY,
    };
    let shot = tokio::task::spawn_blocking(move || e.watch(&shape, None))
        .await
        .map_err(|_| tonic::Status::internal("a thumbnail capture panicked"))?
        .map_err(crate::pool::PoolError::from)?;
    let Some(obs) = shot.1 else {
        return Err(tonic::Status::internal("a first capture made no frame").into());
    };
    Ok((
        [
            (header::CONTENT_TYPE, "image/jpeg"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        obs.frame,
    )
        .into_response())
}

/// The live view's knobs.
#[derive(Debug, serde::Deserialize)]
pub(super) struct LiveQuery {
    /// Frames per second, 0.1..=30 (default 10).
    fps: Option<f64>,
    /// Long edge at most this (0 or absent: full size).
    max_long_edge: Option<u32>,
    /// `jpeg` (the default) or `h264`.
    codec: Option<String>,
}

/// `GET /api/envs/{id}/live`: the screen as it changes, one record per frame: a
/// big-endian u32 length and that much JSON (seq, size, hash, pointer, geometry,
/// capture time), then a u32 length and the JPEG. Holds a screencast slot while open.
pub(super) async fn live(
    State(c): State<Console>,
    EnvOf { who, env: e }: EnvOf<false>,
    Query(q): Query<LiveQuery>,
) -> Result<Response, Refusal> {
    let fps = q.fps.unwrap_or(10.0);
    if !(0.1..=30.0).contains(&fps) {
        return Err(tonic::Status::invalid_argument(format!(
            "fps {} is outside 0.1..=30",
            quote(&fps.to_string())
        ))
        .into());
    }
    let shape = Shape {
        window: None,
        max_long_edge: q.max_long_edge.unwrap_or(0),
        jpeg_quality: 0,
    };
    let h264 = match q.codec.as_deref() {
        None | Some("jpeg") => false,
        Some("h264") => true,
        Some(other) => {
            return Err(tonic::Status::invalid_argument(format!(
                "codec {} is not jpeg or h264",
                quote(other)
            ))
            .into());
        }
    };
    let mut frames = c
        .screencasts
        .open(e, who.max_screencasts, shape, fps, h264)?;
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(1);
    tokio::spawn(async move {
        // Ends when the viewer hangs up (the body, and `rx`, dropped) or the stream does.
        while let Some(f) = tokio::select! {
            f = frames.recv() => f,
            () = tx.closed() => None,
        } {
            let Ok(f) = f else { break };
            if tx.send(Ok(record(&f))).await.is_err() {
                break;
            }
        }
    });
    Ok(streamed("application/x-deskgym-frames", rx))
}

/// A response whose body is what `rx` receives, until its sender ends it (or the
/// client hangs up, which drops the receiver and ends the sender's task).
fn streamed(kind: &'static str, rx: mpsc::Receiver<Result<Bytes, Infallible>>) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response()
}

/// One frame of the live body (see [`live`]).
fn record(f: &pb::ScreencastFrame) -> Bytes {
    let point = |p: &Option<pb::PointPx>| p.as_ref().map(|p| [p.x, p.y]);
    let head = json!({
        "seq": f.seq,
        "width": f.width,
        "height": f.height,
        "frame_hash": f.frame_hash,
        "pointer": point(&f.pointer),
        "frame_pointer": point(&f.frame_pointer),
        "screen": f.display.as_ref().map(|d| [d.screen_width, d.screen_height]),
        "source": f
            .display
            .as_ref()
            .and_then(|d| d.source_rect.as_ref())
            .map(|r| [r.x, r.y, r.width, r.height]),
        "captured_unix_ms": f.captured_unix_ms,
        "dropped": f.dropped,
        "codec": if f.h264.is_empty() { "jpeg" } else { &f.codec },
        "keyframe": f.keyframe,
    })
    .to_string();
    let pixels = if f.h264.is_empty() { &f.jpeg } else { &f.h264 };
    let mut out = Vec::with_capacity(8 + head.len() + pixels.len());
    for part in [head.as_bytes(), &pixels[..]] {
        out.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(part);
    }
    Bytes::from(out)
}

/// `GET /api/envs/{id}/feed`: server-sent events, one per step, reset, take-over or
/// release of the env from now on (the first event is the env as it stands).
pub(super) async fn feed(EnvOf { env: e, .. }: EnvOf<false>) -> Result<Response, Refusal> {
    let mut entries = e.control.subscribe();
    let first = json!({"kind": "hello", "env": env_json(&e)}).to_string();
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(16);
    tokio::spawn(async move {
        if tx.send(Ok(event(&first))).await.is_err() {
            return;
        }
        let mut quiet = tokio::time::interval(FEED_KEEP_ALIVE);
        quiet.tick().await;
        loop {
            let out = tokio::select! {
                r = entries.recv() => match r {
                    Ok(entry) => event(&entry),
                    // A slow reader is told what it missed, then goes on.
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        event(&json!({"kind": "missed", "entries": n}).to_string())
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = quiet.tick() => Bytes::from_static(b": still here\n\n"),
                () = tx.closed() => return,
            };
            if tx.send(Ok(out)).await.is_err() {
                return;
            }
        }
    });
    Ok(streamed("text/event-stream", rx))
}

/// One server-sent event of JSON (which never holds a raw newline).
fn event(json: &str) -> Bytes {
    Bytes::from(format!("data: {json}\n\n"))
}

/// `GET /api/envs/{id}/tree`: the last accessibility tree read on the env while the
/// console watched: by its agent, or with the person's own take-over and actions. The
/// console never reads one in a call of its own, so it never holds an env's flight
/// when its agent (or, after a release, the agent again) calls.
pub(super) async fn tree(EnvOf { env: e, .. }: EnvOf<false>) -> Result<Response, Refusal> {
    match e.control.last_tree() {
        Some(t) => Ok(axum::Json(json!({ "tree": *t })).into_response()),
        None => Err(Refusal(
            axum::http::StatusCode::NOT_FOUND,
            format!(
                "no tree of env {} yet: none was read while you watched (take it over, or \
                 wait for its agent to read one)",
                e.id
            ),
        )),
    }
}
