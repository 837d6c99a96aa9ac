//! `.skn` recordings of deskgym runs: Parquet tables (`episodes`, `steps`, `frames`,
//! `events`) plus `manifest.json`, written off the step path and crash-safely.
//! Knows nothing of X11 or gRPC.
//!
//! # The crate's face
//! The modules are private; what other crates (the server, the benches) and this
//! crate's own binary and tests use is re-exported here, and nothing else:
//! - recording: a [`Recorder`] started from a [`RecorderConfig`] and sent [`Record`]s
//!   ([`StepRow`], [`EpisodeRow`], [`FrameRecord`]), closed into a [`Manifest`];
//!   [`read_manifest`] and [`recover`] for bundles already on disk;
//! - recording disk: a [`DiskShare`] its recorders charge and stop at
//!   ([`EarlyStop`]), and [`bundles_bytes`], what a folder's bundles hold;
//! - reading back: [`Bundle`], the replay view's reads;
//! - video: [`h264_encoder`] (the probe), [`VideoStream`] (per-episode MP4s),
//!   [`LiveEncoder`] (the console's live view), [`rgb_to_i420`];
//! - the replay page: [`serve_replay`] and the files the console embeds too;
//! - small shared rules: [`unix_ms`], [`png_rgb`], [`validate_run_name`],
//!   [`BUNDLE_SUFFIX`], [`TABLES`];
//! - and the types those hand out, so a caller can name them: the errors, the
//!   manifest's [`Counts`] and [`Files`], [`EncoderChoice`], [`AccessUnit`].
//!
//! # Layout
//! - `replay`: a bundle read back for a viewer: episodes, steps, frames by hash.
//! - `tables`: rows, Arrow schemas, rows → record batches.
//! - `video`: the encoder probe, one H.264 encoder per env cut into one MP4 per
//!   episode, RGB → I420.
//! - `viewer`: the replay page served from one bundle, no server needed.
//! - `writer`: the recorder thread, chunk rolling, atomic renames, the manifest,
//!   crash recovery.
//!
//! A bundle on disk:
//! ```text
//! <data-dir>/<run>.skn/
//!   manifest.json
//!   episodes/part-00000.parquet  steps/part-00000.parquet
//!   frames/part-00000.parquet    events/part-00000.parquet   ...
//!   videos/<env>_<episode>.mp4   (one per episode, when video is on)
//! ```

mod replay;
mod tables;
mod video;
mod viewer;
mod writer;

// The rows the server fills (steps and episodes; events and frames are the writer's own).
pub use tables::{Actor, EpisodeRow, StepRow};
// The recorder and the bundles it leaves (the server records, the binary inspects, the
// benches time it); `BLOCK_LIMIT` is the server's default wait for a stalled writer.
pub use writer::{
    BLOCK_LIMIT, Counts, Files, FrameRecord, Manifest, Overflow, Record, RecordError, Recorder,
    RecorderConfig, TABLES, png_rgb, read_manifest, recover,
};
// A principal's share of recording disk: the server makes one per principal, counts
// its bundles with `bundles_bytes` when a recording starts, and every recorder of that
// principal charges it and stops at it (`EarlyStop` in the manifest says so).
pub use writer::{DiskShare, EarlyStop, bundles_bytes};
// A bundle read back (the console's replay view and `deskgym-datasets view`).
pub use replay::{Bundle, ReplayError};
// Video: the per-episode streams and RGB → I420 (the benches time them), the live
// encoder (the console's H.264 view).
/// The H.264 encoder this process uses, probed once (the server reports it).
pub use video::encoder as h264_encoder;
pub use video::{
    AccessUnit, ENCODERS, EncoderChoice, LiveEncoder, VideoError, VideoStream, rgb_to_i420,
};
// The replay page's files, embedded by the server's console too, and the Host check
// both apply.
/// Serves one bundle's replay page on loopback (`deskgym-datasets view`).
pub use viewer::serve as serve_replay;
pub use viewer::{CONSOLE_CSS, REPLAY_HTML, REPLAY_JS, loopback_host};

