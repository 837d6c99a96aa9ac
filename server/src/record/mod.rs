//! Recording a pool as a `.skn` bundle: where bundles go, opening a run's writer (the
//! `deskgym-datasets` recorder, on its own thread, off the step path), listing, reading,
//! deleting and recovering a principal's bundles. The rows it is fed: [`rows`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use deskgym_datasets::{Overflow, Recorder, RecorderConfig};

use crate::spec::{Invalid, PoolSpec, quote};

mod rows;

pub(crate) use rows::*;

/// Server-wide recording settings.
#[derive(Clone, Debug)]
pub(crate) struct RecordSettings {
    /// Bundles go to `<data_dir>/<run>.skn`.
    pub data_dir: PathBuf,
    /// Roll chunks at about this many buffered bytes.
    pub roll_bytes: usize,
    /// Roll chunks at least this often.
    pub roll_every: Duration,
    /// Behaviour when the writer falls behind.
    pub overflow: Overflow,
    /// Records queued before `overflow` applies.
    pub queue: usize,
    /// How long a `block` send waits for a stalled writer.
    pub block_limit: Duration,
    /// Frames per second of per-episode H.264 videos; `None` records none.
    pub video_fps: Option<u32>,
    /// Elide repeated frames in the videos (cheaper; not for frame-index readers).
    pub video_variable_rate: bool,
}

/// Why a recording cannot start or finish.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum RecordingError {
    /// A run name that could leave the data dir.
    #[error(transparent)]
    BadName(Invalid),
    /// A run of that name exists.
    #[error("{0}")]
    Exists(String),
    /// The data dir cannot be created or written.
    #[error("{0}")]
    Unusable(String),
    /// No H.264 encoder for the per-episode videos.
    #[error("recording video is not possible: {0}; or start the server with --record-video-fps 0")]
    Video(String),
    /// Flushing or closing the bundle failed.
    #[error("{0}")]
    Finish(String),
    /// No such recording (or file of one) of the caller's.
    #[error("{0}")]
    Missing(String),
    /// The recording is still being written (its pool records).
    #[error("{0}")]
    InUse(String),
    /// The principal's recordings hold its whole share of recording disk.
    #[error(
        "recordings of {principal} hold {used_mib:.1} MiB of its share of {share_mib} MiB; \
         delete runs with DeleteRecording (ListRecordings lists them), or ask for a larger \
         `recording_mb=` share"
    )]
    ShareUsed {
        /// Whose share.
        principal: String,
        /// What its bundles hold, in MiB.
        used_mib: f64,
        /// Its share, in MiB.
        share_mib: u64,
    },
}

#[cfg(test)]
impl RecordSettings {
    /// Small chunks in the temp dir, no video.
    pub(crate) fn for_tests() -> Self {
        Self {
            data_dir: std::env::temp_dir(),
            roll_bytes: 1 << 20,
            roll_every: Duration::from_secs(30),
            overflow: Overflow::Block,
            queue: 4096,
            block_limit: deskgym_datasets::BLOCK_LIMIT,
            video_fps: None,
            video_variable_rate: false,
        }
    }
}

