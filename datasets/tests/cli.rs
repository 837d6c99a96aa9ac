//! The `deskgym-datasets inspect` binary on a real bundle, a corrupt one and a foreign dir.

use std::process::Command;

use deskgym_datasets::{Record, StepRow};

mod common;

fn inspect(path: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_deskgym-datasets"))
        .arg("inspect")
        .arg(path)
        .output()
        .unwrap()
}

#[test]
fn inspect_reads_good_bundles_and_rejects_bad_ones() {
    let (d, r) = common::recorder("cli", 1 << 20);
    let bundle = d.join("run.skn");
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
