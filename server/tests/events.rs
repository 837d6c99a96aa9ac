//! One env as a whole, against the real server on real desktops: GetEnv answers its
//! owner only; `snapshot_kind` on capabilities and checkpoints; WatchEvents is the
//! recording's event log as it happens, bounded for slow watchers.

mod common;

use std::collections::HashMap;

use common::*;
use deskgym_proto::v1 as pb;
use deskgym_server::ServerConfig;
use tonic::Code;

/// A server with two principals (alice `aaa`, bob `bbb`) recording under `data`.
async fn two_principals(tag: &str) -> (TestServer, Client, std::path::PathBuf) {
    let data = std::env::temp_dir().join(format!("deskgym-events-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let server = TestServer::start(ServerConfig {
        principals: deskgym_server::parse_token_file(
            "alice: aaa desktops=4\nbob: bbb desktops=4\n",
        )
        .unwrap(),
        data_dir: data.clone(),
        record_video_fps: None,
        ..ServerConfig::default()
    })
    .await;
    let c = server.client().await;
    (server, c, data)
}

/// A pool of one 320x240 click-target desktop for `token`, recording as `record`.
fn small_pool(record: &str) -> pb::CreatePoolRequest {
    pb::CreatePoolRequest {
        task: "click-target".into(),
        num_envs: 1,
        screen: Some(pb::ScreenSize {
            width: 320,
            height: 240,
        }),
        record: record.into(),
        max_steps: 5000,
        lease_ttl_ms: 60_000,
        ..Default::default()
    }
}

fn get(env: &str) -> pb::GetEnvRequest {
    pb::GetEnvRequest { env_id: env.into() }
}

