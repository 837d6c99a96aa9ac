//! PutDir and GetDir (capability `files`): a directory tree as a stream of typed
//! entries and their bytes, no tar on the wire, over the same desktop calls as
//! PutFile, GetFile and ListDirectory (`make_dir`, `write_file`, `read_file`,
//! `list_dir`), bounded by `Limits` (`max_tree_bytes`, `max_tree_entries`,
//! `max_tree_depth`).

use super::*;
use crate::artifacts::check_crc;
use pb::TreeEntryKind as Kind;

/// The stream GetDir answers.
pub(crate) type TreeStream = tokio_stream::wrappers::ReceiverStream<Result<pb::TreeEntry, Status>>;

/// Messages of a GetDir queued ahead of the client.
const TREE_QUEUE: usize = 4;

/// What PutDir's reader hands its desktop job, each entry already checked.
enum Op {
    Dir {
        path: String,
        mode: u32,
    },
    File {
        path: String,
        mode: u32,
        size: u64,
        data: Bytes,
    },
    Data(Bytes),
}

/// A permission field: 0o7777 at most.
fn check_mode(mode: u32) -> Result<(), Invalid> {
    if mode > 0o7777 {
        return Err(Invalid::new(
            "mode",
            format!("{mode:#o} is over 0o7777 (permission bits only)"),
        ));
    }
    Ok(())
}

/// Sends one message to a GetDir's client from a desktop job, waiting for room at most
/// until `deadline`: a client that stops reading must not hold the desktop's flight
/// until the job's own bound (which would restart the desktop).
fn send(
    tx: &tokio::sync::mpsc::Sender<Result<pb::TreeEntry, Status>>,
    mut msg: Result<pb::TreeEntry, Status>,
    deadline: std::time::Instant,
) -> Result<(), ()> {
    use tokio::sync::mpsc::error::TrySendError;
    loop {
        match tx.try_send(msg) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Closed(_)) => return Err(()),
            Err(TrySendError::Full(m)) => {
                if std::time::Instant::now() > deadline {
                    return Err(());
                }
                msg = m;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }
}

