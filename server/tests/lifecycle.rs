//! Crashes and shutdown: a killed Xvfb fails only its env; nothing is left behind.

mod common;

use std::time::Duration;

use common::*;
use deskgym_proto::v1 as pb;
use deskgym_proto::v1::deskgym_client::DeskgymClient;
use tonic::Code;

/// Tests that count this process's Xvfb children must not overlap.
static CHILD_COUNTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_xvfb_fails_one_item_and_comes_back_on_reset() {
    let _serial = CHILD_COUNTING.lock().await;
    let server = TestServer::with_limits(8, 8).await;
    let mut c = server.client().await;
    let p = pool(&mut c, "click-target", 3, 320, 240).await;
    let mut displays = Vec::new();
    for e in &p.env_ids {
        displays.push(display(&reset(&mut c, e, 1).await.info.unwrap()));
    }
    let victim = xvfb_pid(displays[1]).expect("an Xvfb child holds the display socket");
    // SAFETY: killing an Xvfb this test's server started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    tokio::time::sleep(Duration::from_millis(200)).await;

    let batch = pb::StepBatchRequest {
        resets: vec![],
        items: p
            .env_ids
            .iter()
            .map(|e| pb::StepRequest {
                env_id: e.clone(),
                action: noop(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let r = c.step_batch(batch.clone()).await.unwrap().into_inner();
    assert_eq!(r.results[0].code, 0);
    assert_eq!(
        r.results[1].code,
        Code::Unavailable as i32,
        "{:?}",
        r.results[1]
    );
    assert!(
        r.results[1].message.contains("Reset"),
        "{}",
        r.results[1].message
    );
    assert_eq!(r.results[2].code, 0);
    // Still down until reset.
    let e = c.step(batch.items[1].clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);

    let back = reset(&mut c, &p.env_ids[1], 1).await;
    let before = reset(&mut c, &p.env_ids[0], 1).await;
    assert_eq!(
        back.observation.unwrap().frame_hash,
        before.observation.unwrap().frame_hash,
        "respawned env is deterministic"
    );
    let r = c.step_batch(batch).await.unwrap().into_inner();
    assert!(r.results.iter().all(|i| i.code == 0), "{r:?}");
    server.stop().await;
    assert!(children_named("Xvfb").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_server_leaves_no_xvfb_app_or_lock() {
    let _serial = CHILD_COUNTING.lock().await;
    let server = TestServer::with_limits(8, 8).await;
    let mut c = server.client().await;
    let p = pool(&mut c, "drag-to-zone", 2, 320, 240).await;
    let mut displays = Vec::new();
    for e in &p.env_ids {
        displays.push(display(&reset(&mut c, e, 1).await.info.unwrap()));
    }
    assert_eq!(children_named("Xvfb").len(), 2);
    assert_eq!(children_named("deskgym-task-app").len(), 2);
    server.stop().await;
    assert!(children_named("Xvfb").is_empty());
    assert!(children_named("deskgym-task-app").is_empty());
    for d in displays {
        assert!(
            !std::path::Path::new(&format!("/tmp/.X{d}-lock")).exists(),
            ":{d} lock left behind"
        );
        assert!(
            !std::path::Path::new(&format!("/tmp/.X11-unix/X{d}")).exists(),
            ":{d} socket left behind"
        );
    }
}

fn process_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_kills_every_xvfb() {
    let (mut child, addr) = spawn_server(server_command(&["--listen", "127.0.0.1:0"]));
    let mut c = DeskgymClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .max_decoding_message_size(usize::MAX);
    let p = pool(&mut c, "click-target", 2, 320, 240).await;
    for e in &p.env_ids {
        reset(&mut c, e, 1).await;
    }
    let server_pid = child.id() as i32;
    let pids = children_of(server_pid, "Xvfb");
    assert_eq!(pids.len(), 2);
    assert_eq!(children_of(server_pid, "deskgym-task-app").len(), 2);
    // SAFETY: signalling the server we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    for pid in pids {
        assert!(!process_alive(pid), "Xvfb {pid} survived");
    }
}

/// A stopped server closes its listener at once (an in-process server, as tests and
/// embedders run it, must not keep its port).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_releases_its_port() {
    let server = TestServer::with_limits(1, 1).await;
    let addr = server.addr;
    let mut c = server.client().await;
    c.get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap();
    server.stop().await;
    // The accept loop notices the closed stream without waiting for a connection: a
    // first connection (which would itself wake an old-style loop) is refused.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let connected = tokio::net::TcpStream::connect(addr).await;
    assert!(
        connected.is_err(),
        "{addr} still accepts connections after stop"
    );
}
