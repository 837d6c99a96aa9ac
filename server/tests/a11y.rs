//! Structured observation against the real server and the real task app: the tree
//! rides on Reset/Step/Observe, element targets resolve when the action runs, failures
//! carry their reason as `google.rpc.ErrorInfo`, and a checkpoint replays what an
//! element action did.

mod common;

use common::*;
use deskgym_proto::v1 as pb;
use pb::action::Verb;
use tonic::Code;
use tonic_types::StatusExt as _;

fn act(v: Verb) -> Option<pb::Action> {
    Some(pb::Action {
        verb: Some(v),
        extension: None,
    })
}

fn by_ref(r: &str) -> Option<pb::Target> {
    Some(pb::Target {
        kind: Some(pb::target::Kind::ElementRef(r.into())),
    })
}

fn query(role: &str, name: &str) -> Option<pb::Target> {
    Some(pb::Target {
        kind: Some(pb::target::Kind::Element(pb::ElementQuery {
            role: role.into(),
            name: name.into(),
        })),
    })
}

fn tree() -> Option<pb::TreeRequest> {
    Some(pb::TreeRequest {
        enabled: true,
        osworld_xml: true,
        ..Default::default()
    })
}

fn reason(e: &tonic::Status) -> String {
    e.get_details_error_info()
        .map(|i| i.reason)
        .unwrap_or_default()
}

// spec: aci:4.1.element-actions
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn element_targets_resolve_on_the_live_tree_and_replay_by_pixels() {
    let server = TestServer::with_limits(4, 4).await;
    let mut c = server.client().await;
    let p = pool(&mut c, "click-button", 1, 640, 480).await;
    let env = p.env_ids[0].clone();
    let r = c
        .reset(pb::ResetRequest {
            env_id: env.clone(),
            seed: Some(7),
            tree: tree(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let t = r
        .observation
        .unwrap()
        .tree
        .expect("the tree rides on Reset");
    assert_eq!(t.revision, 1);
    assert!(!t.partial && t.node_count as usize == t.elements.len());
    assert!(t.osworld_xml.starts_with("<desktop-frame"));
    let instruction = r.info.unwrap().instruction;
    let answer = instruction.split('"').nth(1).unwrap();
    let button = t
        .elements
        .iter()
        .find(|e| e.role == "push button" && e.name == answer)
        .expect("the answer's button");
    let others = t
        .elements
        .iter()
        .filter(|e| e.role == "push button")
        .count();

    // A query several buttons match is ambiguous, with the candidates listed.
    let e = c
        .step(step_req(
            env.clone(),
            act(Verb::Click(pb::Click {
                target: query("push button", ""),
                ..Default::default()
            })),
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&e), "ambiguous_element", "{e:?}");
    // A role alone matches every element of the role: all the buttons are candidates.
    assert!(
        e.message().contains(&format!("push button {answer:?}")),
        "{e:?}"
    );
    // Neither a role nor a name is no query at all.
    let e = c
        .step(step_req(
            env.clone(),
            act(Verb::Click(pb::Click {
                target: query("", ""),
                ..Default::default()
            })),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    // The application and its frame share their name: two exact matches.
    let e = c
        .step(step_req(
            env.clone(),
            act(Verb::Click(pb::Click {
                target: query("", "deskgym tasks"),
                ..Default::default()
            })),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(reason(&e), "ambiguous_element", "{e:?}");
    assert!(
        e.message()
            .starts_with("ambiguous_element: 2 elements match"),
        "{e:?}"
    );
    assert!(others >= 3);

    // Unknown and malformed refs.
    for (r, code) in [
        ("e999", Code::FailedPrecondition),
        ("12", Code::InvalidArgument),
    ] {
        let e = c
            .step(step_req(
                env.clone(),
                act(Verb::Click(pb::Click {
                    target: by_ref(r),
                    ..Default::default()
                })),
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), code, "{r}: {e:?}");
        if code == Code::FailedPrecondition {
            assert_eq!(reason(&e), "stale_element_ref");
        }
    }
    // An element verb needs an element.
    let e = c
        .step(step_req(
            env.clone(),
            act(Verb::InvokeAction(pb::InvokeAction {
                target: px(1, 1),
                action: String::new(),
            })),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("invoke_action.target"), "{e:?}");
    // A line budget over the limit names its field.
    let e = c
        .observe(pb::ObserveRequest {
            env_id: env.clone(),
            tree: Some(pb::TreeRequest {
                enabled: true,
                line_budget: 1_000_000,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("tree.line_budget"), "{e:?}");
    // So does a walk deadline over 30 s, on every call that carries a tree.
    let long = Some(pb::TreeRequest {
        enabled: true,
        timeout_ms: u32::MAX,
        ..Default::default()
    });
    let e = c
        .step(pb::StepRequest {
            tree: long,
            ..step_req(env.clone(), click(1, 1))
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("tree.timeout_ms"), "{e:?}");
    let e = c
        .reset(pb::ResetRequest {
            env_id: env.clone(),
            tree: long,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("tree.timeout_ms"), "{e:?}");

    // The answer's ref: the click lands on its centre and wins; the checkpoint holds
    // the resolved click, so a fork rebuilds the same screen without any refs.
    let s = c
        .step(pb::StepRequest {
            tree: tree(),
            ..step_req(
                env.clone(),
                act(Verb::Click(pb::Click {
                    target: by_ref(&button.r#ref),
                    ..Default::default()
                })),
            )
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((s.reward, s.terminated), (1.0, true));
    let obs = s.observation.unwrap();
    let b = button.bounds.unwrap();
    let at = obs.pointer.unwrap();
    assert_eq!(
        (at.x, at.y),
        (b.x + b.width / 2, b.y + b.height / 2),
        "clicked at the centre"
    );
    let cp = c
        .save(pb::SaveRequest {
            env_id: env.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let f = c
        .fork(pb::ForkRequest {
            checkpoint_id: cp.checkpoint_id.clone(),
            n: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(f.replicas[0].fidelity, pb::Fidelity::Exact as i32);
    assert_eq!(
        f.replicas[0].observation.as_ref().unwrap().frame_hash,
        obs.frame_hash
    );
    server.stop().await;
}
