//! What the datasets integration tests share: a fresh directory and a recorder of a
//! small 4x2 run in it.

use std::path::PathBuf;
use std::time::Duration;

use deskgym_datasets::{Overflow, Recorder, RecorderConfig};

/// A fresh directory for test `tag`, and a recorder writing `<dir>/run.skn` that rolls
/// a chunk every `roll_bytes` bytes.
pub(crate) fn recorder(tag: &str, roll_bytes: usize) -> (PathBuf, Recorder) {
    let d = std::env::temp_dir().join(format!("deskgym-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let r = Recorder::start(RecorderConfig {
        dir: d.join("run.skn"),
        run_id: "run".into(),
        task: "click-target".into(),
        width: 4,
        height: 2,
        server_version: "test".into(),
        roll_bytes,
        roll_every: Duration::from_secs(60),
        channel_capacity: 64,
        overflow: Overflow::Block,
        video_fps: None,
        video_variable_rate: false,
        disk_share: None,
    })
    .unwrap();
    (d, r)
}