/// Opens the bundle for run `name`: INVALID_ARGUMENT for a name that could leave the
/// data dir, ALREADY_EXISTS for a run that exists, FAILED_PRECONDITION when the data
/// dir cannot be written, RESOURCE_EXHAUSTED when `who`'s recordings hold its share
/// of recording disk (the pool is then not created).
///
/// `owner`: a principal of a server with tokens, whose runs live in a folder of its
/// own (`<data_dir>/<principal>/`): run names are per principal, and no principal
/// learns another's. `None` (a server without tokens): `<data_dir>/<run>.skn`.
pub(crate) fn open(
    settings: &RecordSettings,
    name: &str,
    spec: &PoolSpec,
    owner: Option<&str>,
    who: &crate::auth::Principal,
) -> Result<Recorder, RecordingError> {
    deskgym_datasets::validate_run_name(name)
        .map_err(|m| RecordingError::BadName(Invalid::new("record", m)))?;
    let data_dir = &runs_dir(settings, owner);
    // Counted afresh at each start (runs deleted since are freed); the recorder
    // charges its growth to the same account and stops at the share.
    let share = &who.recording;
    share.set_used(deskgym_datasets::bundles_bytes(data_dir));
    if share.used_up() {
        return Err(RecordingError::ShareUsed {
            principal: who.name.to_string(),
            used_mib: share.used_bytes() as f64 / f64::from(1 << 20),
            share_mib: who.max_recording_mb,
        });
    }
    std::fs::create_dir_all(data_dir).map_err(|e| {
        // The server's log has the path; the client's message has none of it.
        tracing::error!(dir = %data_dir.display(), error = %e, "data dir cannot be created");
        RecordingError::Unusable(format!("the server's data dir cannot be created ({e})"))
    })?;
    let data_dir = data_dir.canonicalize().map_err(|e| {
        tracing::error!(dir = %data_dir.display(), error = %e, "data dir is not usable");
        RecordingError::Unusable(format!("the server's data dir is not usable ({e})"))
    })?;
    let dir = data_dir.join(format!("{name}{}", deskgym_datasets::BUNDLE_SUFFIX));
    if dir.exists() {
        return Err(RecordingError::Exists(format!(
            "recording {} exists; pick another run name",
            quote(name),
        )));
    }
    Recorder::start(RecorderConfig {
        dir,
        run_id: name.to_string(),
        task: spec.task.id.to_string(),
        width: spec.screen.width,
        height: spec.screen.height,
        server_version: env!("CARGO_PKG_VERSION").to_string(),
        roll_bytes: settings.roll_bytes,
        roll_every: settings.roll_every,
        channel_capacity: settings.queue,
        overflow: settings.overflow,
        video_fps: settings.video_fps,
        video_variable_rate: settings.video_variable_rate,
        disk_share: Some(share.clone()),
    })
    .map_err(|e| match e {
        deskgym_datasets::RecordError::Video(m) => RecordingError::Video(m),
        deskgym_datasets::RecordError::Io { ref source, .. }
            if source.kind() == std::io::ErrorKind::AlreadyExists =>
        {
            RecordingError::Exists(format!(
                "recording {} exists; pick another run name",
                quote(name)
            ))
        }
        e => {
            tracing::error!(error = %e, "recording cannot start");
            RecordingError::Unusable(
                "the recording cannot start: the server cannot write its data dir".into(),
            )
        }
    })
    .map(|mut r| {
        r.set_block_limit(settings.block_limit);
        r
    })
}

/// Where `owner`'s runs live: `<data_dir>/<principal>/` (a principal name that is no
/// plain folder name written by its bytes), or the data dir itself without tokens.
fn runs_dir(settings: &RecordSettings, owner: Option<&str>) -> PathBuf {
    match owner {
        Some(o) if deskgym_datasets::validate_run_name(o).is_ok() => settings.data_dir.join(o),
        Some(o) => settings
            .data_dir
            .join(o.bytes().map(|b| format!("{b:02x}")).collect::<String>()),
        None => settings.data_dir.clone(),
    }
}

/// A finished or open recording of one caller, as listed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunInfo {
    /// The run name.
    pub(crate) run: String,
    /// `open` or `closed` (the manifest's status).
    pub(crate) status: String,
    /// Its complete files: path inside the bundle ('/'-separated) and size.
    pub(crate) files: Vec<(String, u64)>,
}

/// `owner`'s recordings, sorted by run; unreadable bundles are left out.
pub(crate) fn list(settings: &RecordSettings, owner: Option<&str>) -> Vec<RunInfo> {
    let dir = runs_dir(settings, owner);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut runs: Vec<RunInfo> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let run = name
                .strip_suffix(deskgym_datasets::BUNDLE_SUFFIX)?
                .to_string();
            let path = e.path();
            let m = deskgym_datasets::read_manifest(&path).ok()?;
            let mut files = Vec::new();
            bundle_files(&path, "", 0, &mut files);
            files.sort();
            Some(RunInfo {
                run,
                status: m.status,
                files,
            })
        })
        .collect();
    runs.sort_by(|a, b| a.run.cmp(&b.run));
    runs
}

/// The complete regular files under `dir` (two levels: tables' parts), skipping
/// temp files and links.
fn bundle_files(dir: &Path, prefix: &str, depth: u32, out: &mut Vec<(String, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let (Ok(name), Ok(meta)) = (e.file_name().into_string(), e.metadata()) else {
            continue;
        };
        let ft = meta.file_type();
        if name.ends_with(".tmp") || ft.is_symlink() {
            continue;
        }
        let rel = format!("{prefix}{name}");
        if ft.is_dir() && depth < 2 {
            bundle_files(&e.path(), &format!("{rel}/"), depth + 1, out);
        } else if ft.is_file() {
            out.push((rel, meta.len()));
        }
    }
}

