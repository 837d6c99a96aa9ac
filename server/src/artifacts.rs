//! The artifact store: bytes addressed by their SHA-256, stored once per server, each
//! principal reaching only what it uploaded itself.
//!
//! On disk under `<data-dir>/artifacts/`: `blobs/<sha256>` (one file per distinct
//! content, whoever uploaded it), `refs/<principal>/<sha256>` (an empty file: this
//! principal uploaded it and may read it) and `partial/<principal>/<upload id>` (an
//! unfinished upload: every byte in it was checked against its chunk's CRC-32 before
//! it was written, so its length is where the upload resumes). A principal without a
//! ref gets NOT_FOUND for a blob that exists, exactly as for one that does not: a
//! tenant cannot learn what another stored by guessing hashes, and an upload always
//! carries every byte (the store never answers "already have it" across principals).
//!
//! Shares: what a principal's refs and partial uploads hold is counted once from disk
//! (the first time the principal uses the store after a start) and kept in memory,
//! charged chunk by chunk before each write and released by DeleteArtifact, so two
//! uploads of one principal at once cannot pass its share between them.

use std::collections::HashMap;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::Digest;

use crate::spec::{Invalid, quote};

/// Why a store operation failed, in the store's words (`error.rs` maps them).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArtifactError {
    /// A request field is malformed.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// A chunk's bytes do not match its CRC-32: corrupted on the way.
    #[error(
        "chunk at offset {offset}: its data has CRC-32 {got:#010x}, the chunk says \
         {want:#010x}; damaged on the way: resend from offset {offset} (an artifact upload \
         holds every byte before it)"
    )]
    Checksum { offset: u64, want: u32, got: u32 },
    /// The whole content does not hash to what the client said.
    #[error(
        "the uploaded bytes hash to {actual}, the last chunk says {declared}; nothing was \
         stored (start the upload again)"
    )]
    ShaMismatch { declared: String, actual: String },
    /// No such artifact for this principal (unknown and another's alike).
    #[error("artifact {0} not found (never uploaded by you, or deleted)")]
    NotFound(String),
    /// No such unfinished upload for this principal.
    #[error("upload {0} not found (finished, deleted, or never started)")]
    NoUpload(String),
    /// The principal's share would be passed.
    #[error(
        "artifact store share used: your artifacts and unfinished uploads hold {used} \
         bytes of your {share}-byte share and this chunk needs {need} more; delete \
         artifacts or unfinished uploads with DeleteArtifact, or ask for a larger \
         `artifact_mb=`"
    )]
    Share { used: u64, share: u64, need: u64 },
    /// A resume past what the upload holds.
    #[error("upload {id} holds {held} bytes; resume at offset {held} or earlier, not {asked}")]
    Offset { id: String, held: u64, asked: u64 },
    /// A chunk that does not follow the one before it.
    #[error("chunk at offset {got} does not follow the previous chunk, which ended at {want}")]
    Gap { want: u64, got: u64 },
    /// Another call is uploading under the same id.
    #[error("upload {0} is in progress on another call; wait for it or use another id")]
    InProgress(String),
    /// The data dir failed us.
    #[error("artifact store: {0}")]
    Io(#[from] std::io::Error),
}

/// A stored artifact's address and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stored {
    /// Lowercase hex SHA-256.
    pub sha256: String,
    /// Bytes.
    pub size: u64,
}

/// The store of one server.
#[derive(Debug)]
pub(crate) struct Store {
    root: PathBuf,
    /// Bytes each principal's refs and partial uploads hold, by principal name;
    /// absent until counted from disk. Also the lock that orders every change of refs
    /// and blobs (a delete never removes a blob a finishing upload just referenced).
    used: Mutex<HashMap<Arc<str>, u64>>,
    /// Uploads being written, (principal, id): one call per upload at a time. Each
    /// holds the bytes its call has acknowledged, which is what a status answers while
    /// the call is open (the file's length may include a chunk half written).
    open: Mutex<OpenUploads>,
}

