//! Demonstrations: a person records episodes of a task from the console. A demo is a
//! recording pool of one env, created for and held by that person from the start;
//! each episode they solve lands in the run's bundle with actor `human` (the same rows
//! as an agent's), and finishing closes the pool, which completes the bundle. A demo
//! left open is closed by its lease once its page stops renewing it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use deskgym_proto::v1 as pb;
use serde_json::json;

use super::{Console, EnvOf, Refusal};
use crate::invalid::quote;
use crate::sync::lock;

/// How long a demo outlives its page's last call (the page renews it every 10 s).
const DEMO_LEASE_MS: u32 = 10 * 60 * 1000;

/// Demonstration pools by id, and whose they are.
#[derive(Debug, Clone, Default)]
pub(crate) struct Demos(Arc<Mutex<HashMap<String, Arc<str>>>>);

impl Demos {
    /// True when `pool` is a demo of `who`'s.
    pub(super) fn is(&self, pool: &str, who: &str) -> bool {
        lock(&self.0).get(pool).is_some_and(|w| &**w == who)
    }
}

/// What a person asks for.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DemoRequest {
    /// The task's id.
    task: String,
    /// Screen size (default 1280x720).
    #[serde(default)]
    width: u32,
    #[serde(default)]
    height: u32,
    /// Run name (default `demo-<task>-<time>`).
    #[serde(default)]
    run: String,
}

/// `GET /api/tasks`: the tasks a demo can be recorded of.
pub(super) async fn tasks(
    State(c): State<Console>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    c.who(&headers)?;
    let tasks: Vec<_> = c
        .mgr
        .policy()
        .tasks
        .iter()
        .map(|t| json!({"id": t.id, "description": t.description}))
        .collect();
    Ok(axum::Json(json!({ "tasks": tasks })).into_response())
}

/// `POST /api/demos`: a new demonstration: a recording pool of one env, held by the
/// caller, its first episode started.
pub(super) async fn start(
    State(c): State<Console>,
    headers: HeaderMap,
    axum::Json(r): axum::Json<DemoRequest>,
) -> Result<Response, Refusal> {
    let who = c.who_acting(&headers)?;
    let run = if r.run.is_empty() {
        let task: String = r
            .task
            .chars()
            .map(|ch| if ch.is_ascii_alphanumeric() { ch } else { '-' })
            .take(32)
            .collect();
        format!("demo-{task}-{}", deskgym_datasets::unix_ms())
    } else {
        r.run
    };
    let req = pb::CreatePoolRequest {
        task: r.task,
        num_envs: 1,
        screen: Some(pb::ScreenSize {
            width: if r.width == 0 { 1280 } else { r.width },
            height: if r.height == 0 { 720 } else { r.height },
        }),
        record: run.clone(),
        lease_ttl_ms: DEMO_LEASE_MS,
        ..Default::default()
    };
    let spec = c.mgr.spec(&req)?;
    let pool = c.mgr.create_pool(spec, 1, Some(&run), &who).await?;
    lock(&c.demos.0).insert(pool.id.clone(), who.name.clone());
    let env = c.mgr.env_of(&pool.env_ids[0], &who)?;
    let _ = env.control.take(&who.name);
    super::act::note(&env, "takeover", &who.name);
    let reset = pb::ResetRequest {
        env_id: env.id.clone(),
        encoding: pb::ImageEncoding::RawRgb as i32,
        ..Default::default()
    };
    c.calls.start_human_reset(reset, &who)?.finish().await?;
    Ok(axum::Json(json!({
        "pool": pool.id, "env": env.id, "run": run, "url": format!("/env/{}", env.id),
    }))
    .into_response())
}

/// `POST /api/envs/{id}/reset`: the next episode of a demonstration the caller holds.
pub(super) async fn next_episode(
    State(c): State<Console>,
    EnvOf { who, env }: EnvOf<true>,
) -> Result<Response, Refusal> {
    if !c.demos.is(&env.pool.id, &who.name) {
        return Err(Refusal(
            StatusCode::CONFLICT,
            format!(
                "env {} is not one of your demonstrations: the console starts episodes only \
                 there (an agent's env keeps its own episodes)",
                env.id
            ),
        ));
    }
    let reset = pb::ResetRequest {
        env_id: env.id.clone(),
        encoding: pb::ImageEncoding::RawRgb as i32,
        ..Default::default()
    };
    let r = c.calls.start_human_reset(reset, &who)?.finish().await?;
    let info = r.info.unwrap_or_default();
    Ok(
        axum::Json(json!({"episode": info.episode, "instruction": info.instruction}))
            .into_response(),
    )
}

/// `POST /api/demos/{pool}/finish`: ends the demonstration: the pool closes and its
/// bundle is complete (replay it, export it as any run).
pub(super) async fn finish(
    State(c): State<Console>,
    Path(pool): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let who = c.who_acting(&headers)?;
    if !c.demos.is(&pool, &who.name) {
        return Err(Refusal(
            StatusCode::NOT_FOUND,
            format!(
                "no demonstration {} of yours (the console closes only its demos)",
                quote(&pool)
            ),
        ));
    }
    // Its own task: a page that goes away mid-close leaves no half-closed pool.
    let (mgr, id, w) = (c.mgr.clone(), pool.clone(), who.clone());
    let (_, path) = tokio::spawn(async move { mgr.close_pool(&id, Some(&w)).await })
        .await
        .map_err(|_| {
            Refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                "closing the demo failed".into(),
            )
        })??;
    lock(&c.demos.0).remove(&pool);
    let run = path
        .as_ref()
        .and_then(|p| p.file_stem())
        .map(|s| s.to_string_lossy().into_owned());
    Ok(axum::Json(json!({ "run": run })).into_response())
}
