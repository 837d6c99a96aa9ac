//! Capability requests against the real server and real sandboxes (issue 43, ACI §6's
//! control channel): a call that needs a power the operator's policy says to ask for
//! emits `capability_required` and waits until the env's principal answers
//! (AnswerCapability): allowed, it goes on under a grant like Unlock's; refused, or
//! unanswered within `--ask-timeout-s`, it is PERMISSION_DENIED; a reset or the env's
//! end while it waits ends it with ABORTED / NOT_FOUND. Hostile answers: another
//! principal (NOT_FOUND, as an unknown env), an unknown token (NOT_FOUND), a second
//! answer (FAILED_PRECONDITION), a scope wider than the request's (INVALID_ARGUMENT).
//! Needs `scripts/setup.sh --desktop` (bubblewrap).

mod common;

use std::time::Duration;

use common::*;
use deskgym_proto::v1 as pb;
use deskgym_server::ServerConfig;
use tonic::Code;
use tonic::Streaming;

/// The next event of `kind` on `events` (others skipped), as its JSON payload.
async fn next_of(events: &mut Streaming<pb::EnvEvent>, kind: &str) -> serde_json::Value {
    loop {
        let e = events
            .message()
            .await
            .expect("the event stream")
            .unwrap_or_else(|| panic!("the stream ended before a {kind} event"));
        if e.kind == kind {
            return serde_json::from_str(&e.payload).unwrap();
        }
    }
}

fn answer(env: &str, token: &str, allow: bool, scope: &[&str]) -> pb::AnswerCapabilityRequest {
    pb::AnswerCapabilityRequest {
        env_id: env.into(),
        token: token.into(),
        allow,
        scope: scope.iter().map(|s| s.to_string()).collect(),
        reason: if allow {
            String::new()
        } else {
            "not in this run".into()
        },
    }
}

async fn reset_as_alice(c: &mut Client, env: &str) {
    let req = pb::ResetRequest {
        env_id: env.into(),
        ..Default::default()
    };
    c.reset(as_("aaa", req)).await.unwrap();
}

/// A call of alice's on `env`, spawned so the test can answer while it waits.
fn exec_as_alice(
    c: &Client,
    env: &str,
    line: &str,
) -> tokio::task::JoinHandle<Result<String, tonic::Status>> {
    let (mut c, req) = (c.clone(), sh(env, line));
    tokio::spawn(async move { c.exec(as_("aaa", req)).await.map(|r| out(&r.into_inner())) })
}