/// (principal, upload id) -> the bytes its call has acknowledged.
type OpenUploads = HashMap<(Arc<str>, String), Arc<AtomicU64>>;

/// Bytes per chunk a download answers.
pub(crate) const DOWNLOAD_CHUNK: usize = 1 << 20;

/// A chunk's bytes against the CRC-32 (IEEE) the chunk carries: DATA_LOSS when the
/// bytes were damaged on the way. `offset` places the chunk in the message.
pub(crate) fn check_crc(offset: u64, data: &[u8], crc: u32) -> Result<(), ArtifactError> {
    let got = crc32fast::hash(data);
    if got != crc {
        return Err(ArtifactError::Checksum {
            offset,
            want: crc,
            got,
        });
    }
    Ok(())
}

/// Whether `s` is a SHA-256 as the store spells it: 64 lowercase hex digits.
pub(crate) fn check_sha(field: &str, s: &str) -> Result<(), Invalid> {
    if s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!(
                "{} is not a SHA-256: 64 lowercase hex digits, as UploadArtifact answers",
                quote(s)
            ),
        ))
    }
}

/// Whether `s` is an upload id: 8-64 of `[A-Za-z0-9_-]` (a file name in the store).
pub(crate) fn check_upload_id(field: &str, s: &str) -> Result<(), Invalid> {
    if (8..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!(
                "{} is not an upload id: 8-64 of letters, digits, '_' and '-' (a random \
                 one per upload, kept to resume it)",
                quote(s)
            ),
        ))
    }
}

/// Lowercase hex of `bytes`.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// A principal's folder name: its name when that is a plain file name, else hex (token
/// file names are letters, digits, `_`, `-`, `.`; hex keeps any other name safe).
fn folder(principal: &str) -> String {
    if !principal.is_empty()
        && !principal.starts_with('.')
        && principal
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    {
        principal.to_string()
    } else {
        format!("x-{}", to_hex(principal.as_bytes()))
    }
}

/// An upload being written by one call: appends checked chunks to its partial file,
/// hashing as it goes. Dropping it leaves the partial file for a resume.
pub(crate) struct Upload {
    store: Arc<Store>,
    principal: Arc<str>,
    share: u64,
    id: String,
    file: std::fs::File,
    path: PathBuf,
    hasher: sha2::Sha256,
    /// Bytes in the partial file.
    at: u64,
    /// `at`, published to [`Store::held`] once each chunk is written.
    acked: Arc<AtomicU64>,
}

impl Store {
    /// The store under `<data_dir>/artifacts` (made on first use).
    pub(crate) fn new(data_dir: &Path) -> Self {
        Self {
            root: data_dir.join("artifacts"),
            used: Mutex::new(HashMap::new()),
            open: Mutex::new(HashMap::new()),
        }
    }

    fn blob(&self, sha: &str) -> PathBuf {
        self.root.join("blobs").join(sha)
    }

    fn refs(&self, principal: &str) -> PathBuf {
        self.root.join("refs").join(folder(principal))
    }

    fn partials(&self, principal: &str) -> PathBuf {
        self.root.join("partial").join(folder(principal))
    }

