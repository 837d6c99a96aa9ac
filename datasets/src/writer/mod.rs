//! The recorder: a bounded channel to one writer thread that turns records into
//! Parquet chunks, crash-safely.
//!
//! Every chunk is written to `<table>/part-NNNNN.parquet.tmp`, fsynced, renamed to
//! `part-NNNNN.parquet` and the directory fsynced; readers glob `*.parquet`, so they
//! never see a half-written file. All tables roll together (by size or age), and the
//! manifest is rewritten (atomically, the same way) after each roll, so after a crash
//! it describes exactly the chunks on disk; at most the rows buffered since the last
//! roll are lost, and [`recover`] counts them in the manifest.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use bytes::Bytes;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};

use crate::tables::{
    EpisodeRow, EventRow, FrameRow, StepRow, episodes_batch, events_batch, frames_batch,
    steps_batch,
};
use crate::unix_ms;
use crate::video::{VideoError, VideoStream};

mod manifest;
mod recovery;
mod share;
mod table;

pub use manifest::{Counts, Files, Manifest, read_manifest};
pub use recovery::recover;
pub use share::{DiskShare, EarlyStop, bundles_bytes};
use table::Table;

/// Format name written in every manifest.
pub(crate) const FORMAT: &str = "deskgym.skn";
/// Version of the bundle layout. 2: the episodes table's `return` column is
/// `episode_return` (no SQL quoting); videos may be constant frame rate.
pub(crate) const SCHEMA_VERSION: u32 = 2;
/// The four tables, also the directory names inside a bundle.
pub const TABLES: [&str; 4] = ["episodes", "steps", "frames", "events"];

/// Why recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The bundle directory could not be created or written.
    #[error("cannot write recording at {path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Arrow or Parquet refused the data.
    #[error("parquet: {0}")]
    Parquet(String),
    /// Video was asked for but cannot be recorded (the message names the package).
    #[error("{0}")]
    Video(String),
    /// The bundle is not a deskgym recording or is damaged.
    #[error("{path} is not a readable .skn bundle: {reason}")]
    NotABundle {
        /// Where.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError + '_ {
    move |source| RecordError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What to do when the writer falls behind and the channel is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// The step waits for room (nothing is lost; steps slow down).
    #[default]
    Block,
    /// The record is dropped and counted in the manifest (`dropped_records`).
    Drop,
}

/// How a recorder writes.
#[derive(Clone, Debug)]
pub struct RecorderConfig {
    /// The bundle directory to create (must not exist).
    pub dir: PathBuf,
    /// Run name.
    pub run_id: String,
    /// Task id.
    pub task: String,
    /// Screen width.
    pub width: u32,
    /// Screen height.
    pub height: u32,
    /// Version of the server writing it.
    pub server_version: String,
    /// Roll chunks when the buffered rows reach about this many bytes.
    pub roll_bytes: usize,
    /// Roll chunks at least this often.
    pub roll_every: Duration,
    /// Records the channel holds before `overflow` applies.
    pub channel_capacity: usize,
    /// Behaviour when the channel is full.
    pub overflow: Overflow,
    /// Frames per second of per-episode videos; `None` records no video.
    pub video_fps: Option<u32>,
    /// Elide repeated frames (variable frame rate): cheaper to record, but a reader
    /// that maps frame index to time (LeRobot) cannot use the videos.
    pub video_variable_rate: bool,
    /// The recording disk this bundle counts against (its principal's share, shared
    /// with that principal's other recorders); the writer stops when it is used up.
    /// `None`: no bound.
    pub disk_share: Option<Arc<DiskShare>>,
}

/// A raw frame to store once (the writer encodes PNG itself, off the step path).
#[derive(Clone, Debug)]
pub struct FrameRecord {
    /// XXH3-128 frame hash (the key).
    pub hash: String,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// Packed RGB.
    pub rgb: Bytes,
    /// The env that showed it (each env has its own video stream).
    pub env_id: String,
    /// The episode this frame belongs to (reset and step frames): it goes into that
    /// episode's video. `None` for frames outside episodes (Observe).
    pub episode_id: Option<String>,
}

/// One thing to record.
#[derive(Clone, Debug)]
pub enum Record {
    /// A step row.
    Step(StepRow),
    /// An ended episode.
    Episode(EpisodeRow),
    /// A frame (stored only if its hash is new to this bundle).
    Frame(FrameRecord),
    /// An event; `seq` is assigned by the writer in arrival order.
    Event {
        /// Kind.
        kind: String,
        /// Env id, or empty.
        env_id: String,
        /// Details.
        payload: serde_json::Value,
    },
}

