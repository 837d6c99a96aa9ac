//! Unlock against the real server and real sandboxes (issue 43): a power unlocked on
//! one env for a while (the verbs work there only, and are refused again after Relock
//! or a reset), and `net.egress` scoped to host names: the scoped host answers through
//! the env's proxy, everything else is refused at once, by name, by address, directly,
//! over IPv6 and through another env's proxy. The test hosts are two HTTP servers of
//! this test on the host's loopback, named through `egress_hosts`; never the internet.
//! Needs `scripts/setup.sh --desktop` (bubblewrap).

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;

use common::*;
use deskgym_proto::v1 as pb;
use deskgym_server::ServerConfig;
use tonic::Code;

/// An HTTP server answering every request with `body`; returns its port.
fn http_host(body: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let mut s = s;
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// Python in the sandbox fetching `url` (through `proxy`, or directly with none) and
/// printing the body, the HTTP error code, or the error's class.
fn fetch(url: &str, proxy: Option<&str>) -> String {
    let handler = match proxy {
        Some(p) => format!("urllib.request.ProxyHandler({{'http': '{p}', 'https': '{p}'}})"),
        None => "urllib.request.ProxyHandler({})".into(),
    };
    format!(
        "python3 -c \"\nimport urllib.request, urllib.error\no = urllib.request.build_opener({handler})\n\
         try:\n    print(o.open('{url}', timeout=5).read().decode())\n\
         except urllib.error.HTTPError as e:\n    print('HTTP', e.code, e.read().decode().strip())\n\
         except Exception as e:\n    print('ERR', type(e).__name__, getattr(e, 'reason', e))\n\""
    )
}

fn unlock(env: &str, capability: &str, scope: &[&str]) -> pb::UnlockRequest {
    pb::UnlockRequest {
        env_id: env.into(),
        capability: capability.into(),
        scope: scope.iter().map(|s| s.to_string()).collect(),
        reason: "install a package".into(),
    }
}

// spec: aci:2.unlock
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlocked_powers_hold_for_one_env_until_released_and_egress_reaches_its_scope_only() {
    let (allowed_port, other_port) = (
        http_host("hello from allowed"),
        http_host("hello from other"),
    );
    let data = std::env::temp_dir().join(format!("deskgym-unlock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let server = TestServer::start(ServerConfig {
        data_dir: data.join("recordings"),
        // Exec is the pool's for the probes; files and egress only through Unlock.
        allow_capabilities: vec!["exec".into()],
        allow_unlock: vec!["files".into(), "net.egress:allowed.test,other.test".into()],
        egress_hosts: vec![
            ("allowed.test".into(), "127.0.0.1".parse().unwrap()),
            ("other.test".into(), "127.0.0.1".parse().unwrap()),
        ],
        step_threads: 8,
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = desktop_pool(&mut c, 2, &["exec"]).await;
    let (a, b) = (p.env_ids[0].clone(), p.env_ids[1].clone());
    for e in [&a, &b] {
        reset(&mut c, e, 1).await;
    }
    let list = |env: &str| pb::ListDirectoryRequest {
        env_id: env.into(),
        path: "/home/user".into(),
        ..Default::default()
    };

    // Files: refused, unlocked on `a` only, refused again after Relock.
    let e = c.list_directory(list(&a)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(
        e.message().contains("Unlock"),
        "the refusal names how to unlock: {}",
        e.message()
    );
    let g = c
        .unlock(unlock(&a, "files", &[]))
        .await
        .unwrap()
        .into_inner();
    assert!(g.proxy.is_empty() && g.grant_id.starts_with('u'));
    c.list_directory(list(&a))
        .await
        .expect("files unlocked on a");
    assert_eq!(
        c.list_directory(list(&b)).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    let rel = |id: &str| pb::RelockRequest {
        env_id: a.clone(),
        grant_id: id.into(),
    };
    assert!(
        c.relock(rel(&g.grant_id))
            .await
            .unwrap()
            .into_inner()
            .released
    );
    assert!(
        !c.relock(rel(&g.grant_id))
            .await
            .unwrap()
            .into_inner()
            .released
    );
    assert_eq!(
        c.list_directory(list(&a)).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    // A reset ends a grant too.
    c.unlock(unlock(&a, "files", &[])).await.unwrap();
    reset(&mut c, &a, 2).await;
    assert_eq!(
        c.list_directory(list(&a)).await.unwrap_err().code(),
        Code::PermissionDenied
    );

    // Before the unlock: no way out at all, refused at once (no route).
    let allowed = format!("http://allowed.test:{allowed_port}/");
    let direct = out(&run(
        &mut c,
        sh(
            &a,
            &fetch(&format!("http://10.0.2.2:{allowed_port}/"), None),
        ),
    )
    .await);
    assert!(direct.starts_with("ERR"), "{direct}");

    let g = c
        .unlock(unlock(&a, "net.egress", &["Allowed.test"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(g.scope, ["allowed.test"]);
    assert!(g.proxy.starts_with("http://127.0.0.1:"), "{}", g.proxy);
    let proxy = g.proxy.as_str();
    // The scoped host answers, through the proxy the env's execs are given.
    let got = out(&run(&mut c, sh(&a, &fetch(&allowed, Some(proxy)))).await);
    assert_eq!(got, "hello from allowed");
    let via_env = out(&run(
        &mut c,
        sh(&a, &format!("python3 -c \"import urllib.request; print(urllib.request.urlopen('{allowed}', timeout=5).read().decode())\"")),
    )
    .await);
    assert_eq!(
        via_env, "hello from allowed",
        "execs get http_proxy while the grant holds"
    );
    // Everything else is refused at once: another host, an address, IPv6, directly.
    for (url, what) in [
        (
            format!("http://other.test:{other_port}/"),
            "not in this env's net.egress scope",
        ),
        (
            format!("http://127.0.0.1:{allowed_port}/"),
            "named hosts only",
        ),
        (format!("http://[::1]:{allowed_port}/"), "named hosts only"),
    ] {
        let got = out(&run(&mut c, sh(&a, &fetch(&url, Some(proxy)))).await);
        assert!(
            got.starts_with("HTTP 403") && got.contains(what),
            "{url}: {got}"
        );
    }
    for url in [
        format!("http://127.0.0.1:{allowed_port}/"),
        format!("http://[::1]:{allowed_port}/"),
        format!("http://10.0.2.2:{allowed_port}/"),
        allowed.clone(),
    ] {
        // The proxy's port is the env's own loopback's, the host's server's port the
        // host's: the two can be the same number (a clean-clone run met it), and then
        // the env's loopback at that port is the proxy, which answers, as it should.
        if url.starts_with("http://127.0.0.1:") && proxy.ends_with(&format!(":{allowed_port}")) {
            continue;
        }
        let got = out(&run(&mut c, sh(&a, &fetch(&url, None))).await);
        assert!(got.starts_with("ERR"), "directly {url}: {got}");
    }
    // Env b holds no grant: a's proxy port on b's loopback is b's own, and closed.
    let got = out(&run(&mut c, sh(&b, &fetch(&allowed, Some(proxy)))).await);
    assert!(got.starts_with("ERR"), "through a's proxy from b: {got}");

    // Released: the proxy is gone at once.
    assert!(
        c.relock(rel(&g.grant_id))
            .await
            .unwrap()
            .into_inner()
            .released
    );
    let got = out(&run(&mut c, sh(&a, &fetch(&allowed, Some(proxy)))).await);
    assert!(got.starts_with("ERR"), "after Relock: {got}");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}
