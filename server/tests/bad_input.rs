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
