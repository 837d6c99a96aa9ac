//! What one principal may see of and take from another (issue 46): figures, the frame
//! cache, metrics, and shares of the global limits. On the fake backend (the same
//! RPCs, quotas and cache as real desktops, without X), so these run in seconds.

use std::time::Duration;

use deskgym_proto::v1 as pb;
use deskgym_server::{BackendKind, Limits, Listeners, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::{Client, as_};

/// A fake-backend server for `tokens` (a token file), with a console and a metrics
/// endpoint bound on `metrics_at`; returns the stop switch, the client and the
/// (console, metrics) addresses.
pub(crate) struct Fake {
    stop: oneshot::Sender<()>,
    done: tokio::task::JoinHandle<Result<(), deskgym_server::RunError>>,
    pub(crate) c: Client,
    pub(crate) console: std::net::SocketAddr,
    pub(crate) metrics: std::net::SocketAddr,
}

pub(crate) async fn fake(tokens: &str, limits: Limits, metrics_at: &str) -> Fake {
    let config = ServerConfig {
        limits,
        data_dir: std::env::temp_dir().join(format!("deskgym-ten-shares-{}", std::process::id())),
        ..ServerConfig::default()
    };
    fake_with(tokens, config, metrics_at).await
}

/// [`fake`] with the rest of the server's `config` (its principals and backend are
/// set here).
pub(crate) async fn fake_with(tokens: &str, config: ServerConfig, metrics_at: &str) -> Fake {
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = grpc.local_addr().unwrap();
    let console = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics = tokio::net::TcpListener::bind(metrics_at).await.unwrap();
    let (console_at, metrics_at) = (console.local_addr().unwrap(), metrics.local_addr().unwrap());
    let config = ServerConfig {
        principals: deskgym_server::parse_token_file(tokens).unwrap(),
        backend: BackendKind::Fake,
        ..config
    };
    let (stop, rx) = oneshot::channel::<()>();
    let extra = Listeners {
        metrics: Some(metrics),
        console: Some(console),
    };
    let done = tokio::spawn(deskgym_server::run_with(
        deskgym_server::Listener::Tcp(grpc),
        extra,
        config,
        async {
            let _ = rx.await;
        },
    ));
    let mut c = None;
    for _ in 0..100 {
        if let Ok(x) = deskgym_server::connect(addr).await {
            c = Some(x);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Fake {
        stop,
        done,
        c: c.expect("the server did not start"),
        console: console_at,
        metrics: metrics_at,
    }
}

impl Fake {
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        self.done.await.unwrap().unwrap();
    }
}

/// `GET path` on `at` (connecting to loopback whatever the bound address), with a
/// bearer token if given: (status code, body).
async fn get(at: std::net::SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", at.port()))
        .await
        .unwrap();
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{auth}connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).await.unwrap();
    let reply = String::from_utf8_lossy(&reply).to_string();
    let code = reply
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = reply
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    (code, body)
}

pub(crate) fn small_pool(n: u32) -> pb::CreatePoolRequest {
    pb::CreatePoolRequest {
        task: "click-target".into(),
        num_envs: n,
        screen: Some(pb::ScreenSize {
            width: 320,
            height: 240,
        }),
        ..Default::default()
    }
}

async fn reset_as(c: &mut Client, token: &str, env: &str, seed: u64) {
    c.reset(as_(
        token,
        pb::ResetRequest {
            env_id: env.into(),
            seed: Some(seed),
            ..Default::default()
        },
    ))
    .await
    .unwrap();
}

async fn stats(c: &mut Client, token: &str) -> pb::CacheStats {
    c.get_cache_stats(as_(token, pb::GetCacheStatsRequest {}))
        .await
        .unwrap()
        .into_inner()
}

/// Reproductions 1 and 2: Bob, with no pools, saw Alice's envs, steps and cache
/// figures on the console and the server's free pixels in GetCapabilities; after
/// Alice reset seed 3, Bob's reset of seed 3 was a cache hit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_and_cache_hits_are_each_principals_own() {
    let limits = Limits {
        max_total_pixels: 4 * 320 * 240,
        ..Limits::default()
    };
    // Principal tallies live for the process (one server per process in use): names no
    // other test in this binary uses keep the counts this test reads its own.
    let mut f = fake("fig-alice: aaa\nfig-bob: bbb\n", limits, "127.0.0.1:0").await;
    let pa =
        f.c.create_pool(as_("aaa", small_pool(1)))
            .await
            .unwrap()
            .into_inner();
    reset_as(&mut f.c, "aaa", &pa.env_ids[0], 3).await;
    let (code, fleet) = get(f.console, "/api/fleet", Some("bbb")).await;
    assert_eq!(code, 200, "{fleet}");
    let fleet: serde_json::Value = serde_json::from_str(&fleet).unwrap();
    let s = &fleet["server"];
    assert_eq!(
        (&s["envs"], &s["resets"], &s["steps"], &s["cache_misses"]),
        (&0.into(), &0.into(), &0.into(), &0.into()),
        "{fleet}"
    );
    assert!(s.get("errors").is_none(), "{fleet}");
    let (_, alice) = get(f.console, "/api/fleet", Some("aaa")).await;
    let alice: serde_json::Value = serde_json::from_str(&alice).unwrap();
    assert_eq!(alice["server"]["resets"], 1, "{alice}");
    // Bob's free pixels are what his share (half) leaves him, not the server's 3/4.
    let cap =
        f.c.get_capabilities(as_("bbb", pb::GetCapabilitiesRequest {}))
            .await
            .unwrap()
            .into_inner();
    let capacity = cap.capacity.unwrap();
    assert_eq!(capacity.pixels_free, 2 * 320 * 240, "{capacity:?}");
    let shares = cap.limits.unwrap().shares.unwrap();
    assert_eq!(
        (shares.pixels, shares.desktops),
        (2 * 320 * 240, 32),
        "{shares:?}"
    );

    // Bob resets the seed Alice did: his own figures say miss, as for a fresh seed.
    let pb_ =
        f.c.create_pool(as_("bbb", small_pool(1)))
            .await
            .unwrap()
            .into_inner();
    reset_as(&mut f.c, "bbb", &pb_.env_ids[0], 3).await;
    let bob = stats(&mut f.c, "bbb").await;
    assert_eq!((bob.hits, bob.encodes_saved), (0, 0), "{bob:?}");
    assert!(bob.misses > 0, "{bob:?}");
    f.stop().await;
}

