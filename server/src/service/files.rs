//! The files verbs (capability `files`): PutFile streamed in bounded pieces,
//! GetFile in chunks, ListDirectory.

use super::*;

/// A file's bytes read from `offset` as the stream of chunks GetFile answers.
pub(super) fn file_chunks(
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
pub(super) const UPLOAD_PIECE: usize = 256 << 10;

/// Pieces of one upload queued for the desktop before reading the client waits.
pub(super) const UPLOAD_QUEUE: usize = 2;

/// Bytes of file data per GetFile message.
pub(super) const FILE_CHUNK: usize = 1 << 20;

impl DeskgymService {
    pub(super) async fn do_put_file(
        &self,
        req: Request<tonic::Streaming<pb::PutFileChunk>>,
    ) -> Result<Response<pb::PutFileResponse>, Status> {
        let who = principal(&req)?;
        let mut stream = req.into_inner();
        let first = first_message(&mut stream, "path", "the first names the file").await?;
        let env = self
            .granted(&first.env_id, &who, Capability::Files, "PutFile")
            .await?;
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

    pub(super) async fn do_get_file(
        &self,
        req: Request<pb::GetFileRequest>,
    ) -> Result<Response<<Self as Deskgym>::GetFileStream>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self
            .granted(&r.env_id, &who, Capability::Files, "GetFile")
            .await?;
        let max = self.mgr.limits().max_file_bytes;
        let (path, offset) = (r.path, r.offset);
        let job = self
            .mgr
            .on_env(&env, Call::Files, self.mgr.op_timeout(), move |e, _| {
                e.files("get_file", &path, |d| d.read_file(&path, offset, max))
            })?;
        let c = job.finish().await?;
        Ok(Response::new(file_chunks(offset, c.size, c.data, c.eof)))
    }

    pub(super) async fn do_list_directory(
        &self,
        req: Request<pb::ListDirectoryRequest>,
    ) -> Result<Response<pb::ListDirectoryResponse>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self
            .granted(&r.env_id, &who, Capability::Files, "ListDirectory")
            .await?;
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
}
