//! Recording disk per principal (issue 46, decision 170): a principal whose bundles
//! hold its `recording_mb=` share may not start another recording, and a recording
//! that reaches the share stops (a whole bundle) while its pool steps on. On the fake
//! backend: the recorder is the real one, only the desktops are in memory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use deskgym_proto::v1 as pb;
use deskgym_server::{Limits, ServerConfig};

use super::shares::{Fake, fake_with, small_pool};
use super::{Client, as_};

/// A fresh data dir for test `tag`.
fn data_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deskgym-ten-rec-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A fake-backend server for `tokens` writing recordings into `data`: chunks roll
/// after every record and there is no video, so bundles grow step by step.
async fn server(tokens: &str, data: &Path, limits: Limits) -> Fake {
    let config = ServerConfig {
        limits,
        data_dir: data.to_path_buf(),
        record_roll_bytes: 1,
        record_video_fps: None,
        ..ServerConfig::default()
    };
    fake_with(tokens, config, "127.0.0.1:0").await
}

fn recording_pool(run: &str) -> pb::CreatePoolRequest {
    pb::CreatePoolRequest {
        record: run.into(),
        // Short episodes, so a stopped bundle holds whole ones to read back.
        max_steps: 20,
        ..small_pool(1)
    }
}

/// The bytes of the regular files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

async fn close(c: &mut Client, token: &str, pool_id: &str) -> pb::ClosePoolResponse {
    c.close_pool(as_(
        token,
        pb::ClosePoolRequest {
            pool_id: pool_id.into(),
        },
    ))
    .await
    .unwrap()
    .into_inner()
}

async fn step(c: &mut Client, token: &str, env: &str) -> Result<(), tonic::Status> {
    let req = pb::StepRequest {
        env_id: env.into(),
        autoreset: true,
        action: Some(pb::Action {
            verb: Some(pb::action::Verb::Wait(pb::Wait { ms: 0 })),
            ..Default::default()
        }),
        ..Default::default()
    };
    c.step(as_(token, req)).await.map(drop)
}

/// Admission: Alice's runs already hold 2 MiB of her 1 MiB share, so a new recording
/// is refused whole (RESOURCE_EXHAUSTED, saying what to delete) while Bob records;
/// once she deletes the old run she records again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_over_its_recording_share_cannot_start_a_recording() {
    let data = data_dir("admit");
    let old = data.join("rs-alice/old.skn");
    std::fs::create_dir_all(old.join("frames")).unwrap();
    std::fs::write(old.join("frames/part-00000.parquet"), vec![0u8; 2 << 20]).unwrap();
    let mut f = server(
        "rs-alice: aaa recording_mb=1\nrs-bob: bbb\n",
        &data,
        Limits::default(),
    )
    .await;
    let err =
        f.c.create_pool(as_("aaa", recording_pool("new")))
            .await
            .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message()
            .contains("recordings of rs-alice hold 2.0 MiB of its share of 1 MiB")
            && err.message().contains("DeleteRecording"),
        "{err:?}"
    );
    assert!(
        !data.join("rs-alice/new.skn").exists(),
        "nothing is created"
    );
    let bob =
        f.c.create_pool(as_("bbb", recording_pool("new")))
            .await
            .unwrap()
            .into_inner();
    assert!(
        !close(&mut f.c, "bbb", &bob.pool_id)
            .await
            .recording_path
            .is_empty()
    );

    f.c.delete_recording(as_("aaa", pb::DeleteRecordingRequest { run: "old".into() }))
        .await
        .unwrap();
    let alice =
        f.c.create_pool(as_("aaa", recording_pool("new")))
            .await
            .unwrap()
            .into_inner();
    close(&mut f.c, "aaa", &alice.pool_id).await;
    f.stop().await;
}

/// A live recording that fills its principal's 1 MiB share stops: its manifest says
/// why, the pool steps on, records after the stop are dropped and counted, ClosePool
/// returns the bundle, and the bundle reads back. The overshoot is at most a chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_stops_at_its_share_and_the_pool_steps_on() {
    let data = data_dir("stop");
    let mut f = server("rs-carol: ccc recording_mb=1\n", &data, Limits::default()).await;
    let p =
        f.c.create_pool(as_("ccc", recording_pool("long")))
            .await
            .unwrap()
            .into_inner();
    let env = &p.env_ids[0];
    f.c.reset(as_(
        "ccc",
        pb::ResetRequest {
            env_id: env.clone(),
            seed: Some(1),
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    let bundle = data.join("rs-carol/long.skn");
    let stopped = |b: &Path| {
        deskgym_datasets::read_manifest(b)
            .ok()
            .and_then(|m| m.stopped_early)
    };
    let mut steps = 0;
    while stopped(&bundle).is_none() {
        assert!(steps < 5_000, "no stop after {steps} steps");
        step(&mut f.c, "ccc", env).await.unwrap();
        steps += 1;
    }
    // The writer is on its own thread: give the stop's final manifest a moment.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let at_stop = dir_bytes(&bundle);
    for _ in 0..20 {
        step(&mut f.c, "ccc", env).await.unwrap();
    }
    assert_eq!(
        dir_bytes(&bundle),
        at_stop,
        "nothing is written after the stop"
    );
    let closed = close(&mut f.c, "ccc", &p.pool_id).await;
    assert!(closed.recording_path.ends_with("long.skn"), "{closed:?}");

    let m = deskgym_datasets::read_manifest(&bundle).unwrap();
    let stop = m.stopped_early.clone().unwrap();
    assert_eq!(
        (m.status.as_str(), stop.reason.as_str(), stop.share_bytes),
        ("closed", "disk_share", 1 << 20)
    );
    assert!(m.dropped_records >= 20, "{m:?}");
    let overshoot = dir_bytes(&bundle).saturating_sub(1 << 20);
    eprintln!("stopped after {steps} steps; {overshoot} bytes past the 1 MiB share");
    assert!(overshoot < 64 << 10, "{overshoot} bytes past the share");
    let b = deskgym_datasets::Bundle::open(&bundle).unwrap();
    let episodes = b.episodes().unwrap();
    assert!(!episodes.is_empty(), "{m:?}");
    let first = episodes[0]["episode_id"].as_str().unwrap();
    assert!(!b.steps(first).unwrap().is_empty());
    f.stop().await;
}

/// GetCapabilities reports the server's bound and each principal's share of it: set
/// in the token file, or the bound split between the principals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_report_the_recording_share_and_the_bound() {
    let data = data_dir("caps");
    let limits = Limits {
        max_recording_mb: 10,
        ..Limits::default()
    };
    let mut f = server("rs-dan: ddd recording_mb=1\nrs-eve: eee\n", &data, limits).await;
    for (token, share) in [("ddd", 1), ("eee", 5)] {
        let l =
            f.c.get_capabilities(as_(token, pb::GetCapabilitiesRequest {}))
                .await
                .unwrap()
                .into_inner()
                .limits
                .unwrap();
        assert_eq!(l.max_recording_mb, 10);
        assert_eq!(l.shares.unwrap().recording_mb, share, "{token}");
    }
    f.stop().await;
}