    /// The usage map, counted from disk for `principal` if it is not yet.
    fn usage(
        &self,
        principal: &Arc<str>,
    ) -> std::io::Result<std::sync::MutexGuard<'_, HashMap<Arc<str>, u64>>> {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if !used.contains_key(principal) {
            let mut n = 0;
            for (dir, blobs) in [
                (self.refs(principal), true),
                (self.partials(principal), false),
            ] {
                let Ok(rd) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for e in rd.flatten() {
                    let size = if blobs {
                        std::fs::metadata(self.blob(&e.file_name().to_string_lossy()))
                    } else {
                        e.metadata()
                    };
                    n += size.map_or(0, |m| m.len());
                }
            }
            used.insert(principal.clone(), n);
        }
        Ok(used)
    }

    /// Bytes `principal`'s artifacts and unfinished uploads hold.
    pub(crate) fn used(&self, principal: &crate::auth::Principal) -> std::io::Result<u64> {
        Ok(self.usage(&principal.name)?[&principal.name])
    }

    /// Bytes an unfinished upload holds (0 when there is none): while a call writes
    /// it, the chunks that call has acknowledged.
    pub(crate) fn held(&self, principal: &str, id: &str) -> u64 {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(acked) = open.get(&(Arc::<str>::from(principal), id.to_string())) {
            return acked.load(Ordering::Acquire);
        }
        // A closed upload's file is whole chunks: a failed write is cut back.
        std::fs::metadata(self.partials(principal).join(id)).map_or(0, |m| m.len())
    }

    /// Starts (offset 0) or resumes an upload. Blocking (a resume hashes what is held).
    pub(crate) fn begin(
        self: &Arc<Self>,
        who: &crate::auth::Principal,
        id: &str,
        offset: u64,
    ) -> Result<Upload, ArtifactError> {
        let principal = who.name.clone();
        let key = (principal.clone(), id.to_string());
        let acked = Arc::new(AtomicU64::new(offset));
        {
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            if open.contains_key(&key) {
                return Err(ArtifactError::InProgress(id.into()));
            }
            open.insert(key, acked.clone());
        }
        // From here the id is ours until the Upload drops (it removes it), or this fails.
        let release = |e: ArtifactError| {
            self.open
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&(principal.clone(), id.to_string()));
            e
        };
        let dir = self.partials(&principal);
        std::fs::create_dir_all(&dir).map_err(|e| release(e.into()))?;
        let path = dir.join(id);
        let open = || -> Result<Upload, ArtifactError> {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)?;
            let held = file.metadata()?.len();
            if offset > held {
                return Err(ArtifactError::Offset {
                    id: id.into(),
                    held,
                    asked: offset,
                });
            }
            // Resumed earlier than held: the rest is dropped and its bytes released.
            if offset < held {
                file.set_len(offset)?;
                let mut used = self.usage(&principal)?;
                if let Some(n) = used.get_mut(&principal) {
                    *n = n.saturating_sub(held - offset);
                }
            }
            let mut hasher = sha2::Sha256::new();
            file.seek(std::io::SeekFrom::Start(0))?;
            let mut buf = vec![0; 1 << 20];
            let mut left = offset;
            while left > 0 {
                let n = file.read(&mut buf[..left.min(1 << 20) as usize])?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                left -= n as u64;
            }
            file.seek(std::io::SeekFrom::Start(offset))?;
            Ok(Upload {
                store: self.clone(),
                principal: principal.clone(),
                share: who.max_artifact_bytes,
                id: id.into(),
                file,
                path: path.clone(),
                hasher,
                at: offset,
                acked,
            })
        };
        // Counted before the file is made, so a new upload's empty file is not
        // counted twice.
        drop(self.usage(&principal).map_err(|e| release(e.into()))?);
        open().map_err(release)
    }

    /// An artifact of `principal`'s: its blob's path and size, or NOT_FOUND.
    pub(crate) fn find(&self, principal: &str, sha: &str) -> Result<(PathBuf, u64), ArtifactError> {
        let not_found = || ArtifactError::NotFound(sha.into());
        if !self.refs(principal).join(sha).exists() {
            return Err(not_found());
        }
        let blob = self.blob(sha);
        let size = std::fs::metadata(&blob).map_err(|_| not_found())?.len();
        Ok((blob, size))
    }

    /// Drops `principal`'s ref to `sha` (and the blob when no principal refers to it);
    /// the bytes freed from its share.
    pub(crate) fn delete(&self, principal: &Arc<str>, sha: &str) -> Result<u64, ArtifactError> {
        let mut used = self.usage(principal)?;
        let r = self.refs(principal).join(sha);
        if !r.exists() {
            return Err(ArtifactError::NotFound(sha.into()));
        }
        let size = std::fs::metadata(self.blob(sha)).map_or(0, |m| m.len());
        std::fs::remove_file(&r)?;
        let others = std::fs::read_dir(self.root.join("refs"))?
            .flatten()
            .any(|d| d.path().join(sha).exists());
        if !others {
            std::fs::remove_file(self.blob(sha))?;
        }
        if let Some(n) = used.get_mut(principal) {
            *n = n.saturating_sub(size);
        }
        Ok(size)
    }

    /// Drops an unfinished upload; the bytes freed.
    pub(crate) fn delete_upload(
        &self,
        principal: &Arc<str>,
        id: &str,
    ) -> Result<u64, ArtifactError> {
        let busy = self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(&(principal.clone(), id.to_string()));
        if busy {
            return Err(ArtifactError::InProgress(id.into()));
        }
        let mut used = self.usage(principal)?;
        let p = self.partials(principal).join(id);
        let size = std::fs::metadata(&p)
            .map_err(|_| ArtifactError::NoUpload(id.into()))?
            .len();
        std::fs::remove_file(&p)?;
        if let Some(n) = used.get_mut(principal) {
            *n = n.saturating_sub(size);
        }
        Ok(size)
    }

    /// Blocking: removes the unfinished uploads nobody has written to for `idle` (a
    /// client that never came back to resume), releasing their bytes from their
    /// principals' shares. An upload being written is never touched. Returns the uploads
    /// removed and their bytes.
    pub(crate) fn sweep(&self, idle: std::time::Duration) -> (u64, u64) {
        let Some(cutoff) = std::time::SystemTime::now().checked_sub(idle) else {
            return (0, 0);
        };
        let (mut files, mut bytes) = (0, 0);
        let Ok(principals) = std::fs::read_dir(self.root.join("partial")) else {
            return (0, 0);
        };
        for dir in principals.flatten() {
            let folder_name = dir.file_name().to_string_lossy().into_owned();
            let Ok(uploads) = std::fs::read_dir(dir.path()) else {
                continue;
            };
            for e in uploads.flatten() {
                let id = e.file_name().to_string_lossy().into_owned();
                // Held across the check and the removal: a resume of this id waits
                // (`begin` inserts here first), so it never writes to a removed file.
                let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
                if open
                    .keys()
                    .any(|(who, busy)| *busy == id && folder(who) == folder_name)
                {
                    continue;
                }
                let Ok(meta) = e.metadata() else { continue };
                if meta.modified().map_or(true, |m| m > cutoff) {
                    continue;
                }
                // Under the share lock, so a count from disk cannot race the removal.
                let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
                if std::fs::remove_file(e.path()).is_err() {
                    continue;
                }
                if let Some(n) = used
                    .iter_mut()
                    .find_map(|(who, n)| (folder(who) == folder_name).then_some(n))
                {
                    *n = n.saturating_sub(meta.len());
                }
                drop((used, open));
                tracing::info!(upload = %id, bytes = meta.len(), "swept an abandoned upload");
                files += 1;
                bytes += meta.len();
            }
        }
        (files, bytes)
    }
}

