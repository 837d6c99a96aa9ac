//! A sandbox's System V IPC, against the real server (decision 219): with the server
//! running as root, each env's Xvfb has an IPC namespace of its own and the env's
//! sandbox joins it, so MIT-SHM segments the env's programs make reach their display
//! (Chromium then calls a frame presented only once Xvfb has drawn it) and no other
//! env or the host. Without root each sandbox has a namespace of its own, as before.
//! Needs the `desktop` profile's packages (`scripts/setup.sh --desktop`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use deskgym_server::ServerConfig;

/// The IPC namespace `pid` runs in (`ipc:[inode]`).
fn ipc_of(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/ipc"))
        .map(|l| l.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Host pids of the process whose command line holds `marker`, once it runs.
async fn running(marker: &str) -> Vec<u32> {
    let t0 = Instant::now();
    loop {
        let pids = pids_running(marker);
        if !pids.is_empty() || t0.elapsed() > Duration::from_secs(10) {
            return pids;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_v_memory_is_shared_with_the_envs_display_and_no_one_else() {
    let data = std::env::temp_dir().join(format!("deskgym-ipc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).unwrap();
    let server = TestServer::start(ServerConfig {
        data_dir: data.join("recordings"),
        allow_capabilities: vec!["exec".into()],
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = desktop_pool(&mut c, 2, &["exec"]).await;
    let (a, b) = (p.env_ids[0].clone(), p.env_ids[1].clone());
    for e in &p.env_ids {
        reset(&mut c, e, 1).await;
    }
    // A segment of an odd size made in A (and kept: no IPC_RMID), listed where it shows.
    let size = 4096 * 17 + 1;
    let make = format!(
        "python3 -c \"import ctypes; l = ctypes.CDLL(None); print(l.shmget(0, {size}, 0o1600))\""
    );
    let r = run(&mut c, sh(&a, &make)).await;
    assert!(out(&r).parse::<i32>().is_ok_and(|id| id >= 0), "{r:?}");
    let listed = |text: &str| {
        text.lines()
            .skip(1)
            .any(|l| l.split_whitespace().nth(3) == Some(&size.to_string()))
    };
    let r = run(&mut c, sh(&a, "cat /proc/sysvipc/shm")).await;
    assert!(listed(&out(&r)), "A's own segment: {r:?}");
    let r = run(&mut c, sh(&b, "cat /proc/sysvipc/shm")).await;
    assert!(!listed(&out(&r)), "B sees A's segment: {r:?}");
    let host = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    assert!(!listed(&host), "the host sees A's segment");

    // Whose namespace: a process of each env, seen from the host.
    let tag = std::process::id() % 10_000;
    let mut ns = Vec::new();
    for (e, n) in [(&a, 1), (&b, 2)] {
        let marker = format!("{n}{tag}.75");
        let r = run(&mut c, sh(e, &format!("(sleep {marker} &); echo started"))).await;
        assert_eq!(out(&r), "started");
        let pids = running(&marker).await;
        assert_eq!(pids.len(), 1, "{marker}: {pids:?}");
        ns.push(ipc_of(pids[0]));
    }
    let ours = ipc_of(std::process::id());
    assert!(
        ns[0] != ours && ns[1] != ours && ns[0] != ns[1],
        "{ns:?} (ours {ours})"
    );
    let displays: Vec<String> = pids_running("Xvfb").into_iter().map(ipc_of).collect();
    // SAFETY: a plain syscall without arguments.
    if unsafe { libc::geteuid() } == 0 {
        for n in &ns {
            assert_eq!(
                displays.iter().filter(|d| *d == n).count(),
                1,
                "{n} among {displays:?}"
            );
        }
    } else {
        assert!(
            !displays.iter().any(|d| ns.contains(d)),
            "{ns:?} among {displays:?}"
        );
    }
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}
