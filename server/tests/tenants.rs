//! The hostile-tenant suite (SECURITY.md): from inside a sandbox, through `exec` and
//! through the verbs a default pool has, every way out of a desktop or into another
//! tenant's that a probe of the server found, and every way one tenant could starve
//! the others. Needs the `desktop` profile's packages (`scripts/setup.sh --desktop`).

mod common;
#[path = "tenants/displays.rs"]
mod displays;
#[path = "tenants/echoes.rs"]
mod echoes;
#[path = "tenants/recording_share.rs"]
mod recording_share;
#[path = "tenants/shares.rs"]
mod shares;
#[path = "tenants/unlock.rs"]
mod unlock;

use std::time::Duration;

use common::*;
use deskgym_proto::v1 as pb;
use deskgym_server::{Limits, ServerConfig};
use tonic::Code;

/// A server whose pools may be granted every capability, with small sandbox limits
/// (so the bombs below reach them quickly).
async fn server(tag: &str) -> (TestServer, Client, std::path::PathBuf) {
    let data = std::env::temp_dir().join(format!("deskgym-ten-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let server = TestServer::start(ServerConfig {
        data_dir: data.clone(),
        allow_capabilities: vec!["exec".into(), "files".into()],
        step_threads: 16,
        limits: Limits {
            sandbox_memory_mb: 512,
            sandbox_disk_mb: 64,
            op_timeout: Duration::from_secs(30),
            ..Limits::default()
        },
        ..ServerConfig::default()
    })
    .await;
    let c = server.client().await;
    (server, c, data)
}

/// A server of [`server`] and one pool of `n` desktops with `caps`, each reset.
struct Desktops {
    server: TestServer,
    c: Client,
    data: std::path::PathBuf,
    envs: Vec<String>,
}

impl Desktops {
    async fn start(tag: &str, n: u32, caps: &[&str]) -> Self {
        let (server, mut c, data) = server(tag).await;
        let envs = desktop_pool(&mut c, n, caps).await.env_ids;
        for e in &envs {
            reset(&mut c, e, 1).await;
        }
        Self {
            server,
            c,
            data,
            envs,
        }
    }
}

/// Runs `line` in `env` and returns (exit code, stdout, stderr).
async fn shell(c: &mut Client, env: &str, line: &str) -> (Option<i32>, String, String) {
    let r = run(c, sh(env, line)).await;
    (
        r.exit_code,
        String::from_utf8_lossy(&r.stdout).trim().to_string(),
        String::from_utf8_lossy(&r.stderr).trim().to_string(),
    )
}

