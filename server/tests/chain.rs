//! Chained checkpoints and parked replicas (`SaveRequest.park`) against the real
//! server: a chain of saves keeps its replicas at the newest checkpoint by replaying
//! only the suffix, forks and restores take them (replaying nothing), and every parked
//! desktop (a real Xvfb, counted among this process's children) goes when its
//! checkpoint or pool does. One test: the Xvfb counts are of the whole process.

mod common;

use std::time::{Duration, Instant};

use common::*;
use deskgym_proto::v1 as pb;
use deskgym_server::{Limits, ServerConfig};

fn type_text(t: &str) -> Option<pb::Action> {
    Some(pb::Action {
        verb: Some(pb::action::Verb::TypeText(pb::TypeText { text: t.into() })),
        extension: None,
    })
}

async fn step(c: &mut Client, env: &str, action: Option<pb::Action>) -> pb::StepResult {
    c.step(step_req(env, action)).await.unwrap().into_inner()
}

async fn save(c: &mut Client, env: &str, park: u32) -> pb::Checkpoint {
    c.save(pb::SaveRequest {
        env_id: env.into(),
        park,
    })
    .await
    .unwrap()
    .into_inner()
}

/// The checkpoint as listed now.
async fn listed(c: &mut Client, cp: &pb::Checkpoint) -> pb::Checkpoint {
    let all = c
        .list_checkpoints(pb::ListCheckpointsRequest {
            pool_id: cp.pool_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    all.checkpoints
        .into_iter()
        .find(|c| c.checkpoint_id == cp.checkpoint_id)
        .expect("listed")
}

/// Waits until no replica of `cp` is being rebuilt; its chain then.
async fn parked(c: &mut Client, cp: &pb::Checkpoint) -> pb::CheckpointChain {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let chain = listed(c, cp).await.chain.unwrap();
        if chain.parking == 0 {
            return chain;
        }
        assert!(
            Instant::now() < deadline,
            "parking never finished: {chain:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until this process has `n` Xvfb children (desktops stop in the background).
async fn xvfbs(n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while children_named("Xvfb").len() != n {
        assert!(
            Instant::now() < deadline,
            "{} Xvfb children, not {n}",
            children_named("Xvfb").len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn fork(c: &mut Client, cp: &pb::Checkpoint, n: u32) -> pb::ForkResponse {
    let f = c
        .fork(pb::ForkRequest {
            checkpoint_id: cp.checkpoint_id.clone(),
            n,
            encoding: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(f.expected_hash, cp.frame_hash);
    for r in &f.replicas {
        assert_eq!(r.fidelity, pb::Fidelity::Exact as i32, "{r:?}");
        assert_eq!(r.observation.as_ref().unwrap().frame_hash, cp.frame_hash);
        assert_eq!(r.info.as_ref().unwrap().step_index, cp.step_index);
    }
    f
}

fn from_steps(f: &pb::ForkResponse) -> Vec<u32> {
    f.replicas
        .iter()
        .map(|r| r.path.as_ref().unwrap().replayed_from_step)
        .collect()
}

async fn close(c: &mut Client, pool_id: &str) {
    c.close_pool(pb::ClosePoolRequest {
        pool_id: pool_id.into(),
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_saves_keeps_parked_replicas_that_forks_and_restores_take() {
    let server = TestServer::start(ServerConfig {
        limits: Limits {
            max_envs: 8,
            ..Limits::default()
        },
        step_threads: 16,
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = c
        .create_pool(pb::CreatePoolRequest {
            task: "type-word".into(),
            num_envs: 1,
            screen: Some(pb::ScreenSize {
                width: 320,
                height: 240,
            }),
            max_steps: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let env = p.env_ids[0].clone();
    let first = reset(&mut c, &env, 3).await.observation.unwrap();
    let field = find(&first, 0xfcfcfc).unwrap();
    step(&mut c, &env, click(field.0, field.1)).await;
    for k in 1..10 {
        step(&mut c, &env, type_text(&"abcdefghij"[k..=k])).await;
    }
    xvfbs(1).await;

    // Step 10: two replicas parked by full replays.
    let cp10 = save(&mut c, &env, 2).await;
    assert_eq!(cp10.step_index, 10);
    let chain = parked(&mut c, &cp10).await;
    assert_eq!(
        (chain.parked, chain.park, chain.parked_from_step),
        (2, 2, 0),
        "{chain:?}"
    );
    assert_eq!(chain.note, "");
    xvfbs(3).await;

    // Step 20: the same two desktops advanced by the ten steps between.
    for k in 0..10 {
        step(&mut c, &env, type_text(&"klmnopqrst"[k..=k])).await;
    }
    let cp20 = save(&mut c, &env, 2).await;
    assert_eq!(
        cp20.chain.as_ref().unwrap().parent_checkpoint_id,
        cp10.checkpoint_id
    );
    // A fork right away waits for the advance in flight, then takes both replicas
    // (nothing replayed); a third replica is a full replay.
    let f = fork(&mut c, &cp20, 2).await;
    assert_eq!((f.from_parked, from_steps(&f)), (2, vec![20, 20]));
    let chain = parked(&mut c, &cp20).await;
    assert_eq!((chain.parked, chain.parked_from_step), (0, 10), "{chain:?}");
    assert_eq!(
        parked(&mut c, &cp10).await.parked,
        0,
        "advanced, not copied"
    );
    xvfbs(3).await;
    let g = fork(&mut c, &cp20, 1).await;
    assert_eq!((g.from_parked, from_steps(&g)), (0, vec![0]));
    close(&mut c, &f.pool_id).await;
    close(&mut c, &g.pool_id).await;
    xvfbs(1).await;

    // Restore takes a parked replica for the env's desktop; the env's own stops.
    let cp21 = save(&mut c, &env, 1).await;
    assert_eq!(parked(&mut c, &cp21).await.parked, 1);
    xvfbs(2).await;
    let before = step(&mut c, &env, type_text("u")).await;
    assert_ne!(before.observation.unwrap().frame_hash, cp21.frame_hash);
    let back = c
        .restore(pb::RestoreRequest {
            env_id: env.clone(),
            checkpoint_id: cp21.checkpoint_id.clone(),
            encoding: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(back.fidelity, pb::Fidelity::Exact as i32);
    assert_eq!(back.observation.unwrap().frame_hash, cp21.frame_hash);
    assert_eq!(parked(&mut c, &cp21).await.parked, 0);
    xvfbs(1).await;
    let on = step(&mut c, &env, type_text("v")).await;
    assert_eq!(on.info.unwrap().step_index, 21);

    // Deleting a checkpoint stops its parked desktops.
    let cp22 = save(&mut c, &env, 2).await;
    assert_eq!(parked(&mut c, &cp22).await.parked, 2);
    xvfbs(3).await;
    c.delete_checkpoint(pb::DeleteCheckpointRequest {
        checkpoint_id: cp22.checkpoint_id.clone(),
    })
    .await
    .unwrap();
    xvfbs(1).await;

    // A pool that needs the room takes it from parked replicas: 1 env + 2 parked + 6
    // is over max_envs=8, so one parked replica goes.
    let cp23 = save(&mut c, &env, 2).await;
    assert_eq!(parked(&mut c, &cp23).await.parked, 2);
    let big = pool(&mut c, "click-target", 6, 320, 240).await;
    assert_eq!(parked(&mut c, &cp23).await.parked, 1);
    xvfbs(8).await;
    close(&mut c, &big.pool_id).await;

    // Closing the pool stops its parked desktops with its envs.
    close(&mut c, &p.pool_id).await;
    xvfbs(0).await;
    server.stop().await;
}
