//! Unlock between principals (issue 43): each principal unlocks what its own token-file
//! line (or else the server's `--allow-unlock`) lists and nothing more, and never on
//! another principal's env. On the fake backend: the decision comes before any desktop
//! work, so these run in seconds.

use deskgym_proto::v1 as pb;
use deskgym_server::{Limits, ServerConfig};
use tonic::Code;

use super::shares::{fake_with, small_pool};
use super::{Client, as_};

fn unlock(env: &str, capability: &str, scope: &[&str]) -> pb::UnlockRequest {
    pb::UnlockRequest {
        env_id: env.into(),
        capability: capability.into(),
        scope: scope.iter().map(|s| s.to_string()).collect(),
        reason: "tenant test".into(),
    }
}

async fn env_of(c: &mut Client, token: &str) -> String {
    c.create_pool(as_(token, small_pool(1)))
        .await
        .unwrap()
        .into_inner()
        .env_ids
        .remove(0)
}

// spec: aci:2.unlock
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_principal_unlocks_what_its_own_policy_lists_on_its_own_envs() {
    let config = ServerConfig {
        limits: Limits::default(),
        allow_unlock: vec!["files".into()],
        data_dir: std::env::temp_dir().join(format!("deskgym-ten-unlock-{}", std::process::id())),
        ..ServerConfig::default()
    };
    let mut f = fake_with(
        "alice: aaa unlock=exec unlock=net.egress:pypi.org,.pythonhosted.org\nbob: bbb\n",
        config,
        "127.0.0.1:0",
    )
    .await;
    let c = &mut f.c;
    let caps = |c: &mut Client, t: &'static str| {
        let mut c = c.clone();
        async move {
            c.get_capabilities(as_(t, pb::GetCapabilitiesRequest {}))
                .await
                .unwrap()
                .into_inner()
                .unlockable
        }
    };
    // Each sees its own policy: alice her line's, bob the server's list.
    assert_eq!(
        caps(c, "aaa").await,
        ["exec", "net.egress:pypi.org,.pythonhosted.org"]
    );
    assert_eq!(caps(c, "bbb").await, ["files"]);

    let (a, b) = (env_of(c, "aaa").await, env_of(c, "bbb").await);
    // Bob may not unlock exec (alice may), nor egress at all, nor anything on hers.
    let e = c
        .unlock(as_("bbb", unlock(&b, "exec", &[])))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(
        e.message().contains("--allow-unlock exec") && e.message().contains("unlock=exec"),
        "{}",
        e.message()
    );
    let e = c
        .unlock(as_("bbb", unlock(&a, "files", &[])))
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::NotFound,
        "another principal's env is unknown: {e:?}"
    );
    // Alice: a host outside her scope is refused, naming it; a suffix within it passes
    // the policy (and then meets the task app's lack of a sandbox).
    let e = c
        .unlock(as_(
            "aaa",
            unlock(&a, "net.egress", &["pypi.org", "evil.example"]),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(
        e.message().contains("net.egress:evil.example"),
        "{}",
        e.message()
    );
    let e = c
        .unlock(as_(
            "aaa",
            unlock(&a, "net.egress", &["files.pythonhosted.org"]),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("without a sandbox"), "{}", e.message());
    // Bob cannot release alice's grants either (her env is unknown to him).
    let e = c
        .relock(as_(
            "bbb",
            pb::RelockRequest {
                env_id: a.clone(),
                grant_id: "u1".into(),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    f.stop().await;
}
