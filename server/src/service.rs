//! The `deskgym.v1.Deskgym` service: validation at the edge, blocking work on the
//! step pool, one error mapping (`error.rs`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use deskgym_proto::v1 as pb;
use deskgym_proto::v1::deskgym_server::Deskgym;
use tonic::{Request, Response, Status};

use crate::auth::{Principal, principal};
use crate::calls::Calls;
use crate::convert::{self, MAX_CHORD_BYTES, VERBS};
use crate::env::{Call, ObsOptions};
use crate::frame_cache::{parse_hash, parse_hashes};
use crate::pool::{EnvJob, PoolError, PoolManager};
use crate::spec::{Invalid, quote};

/// Bytes of file data per GetFile message.
const FILE_CHUNK: usize = 1 << 20;

/// Time an Exec's deadline allows beyond the command's own bound (the agent kills the
/// command at its bound, then reports).
const EXEC_MARGIN: Duration = Duration::from_secs(10);
/// How long a streaming call may wait for its first message (which names its target).
const FIRST_MESSAGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The gRPC service over a [`PoolManager`].
#[derive(Debug, Clone)]
pub(crate) struct DeskgymService {
    mgr: Arc<PoolManager>,
    /// Steps, resets and grants, as the axstream driver makes them too.
    calls: Calls,
    /// Turns true when the server starts shutting down: long-lived streams (tunnels)
    /// end then, so draining in-flight calls is bounded.
    closing: tokio::sync::watch::Receiver<bool>,
}

impl DeskgymService {
    /// Wraps a manager; `closing` says when the server shuts down.
    pub(crate) fn new(mgr: Arc<PoolManager>, closing: tokio::sync::watch::Receiver<bool>) -> Self {
        Self {
            calls: Calls::new(mgr.clone()),
            mgr,
            closing,
        }
    }
}

/// The first message of a client stream (it names the call's target), waited for at
/// most [`FIRST_MESSAGE_TIMEOUT`]; none (or none in time) is INVALID_ARGUMENT on `field`.
async fn first_message<T>(
    stream: &mut tonic::Streaming<T>,
    field: &str,
    what: &str,
) -> Result<T, Status> {
    match tokio::time::timeout(FIRST_MESSAGE_TIMEOUT, stream.message()).await {
        Ok(Ok(Some(m))) => Ok(m),
        Ok(Ok(None)) => Err(Invalid::new(field, format!("no message: {what}")).into()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Invalid::new(
            field,
            format!("no first message within {FIRST_MESSAGE_TIMEOUT:?}: {what}"),
        )
        .into()),
    }
}

