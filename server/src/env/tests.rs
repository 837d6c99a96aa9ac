//! The env against the fake backend and, where marked, real desktops.

use super::*;
use crate::config::Limits;
use crate::pool::PoolManager;
use crate::record::RecordSettings;

fn manager() -> Arc<PoolManager> {
    let record = RecordSettings::for_tests();
    Arc::new(PoolManager::new(Limits::default(), 4, record).expect("manager"))
}

#[test]
fn episode_seeds_are_distinct_and_reproducible() {
    let mut all = std::collections::HashSet::new();
    for base in 0..64u64 {
        assert_eq!(episode_seed(base, 0), base);
        for k in 1..64 {
            let s = episode_seed(base, k);
            assert!(s < 1 << 63);
            assert_eq!(s, episode_seed(base, k));
            assert!(all.insert(s), "seed {s} repeated");
        }
    }
    // Pinned so the Python twin (deskgym.seeding) can be checked against it.
    assert_eq!(episode_seed(0, 1), 0x045a_7ed4_6449_5a87);
}

/// The replay log keeps an action whose input reached the desktop even when the
/// capture after it failed: Save then Fork rebuilds the screen exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applied_action_survives_a_failed_capture() {
    let mgr = manager();
    let who = crate::auth::Principal::local(mgr.limits());
    let req = pb::CreatePoolRequest {
        task: "type-word".into(),
        num_envs: 1,
        screen: Some(pb::ScreenSize {
            width: 320,
            height: 240,
        }),
        ..Default::default()
    };
    let pool = mgr
        .create_pool(mgr.spec(&req).expect("spec"), 1, None, &who)
        .await
        .expect("pool (needs xvfb)");
    let env = mgr.env(&pool.env_ids[0], &who).expect("env");
    let opts = ObsOptions {
        encoding: pb::ImageEncoding::RawRgb as i32,
        known: Vec::new(),
        ..Default::default()
    };
    let before = env.reset(&mgr.cache, Some(3), &opts).expect("reset");
    let before = deskgym_worker::hash_hex(before.obs.hash);
    // Clicking the field focuses it (its border turns blue): a visible change.
    let (x, y) = deskgym_worker::Episode::new("type-word", 3, 320, 240)
        .expect("layout")
        .hint()[0];
    let focus = Action::Click {
        at: deskgym_worker::Point { x, y },
        button: deskgym_worker::Button::Left,
        count: 1,
    };
    env.fail_next_capture.store(true, Ordering::Release);
    let e = env
        .step(&mgr.cache, &focus.into(), &opts, false)
        .expect_err("the injected capture failure");
    assert_eq!(e.code(), tonic::Code::Internal, "{e}");
    let cp = mgr.save(&env.id, 0, &who).await.expect("save");
    assert_eq!(cp.actions_len(), 1, "the click is in the replay log");
    assert_ne!(
        deskgym_worker::hash_hex(cp.frame_hash()),
        before,
        "the checkpoint's hash is of the screen after the click"
    );
    let fork = mgr.fork(&cp.id, 1, 0, &who).await.expect("fork");
    assert!(fork.replicas[0].1.exact);
    mgr.close_all().await;
}