// spec: aci:2.reattach
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_env_tells_its_owner_what_the_env_is_and_no_one_else_anything() {
    let (server, mut c, data) = two_principals("get").await;
    let p = c
        .create_pool(as_("aaa", small_pool("mine")))
        .await
        .unwrap()
        .into_inner();
    let env = &p.env_ids[0];
    let info = c.get_env(as_("aaa", get(env))).await.unwrap().into_inner();
    assert_eq!(
        (
            info.env_id.as_str(),
            info.pool_id.as_str(),
            info.task.as_str(),
            info.profile.as_str()
        ),
        (env.as_str(), p.pool_id.as_str(), "click-target", "tasks")
    );
    assert_eq!(info.screen, p.screen);
    assert_eq!(info.capabilities, p.capabilities);
    assert_eq!((info.alive, info.record.as_str()), (true, "mine"));
    assert_eq!((info.max_steps, info.lease_ttl_ms), (5000, 60_000));
    assert_eq!(info.pool_env_ids, p.env_ids);
    assert_eq!(info.snapshot_kind, "replay");
    // Bob's view of Alice's env is an unknown id's: NOT_FOUND, the same message shape.
    let theirs = c.get_env(as_("bbb", get(env))).await.unwrap_err();
    let unknown = c.get_env(as_("bbb", get("env-nope"))).await.unwrap_err();
    assert_eq!(
        (theirs.code(), unknown.code()),
        (Code::NotFound, Code::NotFound)
    );
    assert_eq!(
        theirs.message().replace(env.as_str(), "ID"),
        unknown.message().replace("env-nope", "ID")
    );
    let watch = |token: &str| {
        as_(
            token,
            pb::WatchEventsRequest {
                env_id: env.clone(),
            },
        )
    };
    let err = c.watch_events(watch("bbb")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    // A closed pool's env is gone.
    c.close_pool(as_(
        "aaa",
        pb::ClosePoolRequest {
            pool_id: p.pool_id.clone(),
        },
    ))
    .await
    .unwrap();
    let err = c.get_env(as_("aaa", get(env))).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

// spec: aci:5.snapshot-kind
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_and_checkpoints_say_what_a_checkpoint_captures() {
    let server = TestServer::with_limits(2, 2).await;
    let mut c = server.client().await;
    let caps = c
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    let kinds: HashMap<_, _> = caps
        .profiles
        .iter()
        .map(|p| (p.name.as_str(), p.snapshot_kind.as_str()))
        .collect();
    assert!(
        kinds.contains_key("tasks") && kinds.contains_key("desktop"),
        "{kinds:?}"
    );
    assert!(kinds.values().all(|k| *k == "replay"), "{kinds:?}");
    let p = pool(&mut c, "click-target", 1, 320, 240).await;
    let env = &p.env_ids[0];
    reset(&mut c, env, 3).await;
    let cp = c
        .save(pb::SaveRequest {
            env_id: env.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cp.snapshot_kind, kinds["tasks"]);
    let listed = c
        .list_checkpoints(pb::ListCheckpointsRequest {
            pool_id: p.pool_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.checkpoints[0].snapshot_kind, "replay");
    let info = c.get_env(get(env)).await.unwrap().into_inner();
    assert_eq!(info.snapshot_kind, cp.snapshot_kind);
    server.stop().await;
}

/// Reads `n` events of `stream`.
async fn take(stream: &mut tonic::Streaming<pb::EnvEvent>, n: usize) -> Vec<pb::EnvEvent> {
    let mut out = Vec::new();
    while out.len() < n {
        out.push(
            stream
                .message()
                .await
                .unwrap()
                .expect("the stream ended early"),
        );
    }
    out
}

fn payload(e: &pb::EnvEvent) -> serde_json::Value {
    serde_json::from_str(&e.payload).unwrap()
}

// spec: aci:2.events aci:2.replay
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_events_is_the_recordings_event_log_as_it_happens() {
    let (server, mut c, data) = two_principals("watch").await;
    let p = c
        .create_pool(as_("aaa", small_pool("watched")))
        .await
        .unwrap()
        .into_inner();
    let env = p.env_ids[0].clone();
    let mut stream = c
        .watch_events(as_(
            "aaa",
            pb::WatchEventsRequest {
                env_id: env.clone(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let r = c
        .reset(as_(
            "aaa",
            pb::ResetRequest {
                env_id: env.clone(),
                seed: Some(7),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let stepped = c
        .step(as_("aaa", step_req(&env, click(40, 30))))
        .await
        .unwrap()
        .into_inner();
    // A verb the pool was not granted: a permission decision in the log.
    let denied = c.exec(as_("aaa", sh(&env, "true"))).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    let got = take(&mut stream, 4).await;
    let kinds: Vec<_> = got.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["reset", "action", "ack", "permission"]);
    let (reset_ev, action, ack, permission) = (
        payload(&got[0]),
        payload(&got[1]),
        payload(&got[2]),
        payload(&got[3]),
    );
    let obs = r.observation.unwrap();
    assert_eq!(reset_ev["frame_hash"], obs.frame_hash.as_str());
    assert_eq!(
        (
            &action["action"]["verb"],
            &action["action"]["x"],
            &action["action"]["y"]
        ),
        (&"click".into(), &40.into(), &30.into())
    );
    assert_eq!(action["step_index"], 1);
    assert_eq!(action["frame_hash_before"], obs.frame_hash.as_str());
    assert_eq!((&ack["ok"], &ack["step_index"]), (&true.into(), &1.into()));
    assert_eq!(
        ack["frame_hash"],
        stepped.observation.unwrap().frame_hash.as_str()
    );
    assert_eq!(ack["reward"], stepped.reward);
    assert_eq!(
        (&permission["capability"], &permission["decision"]),
        (&"exec".into(), &"denied".into())
    );
    assert!(got.iter().all(|e| e.env_id == env && e.lost == 0));
    let seqs: Vec<u64> = got.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    // Closing the pool says so and ends the stream.
    c.close_pool(as_(
        "aaa",
        pb::ClosePoolRequest {
            pool_id: p.pool_id.clone(),
        },
    ))
    .await
    .unwrap();
    let mut all = got;
    while let Some(e) = stream.message().await.unwrap() {
        all.push(e);
    }
    assert_eq!(all.last().map(|e| e.kind.as_str()), Some("env_closed"));
    // The recording's events table holds the same records in the same order: the
    // env's rows from the first one watched on.
    let bundle = deskgym_datasets::Bundle::open(&data.join("alice").join("watched.skn")).unwrap();
    let table = bundle.events(Some(&env)).unwrap();
    let from = table
        .iter()
        .position(|e| e["kind"] == "reset")
        .expect("the reset is recorded");
    let recorded: Vec<_> = table[from..]
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_string(),
                e["payload"].clone(),
            )
        })
        .collect();
    let watched: Vec<_> = all.iter().map(|e| (e.kind.clone(), payload(e))).collect();
    assert_eq!(recorded, watched);
    // Before the watcher came, the env had started its desktop (the table's only
    // earlier row of it), and the seq says so: it counts every event of the env.
    assert_eq!(table[..from].len() as u64, all[0].seq - 1);
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// A watcher that does not read loses the oldest events, is told how many, and the
/// env never waits for it: every step returns while nobody reads. Without a recording
/// the events exist all the same.
// spec: aci:2.events
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_watcher_loses_counted_events_and_never_holds_the_env() {
    let server = TestServer::with_limits(2, 2).await;
    let mut c = server.client().await;
    let p = c.create_pool(small_pool("")).await.unwrap().into_inner();
    let env = p.env_ids[0].clone();
    // The watcher on a connection of its own with HTTP/2's smallest window (64 KiB, not
    // hyper's 2 MiB), so what it leaves unread backs up into the server soon.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .unwrap();
    let mut stream = deskgym_proto::v1::deskgym_client::DeskgymClient::new(channel)
        .watch_events(pb::WatchEventsRequest {
            env_id: env.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    reset(&mut c, &env, 1).await;
    // Two events a step: far more than the ring (1024), the server's send queue and
    // the connection's window hold.
    const STEPS: u64 = 1500;
    for _ in 0..STEPS {
        c.step(step_req(&env, noop())).await.unwrap();
    }
    c.close_pool(pb::ClosePoolRequest {
        pool_id: p.pool_id.clone(),
    })
    .await
    .unwrap();
    let mut got = Vec::new();
    while let Some(e) = stream.message().await.unwrap() {
        got.push(e);
    }
    let lost: u64 = got.iter().map(|e| e.lost).sum();
    assert!(
        lost > 0,
        "nothing was lost: the test did not outrun the buffers"
    );
    // Every event is either received or counted as lost: reset, 2 per step, env_closed.
    assert_eq!(got.len() as u64 + lost, 1 + 2 * STEPS + 1);
    for w in got.windows(2) {
        assert_eq!(w[1].seq, w[0].seq + 1 + w[1].lost, "seq and lost disagree");
    }
    assert_eq!(got.last().unwrap().kind, "env_closed");
    server.stop().await;
}
