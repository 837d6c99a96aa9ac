//! Frame cache, not_modified, checkpoints, fork and warm spares against the real server.

mod common;

use common::*;
use deskgym_proto::v1 as pb;
use deskgym_proto::v1::deskgym_client::DeskgymClient;
use tonic::Code;
use tonic::transport::Channel;

type Client = DeskgymClient<Channel>;

fn act(v: pb::action::Verb) -> Option<pb::Action> {
    Some(pb::Action {
        verb: Some(v),
        extension: None,
    })
}

fn type_text(t: &str) -> Option<pb::Action> {
    act(pb::action::Verb::TypeText(pb::TypeText { text: t.into() }))
}

async fn batch(c: &mut Client, items: Vec<pb::StepRequest>) -> Vec<pb::StepResult> {
    let r = c
        .step_batch(pb::StepBatchRequest {
            items,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    r.results
        .into_iter()
        .map(|i| {
            assert_eq!(i.code, 0, "{}", i.message);
            i.result.unwrap()
        })
        .collect()
}

async fn pool_with(c: &mut Client, task: &str, n: u32, spares: u32) -> pb::CreatePoolResponse {
    c.create_pool(pb::CreatePoolRequest {
        task: task.into(),
        num_envs: n,
        screen: Some(pb::ScreenSize {
            width: 320,
            height: 240,
        }),
        max_steps: 1000,
        warm_spares: spares,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// A seeded action sequence touching every part of each task.
fn script(seed: u64) -> Vec<Option<pb::Action>> {
    let mut rng = deskgym_worker::Rng::new(seed);
    let mut out = Vec::new();
    for _ in 0..3 {
        out.push(click(rng.range(0, 320), rng.range(0, 240)));
    }
    out.push(act(pb::action::Verb::Drag(pb::Drag {
        from: px(rng.range(0, 320), rng.range(32, 240)),
        to: px(rng.range(0, 320), rng.range(32, 240)),
        ..Default::default()
    })));
    out.push(type_text("ab"));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_replays_identically_for_20_seeds() {
    let server = TestServer::with_limits(8, 8).await;
    let mut c = server.client().await;
    for task in deskgym_worker::TASKS {
        let p = pool_with(&mut c, task.id, 2, 0).await;
        let (a, b) = (p.env_ids[0].clone(), p.env_ids[1].clone());
        for seed in 0..20u64 {
            let ra = reset(&mut c, &a, seed)
                .await
                .observation
                .unwrap()
                .frame_hash;
            let rb = reset(&mut c, &b, seed)
                .await
                .observation
                .unwrap()
                .frame_hash;
            assert_eq!(ra, rb, "{} seed {seed}: reset", task.id);
            for (i, action) in script(seed).into_iter().enumerate() {
                let r = batch(
                    &mut c,
                    vec![step_req(&a, action.clone()), step_req(&b, action)],
                )
                .await;
                let ha = &r[0].observation.as_ref().unwrap().frame_hash;
                let hb = &r[1].observation.as_ref().unwrap().frame_hash;
                assert_eq!(ha, hb, "{} seed {seed} step {i}", task.id);
                if r[0].terminated {
                    assert!(r[1].terminated);
                    break;
                }
            }
        }
        c.close_pool(pb::ClosePoolRequest { pool_id: p.pool_id })
            .await
            .unwrap();
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_of_a_mid_episode_checkpoint_are_exact_and_share_frames() {
    let server = TestServer::with_limits(12, 12).await;
    let mut c = server.client().await;
    let p = pool_with(&mut c, "type-word", 1, 0).await;
    let env = p.env_ids[0].clone();
    let first = reset(&mut c, &env, 3).await.observation.unwrap();
    let field = find(&first, 0xfcfcfc).unwrap();
    batch(&mut c, vec![step_req(&env, click(field.0, field.1))]).await;
    let typed = batch(&mut c, vec![step_req(&env, type_text("xy"))])
        .await
        .remove(0);
    let cp = c
        .save(pb::SaveRequest {
            env_id: env.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cp.step_index, 2);
    assert_eq!(cp.frame_hash, typed.observation.unwrap().frame_hash);

    let f = c
        .fork(pb::ForkRequest {
            checkpoint_id: cp.checkpoint_id.clone(),
            n: 4,
            encoding: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(f.replicas.len(), 4);
    assert_eq!(f.expected_hash, cp.frame_hash);
    for r in &f.replicas {
        assert_eq!(r.fidelity, pb::Fidelity::Exact as i32);
        assert_eq!(r.observation.as_ref().unwrap().frame_hash, cp.frame_hash);
        assert_eq!(r.info.as_ref().unwrap().step_index, 2);
    }

    // Identical actions on the replicas: one frame with pixels, the rest not_modified,
    // and one PNG encode for all four.
    let before = c
        .get_cache_stats(pb::GetCacheStatsRequest {})
        .await
        .unwrap()
        .into_inner();
    let items = f
        .replicas
        .iter()
        .map(|r| pb::StepRequest {
            env_id: r.env_id.clone(),
            action: type_text("z"),
            encoding: pb::ImageEncoding::Png as i32,
            ..Default::default()
        })
        .collect();
    let r = batch(&mut c, items).await;
    let obs: Vec<_> = r.iter().map(|s| s.observation.clone().unwrap()).collect();
    assert!(obs.windows(2).all(|w| w[0].frame_hash == w[1].frame_hash));
    assert!(!obs[0].not_modified && obs[0].frame.starts_with(b"\x89PNG"));
    assert!(
        obs[1..]
            .iter()
            .all(|o| o.not_modified && o.frame.is_empty())
    );
    let after = c
        .get_cache_stats(pb::GetCacheStatsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(after.encodes - before.encodes, 1, "{before:?} -> {after:?}");
    assert_eq!(after.encodes_saved - before.encodes_saved, 3);
    assert_eq!(after.not_modified - before.not_modified, 3);

    // Restore rewinds the original env to the checkpoint.
    let rest = c
        .restore(pb::RestoreRequest {
            env_id: env.clone(),
            checkpoint_id: cp.checkpoint_id.clone(),
            encoding: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rest.fidelity, pb::Fidelity::Exact as i32);
    assert_eq!(rest.observation.unwrap().frame_hash, cp.frame_hash);
    let done = batch(&mut c, vec![step_req(&env, type_text("!"))])
        .await
        .remove(0);
    assert_eq!(done.info.unwrap().step_index, 3);

    // Listing, deleting, and closing the owner pool.
    let list = c
        .list_checkpoints(pb::ListCheckpointsRequest {
            pool_id: p.pool_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.checkpoints.len(), 1);
    let cp2 = c
        .save(pb::SaveRequest {
            env_id: env.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    c.delete_checkpoint(pb::DeleteCheckpointRequest {
        checkpoint_id: cp2.checkpoint_id.clone(),
    })
    .await
    .unwrap();
    let e = c
        .restore(pb::RestoreRequest {
            env_id: env.clone(),
            checkpoint_id: cp2.checkpoint_id,
            encoding: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    c.close_pool(pb::ClosePoolRequest {
        pool_id: p.pool_id.clone(),
    })
    .await
    .unwrap();
    let e = c
        .fork(pb::ForkRequest {
            checkpoint_id: cp.checkpoint_id,
            n: 1,
            encoding: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::NotFound,
        "closing the owner pool deletes its checkpoints"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_modified_and_get_frames() {
    let server = TestServer::with_limits(4, 4).await;
    let mut c = server.client().await;
    let p = pool_with(&mut c, "click-target", 1, 0).await;
    let env = p.env_ids[0].clone();
    let first = reset(&mut c, &env, 8).await.observation.unwrap();
    let miss = pb::StepRequest {
        env_id: env.clone(),
        action: click(1, 235),
        if_none_match: vec!["0".repeat(32), first.frame_hash.clone()],
        ..Default::default()
    };
    let r = c
        .step(miss.clone())
        .await
        .unwrap()
        .into_inner()
        .observation
        .unwrap();
    assert!(r.not_modified && r.frame.is_empty());
    assert_eq!(
        (r.frame_hash.as_str(), r.width, r.height),
        (first.frame_hash.as_str(), 320, 240)
    );

    let frames = c
        .get_frames(pb::GetFramesRequest {
            hashes: vec![first.frame_hash.clone()],
            encoding: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .frames;
    assert_eq!(
        frames[0].frame, first.frame,
        "the cached frame is the frame"
    );
    let png = c
        .get_frames(pb::GetFramesRequest {
            hashes: vec![first.frame_hash.clone()],
            encoding: pb::ImageEncoding::Png as i32,
        })
        .await
        .unwrap()
        .into_inner()
        .frames;
    assert!(png[0].frame.starts_with(b"\x89PNG"));

    let e = c
        .get_frames(pb::GetFramesRequest {
            hashes: vec!["f".repeat(32)],
            encoding: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .step(pb::StepRequest {
            if_none_match: vec!["not-a-hash".into()],
            ..miss.clone()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().starts_with("if_none_match[0]:"),
        "{}",
        e.message()
    );
    let e = c
        .step_batch(pb::StepBatchRequest {
            items: vec![miss.clone()],
            if_none_match: vec!["ABC".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        e.message().starts_with("if_none_match[0]:"),
        "{}",
        e.message()
    );
    let e = c
        .get_frames(pb::GetFramesRequest {
            hashes: vec!["xyz".into()],
            encoding: 0,
        })
        .await
        .unwrap_err();
    assert!(e.message().starts_with("hashes[0]:"), "{}", e.message());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_bad_input() {
    let server = TestServer::with_limits(5, 5).await;
    let mut c = server.client().await;
    let a = pool_with(&mut c, "click-target", 2, 0).await;
    let e = c
        .save(pb::SaveRequest {
            env_id: a.env_ids[0].clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "save before reset");
    reset(&mut c, &a.env_ids[0], 1).await;
    let cp = c
        .save(pb::SaveRequest {
            env_id: a.env_ids[0].clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();

    for id in ["nope", ""] {
        let e = c
            .fork(pb::ForkRequest {
                checkpoint_id: id.into(),
                n: 1,
                encoding: 0,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound);
        let e = c
            .restore(pb::RestoreRequest {
                env_id: a.env_ids[1].clone(),
                checkpoint_id: id.into(),
                encoding: 0,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound);
    }
    let e = c
        .delete_checkpoint(pb::DeleteCheckpointRequest {
            checkpoint_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .fork(pb::ForkRequest {
            checkpoint_id: cp.checkpoint_id.clone(),
            n: 0,
            encoding: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);

    // 2 of 5 slots used: a fork of 4 is refused and creates nothing ...
    let e = c
        .fork(pb::ForkRequest {
            checkpoint_id: cp.checkpoint_id.clone(),
            n: 4,
            encoding: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    // ... so the 3 free slots are still free.
    let other = pool_with(&mut c, "drag-to-zone", 2, 0).await;
    let f = c
        .fork(pb::ForkRequest {
            checkpoint_id: cp.checkpoint_id.clone(),
            n: 1,
            encoding: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(f.replicas[0].fidelity, pb::Fidelity::Exact as i32);

    // Restore onto another task, or another screen size.
    let e = c
        .restore(pb::RestoreRequest {
            env_id: other.env_ids[0].clone(),
            checkpoint_id: cp.checkpoint_id.clone(),
            encoding: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    c.close_pool(pb::ClosePoolRequest {
        pool_id: other.pool_id,
    })
    .await
    .unwrap();
    let big = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 1,
            screen: Some(pb::ScreenSize {
                width: 330,
                height: 240,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = c
        .restore(pb::RestoreRequest {
            env_id: big.env_ids[0].clone(),
            checkpoint_id: cp.checkpoint_id,
            encoding: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("330x240"), "{}", e.message());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_take_warm_spares_and_spares_come_back() {
    let server = TestServer::with_limits(10, 10).await;
    let mut c = server.client().await;
    let p = pool_with(&mut c, "click-button", 1, 2).await;
    reset(&mut c, &p.env_ids[0], 4).await;
    let cp = c
        .save(pb::SaveRequest {
            env_id: p.env_ids[0].clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let f = c
        .fork(pb::ForkRequest {
            checkpoint_id: cp.checkpoint_id.clone(),
            n: 3,
            encoding: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(f.from_spares, 2);
    assert!(
        f.replicas
            .iter()
            .all(|r| r.fidelity == pb::Fidelity::Exact as i32)
    );
    // The pool tops its spares up in the background.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let f = c
            .fork(pb::ForkRequest {
                checkpoint_id: cp.checkpoint_id.clone(),
                n: 2,
                encoding: 0,
            })
            .await
            .unwrap()
            .into_inner();
        let done = f.from_spares == 2;
        c.close_pool(pb::ClosePoolRequest { pool_id: f.pool_id })
            .await
            .unwrap();
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "spares never came back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    server.stop().await;
}
