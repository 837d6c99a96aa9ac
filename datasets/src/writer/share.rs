//! A share of recording disk: the account a principal's recordings charge, and the
//! writer's stop when the share is used up.
//!
//! The server checks the share when a recording starts; a recording already running
//! charges the growth of its own bundle after each roll and after each finished
//! episode video, and stops itself once the account reaches the cap. The check runs
//! there only, so a recording passes its share by at most one chunk (the roll size,
//! plus the record that crossed it) and the videos it was writing when it stopped.

use super::*;

/// The recording disk one principal may fill, and what its bundles hold now. Shared
/// (`Arc`) by every recorder of that principal, so recordings running side by side
/// stop at one cap between them.
#[derive(Debug)]
pub struct DiskShare {
    cap_bytes: u64,
    used: AtomicU64,
}

impl DiskShare {
    /// An account of `cap_bytes` with nothing charged yet.
    pub fn new(cap_bytes: u64) -> Self {
        Self {
            cap_bytes,
            used: AtomicU64::new(0),
        }
    }

    /// The most bytes the principal's bundles may hold.
    pub fn cap_bytes(&self) -> u64 {
        self.cap_bytes
    }

    /// The bytes charged so far.
    pub fn used_bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Sets what the bundles hold from a fresh count ([`bundles_bytes`]) when a
    /// recording starts: deleted runs free their bytes, and the account never drifts
    /// for longer than between two starts.
    pub fn set_used(&self, bytes: u64) {
        self.used.store(bytes, Ordering::Relaxed);
    }

    /// True once the bundles hold the whole share: nothing more may be recorded.
    pub fn used_up(&self) -> bool {
        self.used_bytes() >= self.cap_bytes
    }

    fn charge(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// Why a recording stopped before it was closed (absent in a manifest: it did not).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlyStop {
    /// `disk_share`: the recordings of its principal filled the principal's share.
    pub reason: String,
    /// The share, in bytes.
    pub share_bytes: u64,
    /// What the principal's recordings held when this one stopped, in bytes.
    pub used_bytes: u64,
    /// When (Unix ms).
    pub at_ms: i64,
}

/// The bytes of the regular files under `dir` (a bundle: two levels of tables and
/// videos; temp files count, they are on the disk too). Links are not followed.
pub(crate) fn dir_bytes(dir: &Path) -> u64 {
    fn walk(dir: &Path, depth: u32) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .filter_map(|e| e.metadata().ok().map(|m| (e.path(), m)))
            .map(|(path, m)| match m.file_type() {
                t if t.is_file() => m.len(),
                t if t.is_dir() && depth < 3 => walk(&path, depth + 1),
                _ => 0,
            })
            .sum()
    }
    walk(dir, 0)
}

/// The bytes of every bundle (`*.skn`, finished or live) directly in `runs_dir`: what
/// a principal's recordings hold. Anything else in the folder is not a recording's.
pub fn bundles_bytes(runs_dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(runs_dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .ends_with(crate::BUNDLE_SUFFIX)
        })
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| dir_bytes(&e.path()))
        .sum()
}

impl Writer {
    /// Charges the bundle's growth since the last look to the share, and stops the
    /// recording when the share is used up. Without a share: nothing.
    pub(super) fn check_share(&mut self) -> Result<(), RecordError> {
        if self.stopped.is_some() {
            return Ok(());
        }
        self.charge();
        match self.config.disk_share.clone() {
            Some(share) if share.used_up() => self.stop_at_share(&share),
            _ => Ok(()),
        }
    }

    /// Charges the bundle's growth since the last look to the share, if any.
    pub(super) fn charge(&mut self) {
        let Some(share) = &self.config.disk_share else {
            return;
        };
        let now = dir_bytes(&self.config.dir);
        // Only growth: a temp file renamed or removed between two looks is no refund
        // of bytes already charged.
        if now > self.measured {
            share.charge(now - self.measured);
            self.measured = now;
        }
    }

    /// The share is used up: says so in the events, finishes every open episode
    /// video, rolls, and writes the final manifest (`closed`, with why). From here
    /// on every record is dropped and counted, and the sender drops them unsent.
    fn stop_at_share(&mut self, share: &DiskShare) -> Result<(), RecordError> {
        let stop = EarlyStop {
            reason: "disk_share".into(),
            share_bytes: share.cap_bytes(),
            used_bytes: share.used_bytes(),
            at_ms: unix_ms(),
        };
        tracing::warn!(dir = %self.config.dir.display(), share_bytes = stop.share_bytes,
            used_bytes = stop.used_bytes,
            "recording stopped: its principal's recordings fill their disk share; later records are dropped");
        self.take(Record::Event {
            kind: "recording_stopped".into(),
            env_id: String::new(),
            payload: serde_json::json!({
                "reason": stop.reason, "share_bytes": stop.share_bytes,
                "used_bytes": stop.used_bytes,
            }),
        })?;
        self.finish_videos();
        self.roll()?;
        self.stopped = Some(stop);
        self.stop_flag.store(true, Ordering::Relaxed);
        self.write_manifest("closed")?;
        // The stop's own bytes (its roll, the videos it finished) are the principal's too.
        self.charge();
        Ok(())
    }
}