/// Reproduction 3: a non-loopback metrics endpoint answered every figure with no
/// token. Now it needs a principal's token, or only the `@metrics` one when the file
/// names it; loopback (no sandbox reaches it) stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_beyond_loopback_need_the_token() {
    let f = fake("alice: aaa\nbob: bbb\n", Limits::default(), "0.0.0.0:0").await;
    let (code, body) = get(f.metrics, "/metrics", None).await;
    assert_eq!(code, 401, "{body}");
    assert!(!body.contains("deskgym_"), "{body}");
    assert_eq!(get(f.metrics, "/metrics", Some("wrong")).await.0, 401);
    let (code, body) = get(f.metrics, "/metrics", Some("aaa")).await;
    assert_eq!(code, 200);
    assert!(body.contains("deskgym_"), "{body}");
    f.stop().await;

    let f = fake(
        "alice: aaa\n@metrics: mmm\n",
        Limits::default(),
        "0.0.0.0:0",
    )
    .await;
    assert_eq!(get(f.metrics, "/metrics", Some("aaa")).await.0, 401);
    assert_eq!(get(f.metrics, "/metrics", Some("mmm")).await.0, 200);
    // The metrics token is no principal's: the gRPC server refuses it.
    let mut c = f.c.clone();
    let err = c
        .get_cache_stats(as_("mmm", pb::GetCacheStatsRequest {}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    f.stop().await;

    let f = fake("alice: aaa\n", Limits::default(), "127.0.0.1:0").await;
    assert_eq!(get(f.metrics, "/metrics", None).await.0, 200);
    f.stop().await;
}

/// Reproduction 4 (pixels): Alice's desktops took the whole `max_total_pixels`, so
/// Bob could not start one. Each principal now holds at most its share (the limit
/// split between principals unless the token file says `pixels=`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_principal_takes_the_others_pixels() {
    let limits = Limits {
        max_total_pixels: 4 * 320 * 240,
        ..Limits::default()
    };
    let mut f = fake("alice: aaa\nbob: bbb\n", limits.clone(), "127.0.0.1:0").await;
    let err =
        f.c.create_pool(as_("aaa", small_pool(3)))
            .await
            .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("share"), "{err:?}");
    f.c.create_pool(as_("aaa", small_pool(2))).await.unwrap();
    f.c.create_pool(as_("bbb", small_pool(2))).await.unwrap();
    f.stop().await;

    // A share set in the token file.
    let mut f = fake(
        &format!("alice: aaa pixels={}\nbob: bbb\n", 3 * 320 * 240),
        limits,
        "127.0.0.1:0",
    )
    .await;
    f.c.create_pool(as_("aaa", small_pool(3))).await.unwrap();
    f.c.create_pool(as_("bbb", small_pool(1))).await.unwrap();
    f.stop().await;
}