/// Runs a StepStream: starts each request as it is read (up to `max_batch` running),
/// sends each result as it completes. Ends when the client ends its stream and every
/// started request has answered, when the client goes away, or at shutdown.
async fn step_stream(
    svc: DeskgymService,
    who: Principal,
    mut inbound: tonic::Streaming<pb::StepStreamRequest>,
    tx: tokio::sync::mpsc::Sender<Result<pb::StepStreamResult, Status>>,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    use pb::step_stream_request::Kind as In;
    use pb::step_stream_result::Kind as Out;
    let max = svc.mgr.limits().max_batch.max(1) as usize;
    let mut running = tokio::task::JoinSet::new();
    let mut reading = true;
    loop {
        tokio::select! {
            next = inbound.message(), if reading && running.len() < max => match next {
                Ok(Some(m)) => {
                    let tag = m.tag;
                    match m.kind {
                        Some(In::Step(s)) => {
                            let env_id = s.env_id.clone();
                            let started = svc.calls.start_step(s, "step.", &[], &who);
                            running.spawn(async move {
                                let (code, message, r) = outcome(started).await;
                                pb::StepStreamResult { env_id, tag, code, message, kind: r.map(Out::Step) }
                            });
                        }
                        Some(In::Reset(r)) => {
                            let env_id = r.env_id.clone();
                            let started = svc.calls.start_reset(r, "reset.", &[], &who);
                            running.spawn(async move {
                                let (code, message, r) = outcome(started).await;
                                pb::StepStreamResult { env_id, tag, code, message, kind: r.map(Out::Reset) }
                            });
                        }
                        None => {
                            let s = Status::from(Invalid::new("kind", "set step or reset"));
                            let r = pb::StepStreamResult {
                                tag,
                                code: s.code() as i32,
                                message: s.message().to_string(),
                                ..Default::default()
                            };
                            if tx.send(Ok(r)).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                Ok(None) => reading = false,
                Err(_) => return, // the client went away
            },
            Some(done) = running.join_next(), if !running.is_empty() => {
                let result = done.unwrap_or_else(|e| pb::StepStreamResult {
                    code: tonic::Code::Internal as i32,
                    message: format!("a stream step failed: {e}"),
                    ..Default::default()
                });
                if tx.send(Ok(result)).await.is_err() {
                    return;
                }
            }
            _ = closing.changed() => {
                let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
                return;
            }
        }
        if !reading && running.is_empty() {
            return;
        }
    }
}

async fn finish<T>(started: Result<EnvJob<T>, PoolError>) -> Result<T, PoolError> {
    started?.finish().await
}

/// A batch entry's status: (gRPC code, message, result), so one failing env never
/// fails the batch.
async fn outcome<T>(started: Result<EnvJob<T>, PoolError>) -> (i32, String, Option<T>) {
    match finish(started).await {
        Ok(r) => (0, String::new(), Some(r)),
        Err(e) => {
            let s = Status::from(e);
            (s.code() as i32, s.message().to_string(), None)
        }
    }
}

/// Sends each frame's pixels once per response: an observation whose (hash, encoding)
/// an earlier one already carries becomes `not_modified`.
struct Dedup<'a> {
    mgr: &'a PoolManager,
    who: &'a Principal,
    sent: HashSet<(String, i32)>,
}

impl Dedup<'_> {
    fn apply(&mut self, obs: Option<&mut pb::Observation>) {
        let Some(o) = obs else { return };
        if o.not_modified || o.frame.is_empty() {
            return;
        }
        if !self.sent.insert((o.frame_hash.clone(), o.encoding)) {
            self.mgr
                .cache
                .record_not_modified(o.frame.len() as u64, &self.who.name);
            o.frame = Bytes::new();
            o.not_modified = true;
        }
    }
}

/// A file's bytes read from `offset` as the stream of chunks GetFile answers.
fn file_chunks(
    offset: u64,
    size: u64,
    data: Vec<u8>,
    eof: bool,
) -> <DeskgymService as Deskgym>::GetFileStream {
    let data = bytes::Bytes::from(data);
    let n = data.len().div_ceil(FILE_CHUNK).max(1);
    let chunks: Vec<Result<pb::FileChunk, Status>> = (0..n)
        .map(|i| {
            let (a, b) = (i * FILE_CHUNK, ((i + 1) * FILE_CHUNK).min(data.len()));
            Ok(pb::FileChunk {
                offset: offset + a as u64,
                data: data.slice(a..b),
                size,
                eof: eof && i + 1 == n,
            })
        })
        .collect();
    Box::pin(tokio_stream::iter(chunks))
}

/// Bytes of an upload written to the desktop at a time.
const UPLOAD_PIECE: usize = 256 << 10;
/// Pieces of one upload queued for the desktop before reading the client waits.
const UPLOAD_QUEUE: usize = 2;

#[tonic::async_trait]
impl Deskgym for DeskgymService {
    async fn get_capabilities(
        &self,
        req: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::Capabilities>, Status> {
        let l = self.mgr.limits();
        let who = principal(&req)?;
        Ok(Response::new(pb::Capabilities {
            server_version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: "deskgym.v1".into(),
            verbs: VERBS.iter().map(|v| v.to_string()).collect(),
            targets: ["point_px", "point_norm", "element_ref", "element"]
                .map(String::from)
                .to_vec(),
            encodings: vec![
                pb::ImageEncoding::RawRgb as i32,
                pb::ImageEncoding::Png as i32,
                pb::ImageEncoding::Jpeg as i32,
            ],
            tasks: self
                .mgr
                .policy()
                .tasks
                .iter()
                .map(|t| pb::TaskInfo {
                    id: t.id.clone(),
                    description: t.description.clone(),
                    default_max_steps: t.default_max_steps,
                    profile: t.profile.clone(),
                    any_profile: t.any_profile,
                })
                .collect(),
            profiles: self
                .mgr
                .policy()
                .catalog
                .iter()
                .map(|p| pb::ProfileInfo {
                    name: p.name.clone(),
                    description: p.description.clone(),
                    available: p.available(),
                    missing_packages: p.missing.clone(),
                    apps: p.apps.keys().cloned().collect(),
                    network: p.network,
                })
                .collect(),
            allowed_capabilities: self.mgr.policy().allow.clone(),
            capacity: Some({
                let used = self.mgr.usage();
                let free = pb::Capacity {
                    envs_in_use: used.desktops,
                    envs_free: l.max_envs.saturating_sub(used.desktops),
                    pixels_in_use: used.pixels,
                    pixels_free: l.max_total_pixels.saturating_sub(used.pixels),
                };
                if self.mgr.policy().tenants {
                    // A principal's own use, and what it may still take (its quota,
                    // within what is free): never the other tenants' figures.
                    let own = self.mgr.usage_of(&who.name);
                    pb::Capacity {
                        envs_in_use: own.desktops,
                        envs_free: who
                            .max_desktops
                            .saturating_sub(own.desktops)
                            .min(free.envs_free),
                        pixels_in_use: own.pixels,
                        pixels_free: free.pixels_free,
                    }
                } else {
                    free
                }
            }),
            limits: Some(pb::Limits {
                max_envs: l.max_envs,
                max_batch: l.max_batch,
                max_screen_side: l.max_screen_side,
                min_screen_side: l.min_screen_side,
                max_settle_ms: l.max_settle_ms,
                max_text_len: l.max_text_len,
                max_wait_ms: l.max_wait_ms,
                max_checkpoints: l.max_checkpoints,
                max_if_none_match: l.max_if_none_match,
                frame_cache_bytes: l.frame_cache_bytes,
                max_chord_bytes: MAX_CHORD_BYTES as u32,
                max_checkpoint_bytes: l.max_checkpoint_bytes,
                max_frames_reply_bytes: l.max_frames_reply_bytes,
                max_total_pixels: l.max_total_pixels,
                op_timeout_ms: u32::try_from(l.op_timeout.as_millis()).unwrap_or(u32::MAX),
                max_exec_ms: l.max_exec_ms,
                max_exec_output: l.max_exec_output,
                max_exec_stdin: l.max_exec_stdin,
                max_file_bytes: l.max_file_bytes,
                max_list_entries: l.max_list_entries,
                sandbox: Some(pb::SandboxLimits {
                    memory_mb: l.sandbox_memory_mb,
                    memory_bound: deskgym_worker::limits::memory_bound().name().into(),
                    disk_mb: l.sandbox_disk_mb,
                    open_files: l.sandbox_open_files,
                    processes: l.max_sandbox_processes,
                }),
            }),
        }))
    }

    async fn create_pool(
        &self,
        req: Request<pb::CreatePoolRequest>,
    ) -> Result<Response<pb::CreatePoolResponse>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let spec = self.mgr.spec(&req)?;
        let record = (!req.record.is_empty()).then_some(req.record.as_str());
        let pool = self
            .mgr
            .create_pool(spec, req.num_envs, record, &who)
            .await?;
        Ok(Response::new(pb::CreatePoolResponse {
            pool_id: pool.id.clone(),
            env_ids: pool.env_ids.clone(),
            screen: Some(pb::ScreenSize {
                width: pool.spec.screen.width,
                height: pool.spec.screen.height,
            }),
            max_steps: pool.spec.max_steps,
            recording_path: pool
                .recording_path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            profile: pool.spec.profile.name.clone(),
            capabilities: pool.spec.capabilities.clone(),
        }))
    }

    async fn close_pool(
        &self,
        req: Request<pb::ClosePoolRequest>,
    ) -> Result<Response<pb::ClosePoolResponse>, Status> {
        // Its own task: a client that hangs up mid-close must not leave the close half
        // done (desktops stopped but the recording never finished).
        let who = principal(&req)?;
        let (mgr, id) = (self.mgr.clone(), req.into_inner().pool_id);
        let (n, path) = tokio::spawn(async move { mgr.close_pool(&id, Some(&who)).await })
            .await
            .map_err(|e| PoolError::Internal(format!("closing the pool failed: {e}")))??;
        Ok(Response::new(pb::ClosePoolResponse {
            envs_closed: n,
            recording_path: path.map(|p| p.display().to_string()).unwrap_or_default(),
        }))
    }

    async fn reset(
        &self,
        req: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        let who = principal(&req)?;
        Ok(Response::new(
            finish(self.calls.start_reset(req.into_inner(), "", &[], &who)).await?,
        ))
    }

    async fn step(
        &self,
        req: Request<pb::StepRequest>,
    ) -> Result<Response<pb::StepResult>, Status> {
        let who = principal(&req)?;
        Ok(Response::new(
            finish(self.calls.start_step(req.into_inner(), "", &[], &who)).await?,
        ))
    }

    async fn step_batch(
        &self,
        req: Request<pb::StepBatchRequest>,
    ) -> Result<Response<pb::StepBatchResponse>, Status> {
        let who = principal(&req)?;
        let pb::StepBatchRequest {
            items,
            resets,
            if_none_match,
        } = req.into_inner();
        let max = self.mgr.limits().max_batch as usize;
        let total = items.len() + resets.len();
        if total == 0 {
            return Err(Invalid::new("items", "the batch is empty: give items or resets").into());
        }
        if total > max {
            return Err(PoolError::Limit(format!(
                "batch of {total} entries exceeds max_batch={max}"
            ))
            .into());
        }
        let mut seen = HashSet::with_capacity(total);
        let ids = items
            .iter()
            .map(|i| ("items", &i.env_id))
            .chain(resets.iter().map(|r| ("resets", &r.env_id)));
        for (i, (list, id)) in ids.enumerate() {
            if !seen.insert(id.as_str()) {
                let at = if list == "items" { i } else { i - items.len() };
                return Err(Invalid::new(
                    format!("{list}[{at}].env_id"),
                    format!("env {} appears twice in one batch", quote(id)),
                )
                .into());
            }
        }
        let shared = parse_hashes(
            "if_none_match",
            &if_none_match,
            self.mgr.limits().max_if_none_match,
        )?;
        // Start everything first so it runs in parallel; then collect in request order.
        let steps: Vec<_> = items
            .into_iter()
            .enumerate()
            .map(|(i, it)| {
                (
                    it.env_id.clone(),
                    self.calls
                        .start_step(it, &format!("items[{i}]."), &shared, &who),
                )
            })
            .collect();
        let resets: Vec<_> = resets
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                (
                    r.env_id.clone(),
                    self.calls
                        .start_reset(r, &format!("resets[{i}]."), &shared, &who),
                )
            })
            .collect();
        let mut dedup = Dedup {
            mgr: &self.mgr,
            who: &who,
            sent: HashSet::new(),
        };
        let mut results = Vec::with_capacity(steps.len());
        for (env_id, started) in steps {
            let (code, message, mut result) = outcome(started).await;
            if let Some(r) = result.as_mut() {
                dedup.apply(r.observation.as_mut());
                dedup.apply(r.reset.as_mut().and_then(|r| r.observation.as_mut()));
            }
            results.push(pb::StepBatchItem {
                env_id,
                code,
                message,
                result,
            });
        }
        let mut reset_results = Vec::with_capacity(resets.len());
        for (env_id, started) in resets {
            let (code, message, mut result) = outcome(started).await;
            if let Some(r) = result.as_mut() {
                dedup.apply(r.observation.as_mut());
            }
            reset_results.push(pb::ResetBatchItem {
                env_id,
                code,
                message,
                result,
            });
        }
        Ok(Response::new(pb::StepBatchResponse {
            results,
            reset_results,
        }))
    }

    async fn observe(
        &self,
        req: Request<pb::ObserveRequest>,
    ) -> Result<Response<pb::Observation>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let env = self.mgr.env(&req.env_id, &who)?;
        let opts = self.calls.opts(
            "if_none_match",
            req.encoding,
            &req.if_none_match,
            &[],
            req.tree.as_ref(),
        )?;
        let job = self.mgr.on_env(
            &env,
            Call::Observe,
            self.mgr.op_timeout(),
            move |e, cache| e.observe(cache, &opts).map(convert::observation),
        )?;
        Ok(Response::new(job.finish().await?))
    }

    async fn get_frames(
        &self,
        req: Request<pb::GetFramesRequest>,
    ) -> Result<Response<pb::GetFramesResponse>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let max = self.mgr.limits().max_if_none_match;
        if req.hashes.len() > max as usize {
            return Err(Invalid::new(
                "hashes",
                format!(
                    "{} hashes is more than the limit of {max}",
                    req.hashes.len()
                ),
            )
            .into());
        }
        let mut hashes: Vec<(String, u128)> = req
            .hashes
            .iter()
            .enumerate()
            .map(|(i, h)| parse_hash(&format!("hashes[{i}]"), h).map(|v| (h.clone(), v)))
            .collect::<Result<_, _>>()?;
        // A frame asked for twice is sent once.
        let mut seen = HashSet::with_capacity(hashes.len());
        hashes.retain(|(_, h)| seen.insert(*h));
        let max_bytes = self.mgr.limits().max_frames_reply_bytes;
        let enc = match pb::ImageEncoding::try_from(req.encoding) {
            Ok(pb::ImageEncoding::Unspecified) => pb::ImageEncoding::RawRgb,
            Ok(e) => e,
            Err(_) => {
                return Err(
                    Invalid::new("encoding", format!("unknown encoding {}", req.encoding)).into(),
                );
            }
        };
        let mgr = self.mgr.clone();
        let frames = PoolManager::join(self.mgr.spawn(move || {
            let mut frames = Vec::with_capacity(hashes.len());
            let mut missing = Vec::new();
            let mut bytes = 0u64;
            for (hex, h) in hashes {
                match mgr.cache.get(h, enc, &who.name)? {
                    Some(b) => {
                        bytes = bytes.saturating_add(b.bytes.len() as u64);
                        if bytes > max_bytes {
                            return Err(PoolError::Limit(format!(
                                "these frames exceed max_frames_reply_bytes={max_bytes}; \
                                 ask for fewer per call"
                            )));
                        }
                        frames.push(pb::Observation {
                            frame: b.bytes,
                            encoding: enc as i32,
                            width: b.width,
                            height: b.height,
                            frame_hash: hex,
                            ..Default::default()
                        });
                    }
                    None => missing.push(hex),
                }
            }
            if !missing.is_empty() {
                return Err(PoolError::FramesMissing(missing.join(", ")));
            }
            Ok(frames)
        }))
        .await?;
        Ok(Response::new(pb::GetFramesResponse { frames }))
    }

    async fn get_cache_stats(
        &self,
        req: Request<pb::GetCacheStatsRequest>,
    ) -> Result<Response<pb::CacheStats>, Status> {
        let who = principal(&req)?;
        // On a server with tokens a principal sees its own counters, never the fleet's.
        Ok(Response::new(if self.mgr.policy().tenants {
            self.mgr.cache.stats_of(&who.name)
        } else {
            self.mgr.cache.stats()
        }))
    }

    async fn save(
        &self,
        req: Request<pb::SaveRequest>,
    ) -> Result<Response<pb::Checkpoint>, Status> {
        let who = principal(&req)?;
        let cp = self.mgr.save(&req.into_inner().env_id, &who).await?;
        Ok(Response::new(convert::checkpoint(&cp)))
    }

    async fn restore(
        &self,
        req: Request<pb::RestoreRequest>,
    ) -> Result<Response<pb::RestoreResponse>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let env = self.mgr.env(&req.env_id, &who)?;
        let cp = self.mgr.checkpoint(&req.checkpoint_id, &who)?;
        let opts = ObsOptions {
            encoding: req.encoding,
            ..Default::default()
        };
        let bound = self.mgr.replay_timeout(&cp);
        let job = self
            .mgr
            .on_env(&env, Call::Restore, bound, move |e, cache| {
                e.restore(cache, &cp, &opts).map(convert::restore_response)
            })?;
        Ok(Response::new(job.finish().await?))
    }

    async fn fork(
        &self,
        req: Request<pb::ForkRequest>,
    ) -> Result<Response<pb::ForkResponse>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let f = self
            .mgr
            .fork(&req.checkpoint_id, req.n, req.encoding, &who)
            .await?;
        Ok(Response::new(pb::ForkResponse {
            pool_id: f.pool_id,
            replicas: f
                .replicas
                .into_iter()
                .map(|(id, r)| crate::convert::replica(id, r))
                .collect(),
            expected_hash: f.expected_hash,
            from_spares: f.from_spares,
        }))
    }

    async fn list_checkpoints(
        &self,
        req: Request<pb::ListCheckpointsRequest>,
    ) -> Result<Response<pb::ListCheckpointsResponse>, Status> {
        let who = principal(&req)?;
        let checkpoints = self
            .mgr
            .list_checkpoints(&req.into_inner().pool_id, &who)
            .iter()
            .map(|c| convert::checkpoint(c))
            .collect();
        Ok(Response::new(pb::ListCheckpointsResponse { checkpoints }))
    }

    async fn delete_checkpoint(
        &self,
        req: Request<pb::DeleteCheckpointRequest>,
    ) -> Result<Response<pb::DeleteCheckpointResponse>, Status> {
        let who = principal(&req)?;
        self.mgr
            .delete_checkpoint(&req.into_inner().checkpoint_id, &who)?;
        Ok(Response::new(pb::DeleteCheckpointResponse {}))
    }

    async fn keep_alive(
        &self,
        req: Request<pb::KeepAliveRequest>,
    ) -> Result<Response<pb::KeepAliveResponse>, Status> {
        let who = principal(&req)?;
        let ids = req.into_inner().pool_ids;
        let max = self.mgr.limits().max_envs as usize;
        if ids.len() > max {
            return Err(Invalid::new(
                "pool_ids",
                format!("{} ids is more than the limit of {max}", ids.len()),
            )
            .into());
        }
        Ok(Response::new(pb::KeepAliveResponse {
            gone: self.mgr.keep_alive(&ids, &who),
        }))
    }

    async fn exec(
        &self,
        req: Request<pb::ExecRequest>,
    ) -> Result<Response<pb::ExecResponse>, Status> {
        let who = principal(&req)?;
        let mut r = req.into_inner();
        let env = self.calls.granted(&r.env_id, &who, "exec")?;
        let spec = convert::exec_spec(&r, self.mgr.limits())?;
        let stdin = std::mem::take(&mut r.stdin);
        // The agent ends the command at its bound; the margin covers reporting back.
        let bound = Duration::from_millis(spec.timeout_ms) + EXEC_MARGIN;
        let job = self.mgr.on_env(&env, Call::Exec, bound, move |e, _| {
            e.exec(&spec, &stdin).map(convert::exec_response)
        })?;
        Ok(Response::new(job.finish().await?))
    }

    async fn list_windows(
        &self,
        req: Request<pb::ListWindowsRequest>,
    ) -> Result<Response<pb::ListWindowsResponse>, Status> {
        let who = principal(&req)?;
        let env = self
            .calls
            .granted(&req.into_inner().env_id, &who, "windows")?;
        let job = self
            .mgr
            .on_env(&env, Call::ListWindows, self.mgr.op_timeout(), |e, _| {
                e.windows().map(convert::windows_response)
            })?;
        Ok(Response::new(job.finish().await?))
    }

    async fn put_file(
        &self,
        req: Request<tonic::Streaming<pb::PutFileChunk>>,
    ) -> Result<Response<pb::PutFileResponse>, Status> {
        let who = principal(&req)?;
        let mut stream = req.into_inner();
        let first = first_message(&mut stream, "path", "the first names the file").await?;
        let env = self.calls.granted(&first.env_id, &who, "files")?;
        if first.path.is_empty() {
            return Err(Invalid::new("path", "the first message must name the file").into());
        }
        let max = self.mgr.limits().max_file_bytes;
        if first.data.len() as u64 > max {
            return Err(PoolError::Limit(format!(
                "the file is over max_file_bytes={max}; upload it in several PutFile calls"
            ))
            .into());
        }
        // Every offset this upload can reach (offset + up to max bytes) is a u64.
        if first.offset.checked_add(max).is_none() {
            return Err(Invalid::new(
                "offset",
                format!("{} leaves no room for a file's bytes", first.offset),
            )
            .into());
        }
        let bound = self.mgr.op_timeout();
        // The env's flight is taken before any of the upload is read: a busy env
        // refuses at once, and the file goes to the desktop as it arrives, a bounded
        // piece at a time (the server never holds a whole upload).
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Option<bytes::Bytes>>(UPLOAD_QUEUE);
        let (path, offset, mode) = (first.path, first.offset, first.mode);
        // The job outlives the upload's own bound (the client's pace, which must not
        // count as a stuck desktop) by one more bound for the writes.
        let job = self.mgr.on_env(&env, Call::Files, bound * 2, move |e, _| {
            e.files("put_file", &path, |d| {
                let (mut at, mut size) = (offset, None);
                loop {
                    match rx.blocking_recv() {
                        Some(Some(piece)) => {
                            size = Some(d.write_file(&path, at, mode, &piece)?);
                            at += piece.len() as u64;
                        }
                        // The upload ended: an empty one still makes the file.
                        Some(None) => {
                            return match size {
                                Some(s) => Ok(s),
                                None => d.write_file(&path, offset, mode, &[]),
                            };
                        }
                        // The client failed or went away: what arrived stays, and
                        // the call answers the client's error.
                        None => {
                            return Err(deskgym_worker::DesktopError::Exec(
                                "the upload was cut".into(),
                            ));
                        }
                    }
                }
            })
        })?;
        let upload = async {
            let deadline = tokio::time::Instant::now() + bound;
            let mut piece = bytes::BytesMut::from(&first.data[..]);
            let mut total = piece.len() as u64;
            loop {
                if piece.len() >= UPLOAD_PIECE {
                    let full = piece.split().freeze();
                    // A closed receiver: the desktop side failed; its error answers.
                    if tx.send(Some(full)).await.is_err() {
                        return Ok(());
                    }
                }
                let next = tokio::time::timeout_at(deadline, stream.message())
                    .await
                    .map_err(|_| PoolError::SlowUpload {
                        ms: bound.as_millis(),
                    })??;
                let Some(chunk) = next else { break };
                total += chunk.data.len() as u64;
                if total > max {
                    return Err(Status::from(PoolError::Limit(format!(
                        "the file is over max_file_bytes={max}; upload the rest with a \
                         second PutFile at offset {}",
                        offset + total - chunk.data.len() as u64
                    ))));
                }
                piece.extend_from_slice(&chunk.data);
            }
            if !piece.is_empty() {
                let _ = tx.send(Some(piece.freeze())).await;
            }
            let _ = tx.send(None).await;
            Ok(())
        };
        let uploaded: Result<(), Status> = upload.await;
        drop(tx);
        let written = job.finish().await;
        uploaded?;
        Ok(Response::new(pb::PutFileResponse { size: written? }))
    }

    type GetFileStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::FileChunk, Status>> + Send>>;

    async fn get_file(
        &self,
        req: Request<pb::GetFileRequest>,
    ) -> Result<Response<Self::GetFileStream>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self.calls.granted(&r.env_id, &who, "files")?;
        let max = self.mgr.limits().max_file_bytes;
        let (path, offset) = (r.path, r.offset);
        let job = self
            .mgr
            .on_env(&env, Call::Files, self.mgr.op_timeout(), move |e, _| {
                e.files("get_file", &path, |d| d.read_file(&path, offset, max))
            })?;
        let (size, data, eof) = job.finish().await?;
        Ok(Response::new(file_chunks(offset, size, data, eof)))
    }

    type GetRecordingFileStream = Self::GetFileStream;

    async fn list_recordings(
        &self,
        req: Request<pb::ListRecordingsRequest>,
    ) -> Result<Response<pb::ListRecordingsResponse>, Status> {
        let who = principal(&req)?;
        let mgr = self.mgr.clone();
        let runs = PoolManager::join(self.mgr.spawn(move || Ok(mgr.recordings(&who)))).await?;
        Ok(Response::new(pb::ListRecordingsResponse {
            recordings: runs
                .into_iter()
                .map(|r| pb::Recording {
                    run: r.run,
                    status: r.status,
                    files: r
                        .files
                        .into_iter()
                        .map(|(path, size)| pb::RecordingFile { path, size })
                        .collect(),
                })
                .collect(),
        }))
    }

    async fn get_recording_file(
        &self,
        req: Request<pb::GetRecordingFileRequest>,
    ) -> Result<Response<Self::GetRecordingFileStream>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let offset = r.offset;
        let mgr = self.mgr.clone();
        let (size, data, eof) = PoolManager::join(
            self.mgr
                .spawn(move || mgr.recording_file(&who, &r.run, &r.path, offset)),
        )
        .await?;
        Ok(Response::new(file_chunks(offset, size, data, eof)))
    }

    async fn delete_recording(
        &self,
        req: Request<pb::DeleteRecordingRequest>,
    ) -> Result<Response<pb::DeleteRecordingResponse>, Status> {
        let who = principal(&req)?;
        let run = req.into_inner().run;
        let mgr = self.mgr.clone();
        PoolManager::join(self.mgr.spawn(move || mgr.delete_recording(&who, &run))).await?;
        Ok(Response::new(pb::DeleteRecordingResponse {}))
    }

    type TunnelStream = crate::tunnel::Outbound;

    async fn tunnel(
        &self,
        req: Request<tonic::Streaming<pb::TunnelData>>,
    ) -> Result<Response<Self::TunnelStream>, Status> {
        let who = principal(&req)?;
        let mut inbound = req.into_inner();
        let first = first_message(
            &mut inbound,
            "env_id",
            "the first names the env and the port",
        )
        .await?;
        let port = u16::try_from(first.port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| {
                Invalid::new(
                    "port",
                    format!("{} is not a TCP port (1-65535)", first.port),
                )
            })?;
        let env = self.calls.granted(&first.env_id, &who, "exec")?;
        let at = env.clone();
        let socket = tokio::task::spawn_blocking(move || at.agent_socket())
            .await
            .map_err(|e| PoolError::Internal(format!("tunnel lookup: {e}")))?
            .map_err(PoolError::from)?;
        let open = crate::tunnel::open(&env.id, &socket, port)
            .await
            .map_err(PoolError::from)?;
        Ok(Response::new(crate::tunnel::relay(
            open,
            first.data,
            inbound,
            self.closing.clone(),
        )))
    }

    type StepStreamStream =
        tokio_stream::wrappers::ReceiverStream<Result<pb::StepStreamResult, Status>>;

    async fn step_stream(
        &self,
        req: Request<tonic::Streaming<pb::StepStreamRequest>>,
    ) -> Result<Response<Self::StepStreamStream>, Status> {
        let who = principal(&req)?;
        let inbound = req.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(self.mgr.limits().max_batch.max(1) as usize);
        tokio::spawn(step_stream(
            self.clone(),
            who,
            inbound,
            tx,
            self.closing.clone(),
        ));
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }

    type DriveStream = crate::axstream::Outbound;

    async fn drive(
        &self,
        req: Request<tonic::Streaming<pb::DriveRequest>>,
    ) -> Result<Response<Self::DriveStream>, Status> {
        let who = principal(&req)?;
        let mut inbound = req.into_inner();
        let first = first_message(&mut inbound, "env_id", "the first names the env").await?;
        let observe = self.calls.opts(
            "if_none_match",
            first.encoding,
            &[],
            &[],
            first.tree.as_ref(),
        )?;
        let driver = crate::axstream::Driver::new(self.calls.clone(), who, &first, observe)?;
        Ok(Response::new(driver.run(
            first,
            inbound,
            self.closing.clone(),
        )))
    }

    async fn list_directory(
        &self,
        req: Request<pb::ListDirectoryRequest>,
    ) -> Result<Response<pb::ListDirectoryResponse>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self.calls.granted(&r.env_id, &who, "files")?;
        if r.depth > 8 {
            return Err(Invalid::new("depth", format!("{} is over 8", r.depth)).into());
        }
        let max = self.mgr.limits().max_list_entries as usize;
        let (path, depth) = (
            if r.path.is_empty() {
                ".".to_string()
            } else {
                r.path
            },
            r.depth.max(1),
        );
        let job = self
            .mgr
            .on_env(&env, Call::Files, self.mgr.op_timeout(), move |e, _| {
                e.files("list_directory", &path, |d| d.list_dir(&path, depth, max))
            })?;
        Ok(Response::new(convert::listing(job.finish().await?)))
    }

    async fn get_clipboard(
        &self,
        req: Request<pb::GetClipboardRequest>,
    ) -> Result<Response<pb::Clipboard>, Status> {
        let who = principal(&req)?;
        let env = self
            .calls
            .granted(&req.into_inner().env_id, &who, "clipboard")?;
        let job = self
            .mgr
            .on_env(&env, Call::Clipboard, self.mgr.op_timeout(), |e, _| {
                e.clipboard(None)
            })?;
        Ok(Response::new(pb::Clipboard {
            text: job.finish().await?,
        }))
    }

    async fn set_clipboard(
        &self,
        req: Request<pb::SetClipboardRequest>,
    ) -> Result<Response<pb::Clipboard>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self.calls.granted(&r.env_id, &who, "clipboard")?;
        let max = deskgym_worker::clipboard::MAX_CLIPBOARD_BYTES;
        if r.text.len() > max {
            return Err(Invalid::new(
                "text",
                format!(
                    "{} bytes is over the clipboard limit of {max}",
                    r.text.len()
                ),
            )
            .into());
        }
        let job = self
            .mgr
            .on_env(&env, Call::Clipboard, self.mgr.op_timeout(), move |e, _| {
                e.clipboard(Some(&r.text))
            })?;
        Ok(Response::new(pb::Clipboard {
            text: job.finish().await?,
        }))
    }

    async fn screenshot(
        &self,
        req: Request<pb::ScreenshotRequest>,
    ) -> Result<Response<pb::Observation>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self.mgr.env(&r.env_id, &who)?;
        let window = match pb::ScreenshotScope::try_from(r.scope) {
            Ok(pb::ScreenshotScope::Screen) => None,
            Ok(pb::ScreenshotScope::ActiveWindow) => Some(None),
            Ok(pb::ScreenshotScope::Window) => Some(Some(r.window)),
            Err(_) => {
                return Err(Invalid::new("scope", format!("unknown scope {}", r.scope)).into());
            }
        };
        if r.jpeg_quality > 100 {
            return Err(Invalid::new(
                "jpeg_quality",
                format!("{} is outside 1..=100 (0: the default)", r.jpeg_quality),
            )
            .into());
        }
        let quality = if r.jpeg_quality == 0 {
            crate::encode::JPEG_QUALITY
        } else {
            r.jpeg_quality as u8
        };
        let job = self.mgr.on_env(
            &env,
            Call::Screenshot,
            self.mgr.op_timeout(),
            move |e, _| {
                e.screenshot(window, r.max_long_edge, r.encoding, quality)
                    .map(convert::observation)
            },
        )?;
        Ok(Response::new(job.finish().await?))
    }
}