/// The agent's socket can neither be reached nor replaced from inside, the control
/// files are read-only, and mountinfo names no host tree: a tenant has no handle on
/// any other env's agent, so its verbs always run in its own desktop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_swap_its_agent_socket_or_see_host_trees() {
    let Desktops {
        server,
        mut c,
        data,
        envs,
    } = Desktops::start("socket", 2, &["exec", "files"]).await;
    let (a, b) = (envs[0].clone(), envs[1].clone());
    shell(&mut c, &b, "echo b-secret > ~/secret").await;

    // The probe's attack: replace agent.sock with a link to another env's socket.
    let (code, out, _) = shell(&mut c, &a, "ls -A /run/deskgym; ls -A /run/deskgym/bin").await;
    assert_eq!(code, Some(0));
    assert!(
        !out.contains("agent.sock"),
        "the socket shows inside: {out}"
    );
    for attempt in [
        "ln -sf /tmp/x /run/deskgym/agent.sock",
        "touch /run/deskgym/anything",
        "echo x > /run/deskgym/session.json",
        "mv /run/deskgym /run/moved",
    ] {
        let (code, _, _) = shell(&mut c, &a, attempt).await;
        assert_ne!(code, Some(0), "{attempt} succeeded inside a sandbox");
    }
    // What the sandbox can learn of the host: no host path of the server's (its
    // checkout, its sandboxes' control files), and the home and /tmp are its own.
    let (_, mountinfo, _) = shell(&mut c, &a, "cat /proc/self/mountinfo").await;
    let checkout = env!("CARGO_MANIFEST_DIR");
    let checkout_root = std::path::Path::new(checkout).parent().unwrap();
    for line in mountinfo.lines() {
        let root = line.split(' ').nth(3).unwrap_or("");
        assert!(
            !root.starts_with(checkout_root.to_str().unwrap()) && !root.contains("/ctl"),
            "mountinfo shows a host path: {line}"
        );
        let mountpoint = line.split(' ').nth(4).unwrap_or("");
        if mountpoint == "/home/user" || mountpoint == "/tmp" {
            assert!(
                line.contains(" - tmpfs "),
                "{mountpoint} is not its own: {line}"
            );
        }
    }
    let (_, out, _) = shell(
        &mut c,
        &a,
        &format!(
            "for p in {checkout} /work /opt /srv /mnt /root /home/user/../.. /var/lib/apt; do \
             test -e \"$p\" && ls \"$p\" >/dev/null 2>&1 && echo \"readable: $p\"; done; true"
        ),
    )
    .await;
    assert!(!out.contains(checkout), "{out}");
    for host_tree in ["/work", "/opt", "/srv", "/mnt", "/var/lib/apt"] {
        assert!(!out.contains(&format!("readable: {host_tree}")), "{out}");
    }
    // Only the sized mounts take writes (each at most the 64 MiB disk limit): nothing
    // else can grow the host's memory.
    let (_, out, _) = shell(
        &mut c,
        &a,
        "for d in / /usr /etc /etc/chromium.d /dev /sys/fs/cgroup /var /root /run /run/deskgym \
         /run/user/1000 /var/tmp /dev/shm /tmp /home/user; do \
         touch $d/.probe 2>/dev/null && echo \"$d $(df --output=size -k $d | tail -1)\"; done",
    )
    .await;
    let writable: Vec<(&str, u64)> = out
        .lines()
        .map(|l| {
            let (d, kb) = l.split_once(' ').unwrap();
            (d, kb.trim().parse().unwrap())
        })
        .collect();
    let dirs: Vec<&str> = writable.iter().map(|(d, _)| *d).collect();
    assert_eq!(
        dirs,
        [
            "/run",
            "/run/user/1000",
            "/var/tmp",
            "/dev/shm",
            "/tmp",
            "/home/user"
        ],
        "{out}"
    );
    for (d, kb) in writable {
        assert!(kb <= 64 << 10, "{d} holds {kb} KiB");
    }
    // No nested user namespaces (their kernel surface is a way out).
    let (code, _, err) = shell(&mut c, &a, "unshare -rm true").await;
    assert_ne!(code, Some(0), "unshare -rm worked inside: {err}");
    // Every verb still reaches A itself and nothing of B's.
    let (_, out, _) = shell(&mut c, &a, "cat ~/secret 2>&1; hostname").await;
    assert!(!out.contains("b-secret"), "{out}");
    let err = c
        .get_file(pb::GetFileRequest {
            env_id: a.clone(),
            path: "secret".into(),
            offset: 0,
        })
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// Xvfb runs as the server's user on the host: a font path a tenant names must never
/// reach files the tenant wrote (its home is a tmpfs the host cannot see).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_font_path_into_the_home_never_reaches_xvfb() {
    let Desktops {
        server,
        mut c,
        data,
        envs,
    } = Desktops::start("font", 1, &["exec"]).await;
    let a = envs[0].clone();
    // A font directory in the home; then ask the X server to read it, at the path the
    // tenant sees and at every host path mountinfo names for the home.
    let script = r#"
import os, re
from Xlib import display, error
os.makedirs('/home/user/f', exist_ok=True)
open('/home/user/f/fonts.dir', 'w').write('0\n')
roots = ['/home/user/f']
for line in open('/proc/self/mountinfo'):
    parts = line.split()
    if parts[4] == '/home/user' and parts[3] != '/':
        roots.append(parts[3] + '/f')
d = display.Display()
for r in roots:
    # Errors of requests without replies arrive later: caught, then read after a sync.
    caught = error.CatchError(error.BadValue)
    d.set_font_path([r], onerror=caught)
    d.sync()
    print('refused' if caught.get_error() else 'ACCEPTED', r)
