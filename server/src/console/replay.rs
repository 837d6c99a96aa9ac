//! The replay view's reads: the caller's recorded runs, a run's episodes, an episode's
//! steps, and frames by hash, from the bundles on the server's data dir (read through
//! `deskgym_datasets::Bundle`, never the live pools).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use deskgym_datasets::Bundle;
use serde_json::json;

use super::{Console, Refusal};
use crate::invalid::quote;
use crate::sync::lock;

/// Bundles kept open (with their frame indexes) at most.
const KEPT: usize = 16;

/// Bundles opened for replay, by directory.
#[derive(Debug, Clone, Default)]
pub(crate) struct Bundles(Arc<Mutex<HashMap<PathBuf, Arc<Bundle>>>>);

impl Console {
    /// Blocking: `who`'s run `run`, opened (or as opened before).
    fn bundle(&self, headers: &HeaderMap, run: &str) -> Result<Arc<Bundle>, Refusal> {
        let who = self.who(headers)?;
        let dir = self.mgr.recording_dir(&who, run)?;
        let mut open = lock(&self.bundles.0);
        if let Some(b) = open.get(&dir) {
            return Ok(b.clone());
        }
        let b =
            Arc::new(Bundle::open(&dir).map_err(|e| Refusal(StatusCode::CONFLICT, e.to_string()))?);
        if open.len() >= KEPT {
            open.clear();
        }
        open.insert(dir, b.clone());
        Ok(b)
    }
}

/// Runs `f` off the runtime (bundles are read from disk).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Refusal> + Send + 'static,
) -> Result<T, Refusal> {
    tokio::task::spawn_blocking(f).await.map_err(|_| {
        Refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "a replay read panicked".into(),
        )
    })?
}

/// `GET /api/runs`: the caller's recordings (name and status).
pub(super) async fn runs(
    State(c): State<Console>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let who = c.who(&headers)?;
    let runs = blocking(move || Ok(c.mgr.recordings(&who))).await?;
    let runs: Vec<_> = runs
        .iter()
        .map(|r| json!({"run": r.run, "status": r.status}))
        .collect();
    Ok(axum::Json(json!({ "runs": runs })).into_response())
}

/// `GET /api/runs/{run}/episodes`: the run's ended episodes.
pub(super) async fn episodes(
    State(c): State<Console>,
    Path(run): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let eps = blocking(move || {
        let b = c.bundle(&headers, &run)?;
        b.episodes()
            .map_err(|e| Refusal(StatusCode::CONFLICT, e.to_string()))
    })
    .await?;
    Ok(axum::Json(json!({ "episodes": eps })).into_response())
}

/// Which episode's steps.
#[derive(Debug, serde::Deserialize)]
pub(super) struct StepsQuery {
    episode: String,
}

/// `GET /api/runs/{run}/steps?episode=ID`: one episode's steps in order.
pub(super) async fn steps(
    State(c): State<Console>,
    Path(run): Path<String>,
    Query(q): Query<StepsQuery>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let steps = blocking(move || {
        let b = c.bundle(&headers, &run)?;
        b.steps(&q.episode)
            .map_err(|e| Refusal(StatusCode::CONFLICT, e.to_string()))
    })
    .await?;
    Ok(axum::Json(json!({ "steps": steps })).into_response())
}

/// `GET /api/runs/{run}/frames/{hash}`: a recorded frame as PNG.
pub(super) async fn frame(
    State(c): State<Console>,
    Path((run, hash)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    if hash.len() != 32 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            format!("{} is not a frame hash (32 hex digits)", quote(&hash)),
        ));
    }
    let png = blocking(move || {
        let b = c.bundle(&headers, &run)?;
        b.frame_png(&hash)
            .map_err(|e| Refusal(StatusCode::CONFLICT, e.to_string()))?
            .ok_or_else(|| {
                Refusal(
                    StatusCode::NOT_FOUND,
                    format!("run {} holds no frame {hash}", quote(&run)),
                )
            })
    })
    .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "image/png"),
            // A frame's bytes never change: its name is its hash.
            (header::CACHE_CONTROL, "private, max-age=86400, immutable"),
        ],
        png,
    )
        .into_response())
}
