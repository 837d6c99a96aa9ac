//! The `deskgym.v1.Deskgym` service: the trait impl only dispatches, each RPC group in
//! its own file; validation at the edge, blocking work on the step pool, one error
//! mapping (`error.rs`).

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

mod artifacts;
mod capabilities;
mod checkpoints;
mod desktop;
mod drive;
mod events;
mod exec;
mod files;
mod frames;
mod observe;
mod pools;
mod ports;
mod recordings;
mod screencast;
mod steps;
mod tree;
mod unlock;

use files::file_chunks;

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
    screencasts: crate::screen_streams::Screencasts,
    /// The content-addressed artifact store on the data dir.
    artifacts: Arc<crate::artifacts::Store>,
}

impl DeskgymService {
    /// Wraps a manager; `closing` says when the server shuts down.
    pub(crate) fn new(
        mgr: Arc<PoolManager>,
        closing: tokio::sync::watch::Receiver<bool>,
        screencasts: crate::screen_streams::Screencasts,
        rings: Arc<crate::ring::Rings>,
        artifacts: Arc<crate::artifacts::Store>,
    ) -> Self {
        Self {
            artifacts,
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
        self.do_create_pool(req).await
    }

    async fn close_pool(
        &self,
        req: Request<pb::ClosePoolRequest>,
    ) -> Result<Response<pb::ClosePoolResponse>, Status> {
        self.do_close_pool(req).await
    }

    async fn reset(
        &self,
        req: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        self.do_reset(req).await
    }

    async fn step(
        &self,
        req: Request<pb::StepRequest>,
    ) -> Result<Response<pb::StepResult>, Status> {
        self.do_step(req).await
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
        self.do_observe(req).await
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
        self.do_get_cache_stats(req).await
    }

    async fn save(
        &self,
        req: Request<pb::SaveRequest>,
    ) -> Result<Response<pb::Checkpoint>, Status> {
        self.do_save(req).await
    }

    async fn restore(
        &self,
        req: Request<pb::RestoreRequest>,
    ) -> Result<Response<pb::RestoreResponse>, Status> {
        self.do_restore(req).await
    }

    async fn fork(
        &self,
        req: Request<pb::ForkRequest>,
    ) -> Result<Response<pb::ForkResponse>, Status> {
        self.do_fork(req).await
    }

    async fn list_checkpoints(
        &self,
        req: Request<pb::ListCheckpointsRequest>,
    ) -> Result<Response<pb::ListCheckpointsResponse>, Status> {
        self.do_list_checkpoints(req).await
    }

    async fn delete_checkpoint(
        &self,
        req: Request<pb::DeleteCheckpointRequest>,
    ) -> Result<Response<pb::DeleteCheckpointResponse>, Status> {
        self.do_delete_checkpoint(req).await
    }

    async fn keep_alive(
        &self,
        req: Request<pb::KeepAliveRequest>,
    ) -> Result<Response<pb::KeepAliveResponse>, Status> {
        self.do_keep_alive(req).await
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
        self.do_list_windows(req).await
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
        self.do_list_recordings(req).await
    }

    async fn get_recording_file(
        &self,
        req: Request<pb::GetRecordingFileRequest>,
    ) -> Result<Response<Self::GetRecordingFileStream>, Status> {
        self.do_get_recording_file(req).await
    }

    async fn delete_recording(
        &self,
        req: Request<pb::DeleteRecordingRequest>,
    ) -> Result<Response<pb::DeleteRecordingResponse>, Status> {
        self.do_delete_recording(req).await
    }

    async fn attach_frames(
        &self,
        req: Request<pb::AttachFramesRequest>,
    ) -> Result<Response<pb::AttachFramesResponse>, Status> {
        self.do_attach_frames(req).await
    }

    async fn unlock(
        &self,
        req: Request<pb::UnlockRequest>,
    ) -> Result<Response<pb::UnlockResponse>, Status> {
        self.do_unlock(req).await
    }

    async fn relock(
        &self,
        req: Request<pb::RelockRequest>,
    ) -> Result<Response<pb::RelockResponse>, Status> {
        self.do_relock(req).await
    }

    async fn answer_capability(
        &self,
        req: Request<pb::AnswerCapabilityRequest>,
    ) -> Result<Response<pb::AnswerCapabilityResponse>, Status> {
        self.do_answer_capability(req).await
    }

    type TunnelStream = crate::tunnel::Outbound;

    async fn tunnel(
        &self,
        req: Request<tonic::Streaming<pb::TunnelData>>,
    ) -> Result<Response<Self::TunnelStream>, Status> {
        self.do_tunnel(req).await
    }

    type StepStreamStream =
        tokio_stream::wrappers::ReceiverStream<Result<pb::StepStreamResult, Status>>;

    async fn step_stream(
        &self,
        req: Request<tonic::Streaming<pb::StepStreamRequest>>,
    ) -> Result<Response<Self::StepStreamStream>, Status> {
        self.do_step_stream(req).await
    }

    type DriveStream = crate::axstream::Outbound;

    async fn drive(
        &self,
        req: Request<tonic::Streaming<pb::DriveRequest>>,
    ) -> Result<Response<Self::DriveStream>, Status> {
        self.do_drive(req).await
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
        self.do_get_clipboard(req).await
    }

    async fn set_clipboard(
        &self,
        req: Request<pb::SetClipboardRequest>,
    ) -> Result<Response<pb::Clipboard>, Status> {
        self.do_set_clipboard(req).await
    }

    async fn screenshot(
        &self,
        req: Request<pb::ScreenshotRequest>,
    ) -> Result<Response<pb::Observation>, Status> {
        self.do_screenshot(req).await
    }

    async fn get_env(
        &self,
        req: Request<pb::GetEnvRequest>,
    ) -> Result<Response<pb::EnvInfo>, Status> {
        self.do_get_env(req).await
    }

    type WatchEventsStream = events::EnvEvents;

    async fn watch_events(
        &self,
        req: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        self.do_watch_events(req).await
    }

    async fn put_dir(
        &self,
        req: Request<tonic::Streaming<pb::TreeEntry>>,
    ) -> Result<Response<pb::PutDirResponse>, Status> {
        self.do_put_dir(req).await
    }

    type GetDirStream = tree::TreeStream;

    async fn get_dir(
        &self,
        req: Request<pb::GetDirRequest>,
    ) -> Result<Response<Self::GetDirStream>, Status> {
        self.do_get_dir(req).await
    }

    async fn upload_artifact(
        &self,
        req: Request<tonic::Streaming<pb::ArtifactChunk>>,
    ) -> Result<Response<pb::Artifact>, Status> {
        self.do_upload_artifact(req).await
    }

    async fn artifact_upload_status(
        &self,
        req: Request<pb::ArtifactUploadStatusRequest>,
    ) -> Result<Response<pb::ArtifactUploadState>, Status> {
        self.do_artifact_upload_status(req).await
    }

    type DownloadArtifactStream = artifacts::DataStream;

    async fn download_artifact(
        &self,
        req: Request<pb::DownloadArtifactRequest>,
    ) -> Result<Response<Self::DownloadArtifactStream>, Status> {
        self.do_download_artifact(req).await
    }

    async fn delete_artifact(
        &self,
        req: Request<pb::DeleteArtifactRequest>,
    ) -> Result<Response<pb::DeleteArtifactResponse>, Status> {
        self.do_delete_artifact(req).await
    }
}