/// Writes `bytes` to `path` atomically: temp file, fsync, rename, fsync the directory.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    let tmp = tmp_of(path);
    write_tmp(&tmp, bytes)?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(path)
}

/// `<path>.tmp`: where a file is written before it is renamed into place.
fn tmp_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// Writes and fsyncs `tmp`; a failed write (a full disk) leaves no file.
fn write_tmp(tmp: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    let written = File::create(tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .map_err(io(tmp));
    if written.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    written
}

fn sync_dir(path: &Path) -> Result<(), RecordError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// How long a `block` send waits for a writer that stopped draining (a hung disk)
/// before it drops the record (counted): every wait has a bound, and a stuck disk must
/// not hold an env's step, or a ClosePool, forever. One wait per stall: until the
/// writer takes a record again, later sends drop at once instead of each waiting.
pub const BLOCK_LIMIT: Duration = Duration::from_secs(10);

/// The recording handle held by the server: sends never block the caller unless the
/// overflow policy is `block` and the writer is behind (then at most `BLOCK_LIMIT`).
#[derive(Debug)]
pub struct Recorder {
    tx: Option<SyncSender<Record>>,
    overflow: Overflow,
    dropped: Arc<AtomicU64>,
    /// Set by the writer when it stopped at its disk share: sends drop (and count)
    /// every record at once instead of queueing it for a writer that drops it anyway.
    stop_flag: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Manifest, RecordError>>>,
    dir: PathBuf,
    /// How long a `block` send waits for a stalled writer.
    block_limit: Duration,
    /// A `block` send timed out and the writer has not taken a record since: sends
    /// do not wait while this is set.
    stalled: AtomicBool,
}

impl Recorder {
    /// Creates the bundle directory (failing if it exists or cannot be written) and
    /// starts the writer thread.
    pub fn start(config: RecorderConfig) -> Result<Self, RecordError> {
        let dir = config.dir.clone();
        std::fs::create_dir(&dir).map_err(io(&dir))?;
        for t in TABLES {
            std::fs::create_dir(dir.join(t)).map_err(io(&dir))?;
        }
        let encoder = match config.video_fps {
            Some(_) => {
                Some(crate::video::encoder().map_err(|e| RecordError::Video(e.to_string()))?)
            }
            None => None,
        };
        if encoder.is_some() {
            std::fs::create_dir(dir.join("videos")).map_err(io(&dir))?;
        }
        let dropped = Arc::new(AtomicU64::new(0));
        let stop_flag = Arc::new(AtomicBool::new(false));
        let mut writer = Writer::new(config.clone(), dropped.clone(), encoder);
        writer.stop_flag = stop_flag.clone();
        // Prove the directory is writable now, not at the first roll.
        writer.write_manifest("open")?;
        let (tx, rx) = sync_channel(config.channel_capacity.max(1));
        let thread = std::thread::Builder::new()
            .name("deskgym-recorder".into())
            .spawn({
                let dir = dir.clone();
                move || {
                    let outcome = writer.run(rx);
                    // Said when it happens, not only when the pool closes: later
                    // records of this run are dropped (and counted) from here on.
                    if let Err(e) = &outcome {
                        tracing::error!(dir = %dir.display(), error = %e, "recording stopped");
                    }
                    outcome
                }
            })
            .map_err(io(&dir))?;
        Ok(Self {
            tx: Some(tx),
            overflow: config.overflow,
            dropped,
            stop_flag,
            thread: Some(thread),
            dir,
            block_limit: BLOCK_LIMIT,
            stalled: AtomicBool::new(false),
        })
    }

    /// Sets how long a `block` send waits for a stalled writer (default [`BLOCK_LIMIT`]).
    pub fn set_block_limit(&mut self, limit: Duration) {
        self.block_limit = limit;
    }

    /// The bundle directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues a record, applying the overflow policy when the writer is behind.
    pub fn send(&self, r: Record) {
        let Some(tx) = &self.tx else { return };
        let lost = self.stop_flag.load(Ordering::Relaxed)
            || match self.overflow {
                Overflow::Block => self.send_bounded(tx, r),
                Overflow::Drop => matches!(
                    tx.try_send(r),
                    Err(TrySendError::Full(_) | TrySendError::Disconnected(_))
                ),
            };
        if lost {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `block`: waits while the channel is full, up to `block_limit`, unless the writer
    /// is known to be stalled; true when lost. The first attempt is the whole cost when
    /// the writer keeps up.
    fn send_bounded(&self, tx: &SyncSender<Record>, mut r: Record) -> bool {
        let deadline = Instant::now() + self.block_limit;
        let mut pause = Duration::from_micros(50);
        loop {
            match tx.try_send(r) {
                Ok(()) => {
                    if self.stalled.swap(false, Ordering::Relaxed) {
                        tracing::warn!(dir = %self.dir.display(), "recording writer moves again");
                    }
                    return false;
                }
                Err(TrySendError::Disconnected(_)) => return true,
                Err(TrySendError::Full(back)) => {
                    if self.stalled.load(Ordering::Relaxed) {
                        return true;
                    }
                    if Instant::now() >= deadline {
                        if !self.stalled.swap(true, Ordering::Relaxed) {
                            tracing::error!(dir = %self.dir.display(), limit_ms = self.block_limit.as_millis() as u64,
                                "recording writer stalled: dropping records it cannot take until it moves");
                        }
                        return true;
                    }
                    r = back;
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
            }
        }
    }

    /// Flushes everything, writes the final manifest and returns it.
    pub fn close(mut self) -> Result<Manifest, RecordError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<Manifest, RecordError> {
        drop(self.tx.take());
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(RecordError::Parquet("recorder thread panicked".into()))),
            None => Err(RecordError::Parquet("recorder already closed".into())),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if self.thread.is_some()
            && let Err(e) = self.finish()
        {
            tracing::error!(dir = %self.dir.display(), error = %e, "closing recording failed");
        }
    }
}

struct Writer {
    config: RecorderConfig,
    dropped: Arc<AtomicU64>,
    started_at_ms: i64,
    steps: Table<StepRow>,
    episodes: Table<EpisodeRow>,
    events: Table<EventRow>,
    frames: Table<FrameRow>,
    stored: HashSet<String>,
    counts: Counts,
    pending: Counts,
    files: Files,
    seq: u64,
    last_roll: Instant,
    encoder: Option<crate::video::EncoderChoice>,
    /// One video stream per env, kept across its episodes.
    streams: HashMap<String, EnvVideo>,
    videos_written: u64,
    /// The bundle's bytes when last charged to `config.disk_share`.
    measured: u64,
    /// Set when the writer stopped at its disk share; it writes nothing after.
    stopped: Option<EarlyStop>,
    /// Tells the sending side that the writer stopped (see [`Recorder`]).
    stop_flag: Arc<AtomicBool>,
}

/// An env's video stream and the episode it is writing, if any.
struct EnvVideo {
    stream: VideoStream,
    episode: Option<String>,
}

impl Writer {
    fn new(
        config: RecorderConfig,
        dropped: Arc<AtomicU64>,
        encoder: Option<crate::video::EncoderChoice>,
    ) -> Self {
        Self {
            encoder,
            streams: HashMap::new(),
            videos_written: 0,
            measured: 0,
            stopped: None,
            stop_flag: Arc::default(),
            config,
            dropped,
            started_at_ms: unix_ms(),
            steps: Table::new("steps", steps_batch),
            episodes: Table::new("episodes", episodes_batch),
            events: Table::new("events", events_batch),
            frames: Table::new("frames", frames_batch),
            stored: HashSet::new(),
            counts: Counts::default(),
            pending: Counts::default(),
            files: TABLES.iter().map(|t| (t.to_string(), Vec::new())).collect(),
            seq: 0,
            last_roll: Instant::now(),
        }
    }

    fn buffered(&self) -> usize {
        self.steps.bytes + self.episodes.bytes + self.events.bytes + self.frames.bytes
    }

    fn run(mut self, rx: Receiver<Record>) -> Result<Manifest, RecordError> {
        if let Some(e) = self.encoder.clone() {
            self.take(Record::Event {
                kind: "encoder".into(),
                env_id: String::new(),
                payload: serde_json::json!({"element": e.element, "rejected": e.rejected}),
            })?;
        }
        while self.stopped.is_none() {
            let left = self
                .config
                .roll_every
                .saturating_sub(self.last_roll.elapsed());
            match rx.recv_timeout(left) {
                Ok(r) => {
                    let videos = self.videos_written;
                    self.take(r)?;
                    if self.videos_written > videos {
                        self.check_share()?;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.stopped.is_none()
                && (self.buffered() >= self.config.roll_bytes
                    || self.last_roll.elapsed() >= self.config.roll_every)
            {
                self.roll()?;
                self.check_share()?;
            }
        }
        if self.stopped.is_some() {
            // Stopped at the disk share: the bundle is final; what still comes is
            // counted, and the manifest rewritten once, at close, with that count.
            for _ in rx.iter() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            return self.write_manifest("closed");
        }
        self.finish_videos();
        self.roll()?;
        let m = self.write_manifest("closed");
        self.charge();
        m
    }

    /// Finishes every env's open episode video (episodes the server did not end: it
    /// always does on close, but a stop at the disk share comes mid-episode).
    fn finish_videos(&mut self) {
        for (env, v) in std::mem::take(&mut self.streams) {
            if let Err(e) = v.stream.finish() {
                tracing::warn!(env = %env, error = %e, "episode video failed");
            }
        }
    }

    fn video_frame(&mut self, episode_id: &str, f: &FrameRecord) {
        let (Some(enc), Some(fps)) = (&self.encoder, self.config.video_fps) else {
            return;
        };
        // A stream that failed is dropped here and the env's next episode starts a new
        // one, so one bad episode costs that episode's video only.
        let fail = |streams: &mut HashMap<String, EnvVideo>, e: VideoError| {
            tracing::warn!(env = %f.env_id, episode = %episode_id, error = %e, "episode video failed");
            streams.remove(&f.env_id);
        };
        if self
            .streams
            .get(&f.env_id)
            .is_some_and(|v| v.stream.size() != (f.width, f.height))
            && let Some(old) = self.streams.remove(&f.env_id)
        {
            let _ = old.stream.finish();
        }
        if !self.streams.contains_key(&f.env_id) {
            match VideoStream::start(f.width, f.height, fps, &enc.element).map(|mut v| {
                v.set_constant_rate(!self.config.video_variable_rate);
                v
            }) {
                Ok(stream) => {
                    let v = EnvVideo {
                        stream,
                        episode: None,
                    };
                    self.streams.insert(f.env_id.clone(), v);
                }
                Err(e) => return fail(&mut self.streams, e),
            }
        }
        let Some(v) = self.streams.get_mut(&f.env_id) else {
            return;
        };
        if v.episode.as_deref() != Some(episode_id) {
            // begin_episode ends an episode the server never reported as ended.
            let path = self.config.dir.join(video_rel(episode_id));
            if let Err(e) = v.stream.begin_episode(&path) {
                return fail(&mut self.streams, e);
            }
            v.episode = Some(episode_id.to_string());
        }
        if let Err(e) = v.stream.push(f.rgb.clone(), &f.hash) {
            fail(&mut self.streams, e);
        }
    }

    /// Finishes the video of an ended episode; `None` when it has none.
    fn end_video(&mut self, env_id: &str, episode_id: &str) -> Option<f64> {
        let v = self.streams.get_mut(env_id)?;
        if v.episode.as_deref() != Some(episode_id) {
            return None;
        }
        v.episode = None;
        match v.stream.end_episode() {
            Ok(duration) => Some(duration),
            Err(e) => {
                tracing::warn!(episode = %episode_id, error = %e, "episode video failed");
                self.streams.remove(env_id);
                None
            }
        }
    }

    fn take(&mut self, r: Record) -> Result<(), RecordError> {
        match r {
            Record::Step(s) => {
                let n = 200 + s.action_json.len();
                self.steps.push(s, n);
                self.pending.steps += 1;
            }
            Record::Episode(mut e) => {
                if let Some(duration) = self.end_video(&e.env_id, &e.episode_id) {
                    e.video_file = Some(video_rel(&e.episode_id));
                    e.video_start_s = Some(0.0);
                    e.video_end_s = Some(duration);
                    self.videos_written += 1;
                }
                let n = 100 + e.instruction.len();
                self.episodes.push(e, n);
                self.pending.episodes += 1;
            }
            Record::Event {
                kind,
                env_id,
                payload,
            } => {
                self.seq += 1;
                let payload = payload.to_string();
                let n = 64 + payload.len();
                self.events.push(
                    EventRow {
                        seq: self.seq,
                        time_ms: unix_ms(),
                        kind,
                        env_id,
                        payload,
                    },
                    n,
                );
                self.pending.events += 1;
            }
            Record::Frame(f) => {
                if let Some(ep) = f.episode_id.clone() {
                    self.video_frame(&ep, &f);
                }
                self.pending.frames_observed += 1;
                if self.stored.insert(f.hash.clone()) {
                    let png = encode_png(&f)?;
                    let n = png.len();
                    self.frames.push(
                        FrameRow {
                            frame_hash: f.hash,
                            width: f.width,
                            height: f.height,
                            png,
                        },
                        n,
                    );
                    self.pending.frames_stored += 1;
                }
            }
        }
        Ok(())
    }

    /// Closes a chunk of every table at once, then publishes the new manifest.
    fn roll(&mut self) -> Result<(), RecordError> {
        self.last_roll = Instant::now();
        if self.buffered() == 0 && self.pending == Counts::default() {
            return Ok(());
        }
        let part = self.counts.chunks;
        let dir = self.config.dir.clone();
        // Two phases, so readers only ever see whole rolls: every table's chunk and then
        // the manifest that lists them are written under temporary names and fsynced;
        // the staged manifest is the commit record. Only then is everything renamed
        // into place. A failure before that (a full disk) publishes nothing of this
        // roll; a crash after it is rolled forward by `recover`.
        let mut staged = Vec::new();
        let mut files = self.files.clone();
        let mut counts = self.counts.clone();
        let manifest = dir.join("manifest.json");
        let written = (|| {
            staged.extend(self.episodes.stage(&dir, part)?);
            staged.extend(self.steps.stage(&dir, part)?);
            staged.extend(self.frames.stage(&dir, part)?);
            staged.extend(self.events.stage(&dir, part)?);
            for s in &staged {
                let table = s.rel.split('/').next().unwrap_or_default().to_string();
                files.entry(table).or_default().push(s.rel.clone());
            }
            let p = &self.pending;
            counts.episodes += p.episodes;
            counts.steps += p.steps;
            counts.frames_stored += p.frames_stored;
            counts.frames_observed += p.frames_observed;
            counts.events += p.events;
            counts.chunks += 1;
            let json = self.manifest("open", &counts, &files).to_json()?;
            write_tmp(&tmp_of(&manifest), &json)
        })();
        if let Err(e) = written {
            for s in &staged {
                let _ = std::fs::remove_file(&s.tmp);
            }
            return Err(e);
        }
        for s in &staged {
            std::fs::rename(&s.tmp, &s.path).map_err(io(&s.path))?;
            sync_dir(&s.path)?;
        }
        std::fs::rename(tmp_of(&manifest), &manifest).map_err(io(&manifest))?;
        sync_dir(&manifest)?;
        self.files = files;
        self.counts = counts;
        self.pending = Counts::default();
        self.episodes.clear();
        self.steps.clear();
        self.frames.clear();
        self.events.clear();
        Ok(())
    }

    /// The manifest describing `counts` and `files` with `status`.
    fn manifest(&self, status: &str, counts: &Counts, files: &Files) -> Manifest {
        Manifest {
            format: FORMAT.into(),
            schema_version: SCHEMA_VERSION,
            run_id: self.config.run_id.clone(),
            server_version: self.config.server_version.clone(),
            task: self.config.task.clone(),
            screen: [self.config.width, self.config.height],
            started_at_ms: self.started_at_ms,
            updated_at_ms: unix_ms(),
            status: status.into(),
            encoder: self.encoder.as_ref().map(|e| e.element.clone()),
            encoder_rejected: self
                .encoder
                .as_ref()
                .map(|e| e.rejected.clone())
                .unwrap_or_default(),
            videos: self.videos_written,
            video_fps: self.encoder.as_ref().and(self.config.video_fps),
            video_constant_rate: self.encoder.is_some() && !self.config.video_variable_rate,
            counts: counts.clone(),
            dropped_records: self.dropped.load(Ordering::Relaxed),
            lost_chunks: 0,
            overflow: self.config.overflow,
            files: files.clone(),
            stopped_early: self.stopped.clone(),
        }
    }

    fn write_manifest(&mut self, status: &str) -> Result<Manifest, RecordError> {
        let m = self.manifest(status, &self.counts, &self.files);
        write_atomic(&self.config.dir.join("manifest.json"), &m.to_json()?)?;
        Ok(m)
    }
}

/// Where an episode's video goes, relative to the bundle (ids contain '/').
fn video_rel(episode_id: &str) -> String {
    let safe: String = episode_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("videos/{safe}.mp4")
}

fn encode_png(f: &FrameRecord) -> Result<Vec<u8>, RecordError> {
    png_rgb(f.width, f.height, &f.rgb).map_err(|e| RecordError::Parquet(format!("png: {e}")))
}

/// Packed RGB as PNG with the fastest compression: desktop screens compress well even
/// so, and this runs on the step path (server) and the writer thread (recordings).
pub fn png_rgb(width: u32, height: u32, rgb: &[u8]) -> Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::with_capacity(rgb.len() / 8);
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fast);
    let mut w = enc.write_header()?;
    w.write_image_data(rgb)?;
    w.finish()?;
    Ok(out)
}
