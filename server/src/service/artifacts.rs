//! The artifact verbs: UploadArtifact (checked chunks, resumable), ArtifactUploadStatus,
//! DownloadArtifact, DeleteArtifact. Disk work runs on the blocking pool; the store
//! itself (`crate::artifacts`) knows nothing of gRPC.

use super::*;
use crate::artifacts::{self as store, ArtifactError, DOWNLOAD_CHUNK, Upload};

/// The stream DownloadArtifact answers.
pub(crate) type DataStream =
    tokio_stream::wrappers::ReceiverStream<Result<pb::ArtifactData, Status>>;

/// Chunks read ahead of a slow downloader.
const DOWNLOAD_QUEUE: usize = 4;

/// Longest `name` an upload may give its event.
const MAX_NAME: usize = 256;

/// Runs blocking store work off the async runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ArtifactError> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(format!("artifact store task: {e}")))?
        .map_err(Status::from)
}

impl DeskgymService {
    pub(super) async fn do_upload_artifact(
        &self,
        req: Request<tonic::Streaming<pb::ArtifactChunk>>,
    ) -> Result<Response<pb::Artifact>, Status> {
        let who = principal(&req)?;
        let mut stream = req.into_inner();
        let first = first_message(&mut stream, "upload_id", "the first names the upload").await?;
        store::check_upload_id("upload_id", &first.upload_id)?;
        if first.name.len() > MAX_NAME {
            return Err(Invalid::new("name", format!("over {MAX_NAME} bytes")).into());
        }
        // The env is checked before any byte is taken: another principal's is NOT_FOUND.
        let env = if first.env_id.is_empty() {
            None
        } else {
            Some(self.mgr.env(&first.env_id, &who)?)
        };
        let max_chunk = self.mgr.limits().max_artifact_chunk as usize;
        let (s, w, id, offset) = (
            self.artifacts.clone(),
            who.clone(),
            first.upload_id.clone(),
            first.offset,
        );
        let mut upload: Upload = blocking(move || s.begin(&w, &id, offset)).await?;
        let bound = self.mgr.op_timeout();
        // Only the first message names the event's artifact.
        let name = first.name.clone();
        let mut next = Some(first);
        loop {
            let chunk = match next.take() {
                Some(c) => c,
                None => {
                    // Each message must come within the server's op bound: a stalled
                    // client keeps its acknowledged bytes and resumes later.
                    let m = tokio::time::timeout(bound, stream.message())
                        .await
                        .map_err(|_| PoolError::SlowUpload {
                            ms: bound.as_millis(),
                        })??;
                    match m {
                        Some(c) => c,
                        None => {
                            return Err(Status::failed_precondition(format!(
                                "the upload ended without a `last` chunk; it holds {} bytes \
                                 under its id: resume at that offset",
                                upload.at()
                            )));
                        }
                    }
                }
            };
            if chunk.data.len() > max_chunk {
                return Err(Invalid::new(
                    "data",
                    format!(
                        "{} bytes in one chunk, over max_chunk_bytes={max_chunk}",
                        chunk.data.len()
                    ),
                )
                .into());
            }
            if chunk.last && !chunk.sha256.is_empty() {
                store::check_sha("sha256", &chunk.sha256)?;
            }
            let (last, declared) = (chunk.last, chunk.sha256);
            upload = blocking(move || {
                upload.append(chunk.offset, &chunk.data, chunk.crc32)?;
                Ok(upload)
            })
            .await?;
            if last {
                let stored = blocking(move || upload.finish(&declared)).await?;
                if let Some(env) = &env {
                    env.record_artifact(&stored.sha256, stored.size, &name);
                }
                return Ok(Response::new(pb::Artifact {
                    sha256: stored.sha256,
                    size: stored.size,
                }));
            }
        }
    }

    pub(super) async fn do_artifact_upload_status(
        &self,
        req: Request<pb::ArtifactUploadStatusRequest>,
    ) -> Result<Response<pb::ArtifactUploadState>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        store::check_upload_id("upload_id", &r.upload_id)?;
        let s = self.artifacts.clone();
        let id = r.upload_id.clone();
        let offset = blocking(move || Ok(s.held(&who.name, &id))).await?;
        Ok(Response::new(pb::ArtifactUploadState {
            upload_id: r.upload_id,
            offset,
        }))
    }

    pub(super) async fn do_download_artifact(
        &self,
        req: Request<pb::DownloadArtifactRequest>,
    ) -> Result<Response<DataStream>, Status> {
        use std::io::{Read, Seek};
        let who = principal(&req)?;
        let r = req.into_inner();
        store::check_sha("sha256", &r.sha256)?;
        let s = self.artifacts.clone();
        let (sha, offset) = (r.sha256, r.offset);
        let (mut file, size) = blocking(move || {
            let (path, size) = s.find(&who.name, &sha)?;
            Ok((std::fs::File::open(path)?, size))
        })
        .await?;
        if offset > size {
            return Err(Invalid::new(
                "offset",
                format!("{offset} is past the artifact's end ({size} bytes)"),
            )
            .into());
        }
        let (tx, rx) = tokio::sync::mpsc::channel(DOWNLOAD_QUEUE);
        // A reader thread feeds the stream, a bounded queue ahead of the client; a
        // client that goes away closes the queue and the thread stops.
        tokio::task::spawn_blocking(move || {
            let mut at = offset;
            if let Err(e) = file.seek(std::io::SeekFrom::Start(offset)) {
                let _ = tx.blocking_send(Err(Status::from(ArtifactError::Io(e))));
                return;
            }
            loop {
                let want = (size - at).min(DOWNLOAD_CHUNK as u64) as usize;
                let mut data = vec![0; want];
                if let Err(e) = file.read_exact(&mut data) {
                    let _ = tx.blocking_send(Err(Status::from(ArtifactError::Io(e))));
                    return;
                }
                let msg = pb::ArtifactData {
                    offset: at,
                    crc32: crc32fast::hash(&data),
                    data: Bytes::from(data),
                    size,
                    eof: at + want as u64 == size,
                };
                at += want as u64;
                let eof = msg.eof;
                if tx.blocking_send(Ok(msg)).is_err() || eof {
                    return;
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }

    pub(super) async fn do_delete_artifact(
        &self,
        req: Request<pb::DeleteArtifactRequest>,
    ) -> Result<Response<pb::DeleteArtifactResponse>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let s = self.artifacts.clone();
        let freed = match (r.sha256.is_empty(), r.upload_id.is_empty()) {
            (false, true) => {
                store::check_sha("sha256", &r.sha256)?;
                blocking(move || s.delete(&who.name, &r.sha256)).await?
            }
            (true, false) => {
                store::check_upload_id("upload_id", &r.upload_id)?;
                blocking(move || s.delete_upload(&who.name, &r.upload_id)).await?
            }
            _ => {
                return Err(Invalid::new(
                    "sha256",
                    "name exactly one of sha256 (an artifact) and upload_id (an unfinished \
                     upload)",
                )
                .into());
            }
        };
        Ok(Response::new(pb::DeleteArtifactResponse {
            freed_bytes: freed,
        }))
    }
}