impl DeskgymService {
    pub(super) async fn do_put_dir(
        &self,
        req: Request<tonic::Streaming<pb::TreeEntry>>,
    ) -> Result<Response<pb::PutDirResponse>, Status> {
        let who = principal(&req)?;
        let mut stream = req.into_inner();
        let first =
            first_message(&mut stream, "kind", "the first names the env and the root").await?;
        if first.kind != Kind::Root as i32 {
            return Err(Invalid::new("kind", "the first message is TREE_ENTRY_KIND_ROOT").into());
        }
        let env = self
            .granted(&first.env_id, &who, Capability::Files, "PutDir")
            .await?;
        if first.path.is_empty() {
            return Err(Invalid::new("path", "the first message names the tree's root").into());
        }
        check_mode(first.mode)?;
        let l = self.mgr.limits().clone();
        let bound = self.mgr.op_timeout();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Op>(super::files::UPLOAD_QUEUE);
        let (root, root_mode) = (first.path.clone(), first.mode);
        // As PutFile: the flight is taken before the tree is read, and the job outlives
        // the client's own bound by one more bound for the writes.
        let job = self.mgr.on_env(&env, Call::Files, bound * 2, move |e, _| {
            e.files("put_dir", &root.clone(), |d| {
                d.make_dir(&root, root_mode)?;
                let resolved = d.list_dir(&root, 1, 0)?.path;
                let mut out = pb::PutDirResponse {
                    path: resolved.clone(),
                    ..Default::default()
                };
                // Directories whose mode would lock their owner out are made with the
                // owner's bits, and given their own mode last, deepest first (as tar does).
                let mut late = Vec::new();
                // The file being written: path, mode, bytes so far, size.
                let mut file: Option<(String, u32, u64, u64)> = None;
                let full = |p: &str| format!("{resolved}/{p}");
                loop {
                    let op = rx.blocking_recv();
                    let data = match op {
                        None => break,
                        Some(Op::Dir { path, mode }) => {
                            let owner = if mode == 0 { 0 } else { mode | 0o700 };
                            d.make_dir(&full(&path), owner)?;
                            if owner != mode {
                                late.push((full(&path), mode));
                            }
                            out.dirs += 1;
                            continue;
                        }
                        Some(Op::File {
                            path,
                            mode,
                            size,
                            data,
                        }) => {
                            let mode = if mode == 0 { 0o644 } else { mode };
                            file = Some((full(&path), mode, 0, size));
                            out.files += 1;
                            // An empty file is made here, whatever follows.
                            d.write_file(&full(&path), 0, mode | 0o600, &[])?;
                            data
                        }
                        Some(Op::Data(data)) => data,
                    };
                    let Some((path, mode, at, size)) = file.as_mut() else {
                        continue;
                    };
                    if !data.is_empty() {
                        d.write_file(path, *at, *mode | 0o600, &data)?;
                        *at += data.len() as u64;
                        out.bytes += data.len() as u64;
                    }
                    if *at == *size && *mode | 0o600 != *mode {
                        d.write_file(path, *at, *mode, &[])?;
                    }
                }
                for (path, mode) in late.into_iter().rev() {
                    d.make_dir(&path, mode)?;
                }
                Ok(out)
            })
        })?;
        let upload = async {
            let deadline = tokio::time::Instant::now() + bound;
            // Bytes still owed to the file being sent, and the entries seen.
            let (mut owed, mut offset, mut entries, mut total) = (0u64, 0u64, 0u32, 0u64);
            loop {
                let next = tokio::time::timeout_at(deadline, stream.message())
                    .await
                    .map_err(|_| PoolError::SlowUpload {
                        ms: bound.as_millis(),
                    })??;
                let Some(m) = next else { break };
                if m.data.len() > l.max_artifact_chunk as usize {
                    return Err(Status::from(Invalid::new(
                        "data",
                        format!(
                            "{} bytes in one message, over max_chunk_bytes={}",
                            m.data.len(),
                            l.max_artifact_chunk
                        ),
                    )));
                }
                let kind = Kind::try_from(m.kind).unwrap_or(Kind::Invalid);
                if matches!(kind, Kind::Dir | Kind::File) {
                    if owed > 0 {
                        return Err(Status::from(Invalid::new(
                            "kind",
                            format!("a new entry while the last file still owes {owed} bytes"),
                        )));
                    }
                    let depth = checked::tree_path("path", &m.path)?;
                    check_mode(m.mode)?;
                    if depth > l.max_tree_depth {
                        return Err(PoolError::Limit(format!(
                            "{} is {depth} levels below the root, over max_tree_depth={}",
                            quote(&m.path),
                            l.max_tree_depth
                        ))
                        .into());
                    }
                    entries += 1;
                    if entries > l.max_tree_entries {
                        return Err(PoolError::Limit(format!(
                            "more than max_tree_entries={} entries; send the tree in parts",
                            l.max_tree_entries
                        ))
                        .into());
                    }
                }
                let op = match kind {
                    Kind::Dir => Op::Dir {
                        path: m.path,
                        mode: m.mode,
                    },
                    Kind::File | Kind::Data => {
                        if kind == Kind::File {
                            total = total.saturating_add(m.size);
                            if total > l.max_tree_bytes {
                                return Err(PoolError::Limit(format!(
                                    "the tree's files hold over max_tree_bytes={}; send it \
                                     in parts",
                                    l.max_tree_bytes
                                ))
                                .into());
                            }
                            (owed, offset) = (m.size, 0);
                        }
                        if m.data.len() as u64 > owed {
                            return Err(Status::from(Invalid::new(
                                "data",
                                format!(
                                    "{} bytes where the file owes {owed}; a FILE's `size` \
                                     counts all its bytes",
                                    m.data.len()
                                ),
                            )));
                        }
                        check_crc(offset, &m.data, m.crc32).map_err(Status::from)?;
                        owed -= m.data.len() as u64;
                        offset += m.data.len() as u64;
                        if kind == Kind::File {
                            Op::File {
                                path: m.path,
                                mode: m.mode,
                                size: m.size,
                                data: m.data,
                            }
                        } else {
                            Op::Data(m.data)
                        }
                    }
                    _ => {
                        return Err(Status::from(Invalid::new(
                            "kind",
                            format!("{} after the first message; DIR, FILE or DATA", m.kind),
                        )));
                    }
                };
                // A closed receiver: the desktop side failed; its error answers.
                if tx.send(op).await.is_err() {
                    return Ok(());
                }
            }
            if owed > 0 {
                return Err(Status::from(Invalid::new(
                    "data",
                    format!("the stream ended while the last file still owed {owed} bytes"),
                )));
            }
            Ok(())
        };
        let uploaded: Result<(), Status> = upload.await;
        drop(tx);
        let written = job.finish().await;
        uploaded?;
        Ok(Response::new(written?))
    }