/// Reproduction 4 (screencasts): four streams held by Alice gave Bob
/// RESOURCE_EXHAUSTED. Each principal now watches at most its share of the slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_principal_takes_the_others_screencast_slots() {
    let limits = Limits {
        max_screencasts: 4,
        ..Limits::default()
    };
    let mut f = fake("alice: aaa\nbob: bbb\n", limits, "127.0.0.1:0").await;
    let mut env_of = async |token: &str| {
        let p =
            f.c.create_pool(as_(token, small_pool(1)))
                .await
                .unwrap()
                .into_inner();
        reset_as(&mut f.c, token, &p.env_ids[0], 1).await;
        p.env_ids[0].clone()
    };
    let (a, b) = (env_of("aaa").await, env_of("bbb").await);
    let cast = |token: &str, env: &str| {
        as_(
            token,
            pb::ScreencastRequest {
                env_id: env.into(),
                ..Default::default()
            },
        )
    };
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(f.c.screencast(cast("aaa", &a)).await.unwrap().into_inner());
    }
    let err = f.c.screencast(cast("aaa", &a)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("share of 2"), "{err:?}");
    held.push(f.c.screencast(cast("bbb", &b)).await.unwrap().into_inner());
    // A slot given back is Alice's again.
    held.remove(0);
    let mut again = None;
    for _ in 0..50 {
        if let Ok(s) = f.c.screencast(cast("aaa", &a)).await {
            again = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(again.is_some(), "the closed stream's slot never came back");
    drop(held);
    f.stop().await;
}

/// Step threads: a principal whose desktops are slow holds at most its share of the
/// threads (`threads=`), so another's steps still find one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_principal_takes_the_others_step_threads() {
    let mut f = fake(
        "alice: aaa threads=1\nbob: bbb\n",
        Limits::default(),
        "127.0.0.1:0",
    )
    .await;
    let pa =
        f.c.create_pool(as_("aaa", small_pool(2)))
            .await
            .unwrap()
            .into_inner();
    let pb_ =
        f.c.create_pool(as_("bbb", small_pool(1)))
            .await
            .unwrap()
            .into_inner();
    let wait = |env: &str, ms: u32| pb::StepRequest {
        env_id: env.into(),
        action: Some(pb::Action {
            verb: Some(pb::action::Verb::Wait(pb::Wait { ms })),
            ..Default::default()
        }),
        ..Default::default()
    };
    for (t, e) in [
        ("aaa", &pa.env_ids[0]),
        ("aaa", &pa.env_ids[1]),
        ("bbb", &pb_.env_ids[0]),
    ] {
        reset_as(&mut f.c, t, e, 1).await;
    }
    let mut slow = f.c.clone();
    let first = wait(&pa.env_ids[0], 1500);
    let held = tokio::spawn(async move { slow.step(as_("aaa", first)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err =
        f.c.step(as_("aaa", wait(&pa.env_ids[1], 0)))
            .await
            .unwrap_err();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("share of 1 step threads"), "{err:?}");
    f.c.step(as_("bbb", wait(&pb_.env_ids[0], 0)))
        .await
        .unwrap();
    held.await.unwrap().unwrap();
    // Her thread back, Alice steps again.
    f.c.step(as_("aaa", wait(&pa.env_ids[1], 0))).await.unwrap();
    let shares =
        f.c.get_capabilities(as_("aaa", pb::GetCapabilitiesRequest {}))
            .await
            .unwrap()
            .into_inner()
            .limits
            .unwrap()
            .shares
            .unwrap();
    assert_eq!(shares.threads, 1, "{shares:?}");
    f.stop().await;
}
