//! The `network` grant against the real server: each granted env has a network stack of
//! its own (pasta), with outbound access and its own loopback; an env without the grant
//! has no route out. Traffic goes only to this machine's own addresses. Needs
//! `scripts/setup.sh --osworld` (bubblewrap, passt).

mod common;

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener};

use common::*;
use deskgym_server::ServerConfig;
use tonic::Code;

/// This machine's first IPv4 address that is not loopback (a sandbox reaches it the way
/// it reaches any other host).
fn own_address() -> Ipv4Addr {
    let mut found = None;
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we walk read-only and free once.
    unsafe {
        assert_eq!(libc::getifaddrs(&mut list), 0, "getifaddrs");
        let mut p = list;
        while !p.is_null() {
            let a = (*p).ifa_addr;
            if !a.is_null() && i32::from((*a).sa_family) == libc::AF_INET {
                let sin = &*(a as *const libc::sockaddr_in);
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                if !ip.is_loopback() && found.is_none() {
                    found = Some(ip);
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    found.expect("this machine has no IPv4 address besides loopback: the test needs one")
}

/// Python in the sandbox that connects to `host:port` and prints what it reads, or the
/// error's class.
fn connect(host: &str, port: u16) -> String {
    format!(
        "python3 -c \"\nimport socket\ntry:\n    s = socket.create_connection(('{host}', {port}), 3)\n    \
         print(s.recv(64).decode())\nexcept OSError as e:\n    print(type(e).__name__, e.errno)\n\""
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_envs_have_their_own_network_and_others_none() {
    let data = std::env::temp_dir().join(format!("deskgym-net-{}", std::process::id()));
    let server = TestServer::start(ServerConfig {
        data_dir: data.join("recordings"),
        allow_capabilities: vec!["exec".into(), "network".into()],
        step_threads: 8,
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;

    // A server of this machine's own, on its own (non-loopback) address.
    let host = own_address();
    let listener = TcpListener::bind((host, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let mut s = s;
            let _ = s.write_all(b"hello from the host");
        }
    });

    let net = desktop_pool(&mut c, 2, &["exec", "network"]).await;
    assert_eq!(net.capabilities, vec!["exec", "network"]);
    let offline = desktop_pool(&mut c, 1, &["exec"]).await;
    let (a, b, off) = (&net.env_ids[0], &net.env_ids[1], &offline.env_ids[0]);
    for e in [a, b, off] {
        reset(&mut c, e, 1).await;
    }

    // Both granted envs hold port 8080 at once, each on its own loopback: each answers
    // with its own name.
    let listen = |me: &str| {
        format!(
            "setsid -f python3 -c \"\nimport socket\ns = socket.socket()\n\
             s.bind(('127.0.0.1', 8080)); s.listen()\nwhile True:\n    \
             c, _ = s.accept(); c.sendall(b'{me}')\n\" >/dev/null 2>&1; \
             for i in $(seq 200); do python3 -c \"import socket; \
             socket.create_connection(('127.0.0.1', 8080), 1)\" 2>/dev/null && break; sleep 0.05; done"
        )
    };
    for e in [a, b] {
        let r = run(&mut c, sh(e, &listen(e))).await;
        assert_eq!(r.exit_code, Some(0), "{r:?}");
    }
    for e in [a, b] {
        let r = run(&mut c, sh(e, &connect("127.0.0.1", 8080))).await;
        assert_eq!(&out(&r), e, "env {e}'s own port 8080: {r:?}");
    }

    // A hostile neighbour: B serves on every address of its own; A finds nothing of B's
    // at the host's address (no port leaves a sandbox) or at its own.
    let r = run(
        &mut c,
        sh(
            b,
            "setsid -f python3 -c \"\nimport socket\ns = socket.socket()\n\
             s.bind(('0.0.0.0', 9999)); s.listen()\nwhile True:\n    \
             c, _ = s.accept(); c.sendall(b'from b')\n\" >/dev/null 2>&1; sleep 1",
        ),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    for target in [host.to_string(), "10.0.2.15".to_string()] {
        // (pasta answers a refused outbound connection by dropping it: a timeout.)
        let r = run(&mut c, sh(a, &connect(&target, 9999))).await;
        assert!(
            out(&r).starts_with("ConnectionRefusedError") || out(&r).starts_with("TimeoutError"),
            "{target}: {r:?}"
        );
    }

    // Outbound: a granted env reaches the host's server at the host's address...
    let r = run(&mut c, sh(a, &connect(&host.to_string(), port))).await;
    assert_eq!(out(&r), "hello from the host", "{r:?}");
    // ...but nothing on the host's loopback (the deskgym server listens there).
    let r = run(&mut c, sh(a, &connect("127.0.0.1", server.addr.port()))).await;
    assert!(out(&r).starts_with("ConnectionRefusedError"), "{r:?}");
    // It has an interface and a default route besides `lo`.
    let links = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort";
    let r = run(&mut c, sh(a, links)).await;
    assert!(
        out(&r).lines().count() == 2 && out(&r).contains("lo"),
        "{r:?}"
    );

    // Without the grant: no route out, only `lo`.
    let r = run(&mut c, sh(off, &connect(&host.to_string(), port))).await;
    assert!(
        out(&r).starts_with("OSError 101"),
        "network unreachable: {r:?}"
    );
    let r = run(&mut c, sh(off, links)).await;
    assert_eq!(out(&r), "lo", "{r:?}");

    // A reset keeps the network (a new session, a new pasta).
    reset(&mut c, a, 2).await;
    let r = run(&mut c, sh(a, &connect(&host.to_string(), port))).await;
    assert_eq!(out(&r), "hello from the host", "after a reset: {r:?}");

    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_is_granted_only_where_the_server_allows_it() {
    let server = TestServer::start(ServerConfig {
        allow_capabilities: vec!["exec".into()],
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let e = c
        .create_pool(desktop_request(1, &["network"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("network"), "{}", e.message());
    let caps = c
        .get_capabilities(deskgym_proto::v1::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(!caps.allowed_capabilities.contains(&"network".to_string()));
    server.stop().await;
}
