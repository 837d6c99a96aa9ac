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
use crate::capability::Capability;
use crate::checked::{self, Field, MAX_CHORD_BYTES, On, VERBS};
use crate::convert;
use crate::env::{Call, ObsOptions};
use crate::pool::{EnvJob, PoolError, PoolManager};
use crate::spec::{Invalid, quote};

mod capabilities;
mod exec;
mod files;
mod frames;
mod screencast;
mod steps;

use files::file_chunks;
use steps::{finish, step_stream};

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
    /// Open screencasts: their slots and their shared producers.
    screencasts: crate::watch::Screencasts,
}

impl DeskgymService {
    /// Wraps a manager; `closing` says when the server shuts down.
    pub(crate) fn new(
        mgr: Arc<PoolManager>,
        closing: tokio::sync::watch::Receiver<bool>,
        screencasts: crate::watch::Screencasts,
        rings: Arc<crate::ring::Rings>,
    ) -> Self {
        Self {
            calls: Calls::with_rings(mgr.clone(), rings),
            screencasts,
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

#[tonic::async_trait]
impl Deskgym for DeskgymService {
    async fn get_capabilities(
        &self,
        req: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::Capabilities>, Status> {
        self.do_get_capabilities(req).await
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
            capabilities: pool
                .spec
                .capabilities
                .iter()
                .map(|c| c.to_string())
                .collect(),
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
            finish(
                self.calls
                    .start_reset(req.into_inner(), &Field::root(), &[], &who),
            )
            .await?,
        ))
    }

    async fn step(
        &self,
        req: Request<pb::StepRequest>,
    ) -> Result<Response<pb::StepResult>, Status> {
        let who = principal(&req)?;
        Ok(Response::new(
            finish(
                self.calls
                    .start_step(req.into_inner(), &Field::root(), &[], &who),
            )
            .await?,
        ))
    }

    async fn step_batch(
        &self,
        req: Request<pb::StepBatchRequest>,
    ) -> Result<Response<pb::StepBatchResponse>, Status> {
        self.do_step_batch(req).await
    }

    async fn observe(
        &self,
        req: Request<pb::ObserveRequest>,
    ) -> Result<Response<pb::Observation>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let env = self.mgr.env(&req.env_id, &who)?;
        let on = On {
            env: &env,
            limits: self.mgr.limits(),
            rings: self.calls.rings(),
            shared: &[],
        };
        let checked::Looking { opts, ring } = checked::observe(&req, &on)?;
        let job = self.mgr.on_env(
            &env,
            Call::Observe,
            self.mgr.op_timeout(),
            move |e, cache| {
                let mut o = convert::observation(e.observe(cache, &opts)?);
                if let Some(ring) = &ring {
                    ring.deliver(&mut o);
                }
                Ok(o)
            },
        )?;
        Ok(Response::new(job.finish().await?))
    }

    async fn get_frames(
        &self,
        req: Request<pb::GetFramesRequest>,
    ) -> Result<Response<pb::GetFramesResponse>, Status> {
        self.do_get_frames(req).await
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
        checked::pool_ids(&ids, self.mgr.limits())?;
        Ok(Response::new(pb::KeepAliveResponse {
            gone: self.mgr.keep_alive(&ids, &who),
        }))
    }

    async fn exec(
        &self,
        req: Request<pb::ExecRequest>,
    ) -> Result<Response<pb::ExecResponse>, Status> {
        self.do_exec(req).await
    }

    type ExecStreamStream = exec::ExecEvents;

    type ScreencastStream = screencast::Frames;

    async fn screencast(
        &self,
        req: Request<pb::ScreencastRequest>,
    ) -> Result<Response<Self::ScreencastStream>, Status> {
        self.do_screencast(req).await
    }

    async fn exec_stream(
        &self,
        req: Request<pb::ExecRequest>,
    ) -> Result<Response<Self::ExecStreamStream>, Status> {
        self.do_exec_stream(req).await
    }

    async fn list_windows(
        &self,
        req: Request<pb::ListWindowsRequest>,
    ) -> Result<Response<pb::ListWindowsResponse>, Status> {
        let who = principal(&req)?;
        let env = self
            .calls
            .granted(&req.into_inner().env_id, &who, Capability::Windows)?;
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
        self.do_put_file(req).await
    }

    type GetFileStream =
        std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::FileChunk, Status>> + Send>>;

    async fn get_file(
        &self,
        req: Request<pb::GetFileRequest>,
    ) -> Result<Response<Self::GetFileStream>, Status> {
        self.do_get_file(req).await
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

    async fn attach_frames(
        &self,
        req: Request<pb::AttachFramesRequest>,
    ) -> Result<Response<pb::AttachFramesResponse>, Status> {
        let who = principal(&req)?;
        let ring = self.calls.rings().attach(&who.name, req.get_ref())?;
        Ok(Response::new(ring))
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
        let port = checked::port(first.port)?;
        let env = self.calls.granted(&first.env_id, &who, Capability::Exec)?;
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
        let observe = checked::drive(&first, self.mgr.limits())?;
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
        self.do_list_directory(req).await
    }

    async fn get_clipboard(
        &self,
        req: Request<pb::GetClipboardRequest>,
    ) -> Result<Response<pb::Clipboard>, Status> {
        let who = principal(&req)?;
        let env = self
            .calls
            .granted(&req.into_inner().env_id, &who, Capability::Clipboard)?;
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
        let env = self.calls.granted(&r.env_id, &who, Capability::Clipboard)?;
        checked::clipboard_text(&r.text)?;
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
        let (shape, known) = checked::screenshot(&r, self.mgr.limits())?;
        let job = self.mgr.on_env(
            &env,
            Call::Screenshot,
            self.mgr.op_timeout(),
            move |e, _| {
                e.screenshot(shape, r.encoding, &known)
                    .map(convert::observation)
            },
        )?;
        Ok(Response::new(job.finish().await?))
    }
}