/// The bundle of `run` of `owner`'s, checked to exist.
pub(crate) fn bundle_of(
    settings: &RecordSettings,
    owner: Option<&str>,
    run: &str,
) -> Result<PathBuf, RecordingError> {
    deskgym_datasets::validate_run_name(run)
        .map_err(|m| RecordingError::BadName(Invalid::new("run", m)))?;
    let dir = runs_dir(settings, owner).join(format!("{run}{}", deskgym_datasets::BUNDLE_SUFFIX));
    if !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return Err(RecordingError::Missing(format!(
            "no recording {} of yours (ListRecordings lists them)",
            quote(run)
        )));
    }
    Ok(dir)
}

/// Reads at most `max` bytes of one file of a recording from `offset`:
/// (file size, data, eof). The path must name a complete file inside the bundle.
pub(crate) fn read_file(
    settings: &RecordSettings,
    owner: Option<&str>,
    run: &str,
    path: &str,
    offset: u64,
    max: u64,
) -> Result<(u64, Vec<u8>, bool), RecordingError> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let dir = bundle_of(settings, owner, run)?;
    let rel = Path::new(path);
    let plain = !path.is_empty()
        && !path.ends_with(".tmp")
        && rel
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    let missing = || {
        RecordingError::Missing(format!(
            "recording {} has no file {} (ListRecordings lists its files)",
            quote(run),
            quote(path)
        ))
    };
    if !plain {
        return Err(RecordingError::BadName(Invalid::new(
            "path",
            format!("{} is not a file path inside the recording", quote(path)),
        )));
    }
    // No link anywhere on the way (the bundle is the server's; this keeps it so).
    let mut at = dir.clone();
    for c in rel.components() {
        at.push(c);
        if std::fs::symlink_metadata(&at).map_or(true, |m| m.file_type().is_symlink()) {
            return Err(missing());
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&at)
        .map_err(|_| missing())?;
    let meta = f.metadata().map_err(|_| missing())?;
    if !meta.is_file() {
        return Err(missing());
    }
    let size = meta.len();
    f.seek(SeekFrom::Start(offset))
        .map_err(|e| RecordingError::Unusable(format!("reading the recording: {e}")))?;
    let mut data = Vec::new();
    f.take(max)
        .read_to_end(&mut data)
        .map_err(|e| RecordingError::Unusable(format!("reading the recording: {e}")))?;
    let eof = offset.saturating_add(data.len() as u64) >= size;
    Ok((size, data, eof))
}

/// Deletes a finished recording of `owner`'s; `in_use` says whether a live pool
/// still writes that bundle.
pub(crate) fn delete(
    settings: &RecordSettings,
    owner: Option<&str>,
    run: &str,
    in_use: impl Fn(&Path) -> bool,
) -> Result<(), RecordingError> {
    let dir = bundle_of(settings, owner, run)?;
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.clone());
    if in_use(&canonical) {
        return Err(RecordingError::InUse(format!(
            "recording {} is still being written: close its pool first",
            quote(run)
        )));
    }
    std::fs::remove_dir_all(&dir)
        .map_err(|e| RecordingError::Unusable(format!("deleting the recording: {e}")))
}

/// Finishes recordings a crashed server left open in `data_dir` (their unclosed chunks
/// are counted as lost in their manifests).
pub(crate) fn recover_all(data_dir: &std::path::Path) {
    recover_in(data_dir, true);
}

/// [`recover_all`] in one directory; `principals`: also in its principals' folders.
fn recover_in(data_dir: &std::path::Path, principals: bool) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if !path
            .to_string_lossy()
            .ends_with(deskgym_datasets::BUNDLE_SUFFIX)
        {
            if principals && path.is_dir() {
                recover_in(&path, false);
            }
            continue;
        }
        match deskgym_datasets::read_manifest(&path) {
            Ok(m) if m.status == "open" => match deskgym_datasets::recover(&path) {
                Ok(m) => {
                    tracing::warn!(bundle = %path.display(), lost_chunks = m.lost_chunks, "recovered a recording left open by a crash")
                }
                Err(e) => {
                    tracing::error!(bundle = %path.display(), error = %e, "cannot recover recording")
                }
            },
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(bundle = %path.display(), error = %e, "skipping unreadable bundle")
            }
        }
    }
}