/// The current Unix time in ms: the clock of every `_ms` column in a bundle.
// The server calls this directly (no clock of its own): its rows must carry this clock.
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Suffix of bundle directories.
pub const BUNDLE_SUFFIX: &str = ".skn";

/// Checks a client-chosen run name: letters, digits, `.`, `_`, `-`, 1 to 64 characters,
/// not starting with a dot. Anything else (a path separator, `..`) could steer the
/// server to write outside its data directory.
pub fn validate_run_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!(
            "run name must be 1 to 64 characters, got {}",
            name.len()
        ));
    }
    if name.starts_with('.') {
        return Err(format!("run name {name:?} must not start with '.'"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "run name {name:?} contains {c:?}; use letters, digits, '.', '_' and '-'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    fn config(dir: &std::path::Path, roll_bytes: usize) -> RecorderConfig {
        RecorderConfig {
            dir: dir.join("run.skn"),
            run_id: "run".into(),
            task: "click-target".into(),
            width: 4,
            height: 2,
            server_version: "test".into(),
            roll_bytes,
            roll_every: Duration::from_secs(3600),
            channel_capacity: 16,
            overflow: Overflow::Block,
            video_fps: None,
            video_variable_rate: false,
            disk_share: None,
        }
    }

    fn rows(path: &std::path::Path) -> usize {
        let f = std::fs::File::open(path).unwrap();
        ParquetRecordBatchReaderBuilder::try_new(f)
            .unwrap()
            .build()
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum()
    }

    fn tmpdir(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("deskgym-datasets-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn frame(seed: u8) -> Record {
        Record::Frame(FrameRecord {
            hash: format!("{seed:032x}"),
            width: 4,
            height: 2,
            rgb: vec![seed; 24].into(),
            env_id: "e".into(),
            episode_id: Some("e/1".into()),
        })
    }

    /// A writer stuck on its disk (here: opening a chunk that is a FIFO nobody reads)
    /// makes `block` sends wait once, for the block limit, then drop and count until
    /// the writer moves again (not wait again for each record).
    #[test]
    fn a_stalled_writer_bounds_block_sends() {
        let d = tmpdir("stall");
        let mut c = config(&d, 1); // roll after every record
        c.channel_capacity = 2;
        let bundle = c.dir.clone();
        let mut r = Recorder::start(c).unwrap();
        let limit = Duration::from_millis(500);
        r.set_block_limit(limit);
        let fifos: Vec<_> = TABLES
            .iter()
            .map(|t| bundle.join(t).join("part-00000.parquet.tmp"))
            .collect();
        for f in &fifos {
            let ok = std::process::Command::new("mkfifo")
                .arg(f)
                .status()
                .unwrap();
            assert!(ok.success(), "mkfifo (coreutils)");
        }
        let step = |i| {
            Record::Step(StepRow {
                episode_id: "e/1".into(),
                step_index: i,
                verb: "noop".into(),
                ..Default::default()
            })
        };
        r.send(step(0)); // the writer takes it, rolls, and blocks opening the FIFO
        std::thread::sleep(Duration::from_millis(300));
        // On a thread, so a regression fails here instead of hanging the test run.
        let (tx, rx) = std::sync::mpsc::channel();
        let sender = std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            // 2 fill the channel, 8 find it full: old behaviour, 8 waits (4 s).
            for i in 1..11 {
                r.send(step(i));
            }
            tx.send(t0.elapsed()).unwrap();
            r
        });
        let took = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("block sends hung on the stalled writer");
        assert!(
            took >= limit,
            "{took:?}: the first send into a full channel waited"
        );
        assert!(
            took < limit * 4,
            "{took:?}: sends kept waiting on a writer known to be stalled"
        );
        let r = sender.join().unwrap();
        // Unblock the writer (read whatever it writes into the FIFOs), then close.
        for f in fifos {
            std::thread::spawn(move || {
                let _ = std::fs::read(f);
            });
        }
        let m = r.close();
        let dropped = m.map(|m| m.dropped_records).unwrap_or(u64::MAX);
        assert!(
            dropped >= 8,
            "the {dropped} records the writer could not take were counted"
        );
    }

    #[test]
    fn frames_are_stored_once_and_chunks_roll_together() {
        let d = tmpdir("roll");
        let r = Recorder::start(config(&d, 1)).unwrap(); // roll after every record
        for i in 0..5 {
            r.send(Record::Step(StepRow {
                episode_id: "e/1".into(),
                step_index: i,
                verb: "noop".into(),
                ..Default::default()
            }));
            r.send(frame((i % 2) as u8));
        }
        r.send(Record::Episode(EpisodeRow {
            episode_id: "e/1".into(),
            length: 5,
            ..Default::default()
        }));
        r.send(Record::Event {
            kind: "reset".into(),
            env_id: "e".into(),
            payload: serde_json::json!({"seed": 1}),
        });
        let m = r.close().unwrap();
        assert_eq!(m.status, "closed");
        assert_eq!(
            (m.counts.steps, m.counts.episodes, m.counts.events),
            (5, 1, 1)
        );
        assert_eq!((m.counts.frames_observed, m.counts.frames_stored), (5, 2));
        let total: usize = m.files["steps"].iter().map(|f| rows(&m_path(&d, f))).sum();
        assert_eq!(total, 5);
        let frames: usize = m.files["frames"].iter().map(|f| rows(&m_path(&d, f))).sum();
        assert_eq!(frames, 2);
        assert_eq!(read_manifest(&d.join("run.skn")).unwrap(), m);
        let leftovers = walk(&d.join("run.skn"))
            .into_iter()
            .filter(|p| p.ends_with(".tmp"))
            .count();
        assert_eq!(leftovers, 0);
    }

    fn m_path(d: &std::path::Path, rel: &str) -> std::path::PathBuf {
        d.join("run.skn").join(rel)
    }

    fn walk(d: &std::path::Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.path().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path().display().to_string());
            }
        }
        out
    }

    #[test]
    fn episodes_get_their_video() {
        let d = tmpdir("video");
        let mut c = config(&d, 1 << 20);
        c.video_fps = Some(10);
        let r = Recorder::start(c).unwrap();
        // Two envs interleaved, two episodes each: every episode gets its own file
        // although each env keeps one encoder.
        for episode in 1..=2u8 {
            for i in 0..4u8 {
                for env in ["a", "b"] {
                    r.send(Record::Frame(FrameRecord {
                        hash: format!("{env}{episode}{i}"),
                        width: 64,
                        height: 48,
                        rgb: vec![i * 60 + episode; 64 * 48 * 3].into(),
                        env_id: env.into(),
                        episode_id: Some(format!("{env}/{episode}")),
                    }));
                }
            }
            for env in ["a", "b"] {
                r.send(Record::Episode(EpisodeRow {
                    episode_id: format!("{env}/{episode}"),
                    env_id: env.into(),
                    length: 3,
                    ..Default::default()
                }));
            }
        }
        let m = r.close().unwrap();
        assert!(m.encoder.is_some() && m.videos == 4, "{m:?}");
        for name in ["a_1", "a_2", "b_1", "b_2"] {
            let mp4 = std::fs::read(d.join(format!("run.skn/videos/{name}.mp4"))).unwrap();
            assert_eq!(&mp4[4..8], b"ftyp", "{name}");
        }
    }

    /// The `kind` column of the events table, in order.
    fn event_kinds(d: &std::path::Path, m: &Manifest) -> Vec<String> {
        let mut out = Vec::new();
        for f in &m.files["events"] {
            let file = std::fs::File::open(m_path(d, f)).unwrap();
            for b in ParquetRecordBatchReaderBuilder::try_new(file)
                .unwrap()
                .build()
                .unwrap()
            {
                let b = b.unwrap();
                let kinds = b
                    .column_by_name("kind")
                    .unwrap()
                    .as_any()
                    .downcast_ref::<arrow_array::StringArray>()
                    .unwrap();
                out.extend(kinds.iter().map(|k| k.unwrap_or_default().to_string()));
            }
        }
        out
    }

    /// A writer whose principal's disk share is tiny stops at the first roll past it:
    /// an event and the manifest say why, the bundle is closed and complete up to
    /// there, every record after it is dropped and counted, and the bundle reads back.
    #[test]
    fn a_writer_stops_at_its_disk_share() {
        let d = tmpdir("share");
        let mut c = config(&d, 1); // roll after every record
        let share = std::sync::Arc::new(DiskShare::new(8 << 10));
        c.disk_share = Some(share.clone());
        let r = Recorder::start(c).unwrap();
        let sent = 300u64;
        for i in 0..sent {
            r.send(Record::Step(StepRow {
                episode_id: "e/1".into(),
                step_index: i as u32,
                verb: "noop".into(),
                ..Default::default()
            }));
        }
        let m = r.close().unwrap();
        assert_eq!(m.status, "closed");
        let stop = m.stopped_early.clone().expect("the writer never stopped");
        assert_eq!(
            (stop.reason.as_str(), stop.share_bytes),
            ("disk_share", 8 << 10)
        );
        assert!(stop.used_bytes >= stop.share_bytes, "{stop:?}");
        assert!(share.used_up() && share.used_bytes() >= stop.used_bytes);
        // Each step was either written before the stop or dropped and counted.
        assert!(
            m.counts.steps > 0 && m.counts.steps < sent,
            "{:?}",
            m.counts
        );
        assert_eq!(m.counts.steps + m.dropped_records, sent, "{m:?}");
        assert_eq!(event_kinds(&d, &m), ["recording_stopped"]);
        // What is on disk is what the manifest says, and reads back.
        assert_eq!(read_manifest(&d.join("run.skn")).unwrap(), m);
        let steps = Bundle::open(&d.join("run.skn"))
            .unwrap()
            .steps("e/1")
            .unwrap();
        assert_eq!(steps.len() as u64, m.counts.steps);
        assert!(
            walk(&d.join("run.skn"))
                .iter()
                .all(|p| !p.ends_with(".tmp"))
        );
        // The overshoot is at most the roll that crossed the share and the stop's own.
        let on_disk: u64 = walk(&d.join("run.skn"))
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        assert!(on_disk < stop.share_bytes * 2, "{on_disk} bytes on disk");
    }

    /// A stop mid-episode finishes that episode's video: the bundle holds a whole MP4
    /// and no temp file.
    #[test]
    fn a_stop_finishes_the_open_episode_video() {
        let d = tmpdir("share-video");
        let mut c = config(&d, 1);
        c.video_fps = Some(10);
        c.disk_share = Some(std::sync::Arc::new(DiskShare::new(1)));
        let r = Recorder::start(c).unwrap();
        for i in 0..4u8 {
            r.send(Record::Frame(FrameRecord {
                hash: format!("v{i}"),
                width: 64,
                height: 48,
                rgb: vec![i * 60; 64 * 48 * 3].into(),
                env_id: "a".into(),
                episode_id: Some("a/1".into()),
            }));
        }
        let m = r.close().unwrap();
        assert!(m.stopped_early.is_some(), "{m:?}");
        let files = walk(&d.join("run.skn"));
        assert!(files.iter().all(|p| !p.ends_with(".tmp")), "{files:?}");
        let mp4 = std::fs::read(d.join("run.skn/videos/a_1.mp4")).unwrap();
        assert_eq!(&mp4[4..8], b"ftyp");
    }

    /// Bundles that never stopped carry no `stopped_early`, and manifests written
    /// before the field read as not stopped.
    #[test]
    fn manifests_without_a_stop_read_as_before() {
        let d = tmpdir("no-stop");
        let m = Recorder::start(config(&d, 1)).unwrap().close().unwrap();
        let text = std::fs::read_to_string(d.join("run.skn/manifest.json")).unwrap();
        assert!(!text.contains("stopped_early"), "{text}");
        assert_eq!(m.stopped_early, None);
        assert_eq!(read_manifest(&d.join("run.skn")).unwrap(), m);
    }

    #[test]
    fn an_existing_or_unwritable_bundle_is_refused() {
        let d = tmpdir("exists");
        Recorder::start(config(&d, 1 << 20))
            .unwrap()
            .close()
            .unwrap();
        let e = Recorder::start(config(&d, 1 << 20)).unwrap_err();
        assert!(e.to_string().contains("run.skn"), "{e}");
        // A data "directory" that is a file.
        let file = d.join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let mut c = config(&d, 1);
        c.dir = file.join("run.skn");
        assert!(Recorder::start(c).is_err());
    }

    #[test]
    fn recover_counts_the_unclosed_chunk() {
        let d = tmpdir("recover");
        let r = Recorder::start(config(&d, 1 << 20)).unwrap();
        std::mem::forget(r); // as if the process died: manifest stays "open"
        let bundle = d.join("run.skn");
        std::fs::write(bundle.join("steps/part-00000.parquet.tmp"), b"half").unwrap();
        let m = recover(&bundle).unwrap();
        assert_eq!((m.status.as_str(), m.lost_chunks), ("crashed", 1));
        assert!(!bundle.join("steps/part-00000.parquet.tmp").exists());
        assert_eq!(
            recover(&bundle).unwrap(),
            m,
            "recovering twice changes nothing"
        );
    }

    #[test]
    fn recover_rolls_committed_rolls_forward_and_the_rest_back() {
        let d = tmpdir("roll-forward");
        let r = Recorder::start(config(&d, 1)).unwrap();
        r.send(frame(1));
        let closed = r.close().unwrap();
        let bundle = d.join("run.skn");
        let chunk = bundle.join("frames/part-00000.parquet");
        // The crash came after the roll's commit record (its staged manifest) was
        // written and before its chunk and manifest were renamed into place.
        let committed = Manifest {
            status: "open".into(),
            ..closed.clone()
        };
        let before = Manifest {
            files: Default::default(),
            counts: Default::default(),
            ..committed.clone()
        };
        std::fs::rename(&chunk, bundle.join("frames/part-00000.parquet.tmp")).unwrap();
        std::fs::write(
            bundle.join("manifest.json.tmp"),
            serde_json::to_vec(&committed).unwrap(),
        )
        .unwrap();
        std::fs::write(
            bundle.join("manifest.json"),
            serde_json::to_vec(&before).unwrap(),
        )
        .unwrap();
        let m = recover(&bundle).unwrap();
        assert_eq!(m.status, "crashed");
        assert_eq!((m.counts.frames_stored, m.files["frames"].len()), (1, 1));
        assert_eq!(rows(&chunk), 1, "the committed chunk is back in place");

        // A staged manifest cut short by the crash: that roll never happened.
        let open = Manifest {
            status: "open".into(),
            ..m.clone()
        };
        std::fs::write(
            bundle.join("manifest.json"),
            serde_json::to_vec(&open).unwrap(),
        )
        .unwrap();
        std::fs::write(bundle.join("manifest.json.tmp"), b"{\"format\": ").unwrap();
        std::fs::write(bundle.join("steps/part-00001.parquet.tmp"), b"half").unwrap();
        let m2 = recover(&bundle).unwrap();
        assert_eq!(
            (m2.counts.clone(), m2.lost_chunks),
            (m.counts.clone(), m.lost_chunks + 1)
        );
        assert!(!bundle.join("manifest.json.tmp").exists());
        assert!(!bundle.join("steps/part-00001.parquet.tmp").exists());
    }

    #[test]
    fn foreign_directories_are_not_bundles() {
        let d = tmpdir("foreign");
        let e = read_manifest(&d).unwrap_err();
        assert!(e.to_string().contains("not a readable .skn bundle"), "{e}");
        std::fs::write(d.join("manifest.json"), br#"{"format": "other"}"#).unwrap();
        assert!(read_manifest(&d).is_err());
    }

    #[test]
    fn run_names_cannot_escape_the_data_dir() {
        for ok in ["run-1", "a.b_c", "X"] {
            assert!(validate_run_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "..",
            ".hidden",
            "a/b",
            "../etc",
            "a\\b",
            "sp ace",
            &"x".repeat(65),
        ] {
            assert!(validate_run_name(bad).is_err(), "{bad}");
        }
    }
}