impl Upload {
    /// Bytes the upload holds.
    pub(crate) fn at(&self) -> u64 {
        self.at
    }

    /// Checks a chunk against its CRC-32, charges the share, appends it.
    pub(crate) fn append(
        &mut self,
        offset: u64,
        data: &[u8],
        crc: u32,
    ) -> Result<(), ArtifactError> {
        if offset != self.at {
            return Err(ArtifactError::Gap {
                want: self.at,
                got: offset,
            });
        }
        check_crc(offset, data, crc)?;
        {
            let mut used = self.store.usage(&self.principal)?;
            let n = used.entry(self.principal.clone()).or_default();
            let need = data.len() as u64;
            if n.saturating_add(need) > self.share {
                return Err(ArtifactError::Share {
                    used: *n,
                    share: self.share,
                    need,
                });
            }
            *n += need;
        }
        if let Err(e) = self.file.write_all(data) {
            // What did not land is not held: the file is cut back to the last chunk.
            let _ = self.file.set_len(self.at);
            let _ = self.file.seek(std::io::SeekFrom::Start(self.at));
            let mut used = self.store.usage(&self.principal)?;
            if let Some(n) = used.get_mut(&self.principal) {
                *n = n.saturating_sub(data.len() as u64);
            }
            return Err(e.into());
        }
        self.hasher.update(data);
        self.at += data.len() as u64;
        self.acked.store(self.at, Ordering::Release);
        Ok(())
    }