    pub(super) async fn do_get_dir(
        &self,
        req: Request<pb::GetDirRequest>,
    ) -> Result<Response<TreeStream>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self
            .granted(&r.env_id, &who, Capability::Files, "GetDir")
            .await?;
        if r.path.is_empty() {
            return Err(Invalid::new("path", "name the directory to send").into());
        }
        let l = self.mgr.limits().clone();
        let bound = self.mgr.op_timeout();
        let (tx, rx) = tokio::sync::mpsc::channel(TREE_QUEUE);
        let (out, path) = (tx.clone(), r.path);
        let job = self.mgr.on_env(&env, Call::Files, bound * 2, move |e, _| {
            // The client's pace has one bound; the job's own is twice that.
            let deadline = std::time::Instant::now() + bound;
            e.files("get_dir", &path.clone(), |d| {
                // One level and one entry more than allowed, to tell "at the bound" from
                // "over it".
                let listing =
                    d.list_dir(&path, l.max_tree_depth + 1, l.max_tree_entries as usize + 1)?;
                let deepest = listing
                    .entries
                    .iter()
                    .map(|x| x.path.split('/').count() as u32)
                    .max()
                    .unwrap_or(0);
                let bytes: u64 = listing
                    .entries
                    .iter()
                    .filter(|x| x.kind == "file")
                    .map(|x| x.size)
                    .sum();
                let over =
                    if listing.truncated || listing.entries.len() > l.max_tree_entries as usize {
                        Some(format!(
                            "over max_tree_entries={} entries",
                            l.max_tree_entries
                        ))
                    } else if deepest > l.max_tree_depth {
                        Some(format!("deeper than max_tree_depth={}", l.max_tree_depth))
                    } else if bytes > l.max_tree_bytes {
                        Some(format!(
                            "{bytes} bytes of files, over max_tree_bytes={}",
                            l.max_tree_bytes
                        ))
                    } else {
                        None
                    };
                if let Some(why) = over {
                    return Ok(Err(Status::from(PoolError::Limit(format!(
                        "the tree at {} is {why}; fetch its subdirectories one by one",
                        quote(&listing.path)
                    )))));
                }
                let root = listing.path.clone();
                let gone = || Ok(Ok(()));
                let msg = |kind: Kind| pb::TreeEntry {
                    kind: kind as i32,
                    ..Default::default()
                };
                if send(
                    &out,
                    Ok(pb::TreeEntry {
                        path: root.clone(),
                        ..msg(Kind::Root)
                    }),
                    deadline,
                )
                .is_err()
                {
                    return gone();
                }
                let (mut entries, mut total, mut skipped) = (0u32, 0u64, Vec::new());
                let chunk = u64::from(l.max_artifact_chunk).min(FILE_CHUNK_BYTES);
                for x in listing.entries {
                    let m = match x.kind.as_str() {
                        "dir" => pb::TreeEntry {
                            path: x.path,
                            mode: x.mode,
                            ..msg(Kind::Dir)
                        },
                        "file" => {
                            let full = format!("{root}/{}", x.path);
                            let first = d.read_file(&full, 0, chunk)?;
                            let size = first.size;
                            let mut at = first.data.len() as u64;
                            total += size;
                            entries += 1;
                            let head = pb::TreeEntry {
                                path: x.path,
                                mode: x.mode,
                                size,
                                crc32: crc32fast::hash(&first.data),
                                data: Bytes::from(first.data),
                                ..msg(Kind::File)
                            };
                            if send(&out, Ok(head), deadline).is_err() {
                                return gone();
                            }
                            // Up to the size read first: a file that grows meanwhile is
                            // cut there, one that shrinks fails the call.
                            while at < size {
                                let c = d.read_file(&full, at, chunk.min(size - at))?;
                                if c.data.is_empty() {
                                    return Ok(Err(Status::failed_precondition(format!(
                                        "{} shrank while GetDir read it",
                                        quote(&full)
                                    ))));
                                }
                                at += c.data.len() as u64;
                                let m = pb::TreeEntry {
                                    crc32: crc32fast::hash(&c.data),
                                    data: Bytes::from(c.data),
                                    ..msg(Kind::Data)
                                };
                                if send(&out, Ok(m), deadline).is_err() {
                                    return gone();
                                }
                            }
                            continue;
                        }
                        // Symlinks are never followed (one may point out of the tree),
                        // and only regular files are read.
                        _ => {
                            skipped.push(x.path);
                            continue;
                        }
                    };
                    entries += 1;
                    if send(&out, Ok(m), deadline).is_err() {
                        return gone();
                    }
                }
                let end = pb::TreeEntry {
                    size: total,
                    entries,
                    skipped,
                    ..msg(Kind::End)
                };
                let _ = send(&out, Ok(end), deadline);
                Ok(Ok(()))
            })
        })?;
        // The job's failure (a desktop error, a bound) ends the stream as its status.
        tokio::spawn(async move {
            let err = match job.finish().await {
                Ok(Ok(())) => return,
                Ok(Err(s)) => s,
                Err(e) => Status::from(e),
            };
            let _ = tx.send(Err(err)).await;
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }
}

/// Most bytes read from the desktop per GetDir message.
const FILE_CHUNK_BYTES: u64 = 1 << 20;
