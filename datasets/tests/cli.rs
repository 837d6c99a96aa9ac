//! The `deskgym-datasets inspect` binary on a real bundle, a corrupt one and a foreign dir.

use std::process::Command;
use std::time::Duration;

use deskgym_datasets::{Overflow, Record, Recorder, RecorderConfig, StepRow};

fn inspect(path: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_deskgym-datasets"))
        .arg("inspect")
        .arg(path)
        .output()
        .unwrap()
}

#[test]
fn inspect_reads_good_bundles_and_rejects_bad_ones() {
    let d = std::env::temp_dir().join(format!("deskgym-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let bundle = d.join("run.skn");
    let r = Recorder::start(RecorderConfig {
        dir: bundle.clone(),
        run_id: "run".into(),
        task: "click-target".into(),
        width: 4,
        height: 2,
        server_version: "test".into(),
        roll_bytes: 1 << 20,
        roll_every: Duration::from_secs(60),
        channel_capacity: 8,
        overflow: Overflow::Block,
        video_fps: None,
        video_variable_rate: false,
    })
    .unwrap();
    for i in 0..3 {
        r.send(Record::Step(StepRow {
            episode_id: "e/1".into(),
            step_index: i,
            ..Default::default()
        }));
    }
    r.close().unwrap();

    let ok = inspect(&bundle);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let text = String::from_utf8_lossy(&ok.stdout);
    assert!(text.contains("steps: 3 rows in 1 chunks"), "{text}");

    let chunk = bundle.join("steps/part-00000.parquet");
    std::fs::write(&chunk, b"PAR1 not parquet").unwrap();
    let bad = inspect(&bundle);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot be read"));

    let foreign = inspect(&d);
    assert_eq!(foreign.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&foreign.stderr).contains("not a readable .skn bundle"));
}