// spec: aci:6.capability-channel
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_needing_an_askable_power_waits_for_the_controllers_answer() {
    let server = TestServer::start(ServerConfig {
        principals: deskgym_server::parse_token_file(
            "alice: aaa desktops=2\nbob: bbb desktops=2\n",
        )
        .unwrap(),
        // Exec and files are asked for; net.egress within `.test` too; clipboard never.
        ask_unlock: vec!["exec".into(), "files".into(), "net.egress:.test".into()],
        ask_timeout: Duration::from_secs(3),
        step_threads: 8,
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let caps = c
        .get_capabilities(as_("aaa", pb::GetCapabilitiesRequest {}))
        .await
        .unwrap()
        .into_inner();
    let ask = caps.ask.unwrap();
    assert_eq!(ask.askable, ["exec", "files", "net.egress:.test"]);
    assert_eq!(ask.timeout_ms, 3000);
    let p = c
        .create_pool(as_("aaa", desktop_request(1, &[])))
        .await
        .expect("a desktop pool (needs `scripts/setup.sh --desktop`)")
        .into_inner();
    let env = p.env_ids[0].clone();
    reset_as_alice(&mut c, &env).await;
    let mut events = c
        .watch_events(as_(
            "aaa",
            pb::WatchEventsRequest {
                env_id: env.clone(),
            },
        ))
        .await
        .unwrap()
        .into_inner();

    // Allowed: the Exec waits, the request is listed, the answer grants exec.
    let call = exec_as_alice(&c, &env, "echo ran");
    let req = next_of(&mut events, "capability_required").await;
    assert_eq!(
        (req["capability"].as_str(), req["action"].as_str()),
        (Some("exec"), Some("Exec"))
    );
    assert_eq!(req["principal"], "alice");
    let token = req["token"].as_str().unwrap().to_string();
    let info = c
        .get_env(as_(
            "aaa",
            pb::GetEnvRequest {
                env_id: env.clone(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.pending_capabilities.len(), 1);
    assert_eq!(info.pending_capabilities[0].token, token);
    assert!(info.pending_capabilities[0].timeout_ms <= 3000);
    // Hostile answers first: bob (alice's env is NOT_FOUND to him, as an unknown one),
    // an unknown token; neither ends the request.
    let e = c
        .answer_capability(as_("bbb", answer(&env, &token, true, &[])))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let unknown = c
        .get_env(as_(
            "bbb",
            pb::GetEnvRequest {
                env_id: "nope".into(),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(
        e.message().replace(&env, "ID"),
        unknown.message().replace("nope", "ID")
    );
    let e = c
        .answer_capability(as_("aaa", answer(&env, "c999999999", true, &[])))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("c999999999"), "{}", e.message());
    // exec takes no scope: a malformed answer is refused and the request still waits.
    let e = c
        .answer_capability(as_("aaa", answer(&env, &token, true, &["a.test"])))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let granted = c
        .answer_capability(as_("aaa", answer(&env, &token, true, &[])))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(granted.capability, "exec");
    assert!(granted.grant_id.starts_with('u'), "{granted:?}");
    assert_eq!(
        call.await.unwrap().expect("the Exec goes on once allowed"),
        "ran"
    );
    let decided = next_of(&mut events, "capability_decision").await;
    assert_eq!(
        (decided["decision"].as_str(), decided["by"].as_str()),
        (Some("allowed"), Some("alice"))
    );
    assert_eq!(decided["grant_id"], granted.grant_id.as_str());
    // The grant holds as an Unlock's: the next Exec asks nobody.
    assert_eq!(
        out(&c
            .exec(as_("aaa", sh(&env, "echo again")))
            .await
            .unwrap()
            .into_inner()),
        "again"
    );
    // A second answer is told the request is over.
    let e = c
        .answer_capability(as_("aaa", answer(&env, &token, false, &[])))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("allowed already"), "{}", e.message());

    // Refused: after Relock the Exec asks again; the refusal names who and why.
    let rel = pb::RelockRequest {
        env_id: env.clone(),
        grant_id: granted.grant_id.clone(),
    };
    assert!(
        c.relock(as_("aaa", rel))
            .await
            .unwrap()
            .into_inner()
            .released
    );
    let call = exec_as_alice(&c, &env, "echo never");
    let token = next_of(&mut events, "capability_required").await["token"]
        .as_str()
        .unwrap()
        .to_string();
    let no = c
        .answer_capability(as_("aaa", answer(&env, &token, false, &[])))
        .await
        .unwrap()
        .into_inner();
    assert!(no.grant_id.is_empty());
    let e = call.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    for needle in ["alice", "not in this run", "--allow-unlock exec", &token] {
        assert!(e.message().contains(needle), "{needle}: {}", e.message());
    }
    assert_eq!(
        next_of(&mut events, "capability_decision").await["decision"],
        "denied"
    );

    // Unanswered: refused at the timeout, saying how to get the power; a late answer
    // is told it timed out.
    let list = pb::ListDirectoryRequest {
        env_id: env.clone(),
        path: "/home/user".into(),
        ..Default::default()
    };
    let e = c.list_directory(as_("aaa", list)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(
        e.message().contains("within 3.0 s") && e.message().contains("AnswerCapability"),
        "{}",
        e.message()
    );
    let req = next_of(&mut events, "capability_required").await;
    assert_eq!(
        (req["capability"].as_str(), req["action"].as_str()),
        (Some("files"), Some("ListDirectory"))
    );
    let timed = next_of(&mut events, "capability_decision").await;
    assert_eq!(
        (timed["decision"].as_str(), timed["by"].as_str()),
        (Some("timed_out"), Some("timeout"))
    );
    let e = c
        .answer_capability(as_(
            "aaa",
            answer(&env, req["token"].as_str().unwrap(), true, &[]),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("timed out"), "{}", e.message());

    // Never asked: clipboard is in neither list, refused at once as before.
    let e = c
        .get_clipboard(as_(
            "aaa",
            pb::GetClipboardRequest {
                env_id: env.clone(),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);

    // An Unlock asks too; the answer may narrow a net.egress scope, never widen it.
    let mut u = c.clone();
    let unlock_req = pb::UnlockRequest {
        env_id: env.clone(),
        capability: "net.egress".into(),
        scope: vec!["allowed.test".into(), "other.test".into()],
        reason: "fetch a fixture".into(),
    };
    let unlocking = tokio::spawn(async move { u.unlock(as_("aaa", unlock_req)).await });
    let req = next_of(&mut events, "capability_required").await;
    assert_eq!(req["action"], "Unlock");
    assert_eq!(
        req["scope"],
        serde_json::json!(["allowed.test", "other.test"])
    );
    let token = req["token"].as_str().unwrap().to_string();
    let e = c
        .answer_capability(as_("aaa", answer(&env, &token, true, &["evil.test"])))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().starts_with("scope"), "{}", e.message());
    let narrowed = c
        .answer_capability(as_("aaa", answer(&env, &token, true, &["allowed.test"])))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(narrowed.scope, ["allowed.test"]);
    assert!(
        narrowed.grant_id.is_empty(),
        "an Unlock's grant is in its own reply"
    );
    let g = unlocking
        .await
        .unwrap()
        .expect("the Unlock, allowed")
        .into_inner();
    assert_eq!(g.scope, ["allowed.test"]);
    assert!(g.proxy.starts_with("http://127.0.0.1:"), "{}", g.proxy);
    let rec = next_of(&mut events, "unlock").await;
    assert_eq!(
        (rec["by"].as_str(), rec["token"].as_str()),
        (Some("controller"), Some(token.as_str()))
    );

    // A reset while a call waits ends it (ABORTED: retry on the new episode).
    let call = exec_as_alice(&c, &env, "echo late");
    next_of(&mut events, "capability_required").await;
    reset_as_alice(&mut c, &env).await;
    let e = call.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::Aborted, "{e:?}");
    assert_eq!(
        next_of(&mut events, "capability_decision").await["decision"],
        "reset"
    );

    // The env's end while a call waits: NOT_FOUND, as for any call on a closed env.
    let call = exec_as_alice(&c, &env, "echo gone");
    next_of(&mut events, "capability_required").await;
    c.close_pool(as_(
        "aaa",
        pb::ClosePoolRequest {
            pool_id: p.pool_id.clone(),
        },
    ))
    .await
    .unwrap();
    let e = call.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(e.message().contains("closed"), "{}", e.message());
    server.stop().await;
}
