//! The real server on port 0, real Xvfb, the generated client.

mod common;

use common::*;
use deskgym_proto::v1 as pb;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_seed_same_hash_and_a_click_on_the_target_pays() {
    let server = TestServer::with_limits(8, 8).await;
    let mut c = server.client().await;
    let p = pool(&mut c, "click-target", 2, 640, 480).await;
    assert_eq!(p.env_ids.len(), 2);
    let a = reset(&mut c, &p.env_ids[0], 5).await;
    let b = reset(&mut c, &p.env_ids[1], 5).await;
    let (oa, ob) = (a.observation.unwrap(), b.observation.unwrap());
    assert_eq!(oa.frame_hash.len(), 32);
    assert_eq!(oa.frame_hash, ob.frame_hash, "same seed, same pixels");
    assert_eq!(oa.frame.len(), 640 * 480 * 3);
    let other = reset(&mut c, &p.env_ids[1], 6).await.observation.unwrap();
    assert_ne!(
        oa.frame_hash, other.frame_hash,
        "different seed, different pixels"
    );
    assert_eq!(a.info.unwrap().instruction, "Click the red circle.");

    let (x, y) = find(&oa, RED).expect("red target in the frame");
    let miss = c
        .step(step_req(p.env_ids[0].clone(), click(1, 470)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (miss.reward, miss.terminated, miss.truncated),
        (0.0, false, false)
    );
    assert_eq!(
        miss.observation.unwrap().frame_hash,
        oa.frame_hash,
        "a miss changes nothing"
    );
    let hit = c
        .step(step_req(p.env_ids[0].clone(), click(x, y)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((hit.reward, hit.terminated), (1.0, true));
    let info = hit.info.unwrap();
    assert_eq!(
        (info.step_index, info.extra["ended"].as_str()),
        (2, "success")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_answers_in_order_and_episodes_truncate() {
    let server = TestServer::with_limits(8, 8).await;
    let mut c = server.client().await;
    let resp = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-button".into(),
            num_envs: 3,
            screen: Some(pb::ScreenSize {
                width: 320,
                height: 240,
            }),
            max_steps: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(resp.max_steps, 2);
    for e in &resp.env_ids {
        reset(&mut c, e, 1).await;
    }
    let batch = |ids: Vec<String>| pb::StepBatchRequest {
        resets: vec![],
        items: ids
            .into_iter()
            .map(|env_id| pb::StepRequest {
                env_id,
                action: noop(),
                encoding: 0,
                autoreset: false,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let mut ids = resp.env_ids.clone();
    ids.reverse();
    let r = c.step_batch(batch(ids.clone())).await.unwrap().into_inner();
    let got: Vec<_> = r.results.iter().map(|i| i.env_id.clone()).collect();
    assert_eq!(got, ids);
    assert!(
        r.results
            .iter()
            .all(|i| i.code == 0 && !i.result.as_ref().unwrap().truncated)
    );
    let r = c.step_batch(batch(ids.clone())).await.unwrap().into_inner();
    assert!(
        r.results
            .iter()
            .all(|i| i.result.as_ref().unwrap().truncated)
    );
    // Stepping past the end is a precondition failure, item by item.
    let r = c.step_batch(batch(ids)).await.unwrap().into_inner();
    assert!(
        r.results
            .iter()
            .all(|i| i.code == Code::FailedPrecondition as i32),
        "{r:?}"
    );
    server.stop().await;
}

// spec: aci:4.frame-hash
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_encodes_png_and_jpeg_with_the_same_hash() {
    let server = TestServer::with_limits(8, 8).await;
    let mut c = server.client().await;
    let p = pool(&mut c, "type-word", 1, 320, 240).await;
    let r = reset(&mut c, &p.env_ids[0], 2).await.observation.unwrap();
    let env_id = p.env_ids[0].clone();
    let png = c
        .observe(pb::ObserveRequest {
            env_id: env_id.clone(),
            encoding: pb::ImageEncoding::Png as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(png.frame.starts_with(b"\x89PNG"));
    assert_eq!(png.frame_hash, r.frame_hash);
    let jpg = c
        .observe(pb::ObserveRequest {
            env_id,
            encoding: pb::ImageEncoding::Jpeg as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(jpg.frame.starts_with(&[0xff, 0xd8]));
    assert_eq!(jpg.frame_hash, r.frame_hash);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_and_health() {
    let server = TestServer::with_limits(8, 8).await;
    let mut c = server.client().await;
    let caps = c
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(caps.protocol, "deskgym.v1");
    assert!(caps.verbs.contains(&"drag".to_string()));
    let tasks: Vec<_> = caps.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        tasks[..5],
        [
            "click-target",
            "click-button",
            "drag-to-zone",
            "type-word",
            "blank"
        ]
    );
    // Then the bundled declarative tasks, on the desktop profile.
    assert_eq!(tasks.len(), 10, "{tasks:?}");
    assert!(
        caps.tasks[5..]
            .iter()
            .all(|t| t.id.starts_with("desktop/") && t.profile == "desktop")
    );
    let profiles: Vec<_> = caps.profiles.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(profiles, ["desktop", "osworld", "tasks", "web"]);
    assert_eq!(
        caps.allowed_capabilities,
        ["launch_app", "windows", "clipboard"],
        "exec is off by default"
    );
    assert_eq!(caps.limits.unwrap().max_envs, 8);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let r = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: deskgym_server::SERVICE_NAME.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoreset_and_resets_ride_in_one_batch() {
    let server = TestServer::with_limits(8, 8).await;
    let mut c = server.client().await;
    let p = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 2,
            screen: Some(pb::ScreenSize {
                width: 320,
                height: 240,
            }),
            max_steps: 1,
            seed: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let (a, b) = (p.env_ids[0].clone(), p.env_ids[1].clone());
    // Resets alone: a partial reset of both envs; unseeded resets use pool seed + index.
    let r = c
        .step_batch(pb::StepBatchRequest {
            items: vec![],
            resets: vec![
                pb::ResetRequest {
                    env_id: a.clone(),
                    ..Default::default()
                },
                pb::ResetRequest {
                    env_id: b.clone(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let seeds: Vec<u64> = r
        .reset_results
        .iter()
        .map(|i| i.result.as_ref().unwrap().info.as_ref().unwrap().seed)
        .collect();
    assert_eq!(seeds, [100, 101]);
    // Same-step autoreset: the step that truncates also starts the next episode.
    let r = c
        .step_batch(pb::StepBatchRequest {
            items: vec![pb::StepRequest {
                env_id: a.clone(),
                action: noop(),
                encoding: 0,
                autoreset: true,
                ..Default::default()
            }],
            resets: vec![pb::ResetRequest {
                env_id: b.clone(),
                seed: Some(7),
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let step = r.results[0].result.as_ref().unwrap();
    assert!(step.truncated);
    let next = step.reset.as_ref().expect("autoreset happened");
    let info = next.info.as_ref().unwrap();
    // The env's second unseeded episode: derived from its base (pool seed + index).
    assert_eq!(
        (info.step_index, info.episode, info.seed),
        (0, 2, deskgym_server::episode_seed(100, 1))
    );
    assert_eq!(
        r.reset_results[0]
            .result
            .as_ref()
            .unwrap()
            .info
            .as_ref()
            .unwrap()
            .seed,
        7
    );
    // The env is live again without an explicit Reset.
    let again = c
        .step(step_req(a.clone(), noop()))
        .await
        .unwrap()
        .into_inner();
    assert!(again.truncated && again.reset.is_none());
    // An env may not appear in both lists.
    let e = c
        .step_batch(pb::StepBatchRequest {
            items: vec![step_req(a.clone(), noop())],
            resets: vec![pb::ResetRequest {
                env_id: a,
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().starts_with("resets[0].env_id"),
        "{}",
        e.message()
    );
    server.stop().await;
}