"#;
    let mut req = sh(&a, "python3 -");
    req.stdin = script.as_bytes().to_vec();
    let r = run(&mut c, req).await;
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(
        out.contains("refused"),
        "{out} {:?}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(
        !out.contains("ACCEPTED"),
        "Xvfb read a tenant's font path: {out}"
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// `launch_app` arguments are file paths or URLs, never flags or other schemes: with
/// only the default grants, nothing launches a command line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launch_app_arguments_cannot_run_commands() {
    let Desktops {
        server,
        mut c,
        data,
        envs,
    } = Desktops::start("launch", 1, &["launch_app"]).await;
    let a = envs[0].clone();
    let launch = |app: &str, args: &[&str]| pb::StepRequest {
        env_id: a.clone(),
        action: Some(pb::Action {
            verb: Some(pb::action::Verb::LaunchApp(pb::LaunchApp {
                app: app.into(),
                args: args.iter().map(|s| s.to_string()).collect(),
            })),
            extension: None,
        }),
        ..Default::default()
    };
    for (app, args) in [
        ("terminal", vec!["--", "sh", "-c", "touch /tmp/pwned"]),
        ("terminal", vec!["sh"]),
        ("terminal", vec!["-x", "sh"]),
        ("files", vec!["/home/user"]),
        ("chromium", vec!["--renderer-cmd-prefix=sh -c id"]),
        ("chromium", vec!["javascript:alert(1)"]),
        ("writer", vec!["macro:///Standard.Module1.Main"]),
        (
            "writer",
            vec!["vnd.sun.star.script:Standard.x?language=Basic"],
        ),
        ("writer", vec!["https://example.org/x.odt"]),
        ("editor", vec!["-e"]),
    ] {
        let err = c.step(launch(app, &args)).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{app} {args:?}: {err:?}");
        assert!(
            err.message().starts_with("action.launch_app.args[0]"),
            "{err:?}"
        );
    }
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// A memory bomb and a disk fill fail their own env with RESOURCE_EXHAUSTED (or the
/// command's own error) while the neighbour keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_and_disk_bombs_stay_in_their_env() {
    let Desktops {
        server,
        mut c,
        data,
        envs,
    } = Desktops::start("bombs", 2, &["exec", "files"]).await;
    let (a, b) = (envs[0].clone(), envs[1].clone());
    let limits = c
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .limits
        .unwrap()
        .sandbox
        .unwrap();
    assert_eq!((limits.memory_mb, limits.disk_mb), (512, 64));
    let cgroup = limits.memory_bound.starts_with("cgroup");
    assert!(cgroup || limits.memory_bound == "rlimit_data", "{limits:?}");
    // 2 GiB touched, against a 512 MiB limit.
    let bomb = c
        .exec(sh(&a, "python3 -c 'a = bytearray(2 << 30); print(len(a))'"))
        .await;
    match bomb {
        Err(e) => {
            assert!(cgroup);
            assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
            assert!(e.message().contains("memory limit of 512 MiB"), "{e:?}");
        }
        // Without a cgroup the address-space limit answers inside the command.
        Ok(r) => {
            assert!(!cgroup, "a cgroup bound answered {r:?}");
            let r = r.into_inner();
            assert_ne!(r.exit_code, Some(0), "{r:?}");
            assert!(
                String::from_utf8_lossy(&r.stderr).contains("MemoryError"),
                "{r:?}"
            );
        }
    }
    let (code, out, _) = shell(&mut c, &b, "echo neighbour-fine").await;
    assert_eq!((code, out.as_str()), (Some(0), "neighbour-fine"));

    // The disk: 64 MiB of home.
    let (code, _, err) = shell(&mut c, &a, "head -c 200M /dev/zero > ~/fill").await;
    assert_ne!(code, Some(0));
    assert!(err.contains("No space left"), "{err}");
    let put = pb::PutFileChunk {
        env_id: a.clone(),
        path: "more.bin".into(),
        data: vec![1; 1 << 20],
        ..Default::default()
    };
    let err = c.put_file(tokio_stream::iter(vec![put])).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("disk limit"), "{err:?}");
    // The neighbour's disk is its own, and the host's is untouched.
    let (code, _, err) = shell(&mut c, &b, "head -c 32M /dev/zero > ~/ok && rm ~/ok").await;
    assert_eq!(code, Some(0), "{err}");
    c.step(step_req(&b, noop())).await.unwrap();
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// The server's resident memory, in bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

