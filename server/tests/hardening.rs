//! Hostile input and faults against the real server: overflows, oversized input, two
//! calls on one env, stalled and killed desktops racing ClosePool, leases, seeds and the
//! default settle policy. Every call that could hang carries a client deadline.

mod common;

use std::time::{Duration, Instant};

use common::*;
use deskgym_proto::v1 as pb;
use deskgym_server::{Limits, ServerConfig};
use pb::action::Verb;
use tonic::Code;

fn act(v: Verb) -> Option<pb::Action> {
    Some(pb::Action {
        verb: Some(v),
        extension: None,
    })
}

fn wait_ms(ms: u32) -> Option<pb::Action> {
    act(Verb::Wait(pb::Wait { ms }))
}

/// A request with a client-side deadline: no call of these tests may outlive it.
fn within<T>(msg: T, d: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(d);
    r
}

async fn small_pool(c: &mut Client, n: u32) -> pb::CreatePoolResponse {
    pool(c, "click-target", n, 320, 240).await
}

type Client = deskgym_proto::v1::deskgym_client::DeskgymClient<tonic::transport::Channel>;

async fn healthy(server: &TestServer) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let mut req = tonic::Request::new(tonic_health::pb::HealthCheckRequest {
        service: deskgym_server::SERVICE_NAME.into(),
    });
    req.set_timeout(Duration::from_secs(2));
    let r = health
        .check(req)
        .await
        .expect("health answers")
        .into_inner();
    assert_eq!(
        r.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_numbers_are_refused_never_wrapped() {
    let server = TestServer::with_limits(4, 8).await;
    let mut c = server.client().await;
    let p = small_pool(&mut c, 1).await;
    let env = p.env_ids[0].clone();
    reset(&mut c, &env, 1).await;

    // used + n would wrap u32: RESOURCE_EXHAUSTED, not an abort.
    let e = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: u32::MAX,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    // num_envs + warm_spares wraps.
    let e = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 2,
            warm_spares: u32::MAX,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    // A fork of 2^32-1 replicas.
    let cp = c
        .save(pb::SaveRequest {
            env_id: env.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = c
        .fork(pb::ForkRequest {
            checkpoint_id: cp.checkpoint_id.clone(),
            n: u32::MAX,
            encoding: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    // |i32::MIN| wraps to itself with `abs`.
    for (dx, dy) in [(0, i32::MIN), (i32::MIN, 0), (i32::MAX, 0)] {
        let e = c
            .step(within(
                step_req(
                    &env,
                    act(Verb::Scroll(pb::Scroll {
                        target: px(10, 10),
                        dx,
                        dy,
                        ..Default::default()
                    })),
                ),
                Duration::from_secs(10),
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().starts_with("action.scroll."), "{}", e.message());
    }
    // Total pixels: one 4096x4096 desktop is over a 1-desktop-of-1080p budget.
    let px_server = TestServer::start(ServerConfig {
        limits: Limits {
            max_total_pixels: 1920 * 1080,
            ..Limits::default()
        },
        ..ServerConfig::default()
    })
    .await;
    let e = px_server
        .client()
        .await
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 1,
            screen: Some(pb::ScreenSize {
                width: 4096,
                height: 4096,
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("max_total_pixels"), "{}", e.message());
    px_server.stop().await;
    healthy(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_input_gets_short_errors_and_bounded_replies() {
    let server = TestServer::with_limits(2, 8).await;
    let mut c = server.client().await;
    let p = small_pool(&mut c, 1).await;
    let env = p.env_ids[0].clone();
    let r = reset(&mut c, &env, 1).await;
    let hash = r.observation.unwrap().frame_hash;

    // A 100,000-character chord: refused at once, and the message stays short.
    let t0 = Instant::now();
    let e = c
        .step(step_req(
            &env,
            act(Verb::Key(pb::Key {
                keys: "a+".repeat(50_000),
            })),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    assert!(e.message().len() < 200, "{} bytes", e.message().len());
    assert!(t0.elapsed() < Duration::from_secs(5));
    // Unknown ids of 100,000 characters are quoted by a prefix only.
    let e = c
        .step(step_req("x".repeat(100_000), noop()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().len() < 300, "{} bytes", e.message().len());
    // A frame asked for 64 times comes back once.
    let frames = c
        .get_frames(pb::GetFramesRequest {
            hashes: vec![hash.clone(); 64],
            encoding: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .frames;
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].frame_hash, hash);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_in_flight_per_env() {
    let server = TestServer::with_limits(2, 8).await;
    let mut c = server.client().await;
    let p = small_pool(&mut c, 2).await;
    let (a, b) = (p.env_ids[0].clone(), p.env_ids[1].clone());
    reset(&mut c, &a, 1).await;
    reset(&mut c, &b, 1).await;
    let mut c2 = c.clone();
    let slow = {
        let a = a.clone();
        tokio::spawn(async move { c2.step(step_req(a, wait_ms(1500))).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The same env: ABORTED at once, naming the call in flight.
    let t0 = Instant::now();
    let e = c.step(step_req(&a, noop())).await.unwrap_err();
    assert_eq!(e.code(), Code::Aborted, "{e:?}");
    assert!(e.message().contains("Step"), "{}", e.message());
    assert!(t0.elapsed() < Duration::from_millis(1000));
    let e = c
        .reset(pb::ResetRequest {
            env_id: a.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Aborted);
    // Its neighbour is untouched.
    c.step(step_req(&b, noop())).await.unwrap();
    slow.await.unwrap().unwrap();
    // Free again once the first returned.
    c.step(step_req(&a, noop())).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_batch_leaves_its_envs_usable() {
    let server = TestServer::with_limits(4, 8).await;
    let mut c = server.client().await;
    let p = small_pool(&mut c, 3).await;
    for e in &p.env_ids {
        reset(&mut c, e, 1).await;
    }
    let items: Vec<_> = p
        .env_ids
        .iter()
        .map(|e| step_req(e, wait_ms(800)))
        .collect();
    // The client gives up after 200 ms (the call is cancelled, the channel stays).
    let e = c
        .step_batch(within(
            pb::StepBatchRequest {
                items,
                ..Default::default()
            },
            Duration::from_millis(200),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(e.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{e:?}"
    );
    // The steps already running finish on their own; then every env answers again.
    let t0 = Instant::now();
    for e in &p.env_ids {
        loop {
            match c.step(step_req(e, noop())).await {
                Ok(_) => break,
                Err(s) if s.code() == Code::Aborted && t0.elapsed() < Duration::from_secs(5) => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(s) => panic!("{s:?}"),
            }
        }
    }
    server.stop().await;
}

fn stall_server() -> ServerConfig {
    ServerConfig {
        limits: Limits {
            max_envs: 4,
            op_timeout: Duration::from_millis(1500),
            ..Limits::default()
        },
        step_threads: 8,
        ..ServerConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_xvfb_times_out_alone_and_comes_back() {
    let server = TestServer::start(stall_server()).await;
    let mut c = server.client().await;
    let p = small_pool(&mut c, 2).await;
    let (a, b) = (p.env_ids[0].clone(), p.env_ids[1].clone());
    let pid = xvfb_pid(display(&reset(&mut c, &a, 1).await.info.unwrap())).unwrap();
    reset(&mut c, &b, 1).await;
    // SAFETY: stopping an Xvfb this test's server started.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let mut c2 = c.clone();
    let stuck = {
        let a = a.clone();
        tokio::spawn(async move {
            c2.step(within(step_req(a, click(5, 5)), Duration::from_secs(20)))
                .await
        })
    };
    // While it is stuck: health, capabilities and the neighbour answer promptly.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    healthy(&server).await;
    c.get_capabilities(within(
        pb::GetCapabilitiesRequest {},
        Duration::from_secs(2),
    ))
    .await
    .unwrap();
    c.step(within(step_req(&b, noop()), Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    let e = stuck.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    // Reset restarts it (the stuck thread was freed by the kill).
    let t0 = Instant::now();
    loop {
        let r = c
            .reset(within(
                pb::ResetRequest {
                    env_id: a.clone(),
                    seed: Some(1),
                    ..Default::default()
                },
                Duration::from_secs(10),
            ))
            .await;
        match r {
            Ok(_) => break,
            Err(s) if s.code() == Code::Aborted && t0.elapsed() < Duration::from_secs(5) => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(s) => panic!("{s:?}"),
        }
    }
    c.step(step_req(&a, noop())).await.unwrap();
    // ClosePool while a desktop is stopped: the close finishes, health keeps answering.
    let pid = xvfb_pid(display(
        &c.step(step_req(&b, noop()))
            .await
            .unwrap()
            .into_inner()
            .info
            .unwrap(),
    ))
    .unwrap();
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let mut c3 = c.clone();
    let pool_id = p.pool_id.clone();
    let close = tokio::spawn(async move {
        c3.close_pool(within(
            pb::ClosePoolRequest { pool_id },
            Duration::from_secs(20),
        ))
        .await
    });
    healthy(&server).await;
    close.await.unwrap().unwrap();
    healthy(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_of_a_killed_desktop_races_close_pool() {
    let server = TestServer::start(stall_server()).await;
    let mut c = server.client().await;
    // Rounds are cheap (one 320x240 desktop each); enough to have hung in seconds
    // before the lock-order fix (22 hangs in 250 rounds).
    for round in 0..200 {
        let p = small_pool(&mut c, 1).await;
        let env = p.env_ids[0].clone();
        let d = display(&reset(&mut c, &env, 1).await.info.unwrap());
        if let Some(pid) = xvfb_pid(d) {
            // SAFETY: killing an Xvfb this test's server started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let (mut c1, mut c2) = (c.clone(), c.clone());
        let reset = tokio::spawn(async move {
            c1.reset(within(
                pb::ResetRequest {
                    env_id: env,
                    ..Default::default()
                },
                Duration::from_secs(15),
            ))
            .await
        });
        let pool_id = p.pool_id.clone();
        let close = tokio::spawn(async move {
            c2.close_pool(within(
                pb::ClosePoolRequest { pool_id },
                Duration::from_secs(15),
            ))
            .await
        });
        // Either order is fine; neither may outlive its deadline.
        if let Err(s) = reset.await.unwrap() {
            assert_ne!(s.code(), Code::DeadlineExceeded, "round {round}: {s:?}");
            assert_ne!(s.code(), Code::Cancelled, "round {round}: {s:?}");
        }
        close.await.unwrap().unwrap();
    }
    healthy(&server).await;
    assert_eq!(
        c.get_capabilities(pb::GetCapabilitiesRequest {})
            .await
            .unwrap()
            .into_inner()
            .limits
            .unwrap()
            .max_envs,
        4
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundled_tasks_settle_by_sync_unless_told_otherwise() {
    let server = TestServer::with_limits(4, 8).await;
    let mut c = server.client().await;
    let p = small_pool(&mut c, 1).await;
    reset(&mut c, &p.env_ids[0], 1).await;
    let r = c
        .step(step_req(&p.env_ids[0], click(5, 5)))
        .await
        .unwrap()
        .into_inner();
    let s = r.observation.unwrap().settle.unwrap();
    assert_eq!(s.policy, pb::SettlePolicy::Sync as i32);
    assert!(s.quiesced);
    // A pool that asks for a quiet window gets XDamage.
    let p = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 1,
            screen: Some(pb::ScreenSize {
                width: 320,
                height: 240,
            }),
            settle: Some(pb::SettleConfig {
                settle_ms: Some(15),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    reset(&mut c, &p.env_ids[0], 1).await;
    let r = c
        .step(step_req(&p.env_ids[0], click(5, 5)))
        .await
        .unwrap()
        .into_inner();
    let s = r.observation.unwrap().settle.unwrap();
    assert_eq!(s.policy, pb::SettlePolicy::Damage as i32);
    assert!(s.waited_ms >= 15.0, "{s:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unseeded_episodes_never_repeat_across_envs() {
    let server = TestServer::with_limits(4, 8).await;
    let mut c = server.client().await;
    let p = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 4,
            seed: 100,
            max_steps: 1,
            screen: Some(pb::ScreenSize {
                width: 320,
                height: 240,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut seeds = std::collections::HashSet::new();
    for (i, e) in p.env_ids.iter().enumerate() {
        for k in 0..6u64 {
            let info = c
                .reset(pb::ResetRequest {
                    env_id: e.clone(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .info
                .unwrap();
            assert_eq!(
                info.seed,
                deskgym_server::episode_seed(100 + i as u64, k),
                "env {i} episode {k}"
            );
            assert!(seeds.insert(info.seed), "seed {} repeated", info.seed);
        }
    }
    assert_eq!(seeds.len(), 24);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_free_desktops_of_a_silent_client_and_keep_a_live_one() {
    let server = TestServer::with_limits(4, 8).await;
    let mut c = server.client().await;
    let mk = |lease_ttl_ms| pb::CreatePoolRequest {
        task: "click-target".into(),
        num_envs: 1,
        screen: Some(pb::ScreenSize {
            width: 320,
            height: 240,
        }),
        lease_ttl_ms,
        ..Default::default()
    };
    let e = c.create_pool(mk(10)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("lease_ttl_ms"), "{}", e.message());
    let silent = c.create_pool(mk(1000)).await.unwrap().into_inner();
    let live = c.create_pool(mk(1000)).await.unwrap().into_inner();
    // The live client renews (as the Python client's keepalive thread does) without
    // stepping; the silent one does nothing.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(2600) {
        let gone = c
            .keep_alive(pb::KeepAliveRequest {
                pool_ids: vec![live.pool_id.clone()],
            })
            .await
            .unwrap()
            .into_inner()
            .gone;
        assert!(gone.is_empty(), "the live pool was reaped");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let gone = c
        .keep_alive(pb::KeepAliveRequest {
            pool_ids: vec![silent.pool_id.clone(), live.pool_id.clone()],
        })
        .await
        .unwrap()
        .into_inner()
        .gone;
    assert_eq!(gone, vec![silent.pool_id.clone()]);
    let e = c
        .step(step_req(&silent.env_ids[0], noop()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_unguessable() {
    let server = TestServer::with_limits(4, 8).await;
    let mut c = server.client().await;
    let a = small_pool(&mut c, 2).await;
    let b = small_pool(&mut c, 1).await;
    let ids = [
        &a.pool_id,
        &a.env_ids[0],
        &a.env_ids[1],
        &b.pool_id,
        &b.env_ids[0],
    ];
    for id in ids {
        // 128 bits of keyed hash after a one-letter kind.
        assert_eq!(id.len(), 33, "{id}");
    }
    // Consecutive ids share no long prefix (no visible counter).
    assert_ne!(a.env_ids[0][..8], a.env_ids[1][..8]);
    server.stop().await;
}

fn not_found<T>(r: Result<tonic::Response<T>, tonic::Status>) {
    let e = r.map(|_| ()).unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
}

/// A request as principal `token`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_see_and_touch_only_their_own() {
    let server = TestServer::start(ServerConfig {
        principals: deskgym_server::parse_token_file(
            "alice: aaa desktops=2\nbob: bbb desktops=2 checkpoints=1\n",
        )
        .unwrap(),
        limits: Limits {
            max_envs: 8,
            ..Limits::default()
        },
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let mk = |n| pb::CreatePoolRequest {
        task: "click-target".into(),
        num_envs: n,
        screen: Some(pb::ScreenSize {
            width: 320,
            height: 240,
        }),
        ..Default::default()
    };
    let a = c.create_pool(as_("aaa", mk(2))).await.unwrap().into_inner();
    let env = a.env_ids[0].clone();
    c.reset(as_(
        "aaa",
        pb::ResetRequest {
            env_id: env.clone(),
            seed: Some(1),
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    let cp = c
        .save(as_(
            "aaa",
            pb::SaveRequest {
                env_id: env.clone(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();

    // Bob gets NOT_FOUND for every one of Alice's objects, as for ids that never were.
    not_found(c.step(as_("bbb", step_req(&env, noop()))).await);
    not_found(
        c.observe(as_(
            "bbb",
            pb::ObserveRequest {
                env_id: env.clone(),
                ..Default::default()
            },
        ))
        .await,
    );
    not_found(
        c.fork(as_(
            "bbb",
            pb::ForkRequest {
                checkpoint_id: cp.checkpoint_id.clone(),
                n: 1,
                encoding: 0,
            },
        ))
        .await,
    );
    not_found(
        c.delete_checkpoint(as_(
            "bbb",
            pb::DeleteCheckpointRequest {
                checkpoint_id: cp.checkpoint_id.clone(),
            },
        ))
        .await,
    );
    not_found(
        c.close_pool(as_(
            "bbb",
            pb::ClosePoolRequest {
                pool_id: a.pool_id.clone(),
            },
        ))
        .await,
    );
    let listed = c
        .list_checkpoints(as_("bbb", pb::ListCheckpointsRequest::default()))
        .await
        .unwrap()
        .into_inner()
        .checkpoints;
    assert!(listed.is_empty(), "{listed:?}");
    let gone = c
        .keep_alive(as_(
            "bbb",
            pb::KeepAliveRequest {
                pool_ids: vec![a.pool_id.clone()],
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .gone;
    assert_eq!(gone, vec![a.pool_id.clone()]);

    // Quotas: Alice is at her 2 desktops; Bob still gets his.
    let e = c.create_pool(as_("aaa", mk(1))).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    assert!(e.message().contains("alice"), "{}", e.message());
    let b = c.create_pool(as_("bbb", mk(2))).await.unwrap().into_inner();
    let benv = b.env_ids[0].clone();
    c.reset(as_(
        "bbb",
        pb::ResetRequest {
            env_id: benv.clone(),
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    c.save(as_(
        "bbb",
        pb::SaveRequest {
            env_id: benv.clone(),
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    let e = c
        .save(as_(
            "bbb",
            pb::SaveRequest {
                env_id: benv,
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::ResourceExhausted,
        "bob's checkpoint quota is 1"
    );
    // Alice's objects still work for Alice.
    c.step(as_("aaa", step_req(&env, noop()))).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_kills_only_a_desktop_that_was_running() {
    // One step thread: two 700 ms waits run back to back; a third call queues behind.
    let server = TestServer::start(ServerConfig {
        limits: Limits {
            max_envs: 4,
            op_timeout: Duration::from_millis(1000),
            ..Limits::default()
        },
        step_threads: 1,
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = small_pool(&mut c, 3).await;
    let (a1, a2, b) = (
        p.env_ids[0].clone(),
        p.env_ids[1].clone(),
        p.env_ids[2].clone(),
    );
    for e in &p.env_ids {
        reset(&mut c, e, 1).await;
    }
    let call = |env: String, action| {
        let mut c = c.clone();
        tokio::spawn(async move { c.step(step_req(env, action)).await })
    };
    let first = call(a1.clone(), wait_ms(700));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = call(a2.clone(), wait_ms(700));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let queued = call(b.clone(), noop());
    first.await.unwrap().unwrap();
    // The second ran past its deadline: killed. The third never started: untouched.
    let e = second.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    let e = queued.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    let t0 = Instant::now();
    let ok = loop {
        match c.step(step_req(&b, noop())).await {
            Err(s) if s.code() == Code::Aborted && t0.elapsed() < Duration::from_secs(5) => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            r => break r,
        }
    };
    ok.expect("the queued env's desktop was not killed: it steps without a Reset");
    server.stop().await;
}

/// A recording whose writer is stuck on its disk (here: the first chunk of steps is a
/// FIFO nobody reads, so opening it blocks) must not stall the pool: once its queue is
/// full, one send waits `record_block_limit` and later ones drop, so every env's steps
/// go on within their deadline (waiting per record would cost 2 s a send, over the
/// 3 s deadline within two sends); health answers; once the disk moves, ClosePool
/// finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_recording_writer_does_not_stall_the_pool() {
    let data = std::env::temp_dir().join(format!("deskgym-stall-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let server = TestServer::start(ServerConfig {
        data_dir: data.clone(),
        record_roll_bytes: 1, // roll after every record: the writer opens a chunk at once
        record_video_fps: None,
        record_queue: 8,
        record_block_limit: Duration::from_secs(2),
        step_threads: 8,
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 2,
            screen: Some(pb::ScreenSize {
                width: 320,
                height: 240,
            }),
            record: "stall".into(),
            max_steps: 1000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let bundle = data.join("stall.skn");
    // Chunks are numbered across tables, so every number the first steps chunk could
    // take is a FIFO.
    let fifos: Vec<_> = (0..100)
        .map(|i| bundle.join(format!("steps/part-{i:05}.parquet.tmp")))
        .collect();
    for f in &fifos {
        let ok = std::process::Command::new("mkfifo")
            .arg(f)
            .status()
            .unwrap();
        assert!(ok.success(), "mkfifo {}", f.display());
    }
    let steps: Vec<_> = p
        .env_ids
        .iter()
        .map(|env| {
            let (mut c, env) = (c.clone(), env.clone());
            tokio::spawn(async move {
                c.reset(within(
                    pb::ResetRequest {
                        env_id: env.clone(),
                        seed: Some(1),
                        ..Default::default()
                    },
                    Duration::from_secs(10),
                ))
                .await?;
                for _ in 0..30 {
                    c.step(within(step_req(&env, noop()), Duration::from_secs(3)))
                        .await?;
                }
                Ok::<_, tonic::Status>(())
            })
        })
        .collect();
    for s in steps {
        s.await
            .unwrap()
            .expect("steps go on while the writer is stuck");
    }
    healthy(&server).await;
    // The writer really was stuck: no steps chunk was finished.
    let finished = std::fs::read_dir(bundle.join("steps"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "parquet")
        })
        .count();
    assert_eq!(
        finished, 0,
        "the writer was not blocked; the test proves nothing"
    );
    // The disk moves again: drain the FIFOs. A FIFO cannot be fsynced, so this
    // recording ends in an error; what matters is that ClosePool answers and closes.
    for f in fifos {
        std::thread::spawn(move || {
            let _ = std::fs::read(f);
        });
    }
    let closed = c
        .close_pool(within(
            pb::ClosePoolRequest {
                pool_id: p.pool_id.clone(),
            },
            Duration::from_secs(30),
        ))
        .await;
    match closed {
        Ok(r) => assert_eq!(r.into_inner().envs_closed, 2),
        Err(e) => assert_eq!(e.code(), Code::Internal, "{e:?}"),
    }
    let e = c
        .step(within(
            step_req(&p.env_ids[0], noop()),
            Duration::from_secs(3),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::NotFound,
        "the pool is closed either way: {e:?}"
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}
