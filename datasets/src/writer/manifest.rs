//! The manifest: what a bundle holds and in which state, written atomically last.

use super::*;

/// Counts kept in the manifest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Episodes written.
    pub episodes: u64,
    /// Steps written.
    pub steps: u64,
    /// Distinct frames stored.
    pub frames_stored: u64,
    /// Frames seen (each step's frame, stored or not).
    pub frames_observed: u64,
    /// Events written.
    pub events: u64,
    /// Chunk rolls.
    pub chunks: u64,
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always `deskgym.skn`.
    pub format: String,
    /// Layout version.
    pub schema_version: u32,
    /// Run name.
    pub run_id: String,
    /// Server version.
    pub server_version: String,
    /// Task id.
    pub task: String,
    /// Screen size `[width, height]`.
    pub screen: [u32; 2],
    /// Start (Unix ms).
    pub started_at_ms: i64,
    /// Last update (Unix ms).
    pub updated_at_ms: i64,
    /// `open` while recording, `closed` after a clean close, `crashed` once recovered.
    pub status: String,
    /// Video encoder element (`nvh264enc`, `x264enc`, `openh264enc`), or none.
    pub encoder: Option<String>,
    /// Encoders tried and rejected before it, with why.
    #[serde(default)]
    pub encoder_rejected: Vec<String>,
    /// Per-episode MP4 files written.
    #[serde(default)]
    pub videos: u64,
    /// Frame rate of the videos' time slots (one per reset or step), when recorded.
    #[serde(default)]
    pub video_fps: Option<u32>,
    /// True when every slot holds a picture (frame `k` is at `k / fps`); false when
    /// repeated frames were elided (and in bundles written before this field).
    #[serde(default)]
    pub video_constant_rate: bool,
    /// Row counts in the closed chunks.
    pub counts: Counts,
    /// Records dropped because the writer could not keep up (overflow = drop).
    pub dropped_records: u64,
    /// Unclosed chunks found and discarded after a crash.
    pub lost_chunks: u64,
    /// Overflow policy.
    pub overflow: Overflow,
    /// Chunk files per table, relative to the bundle.
    pub files: Files,
    /// Set when the recording stopped before its pool closed (its principal's disk
    /// share was used up): the bundle is complete up to there, and what came after
    /// is in `dropped_records`. Absent in bundles that were not stopped, and in those
    /// written before this field (readers default it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<EarlyStop>,
}

/// Chunk files per table (table name → paths relative to the bundle).
pub type Files = std::collections::BTreeMap<String, Vec<String>>;

impl Manifest {
    pub(super) fn to_json(&self) -> Result<Vec<u8>, RecordError> {
        serde_json::to_vec_pretty(self).map_err(|e| RecordError::Parquet(e.to_string()))
    }
}

/// Reads a bundle's manifest, with a clear error for anything that is not one.
pub fn read_manifest(dir: &Path) -> Result<Manifest, RecordError> {
    let not = |reason: String| RecordError::NotABundle {
        path: dir.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(dir.join("manifest.json"))
        .map_err(|e| not(format!("manifest.json: {e}")))?;
    let m: Manifest =
        serde_json::from_str(&text).map_err(|e| not(format!("manifest.json: {e}")))?;
    if m.format != FORMAT {
        return Err(not(format!("format is {:?}, not {FORMAT:?}", m.format)));
    }
    Ok(m)
}