/// 64 concurrent 48 MiB uploads into one env: one is served, piece by piece, the rest
/// refused at once as busy; the server never holds the uploads in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_uploads_keep_server_memory_bounded() {
    let Desktops {
        server, data, envs, ..
    } = Desktops::start("uploads", 1, &["files"]).await;
    let a = envs[0].clone();
    let before = rss();
    const MB: usize = 1 << 20;
    // The peak, sampled while the uploads run.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                peak = peak.max(rss());
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        })
    };
    let uploads = (0..64).map(|i| {
        let a = a.clone();
        let addr = server.addr;
        tokio::spawn(async move {
            // A connection each, as 64 separate clients would.
            let mut c = deskgym_server::connect(addr).await.unwrap();
            // 48 chunks of 1 MiB, made as they are sent (the client holds few).
            let chunks = (0..48).map(move |k| pb::PutFileChunk {
                env_id: if k == 0 { a.clone() } else { String::new() },
                path: if k == 0 {
                    format!("up-{i}")
                } else {
                    String::new()
                },
                data: vec![i as u8; MB],
                ..Default::default()
            });
            c.put_file(tokio_stream::iter(chunks))
                .await
                .map(|r| r.into_inner().size)
        })
    });
    let mut served = 0;
    for u in uploads.collect::<Vec<_>>() {
        match u.await.unwrap() {
            Ok(size) => {
                assert_eq!(size, 48 * MB as u64);
                served += 1;
            }
            // Busy (the env's one call), or the disk limit (64 MiB) for a second one.
            Err(e) => assert!(
                matches!(e.code(), Code::Aborted | Code::ResourceExhausted),
                "{e:?}"
            ),
        }
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    let peak = sampler.join().unwrap();
    assert!(served >= 1, "no upload was served");
    // 64 x 48 MiB is 3 GiB; what the server holds is a few pieces per upload.
    let grown = peak.saturating_sub(before);
    assert!(
        grown < 512 * MB as u64,
        "the server grew by {} MiB",
        grown >> 20
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// FIFOs, sockets and devices are refused by every file verb at once, never waited on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_verbs_refuse_fifos_and_devices_at_once() {
    let Desktops {
        server,
        mut c,
        data,
        envs,
    } = Desktops::start("fifo", 1, &["exec", "files"]).await;
    let a = envs[0].clone();
    let (code, _, err) = shell(
        &mut c,
        &a,
        "mkfifo ~/fifo && python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/home/user/sock')\"",
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    // The op timeout is 30 s: an answer within 10 s was not a wait on the FIFO.
    for path in ["fifo", "sock"] {
        let get = c.get_file(pb::GetFileRequest {
            env_id: a.clone(),
            path: path.into(),
            offset: 0,
        });
        let err = tokio::time::timeout(Duration::from_secs(10), get)
            .await
            .expect("GetFile waited on a FIFO")
            .map(|_| ())
            .unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{path}: {err:?}");
        assert!(err.message().contains("not a regular file"), "{err:?}");
        let put = c.put_file(tokio_stream::iter(vec![pb::PutFileChunk {
            env_id: a.clone(),
            path: path.into(),
            data: b"x".to_vec(),
            ..Default::default()
        }]));
        let err = tokio::time::timeout(Duration::from_secs(10), put)
            .await
            .expect("PutFile waited on a FIFO")
            .unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{path}: {err:?}");
    }
    // A link to a device resolves outside the home and /tmp.
    shell(&mut c, &a, "ln -s /dev/zero ~/zero").await;
    let err = c
        .get_file(pb::GetFileRequest {
            env_id: a.clone(),
            path: "zero".into(),
            offset: 0,
        })
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    // A long path is quoted short.
    let long = "d/".repeat(50_000);
    let err = c
        .get_file(pb::GetFileRequest {
            env_id: a.clone(),
            path: long,
            offset: 0,
        })
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(err.message().len() < 400, "{} bytes", err.message().len());
    // The env is still fine.
    let (code, _, _) = shell(&mut c, &a, "true").await;
    assert_eq!(code, Some(0));
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// 500 tunnels into one env at once: each is served (its data arrives) or refused
/// with a code; none ends OK with nothing, and the env's exec works after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_tunnels_is_served_or_refused_never_dropped() {
    let Desktops {
        server,
        mut c,
        data,
        envs,
    } = Desktops::start("tunnels", 1, &["exec"]).await;
    let a = envs[0].clone();
    let (code, _, err) = shell(
        &mut c,
        &a,
        "setsid -f python3 -c \"import socketserver\n\
         class H(socketserver.BaseRequestHandler):\n    def handle(self): self.request.sendall(b'pong')\n\
         socketserver.ThreadingTCPServer.request_queue_size = 1024\n\
         socketserver.ThreadingTCPServer(('127.0.0.1', 7100), H).serve_forever()\" >/dev/null 2>&1",
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    // Up?
    let mut up = false;
    for _ in 0..100 {
        if tunnel(&mut c, &a, 7100).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "the in-desktop server did not come up");
    let flood = (0..500).map(|_| {
        let mut c = c.clone();
        let a = a.clone();
        tokio::spawn(async move {
            let (tx, mut inbound) = match tunnel(&mut c, &a, 7100).await {
                Ok(t) => t,
                Err(e) => return Err(e.code()),
            };
            let mut got = Vec::new();
            let end = tokio::time::timeout(Duration::from_secs(60), async {
                loop {
                    match inbound.message().await {
                        Ok(Some(m)) => got.extend_from_slice(&m.data),
                        Ok(None) => return Ok(()),
                        Err(e) => return Err(e.code()),
                    }
                }
            })
            .await
            .expect("a tunnel hung");
            drop(tx);
            end.map(|()| got)
        })
    });
    let (mut served, mut refused) = (0, 0);
    for t in flood.collect::<Vec<_>>() {
        match t.await.unwrap() {
            Ok(data) => {
                assert_eq!(data, b"pong", "a tunnel ended OK without its data");
                served += 1;
            }
            Err(code) => {
                assert!(
                    matches!(
                        code,
                        Code::ResourceExhausted | Code::FailedPrecondition | Code::Unavailable
                    ),
                    "{code:?}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!(served + refused, 500);
    assert!(served > 0);
    let (code, _, _) = shell(&mut c, &a, "true").await;
    assert_eq!(code, Some(0), "exec broke after the flood");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// Frames by hash, run names, cache stats and capacity are each principal's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_share_no_frames_runs_or_figures() {
    let data = std::env::temp_dir().join(format!("deskgym-ten-princ-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let server = TestServer::start(ServerConfig {
        principals: deskgym_server::parse_token_file(
            "alice: aaa desktops=4\nbob: bbb desktops=4\n",
        )
        .unwrap(),
        data_dir: data.clone(),
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let mk = |record: &str| pb::CreatePoolRequest {
        task: "click-target".into(),
        num_envs: 1,
        screen: Some(pb::ScreenSize {
            width: 320,
            height: 240,
        }),
        record: record.into(),
        ..Default::default()
    };
    let pa = c
        .create_pool(as_("aaa", mk("run1")))
        .await
        .unwrap()
        .into_inner();
    let obs = c
        .reset(as_(
            "aaa",
            pb::ResetRequest {
                env_id: pa.env_ids[0].clone(),
                seed: Some(3),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .observation
        .unwrap();
    let frames = |hash: &str| pb::GetFramesRequest {
        hashes: vec![hash.to_string()],
        ..Default::default()
    };
    // Alice gets her frame; Bob, given its hash, hears it does not exist.
    c.get_frames(as_("aaa", frames(&obs.frame_hash)))
        .await
        .unwrap();
    let err = c
        .get_frames(as_("bbb", frames(&obs.frame_hash)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    // The same run name for both: each has its own.
    let pb_ = c
        .create_pool(as_("bbb", mk("run1")))
        .await
        .unwrap()
        .into_inner();
    assert_ne!(pa.recording_path, pb_.recording_path);
    let err = c.create_pool(as_("aaa", mk("run1"))).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    assert!(!err.message().contains(data.to_str().unwrap()), "{err:?}");
    assert!(!err.message().contains("bob"), "{err:?}");
    // Bob's figures are his own: Alice's misses and envs are not in them.
    let stats = c
        .get_cache_stats(as_("bbb", pb::GetCacheStatsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (stats.misses, stats.entries, stats.bytes),
        (0, 0, 0),
        "{stats:?}"
    );
    let alice = c
        .get_cache_stats(as_("aaa", pb::GetCacheStatsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(alice.misses > 0, "{alice:?}");
    let cap = |token| {
        let mut c = c.clone();
        async move {
            c.get_capabilities(as_(token, pb::GetCapabilitiesRequest {}))
                .await
                .unwrap()
                .into_inner()
                .capacity
                .unwrap()
        }
    };
    let (ca, cb) = (cap("aaa").await, cap("bbb").await);
    assert_eq!((ca.envs_in_use, ca.envs_free), (1, 3), "{ca:?}");
    assert_eq!((cb.envs_in_use, cb.envs_free), (1, 3), "{cb:?}");
    // Bob can neither watch, shoot nor run anything on Alice's desktop: to him it
    // does not exist. Alice watches it.
    let cast = |token: &str| {
        as_(
            token,
            pb::ScreencastRequest {
                env_id: pa.env_ids[0].clone(),
                ..Default::default()
            },
        )
    };
    let err = c.screencast(cast("bbb")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let shot = pb::ScreenshotRequest {
        env_id: pa.env_ids[0].clone(),
        if_none_match: vec![obs.frame_hash.clone()],
        ..Default::default()
    };
    let err = c.screenshot(as_("bbb", shot)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let run = pb::ExecRequest {
        env_id: pa.env_ids[0].clone(),
        shell: "true".into(),
        ..Default::default()
    };
    let err = c.exec_stream(as_("bbb", run)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let mut watching = c.screencast(cast("aaa")).await.unwrap().into_inner();
    let frame = watching.message().await.unwrap().unwrap();
    assert_eq!((frame.seq, frame.width, frame.height), (0, 320, 240));
    drop(watching);
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// Health answers while 2,000 idle connections are open, on a server limited to
/// 1,024 descriptors: idle connections give way to new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_take_the_server() {
    use std::os::unix::process::CommandExt;
    let mut cmd = server_command(&["--listen", "127.0.0.1:0"]);
    // SAFETY: setrlimit in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            Ok(())
        });
    }
    let (child, addr) = spawn_server(cmd);
    let mut idle = Vec::new();
    for _ in 0..2000 {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(s) => idle.push(s),
            Err(e) => panic!("connect: {e}"),
        }
    }
    // A hang detector, not a speed test: a starved server never answers.
    let health = tokio::time::timeout(Duration::from_secs(20), async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        tonic_health_check(channel).await
    })
    .await
    .expect("health did not answer beside 2,000 idle connections");
    assert!(health, "health is not SERVING");
    drop(idle);
    assert!(sigterm(child));
}

/// One `grpc.health.v1` check of the whole server.
async fn tonic_health_check(channel: tonic::transport::Channel) -> bool {
    let mut h = tonic_health::pb::health_client::HealthClient::new(channel);
    h.check(tonic_health::pb::HealthCheckRequest {
        service: String::new(),
    })
    .await
    .map(|r| {
        r.into_inner().status
            == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    })
    .unwrap_or(false)
}

/// A server killed with SIGKILL leaves its sandboxes' directories; the next server
/// sweeps them, and one stopped with SIGTERM leaves none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_leftovers_are_swept() {
    let start = || spawn_server(server_command(&["--listen", "127.0.0.1:0"]));
    let root_of = |pid: u32| std::env::temp_dir().join(format!("deskgym-sandboxes-{pid}"));
    let displays_of = |pid: u32| std::env::temp_dir().join(format!("deskgym-displays-{pid}"));
    // The lock that tells sweepers in other PID namespaces the owner is alive.
    let lock_of = |pid: u32| std::env::temp_dir().join(format!("deskgym-owner-{pid}.lock"));
    let (mut killed, addr) = start();
    let mut c = deskgym_server::connect(addr).await.unwrap();
    let p = desktop_pool(&mut c, 1, &[]).await;
    reset(&mut c, &p.env_ids[0], 1).await;
    let killed_root = root_of(killed.id());
    let killed_displays = displays_of(killed.id());
    let killed_lock = lock_of(killed.id());
    assert!(killed_root.exists() && killed_lock.exists());
    killed.kill().unwrap();
    killed.wait().unwrap();
    assert!(
        killed_root.exists() && killed_displays.exists(),
        "SIGKILL leaves the directories (the case to sweep)"
    );

    let (next, addr) = start();
    let mut c = deskgym_server::connect(addr).await.unwrap();
    // Serving means started: the sweep comes before.
    c.get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap();
    assert!(
        !killed_root.exists(),
        "the next server did not sweep {killed_root:?}"
    );
    assert!(
        !killed_displays.exists(),
        "the next server did not sweep {killed_displays:?}"
    );
    assert!(
        !killed_lock.exists(),
        "the next server did not sweep {killed_lock:?}"
    );
    let p = desktop_pool(&mut c, 1, &[]).await;
    reset(&mut c, &p.env_ids[0], 1).await;
    let (next_root, next_pid) = (root_of(next.id()), next.id());
    assert!(next_root.exists() && displays_of(next_pid).exists());
    assert!(sigterm(next));
    assert!(!next_root.exists(), "SIGTERM left {next_root:?}");
    let next_displays = displays_of(next_pid);
    assert!(!next_displays.exists(), "SIGTERM left {next_displays:?}");
    assert!(!lock_of(next_pid).exists(), "SIGTERM left its lock file");
}

/// Without a cgroup (`DESKGYM_SANDBOX_CGROUPS=0`), memory is bounded per process by
/// `RLIMIT_DATA`: a bomb fails inside its command, and Chromium (which reserves far
/// more address space than any limit) still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cgroups_a_data_limit_bounds_memory_and_chromium_runs() {
    let mut cmd = server_command(&["--listen", "127.0.0.1:0", "--allow-capabilities", "exec"]);
    cmd.args(["--sandbox-memory-mb", "1024"])
        .env("DESKGYM_SANDBOX_CGROUPS", "0");
    let (child, addr) = spawn_server(cmd);
    let mut c = deskgym_server::connect(addr).await.unwrap();
    let caps = c
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    let bound = caps.limits.unwrap().sandbox.unwrap().memory_bound;
    assert_eq!(bound, "rlimit_data");
    let p = desktop_pool(&mut c, 1, &["exec"]).await;
    let a = p.env_ids[0].clone();
    reset(&mut c, &a, 1).await;
    let (code, _, err) = shell(&mut c, &a, "python3 -c 'a = bytearray(2 << 30)'").await;
    assert_ne!(code, Some(0));
    assert!(err.contains("MemoryError"), "{err}");
    let (code, out, err) = shell(
        &mut c,
        &a,
        "chromium --headless --disable-gpu --no-first-run --disable-background-networking \
         --dump-dom 'data:text/html,<p>alive</p>' 2>/dev/null",
    )
    .await;
    assert!(out.contains("<p>alive</p>"), "{code:?} {out} {err}");
    assert!(sigterm(child));
}

/// Frames are captured through a memfd passed to Xvfb (`ShmAttachFd`), never a SysV
/// segment: Xvfb lets any of its clients (a tenant's program) attach a SysV segment it
/// already holds by its id, with no permission check, and so read or overwrite the
/// frames the server captures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captures_leave_no_shared_memory_id_to_attach() {
    let server = TestServer::with_limits(4, 4).await;
    let mut c = server.client().await;
    let p = pool(&mut c, "click-target", 2, 320, 240).await;
    for e in &p.env_ids {
        reset(&mut c, e, 1).await;
        c.step(step_req(e, click(5, 5))).await.unwrap();
    }
    let me = std::process::id().to_string();
    let table = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    // Columns: key shmid perms size cpid ...
    for line in table.lines().skip(1) {
        let cpid = line.split_whitespace().nth(4).unwrap_or("");
        assert_ne!(cpid, me, "a SysV segment of the server: {line}");
    }
    server.stop().await;
}

/// Recordings over the wire: each principal lists, reads (from any offset) and deletes
/// its own runs only; paths cannot leave a bundle; an open run cannot be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recordings_are_fetched_and_deleted_by_their_owner_only() {
    let data = std::env::temp_dir().join(format!("deskgym-ten-rec-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let server = TestServer::start(ServerConfig {
        principals: deskgym_server::parse_token_file("alice: aaa\nbob: bbb\n").unwrap(),
        data_dir: data.clone(),
        record_video_fps: None,
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = c
        .create_pool(as_(
            "aaa",
            pb::CreatePoolRequest {
                task: "click-target".into(),
                num_envs: 1,
                screen: Some(pb::ScreenSize {
                    width: 320,
                    height: 240,
                }),
                record: "r1".into(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let env = p.env_ids[0].clone();
    let mut reset_req = pb::ResetRequest {
        env_id: env.clone(),
        seed: Some(1),
        ..Default::default()
    };
    c.reset(as_("aaa", reset_req.clone())).await.unwrap();
    let lc = c.clone();
    let list = move |token: &'static str| {
        let mut c = lc.clone();
        async move {
            c.list_recordings(as_(token, pb::ListRecordingsRequest {}))
                .await
                .unwrap()
                .into_inner()
                .recordings
        }
    };
    let open = list("aaa").await;
    assert_eq!(open.len(), 1);
    assert_eq!(
        (open[0].run.as_str(), open[0].status.as_str()),
        ("r1", "open")
    );
    // An open run is not deleted from under its pool.
    let err = c
        .delete_recording(as_("aaa", pb::DeleteRecordingRequest { run: "r1".into() }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    for _ in 0..3 {
        c.step(as_("aaa", step_req(&env, click(5, 5))))
            .await
            .unwrap();
    }
    reset_req.seed = Some(2);
    c.reset(as_("aaa", reset_req)).await.unwrap();
    c.close_pool(as_(
        "aaa",
        pb::ClosePoolRequest {
            pool_id: p.pool_id.clone(),
        },
    ))
    .await
    .unwrap();
    let closed = list("aaa").await;
    assert_eq!(closed[0].status, "closed");
    let paths: Vec<&str> = closed[0].files.iter().map(|f| f.path.as_str()).collect();
    assert!(paths.contains(&"manifest.json"), "{paths:?}");
    assert!(paths.iter().any(|p| p.starts_with("steps/")), "{paths:?}");
    // Bob sees none of Alice's, and cannot read or delete them by name.
    assert!(list("bbb").await.is_empty());
    let gc = c.clone();
    let get = move |token: &'static str, run: &str, path: &str, offset: u64| {
        let mut c = gc.clone();
        let req = pb::GetRecordingFileRequest {
            run: run.into(),
            path: path.into(),
            offset,
        };
        async move {
            let mut s = c.get_recording_file(as_(token, req)).await?.into_inner();
            let mut out = Vec::new();
            while let Some(m) = s.message().await? {
                out.extend_from_slice(&m.data);
            }
            Ok::<_, tonic::Status>(out)
        }
    };
    let err = get("bbb", "r1", "manifest.json", 0).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = c
        .delete_recording(as_("bbb", pb::DeleteRecordingRequest { run: "r1".into() }))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    // Alice reads each file whole, and from an offset (a resumed download).
    let manifest = std::fs::read(data.join("alice/r1.skn/manifest.json")).unwrap();
    assert_eq!(
        get("aaa", "r1", "manifest.json", 0).await.unwrap(),
        manifest
    );
    assert_eq!(
        get("aaa", "r1", "manifest.json", 10).await.unwrap(),
        manifest[10..]
    );
    // Paths that would leave the bundle, or the run name, are refused.
    for (run, path, code) in [
        ("r1", "../r1.skn/manifest.json", Code::InvalidArgument),
        ("r1", "/etc/passwd", Code::InvalidArgument),
        ("r1", "steps", Code::NotFound),
        ("../alice/r1", "manifest.json", Code::InvalidArgument),
        ("r1", "manifest.json.tmp", Code::InvalidArgument),
    ] {
        let err = get("aaa", run, path, 0).await.unwrap_err();
        assert_eq!(err.code(), code, "{run} {path}: {err:?}");
    }
    c.delete_recording(as_("aaa", pb::DeleteRecordingRequest { run: "r1".into() }))
        .await
        .unwrap();
    assert!(list("aaa").await.is_empty());
    assert!(!data.join("alice/r1.skn").exists());
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}