    /// Ends the upload: checks the declared hash (when given), moves the bytes into the
    /// store (or drops them when the blob is there) and refs it for the principal.
    pub(crate) fn finish(self, declared: &str) -> Result<Stored, ArtifactError> {
        let sha = to_hex(&self.hasher.clone().finalize());
        let size = self.at;
        if !declared.is_empty() && declared != sha {
            let _ = std::fs::remove_file(&self.path);
            let mut used = self.store.usage(&self.principal)?;
            if let Some(n) = used.get_mut(&self.principal) {
                *n = n.saturating_sub(size);
            }
            return Err(ArtifactError::ShaMismatch {
                declared: declared.into(),
                actual: sha,
            });
        }
        self.file.sync_all()?;
        let store = &self.store;
        let mut used = store.usage(&self.principal)?;
        let blob = store.blob(&sha);
        std::fs::create_dir_all(blob.parent().unwrap_or(&store.root))?;
        if blob.exists() {
            std::fs::remove_file(&self.path)?;
        } else {
            std::fs::rename(&self.path, &blob)?;
        }
        let refs = store.refs(&self.principal);
        std::fs::create_dir_all(&refs)?;
        let r = refs.join(&sha);
        if r.exists() {
            // Already the principal's: its bytes were counted once already.
            if let Some(n) = used.get_mut(&self.principal) {
                *n = n.saturating_sub(size);
            }
        } else {
            std::fs::File::create(&r)?;
        }
        Ok(Stored { sha256: sha, size })
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.store
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(self.principal.clone(), self.id.clone()));
    }
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("id", &self.id)
            .field("at", &self.at)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temp dir, removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new() -> Self {
            let p = std::env::temp_dir().join(format!(
                "deskgym-artifacts-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn principal(name: &str, share: u64) -> crate::auth::Principal {
        let mut p = crate::auth::Principal::local(&crate::config::Limits::default());
        p.name = Arc::from(name);
        p.max_artifact_bytes = share;
        p
    }

    fn put(store: &Arc<Store>, who: &crate::auth::Principal, id: &str, data: &[u8]) -> Stored {
        let mut u = store.begin(who, id, 0).unwrap();
        u.append(0, data, crc32fast::hash(data)).unwrap();
        u.finish("").unwrap()
    }

    #[test]
    fn one_blob_per_content_refs_per_principal() {
        let dir = TempDir::new();
        let store = Arc::new(Store::new(dir.path()));
        let (a, b) = (principal("alice", 1 << 20), principal("bob", 1 << 20));
        let s = put(&store, &a, "upload-1", b"hello");
        assert_eq!(s.size, 5);
        assert_eq!(
            s.sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        // Bob cannot read it by its hash until he uploads the same bytes himself.
        assert!(matches!(
            store.find("bob", &s.sha256),
            Err(ArtifactError::NotFound(_))
        ));
        put(&store, &b, "upload-2", b"hello");
        assert_eq!(
            std::fs::read_dir(dir.path().join("artifacts/blobs"))
                .unwrap()
                .count(),
            1
        );
        // Alice's delete keeps Bob's bytes; Bob's removes the blob.
        assert_eq!(store.delete(&a.name, &s.sha256).unwrap(), 5);
        assert!(store.find("bob", &s.sha256).is_ok());
        store.delete(&b.name, &s.sha256).unwrap();
        assert!(!dir.path().join("artifacts/blobs").join(&s.sha256).exists());
        assert_eq!(store.used(&a).unwrap() + store.used(&b).unwrap(), 0);
    }

    #[test]
    fn a_sweep_removes_only_uploads_left_idle_and_releases_their_share() {
        let dir = TempDir::new();
        let store = Arc::new(Store::new(dir.path()));
        let who = principal("carol", 1 << 20);
        let idle = std::time::Duration::from_secs(3600);
        let old = std::time::SystemTime::now() - 2 * idle;
        let partial = |id: &str, n: usize, age: Option<std::time::SystemTime>| {
            let mut u = store.begin(&who, id, 0).unwrap();
            let data = vec![7u8; n];
            u.append(0, &data, crc32fast::hash(&data)).unwrap();
            if let Some(t) = age {
                std::fs::File::options()
                    .write(true)
                    .open(store.partials("carol").join(id))
                    .unwrap()
                    .set_modified(t)
                    .unwrap();
            }
            u
        };
        drop(partial("abandoned", 100, Some(old)));
        drop(partial("recent-1", 10, None));
        // Idle for as long, but its call is still open: a slow client, not a lost one.
        let writing = partial("writing-1", 1000, Some(old));
        assert_eq!(store.used(&who).unwrap(), 1110);

        assert_eq!(store.sweep(idle), (1, 100));
        assert_eq!(store.held("carol", "abandoned"), 0);
        assert_eq!(store.held("carol", "recent-1"), 10);
        assert_eq!(store.used(&who).unwrap(), 1010);
        // Once its call has ended it is as abandoned as any; counted afresh, the same.
        drop(writing);
        assert_eq!(store.sweep(idle), (1, 1000));
        assert_eq!(store.used(&who).unwrap(), 10);
        assert_eq!(Arc::new(Store::new(dir.path())).used(&who).unwrap(), 10);
    }

    #[test]
    fn an_open_upload_answers_its_acknowledged_bytes_not_its_files_length() {
        let dir = TempDir::new();
        let store = Arc::new(Store::new(dir.path()));
        let who = principal("dora", 100);
        let mut u = store.begin(&who, "open-1", 0).unwrap();
        u.append(0, b"whole", crc32fast::hash(b"whole")).unwrap();
        // A chunk half written when a status asks (its call cut mid-write).
        std::fs::OpenOptions::new()
            .append(true)
            .open(store.partials("dora").join("open-1"))
            .unwrap()
            .write_all(b"hal")
            .unwrap();
        assert_eq!(store.held("dora", "open-1"), 5);
        assert!(matches!(
            store.begin(&who, "open-1", 5),
            Err(ArtifactError::InProgress(_))
        ));
        drop(u);
        assert_eq!(store.held("dora", "open-1"), 8, "closed: the file's bytes");
    }

    #[test]
    fn a_resume_hashes_what_was_held_and_shares_hold() {
        let dir = TempDir::new();
        let store = Arc::new(Store::new(dir.path()));
        let who = principal("alice", 10);
        let mut u = store.begin(&who, "resume-1", 0).unwrap();
        u.append(0, b"hell", crc32fast::hash(b"hell")).unwrap();
        assert!(matches!(
            u.append(4, b"o", 0),
            Err(ArtifactError::Checksum { offset: 4, .. })
        ));
        drop(u);
        assert_eq!(store.held("alice", "resume-1"), 4);
        assert!(matches!(
            store.begin(&who, "resume-1", 5),
            Err(ArtifactError::Offset { held: 4, .. })
        ));
        let mut u = store.begin(&who, "resume-1", 4).unwrap();
        u.append(4, b"o", crc32fast::hash(b"o")).unwrap();
        assert!(matches!(
            u.append(5, b"123456", crc32fast::hash(b"123456")),
            Err(ArtifactError::Share {
                used: 5,
                share: 10,
                need: 6
            })
        ));
        let s = u.finish("").unwrap();
        assert_eq!(s.sha256, to_hex(&sha2::Sha256::digest(b"hello")));
        assert_eq!(store.used(&who).unwrap(), 5);
        // Counted afresh after a restart, the same.
        let again = Arc::new(Store::new(dir.path()));
        assert_eq!(again.used(&who).unwrap(), 5);
    }
}
