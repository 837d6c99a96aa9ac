//! Every bad input of the core issue, against the real server: the right code and a
//! message that names the field.

mod common;

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

fn norm(x: f64, y: f64) -> Option<pb::Target> {
    Some(pb::Target {
        kind: Some(pb::target::Kind::PointNorm(pb::PointNorm { x, y })),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_precise_codes() {
    let server = TestServer::with_limits(3, 2).await;
    let mut c = server.client().await;

    // Unknown ids.
    let e = c.step(step_req("nope", noop())).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("nope"));
    let e = c
        .reset(pb::ResetRequest {
            env_id: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .observe(pb::ObserveRequest {
            env_id: "nope".into(),
            encoding: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .close_pool(pb::ClosePoolRequest {
            pool_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .get_env(pb::GetEnvRequest {
            env_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("nope"), "{e:?}");
    let e = c
        .watch_events(pb::WatchEventsRequest {
            env_id: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    // Bad pool requests.
    let e = c
        .create_pool(pb::CreatePoolRequest {
            task: "solitaire".into(),
            num_envs: 1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("task:"), "{}", e.message());
    // An enum number this server does not know (a newer client's policy).
    let e = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 1,
            settle: Some(pb::SettleConfig {
                policy: 99,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message()
            .starts_with("settle.policy: unknown settle policy 99"),
        "{}",
        e.message()
    );
    let e = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 0,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 1,
            screen: Some(pb::ScreenSize {
                width: 10,
                height: 10,
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(e.message().starts_with("screen.width"), "{}", e.message());
    let e = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 4,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");

    // Step before reset.
    let p = pool(&mut c, "click-target", 3, 320, 240).await;
    let env = p.env_ids[0].clone();
    let e = c.step(step_req(env.clone(), noop())).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("Reset"), "{}", e.message());
    // The pool took every env slot: one more is refused, nothing half-created.
    let e = c
        .create_pool(pb::CreatePoolRequest {
            task: "click-target".into(),
            num_envs: 1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);

    let first = reset(&mut c, &env, 0).await.observation.unwrap();
    let cases: Vec<(Option<pb::Action>, &str)> = vec![
        (click(320, 5), "action.click.target.point_px"),
        (click(-1, 5), "action.click.target.point_px"),
        (
            act(Verb::Move(pb::Move {
                target: norm(0.5, 1.01),
            })),
            "action.move.target.point_norm.y",
        ),
        (
            act(Verb::Move(pb::Move {
                target: norm(-0.1, 0.0),
            })),
            "action.move.target.point_norm.x",
        ),
        (
            act(Verb::TypeText(pb::TypeText {
                text: String::new(),
            })),
            "action.type_text.text",
        ),
        (
            act(Verb::Key(pb::Key {
                keys: "ctrl+frobnicate".into(),
            })),
            "action.key.keys",
        ),
        (
            act(Verb::Click(pb::Click::default())),
            "action.click.target",
        ),
        (Some(pb::Action::default()), "action.verb"),
        (None, "action"),
        (
            act(Verb::Drag(pb::Drag {
                from: px(1, 1),
                to: px(1, 999),
                ..Default::default()
            })),
            "action.drag.to.point_px",
        ),
    ];
    for (action, field) in cases {
        let e = c
            .step(step_req(env.clone(), action.clone()))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{action:?}: {e:?}");
        assert!(
            e.message().starts_with(&format!("{field}:")),
            "{action:?}: {}",
            e.message()
        );
    }
    // Rejected actions sent nothing: the episode is untouched.
    let obs = c
        .observe(pb::ObserveRequest {
            env_id: env.clone(),
            encoding: 0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(obs.frame_hash, first.frame_hash);
    let ok = c
        .step(step_req(env.clone(), noop()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        ok.info.unwrap().step_index,
        1,
        "invalid actions do not count as steps"
    );

    // Batch limits and per-item errors.
    let items = |ids: &[&str]| pb::StepBatchRequest {
        resets: vec![],
        items: ids
            .iter()
            .map(|i| step_req(i.to_string(), noop()))
            .collect(),
        ..Default::default()
    };
    let e = c
        .step_batch(items(&[&env, &p.env_ids[1], &p.env_ids[2]]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted);
    let e = c.step_batch(items(&[&env, &env])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().starts_with("items[1].env_id"),
        "{}",
        e.message()
    );
    let e = c.step_batch(items(&[])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let r = c
        .step_batch(items(&[&env, "ghost"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.results[0].code, 0);
    assert_eq!(r.results[1].code, Code::NotFound as i32);

    // More parked replicas than the server's max_parked (8 by default).
    let e = c
        .save(pb::SaveRequest {
            env_id: env.clone(),
            park: 9,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("park") && e.message().contains("max_parked=8"),
        "{}",
        e.message()
    );

    // Ending the episode then stepping again.
    let (x, y) = find(&first, RED).unwrap();
    let won = c
        .step(step_req(env.clone(), click(x, y)))
        .await
        .unwrap()
        .into_inner();
    assert!(won.terminated);
    let e = c.step(step_req(env.clone(), noop())).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("ended"), "{}", e.message());

    let closed = c
        .close_pool(pb::ClosePoolRequest {
            pool_id: p.pool_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(closed.envs_closed, 3);
    let e = c.step(step_req(env, noop())).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    // Slots were released.
    pool(&mut c, "click-target", 3, 320, 240).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_is_required_when_configured() {
    let server = TestServer::start(ServerConfig {
        principals: deskgym_server::parse_token_file("let-me-in").unwrap(),
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let e = c
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
    let mut req = tonic::Request::new(pb::GetCapabilitiesRequest {});
    req.metadata_mut()
        .insert("authorization", "Bearer wrong".parse().unwrap());
    assert_eq!(
        c.get_capabilities(req).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    let mut req = tonic::Request::new(pb::GetCapabilitiesRequest {});
    req.metadata_mut()
        .insert("authorization", "Bearer let-me-in".parse().unwrap());
    assert!(c.get_capabilities(req).await.is_ok());
    server.stop().await;
}

#[tokio::test]
async fn non_loopback_without_token_is_refused() {
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let r = deskgym_server::run(
        listener,
        ServerConfig {
            limits: Limits::default(),
            ..ServerConfig::default()
        },
        async {},
    )
    .await;
    assert!(
        matches!(r, Err(deskgym_server::RunError::InsecureBind(_))),
        "{r:?}"
    );
}

/// Unlock's refusals: each bad field INVALID_ARGUMENT naming it, a power the policy
/// leaves out PERMISSION_DENIED naming what the operator would list, an env without a
/// sandbox FAILED_PRECONDITION (issue 43).
// spec: aci:2.unlock
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_requests_get_precise_codes() {
    let server = TestServer::start(ServerConfig {
        allow_unlock: vec!["exec".into(), "net.egress:pypi.org".into()],
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = pool(&mut c, "click-target", 1, 320, 240).await;
    let env = p.env_ids[0].clone();
    let ask = |capability: &str, scope: &[&str], reason: &str| pb::UnlockRequest {
        env_id: env.clone(),
        capability: capability.into(),
        scope: scope.iter().map(|s| s.to_string()).collect(),
        reason: reason.into(),
    };
    let long = "x".repeat(2000);
    for (req, code, needle) in [
        (ask("sudo", &[], ""), Code::InvalidArgument, "capability"),
        (
            ask("network", &[], ""),
            Code::InvalidArgument,
            "per pool only",
        ),
        (
            ask("exec", &["pypi.org"], ""),
            Code::InvalidArgument,
            "takes no scope",
        ),
        (
            ask("net.egress", &[], ""),
            Code::InvalidArgument,
            "needs a scope",
        ),
        (
            ask("net.egress", &["pypi.org", "10.0.0.1"], ""),
            Code::InvalidArgument,
            "scope[1]",
        ),
        (
            ask("net.egress", &["https://pypi.org/simple"], ""),
            Code::InvalidArgument,
            "not a host name",
        ),
        (ask("exec", &[], &long), Code::InvalidArgument, "reason"),
        (
            ask("files", &[], ""),
            Code::PermissionDenied,
            "--allow-unlock files",
        ),
        (
            ask("net.egress", &["pypi.org", ".org"], ""),
            Code::PermissionDenied,
            "net.egress:.org",
        ),
        (
            ask("exec", &[], "ok"),
            Code::FailedPrecondition,
            "without a sandbox",
        ),
        (
            pb::UnlockRequest {
                env_id: "nope".into(),
                ..ask("exec", &[], "")
            },
            Code::NotFound,
            "nope",
        ),
    ] {
        let what = format!("{:?} {:?}", req.capability, req.scope);
        let e = c.unlock(req).await.unwrap_err();
        assert_eq!(e.code(), code, "{what}: {e:?}");
        assert!(e.message().contains(needle), "{what}: {}", e.message());
    }
    for (id, code) in [("", Code::InvalidArgument), ("g7", Code::InvalidArgument)] {
        let e = c
            .relock(pb::RelockRequest {
                env_id: env.clone(),
                grant_id: id.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), code, "{id:?}");
        assert!(e.message().contains("grant_id"), "{}", e.message());
    }
    // A grant that is not (or no longer) held: nothing to release.
    let r = c
        .relock(pb::RelockRequest {
            env_id: env.clone(),
            grant_id: "u999999".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!r.released);
    server.stop().await;
}

/// AnswerCapability's refusals: a malformed token, reason or scope INVALID_ARGUMENT
/// naming the field; an unknown env or token NOT_FOUND; and an askable power on an env
/// that cannot hold it refused at once, nobody asked (issue 43).
// spec: aci:6.capability-channel
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capability_answers_get_precise_codes() {
    let server = TestServer::start(ServerConfig {
        ask_unlock: vec!["exec".into()],
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = pool(&mut c, "click-target", 1, 320, 240).await;
    let env = p.env_ids[0].clone();
    let answer = |env: &str, token: &str, allow: bool, scope: &[&str], reason: &str| {
        pb::AnswerCapabilityRequest {
            env_id: env.into(),
            token: token.into(),
            allow,
            scope: scope.iter().map(|s| s.to_string()).collect(),
            reason: reason.into(),
        }
    };
    let long = "x".repeat(2000);
    for (req, code, needle) in [
        (
            answer(&env, "", true, &[], ""),
            Code::InvalidArgument,
            "token",
        ),
        (
            answer(&env, "u12", true, &[], ""),
            Code::InvalidArgument,
            "token",
        ),
        (
            answer(&env, "c1x", true, &[], ""),
            Code::InvalidArgument,
            "token",
        ),
        (
            answer(&env, "c1", false, &[], &long),
            Code::InvalidArgument,
            "reason",
        ),
        (
            answer(&env, "c1", false, &["a.org"], ""),
            Code::InvalidArgument,
            "scope",
        ),
        (answer("nope", "c1", true, &[], ""), Code::NotFound, "nope"),
        (
            answer(&env, "c123456789", true, &[], ""),
            Code::NotFound,
            "c123456789",
        ),
    ] {
        let what = format!("{:?} {:?}", req.env_id, req.token);
        let e = c.answer_capability(req).await.unwrap_err();
        assert_eq!(e.code(), code, "{what}: {e:?}");
        assert!(e.message().contains(needle), "{what}: {}", e.message());
    }
    // exec is askable, but this env has no sandbox: refused at once, no request opened.
    let e = c.exec(sh(&env, "true")).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = c
        .unlock(pb::UnlockRequest {
            env_id: env.clone(),
            capability: "exec".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let info = c
        .get_env(pb::GetEnvRequest {
            env_id: env.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(info.pending_capabilities.is_empty(), "{info:?}");
    server.stop().await;
}

/// The artifact and tree verbs' malformed requests: the field named, nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_artifact_requests_name_their_field() {
    let data = std::env::temp_dir().join(format!("deskgym-bad-artifacts-{}", std::process::id()));
    let server = TestServer::start(ServerConfig {
        data_dir: data.clone(),
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let field = |e: &tonic::Status| e.message().split(':').next().unwrap_or("").to_string();
    for bad in ["", "abc", &"A".repeat(64), &"g".repeat(64), &"0".repeat(65)] {
        let req = pb::DownloadArtifactRequest {
            sha256: bad.to_string(),
            offset: 0,
        };
        let e = c.download_artifact(req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}");
        assert_eq!(field(&e), "sha256", "{}", e.message());
    }
    let upload = |m: pb::ArtifactChunk| tokio_stream::iter(vec![m]);
    for bad in [
        "",
        "short",
        "has space in it",
        "../../etc/passwd",
        &"x".repeat(65),
    ] {
        let m = pb::ArtifactChunk {
            upload_id: bad.to_string(),
            last: true,
            ..Default::default()
        };
        let e = c.upload_artifact(upload(m)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}");
        assert_eq!(field(&e), "upload_id", "{}", e.message());
    }
    let big = vec![0u8; (2 << 20) + 1];
    let m = pb::ArtifactChunk {
        upload_id: "too-large-chunk".into(),
        crc32: crc32fast::hash(&big),
        data: big,
        last: true,
        ..Default::default()
    };
    let e = c.upload_artifact(upload(m)).await.unwrap_err();
    assert_eq!(
        (e.code(), field(&e)),
        (Code::InvalidArgument, "data".into())
    );
    let m = pb::ArtifactChunk {
        upload_id: "bad-final-hash".into(),
        last: true,
        sha256: "not-a-hash".into(),
        ..Default::default()
    };
    let e = c.upload_artifact(upload(m)).await.unwrap_err();
    assert_eq!(
        (e.code(), field(&e)),
        (Code::InvalidArgument, "sha256".into())
    );
    // An upload naming someone's env (here: nobody's) is NOT_FOUND before any byte.
    let m = pb::ArtifactChunk {
        upload_id: "env-unknown".into(),
        env_id: "nope".into(),
        last: true,
        ..Default::default()
    };
    assert_eq!(
        c.upload_artifact(upload(m)).await.unwrap_err().code(),
        Code::NotFound
    );
    for (sha256, upload_id) in [("", ""), (&*"0".repeat(64), "both-given")] {
        let req = pb::DeleteArtifactRequest {
            sha256: sha256.to_string(),
            upload_id: upload_id.to_string(),
        };
        let e = c.delete_artifact(req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
    }
    let req = pb::DeleteArtifactRequest {
        upload_id: "never-started".into(),
        ..Default::default()
    };
    assert_eq!(
        c.delete_artifact(req).await.unwrap_err().code(),
        Code::NotFound
    );
    // Trees: the first message must be the root of one of the caller's envs.
    let tree = |m: pb::TreeEntry| tokio_stream::iter(vec![m]);
    let e = c
        .put_dir(tree(pb::TreeEntry {
            kind: pb::TreeEntryKind::File as i32,
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), field(&e)),
        (Code::InvalidArgument, "kind".into())
    );
    let e = c
        .put_dir(tree(pb::TreeEntry {
            kind: pb::TreeEntryKind::Root as i32,
            env_id: "nope".into(),
            path: "x".into(),
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let req = pb::GetDirRequest {
        env_id: "nope".into(),
        path: "x".into(),
    };
    assert_eq!(c.get_dir(req).await.unwrap_err().code(), Code::NotFound);
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parking_off_refuses_park() {
    let server = TestServer::start(ServerConfig {
        limits: Limits {
            max_envs: 2,
            max_parked: 0,
            ..Limits::default()
        },
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = pool(&mut c, "click-target", 1, 320, 240).await;
    reset(&mut c, &p.env_ids[0], 1).await;
    let e = c
        .save(pb::SaveRequest {
            env_id: p.env_ids[0].clone(),
            park: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("parking is off"), "{}", e.message());
    // Without `park`, Save works as ever.
    c.save(pb::SaveRequest {
        env_id: p.env_ids[0].clone(),
        park: 0,
    })
    .await
    .unwrap();
    server.stop().await;
}
