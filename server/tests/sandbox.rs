//! Profile desktops in bubblewrap sandboxes, and `Exec`, against the real server: what
//! a command can and cannot reach from inside an env, and every bad input with its
//! code. Needs the `desktop` profile's packages (`scripts/setup.sh --desktop`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use deskgym_proto::v1 as pb;
use deskgym_server::ServerConfig;
use tonic::Code;

struct Setup {
    server: TestServer,
    c: Client,
    data: std::path::PathBuf,
    token: std::path::PathBuf,
}

async fn setup(tag: &str) -> Setup {
    let data = std::env::temp_dir().join(format!("deskgym-sbx-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).unwrap();
    let token = data.join("tokens");
    std::fs::write(&token, "secret-token-value\n").unwrap();
    let server = TestServer::start(ServerConfig {
        data_dir: data.join("recordings"),
        allow_capabilities: vec!["exec".into()],
        sandbox_hide: vec![token.clone()],
        step_threads: 8,
        ..ServerConfig::default()
    })
    .await;
    let c = server.client().await;
    Setup {
        server,
        c,
        data,
        token,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_sees_only_its_own_env() {
    let Setup {
        server,
        mut c,
        data,
        token,
    } = setup("iso").await;
    let p = desktop_pool(&mut c, 2, &["exec"]).await;
    assert_eq!(p.profile, "desktop");
    assert_eq!(p.capabilities, vec!["exec".to_string()]);
    let (a, b) = (p.env_ids[0].clone(), p.env_ids[1].clone());
    for e in &p.env_ids {
        reset(&mut c, e, 1).await;
    }

    // Who and where: `user`, uid 1000, in /home/user, on display :0.
    let r = run(
        &mut c,
        sh(&a, "id -un; id -u; pwd; echo $DISPLAY; ls /tmp/.X11-unix"),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert_eq!(out(&r), "user\n1000\n/home/user\n:0\nX0");

    // A's home is not B's.
    let r = run(&mut c, sh(&a, "echo from-a > ~/mine.txt && cat ~/mine.txt")).await;
    assert_eq!(out(&r), "from-a");
    let r = run(&mut c, sh(&b, "cat /home/user/mine.txt")).await;
    assert_ne!(r.exit_code, Some(0), "{r:?}");
    let r = run(&mut c, sh(&b, "grep -rs from-a /home /tmp /run; echo done")).await;
    assert_eq!(out(&r), "done", "B found A's file: {r:?}");

    // Other envs' displays: no socket file, and (own network namespace) no abstract
    // socket either; its own display works.
    let probe = |n: &str| {
        format!(
            "python3 -c \"import socket,sys; s=socket.socket(socket.AF_UNIX); \
             s.connect('{n}'); print('connected')\""
        )
    };
    let r = run(&mut c, sh(&a, &probe("/tmp/.X11-unix/X0"))).await;
    assert_eq!(out(&r), "connected", "its own display: {r:?}");
    let others = "python3 -c \"\nimport socket\nfor n in range(1, 400):\n    s = socket.socket(socket.AF_UNIX)\n    try:\n        s.connect('\\0/tmp/.X11-unix/X%d' % n); print('reached', n)\n    except OSError:\n        pass\n\"; ls /tmp/.X11-unix";
    let r = run(&mut c, sh(&a, others)).await;
    assert_eq!(out(&r), "X0", "another display was reachable: {r:?}");

    // No network: not even the server's own port on the host's loopback.
    let port = server.addr.port();
    let r = run(
        &mut c,
        sh(
            &a,
            &format!(
                "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\" \
                 && echo reached; ip -o link 2>/dev/null | wc -l; cat /sys/class/net/*/operstate"
            ),
        ),
    )
    .await;
    assert!(!out(&r).contains("reached"), "{r:?}");

    // The server's secrets: token file and data dir are masked.
    let r = run(
        &mut c,
        sh(
            &a,
            &format!(
                "cat {} 2>&1; ls -A {} 2>&1 | wc -l",
                token.display(),
                data.join("recordings").display()
            ),
        ),
    )
    .await;
    assert!(!out(&r).contains("secret-token-value"), "{r:?}");

    // Nothing outlives its env: a background process is gone once the pool closes.
    let marker = format!("1{}.25", std::process::id() % 10_000);
    let r = run(
        &mut c,
        sh(&a, &format!("(sleep {marker} &) ; echo started")),
    )
    .await;
    assert_eq!(out(&r), "started");
    assert!(
        !pids_running(&marker).is_empty(),
        "the background sleep runs"
    );
    c.close_pool(pb::ClosePoolRequest {
        pool_id: p.pool_id.clone(),
    })
    .await
    .unwrap();
    let t0 = Instant::now();
    while !pids_running(&marker).is_empty() && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        pids_running(&marker).is_empty(),
        "a sandbox process outlived its env"
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_bounds_output_time_and_processes() {
    let Setup {
        server,
        mut c,
        data,
        ..
    } = setup("bounds").await;
    let p = desktop_pool(&mut c, 2, &["exec"]).await;
    let (a, b) = (p.env_ids[0].clone(), p.env_ids[1].clone());

    // argv without a shell, stdin, and bytes that are not UTF-8 both ways.
    let r = run(
        &mut c,
        pb::ExecRequest {
            env_id: a.clone(),
            argv: vec!["wc".into(), "-c".into()],
            stdin: vec![0xff; 1 << 20],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(out(&r), (1u32 << 20).to_string());
    let r = run(&mut c, sh(&a, "printf '\\377\\376'; echo oops >&2; exit 3")).await;
    assert_eq!(r.stdout, b"\xff\xfe".to_vec());
    assert_eq!(String::from_utf8_lossy(&r.stderr), "oops\n");
    assert_eq!(r.exit_code, Some(3));

    // Output beyond the cap is cut and flagged.
    let r = run(&mut c, sh(&a, "head -c 3000000 /dev/zero")).await;
    assert_eq!(r.stdout.len(), 256 << 10);
    assert!(r.stdout_truncated && !r.stderr_truncated);
    assert_eq!(r.exit_code, Some(0));

    // The time bound kills the whole process group.
    let r = run(
        &mut c,
        pb::ExecRequest {
            timeout_ms: 300,
            ..sh(&a, "sleep 30 & sleep 30")
        },
    )
    .await;
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.signal, Some(9));

    // Bad input: precise codes, nothing run.
    let cases: Vec<(pb::ExecRequest, Code, &str)> = vec![
        (
            pb::ExecRequest {
                env_id: a.clone(),
                ..Default::default()
            },
            Code::InvalidArgument,
            "argv",
        ),
        (
            pb::ExecRequest {
                argv: vec!["true".into()],
                ..sh(&a, "true")
            },
            Code::InvalidArgument,
            "shell",
        ),
        (
            pb::ExecRequest {
                timeout_ms: 3_600_000,
                ..sh(&a, "true")
            },
            Code::InvalidArgument,
            "timeout_ms",
        ),
        (
            pb::ExecRequest {
                stdin: vec![b'x'; 10_000_000],
                ..sh(&a, "wc -c")
            },
            Code::InvalidArgument,
            "stdin",
        ),
        (
            pb::ExecRequest {
                env_id: a.clone(),
                argv: vec!["deskgym-no-such-program".into()],
                ..Default::default()
            },
            Code::FailedPrecondition,
            "program",
        ),
        (sh("nope", "true"), Code::NotFound, "env"),
    ];
    for (req, code, word) in cases {
        let e = c.exec(req).await.unwrap_err();
        assert_eq!(e.code(), code, "{e:?}");
        assert!(e.message().contains(word), "{word}: {}", e.message());
    }

    // Last, since its processes take a while to be gone (until then the env answers
    // RESOURCE_EXHAUSTED, as it should, which would blur the codes checked above).
    // A fork bomb stops at the process limit and its time bound (or, when the agent
    // itself finds no thread left to watch it, is killed at once and reported as
    // RESOURCE_EXHAUSTED naming the limit); either way the neighbour is fine and the
    // env recovers.
    let r = c
        .exec(pb::ExecRequest {
            timeout_ms: 3_000,
            ..sh(&a, "bomb() { bomb | bomb & }; bomb; sleep 10")
        })
        .await;
    match r {
        Ok(r) => assert!(
            r.get_ref().timed_out || r.get_ref().exit_code.is_some(),
            "{r:?}"
        ),
        Err(e) => {
            assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
            assert!(e.message().contains("process limit"), "{}", e.message());
        }
    }
    let r = run(&mut c, sh(&b, "echo alive")).await;
    assert_eq!(out(&r), "alive");
    // The bomb's processes die with their group, but not in the same instant: until
    // they are gone the env answers RESOURCE_EXHAUSTED (correctly), then it recovers.
    let mut tries = 0;
    let r = loop {
        match c.exec(sh(&a, "echo recovered")).await {
            Ok(r) => break r.into_inner(),
            Err(e) if e.code() == Code::ResourceExhausted && tries < 50 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the env did not recover from the fork bomb: {e:?}"),
        }
    };
    assert_eq!(out(&r), "recovered");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_and_capabilities_are_checked_up_front() {
    let Setup {
        server,
        mut c,
        data,
        ..
    } = setup("caps").await;
    let caps = c
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    let desktop = caps.profiles.iter().find(|p| p.name == "desktop").unwrap();
    assert!(desktop.available, "{desktop:?}");
    assert!(desktop.apps.contains(&"terminal".to_string()));
    assert_eq!(
        caps.allowed_capabilities,
        ["launch_app", "windows", "clipboard", "exec"]
    );
    let blank = caps.tasks.iter().find(|t| t.id == "blank").unwrap();
    assert!(blank.any_profile);

    let create = |task: &str, profile: &str, caps: &[&str]| pb::CreatePoolRequest {
        task: task.into(),
        profile: profile.into(),
        capabilities: caps.iter().map(|s| s.to_string()).collect(),
        num_envs: 1,
        screen: Some(pb::ScreenSize {
            width: 320,
            height: 240,
        }),
        ..Default::default()
    };
    for (req, code, word) in [
        (
            create("blank", "moon", &[]),
            Code::InvalidArgument,
            "profile",
        ),
        (
            create("click-target", "desktop", &[]),
            Code::InvalidArgument,
            "runs on profile",
        ),
        (
            create("blank", "desktop", &["teleport"]),
            Code::InvalidArgument,
            "capabilities[0]",
        ),
        (
            create("blank", "tasks", &["exec"]),
            Code::FailedPrecondition,
            "sandboxed",
        ),
        (
            create("blank", "tasks", &["windows"]),
            Code::FailedPrecondition,
            "sandboxed",
        ),
    ] {
        let e = c.create_pool(req).await.unwrap_err();
        assert_eq!(e.code(), code, "{e:?}");
        assert!(e.message().contains(word), "{word}: {}", e.message());
    }
    // A verb outside the pool's grant.
    let p = desktop_pool(&mut c, 1, &[]).await;
    let e = c.exec(sh(&p.env_ids[0], "true")).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("exec"), "{}", e.message());
    server.stop().await;

    // A server that does not allow exec, and a profile whose packages are missing.
    let extra = data.join("extra.toml");
    std::fs::write(
        &extra,
        "[profiles.ghost]\ndescription = 'x'\nsandbox = true\n\
         session = [{ argv = ['deskgym-no-such-program'] }]\n\
         requires = { deskgym-no-such-program = 'deskgym-ghost-pkg' }\n",
    )
    .unwrap();
    let server = TestServer::start(ServerConfig {
        data_dir: data.join("recordings"),
        profiles: Some(extra),
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let e = c
        .create_pool(create("blank", "desktop", &["exec"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = c
        .create_pool(create("blank", "ghost", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("deskgym-ghost-pkg"), "{}", e.message());
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// Reset of a used desktop brings the profile's initial state back: in place (sandbox
/// restarted, home copied again), or by swapping in a warm spare when the pool has one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_restores_the_initial_state_with_and_without_a_spare() {
    let Setup {
        server,
        mut c,
        data,
        ..
    } = setup("reset").await;
    for spares in [0, 1] {
        let p = c
            .create_pool(pb::CreatePoolRequest {
                warm_spares: spares,
                ..desktop_request(1, &["exec"])
            })
            .await
            .unwrap()
            .into_inner();
        let e = p.env_ids[0].clone();
        let first = display(reset(&mut c, &e, 1).await.info.as_ref().unwrap());
        // A fresh sandbox resets in place without a restart.
        let again = display(reset(&mut c, &e, 1).await.info.as_ref().unwrap());
        assert_eq!(first, again);
        run(&mut c, sh(&e, "echo x > ~/used && (sleep 1000 &)")).await;
        let after = display(reset(&mut c, &e, 1).await.info.as_ref().unwrap());
        let r = run(&mut c, sh(&e, "ls ~/used; pgrep -c sleep")).await;
        assert_eq!(
            out(&r),
            "0",
            "the home and the processes are back to the seed: {r:?}"
        );
        if spares == 1 {
            assert_ne!(after, first, "the used desktop was swapped for the spare");
        } else {
            assert_eq!(after, first, "restarted in place");
        }
        c.close_pool(pb::ClosePoolRequest { pool_id: p.pool_id })
            .await
            .unwrap();
    }
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// File RPCs: a file over `max_file_bytes` is refused whole, a GetFile of a larger file
/// comes in parts by offset, and without the `files` grant nothing is reachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_limits_and_grants() {
    let data = std::env::temp_dir().join(format!("deskgym-sbx-files-{}", std::process::id()));
    let server = TestServer::start(ServerConfig {
        data_dir: data.join("recordings"),
        allow_capabilities: vec!["files".into()],
        limits: deskgym_server::Limits {
            max_file_bytes: 1024,
            op_timeout: Duration::from_secs(2),
            ..Default::default()
        },
        ..ServerConfig::default()
    })
    .await;
    let mut c = server.client().await;
    let p = desktop_pool(&mut c, 1, &["files"]).await;
    let e = p.env_ids[0].clone();
    let put = |offset: u64, data: Vec<u8>| {
        tokio_stream::iter(vec![pb::PutFileChunk {
            env_id: e.clone(),
            path: "f.bin".into(),
            offset,
            data,
            ..Default::default()
        }])
    };
    // An offset past which no byte fits is refused before anything is written.
    let err = c
        .put_file(put(u64::MAX - 5, vec![1; 10]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().starts_with("offset"), "{err:?}");
    let err = c.put_file(put(0, vec![7; 2000])).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    // In two calls, the second resuming at the first's end.
    c.put_file(put(0, vec![1; 1000])).await.unwrap();
    let size = c
        .put_file(put(1000, vec![2; 1000]))
        .await
        .unwrap()
        .into_inner()
        .size;
    assert_eq!(size, 2000);
    let mut got = Vec::new();
    loop {
        let mut s = c
            .get_file(pb::GetFileRequest {
                env_id: e.clone(),
                path: "f.bin".into(),
                offset: got.len() as u64,
            })
            .await
            .unwrap()
            .into_inner();
        let mut eof = false;
        while let Some(chunk) = s.message().await.unwrap() {
            assert_eq!(chunk.offset, got.len() as u64);
            assert_eq!(chunk.size, 2000);
            got.extend_from_slice(&chunk.data);
            eof = chunk.eof;
        }
        if eof {
            break;
        }
    }
    assert_eq!(got, [vec![1; 1000], vec![2; 1000]].concat());
    // An upload whose client stops sending is ended at the op_timeout.
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(pb::PutFileChunk {
        env_id: e.clone(),
        path: "slow.bin".into(),
        data: vec![1; 10],
        ..Default::default()
    })
    .await
    .unwrap();
    let err = c
        .put_file(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    drop(tx);
    // Bad screenshot requests.
    for (req, field) in [
        (
            pb::ScreenshotRequest {
                env_id: e.clone(),
                scope: 99,
                ..Default::default()
            },
            "scope",
        ),
        (
            pb::ScreenshotRequest {
                env_id: e.clone(),
                jpeg_quality: 101,
                ..Default::default()
            },
            "jpeg_quality",
        ),
        (
            pb::ScreenshotRequest {
                env_id: e.clone(),
                scope: pb::ScreenshotScope::Window as i32,
                window: 0xdead,
                ..Default::default()
            },
            "window",
        ),
    ] {
        let err = c.screenshot(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(
            err.message().starts_with(field),
            "{field}: {}",
            err.message()
        );
    }
    // A pool without the grant: no files, no windows, no launch_app.
    let q = desktop_pool(&mut c, 1, &[]).await;
    let err = c
        .list_windows(pb::ListWindowsRequest {
            env_id: q.env_ids[0].clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    reset(&mut c, &q.env_ids[0], 1).await;
    let err = c
        .step(step_req(
            &q.env_ids[0],
            Some(pb::Action {
                verb: Some(pb::action::Verb::LaunchApp(pb::LaunchApp {
                    app: "terminal".into(),
                    args: vec![],
                })),
                extension: None,
            }),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let err = c
        .list_directory(pb::ListDirectoryRequest {
            env_id: q.env_ids[0].clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}

/// Sends `msg` through a fresh tunnel and reads the answer to its end.
async fn ask(c: &mut Client, env: &str, port: u32, msg: &[u8]) -> Result<Vec<u8>, tonic::Status> {
    let (tx, mut inbound) = tunnel(c, env, port).await?;
    let first = inbound.message().await?.expect("the port accepted");
    assert!(
        first.data.is_empty(),
        "the first answer only says it connected"
    );
    tx.send(pb::TunnelData {
        data: msg.to_vec().into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut out = Vec::new();
    while let Some(m) = tokio::time::timeout(Duration::from_secs(20), inbound.message())
        .await
        .expect("an answer within 20 s")?
    {
        out.extend_from_slice(&m.data);
    }
    Ok(out)
}

/// [`ask`] port 7000, retrying while the server started there is not listening yet.
async fn ask_when_up(c: &mut Client, env: &str, msg: &[u8]) -> Vec<u8> {
    let t0 = Instant::now();
    loop {
        match ask(c, env, 7000, msg).await {
            Ok(v) => return v,
            Err(e)
                if e.code() == Code::FailedPrecondition
                    && t0.elapsed() < Duration::from_secs(20) =>
            {
                assert!(e.message().contains("port 7000"), "{e:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnels_reach_a_port_inside_one_env_only() {
    let Setup {
        server,
        mut c,
        data,
        ..
    } = setup("tunnel").await;
    let p = desktop_pool(&mut c, 2, &["exec"]).await;
    let (a, b) = (p.env_ids[0].clone(), p.env_ids[1].clone());
    for (env, tag) in [(&a, "A"), (&b, "B")] {
        reset(&mut c, env, 1).await;
        // The same port in both envs: each sandbox has its own loopback.
        let server_line = format!(
            "setsid -f python3 -c \"import socket\ns = socket.create_server(('127.0.0.1', 7000))\n\
             while True:\n    c, _ = s.accept(); c.sendall(b'{tag}:' + c.recv(100)); c.close()\" \
             >/dev/null 2>&1"
        );
        let r = run(&mut c, sh(env, &server_line)).await;
        assert_eq!(r.exit_code, Some(0), "{r:?}");
    }
    assert_eq!(ask_when_up(&mut c, &a, b"hello").await, b"A:hello");
    assert_eq!(ask_when_up(&mut c, &b, b"hi").await, b"B:hi");

    // A tunnel holds no flight: the env steps while one is open, and a reset (which
    // restarts the used sandbox) ends it.
    // (`_still_open` keeps the client's side open: the server ends the call itself.)
    let (_still_open, mut open) = tunnel(&mut c, &a, 7000).await.unwrap();
    assert!(open.message().await.unwrap().unwrap().data.is_empty());
    c.step(step_req(&a, click(5, 5))).await.unwrap();
    reset(&mut c, &a, 2).await;
    let end = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match open.message().await {
                Ok(Some(_)) => continue,
                other => break other.map(|_| ()),
            }
        }
    })
    .await
    .expect("a reset ends the env's tunnels");
    drop(end);
    let err = ask(&mut c, &a, 7000, b"x").await.unwrap_err();
    assert_eq!(
        err.code(),
        Code::FailedPrecondition,
        "nothing listens after the reset: {err:?}"
    );

    // Bad input, each with its code.
    for (port, field) in [(0, "port"), (70_000, "port")] {
        let err = tunnel(&mut c, &a, port).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().starts_with(field), "{err:?}");
    }
    let err = tunnel(&mut c, "no-such-env", 7000).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let q = desktop_pool(&mut c, 1, &[]).await;
    let err = tunnel(&mut c, &q.env_ids[0], 7000).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    // A tunnel both of whose ends wait (B's server waits for bytes that never come)
    // does not hold the server's shutdown.
    let (_quiet, mut waiting) = tunnel(&mut c, &b, 7000).await.unwrap();
    assert!(waiting.message().await.unwrap().unwrap().data.is_empty());
    tokio::time::timeout(Duration::from_secs(30), server.stop())
        .await
        .expect("shutdown ends open tunnels");
    let end = waiting.message().await;
    assert!(!matches!(end, Ok(Some(_))), "{end:?}");
    let _ = std::fs::remove_dir_all(&data);
}

/// A desktop is ready for input when CreatePool and Reset return: a key binding sent
/// at once (Ctrl+Alt+T, openbox's) opens a terminal in every one of 20 fresh desktops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_binding_right_after_reset_works_in_every_desktop() {
    let Setup {
        server,
        mut c,
        data,
        ..
    } = setup("ready").await;
    let chord = |env: &str| {
        step_req(
            env,
            Some(pb::Action {
                verb: Some(pb::action::Verb::Key(pb::Key {
                    keys: "ctrl+alt+t".into(),
                })),
                extension: None,
            }),
        )
    };
    let mut missed = Vec::new();
    for round in 0..5 {
        let p = desktop_pool(&mut c, 4, &["windows"]).await;
        for e in &p.env_ids {
            reset(&mut c, e, round).await;
            c.step(chord(e)).await.unwrap();
        }
        for e in &p.env_ids {
            let t0 = Instant::now();
            loop {
                let windows = c
                    .list_windows(pb::ListWindowsRequest { env_id: e.clone() })
                    .await
                    .unwrap()
                    .into_inner()
                    .windows;
                if windows.iter().any(|w| w.wm_class.contains("erminal")) {
                    break;
                }
                if t0.elapsed() > Duration::from_secs(30) {
                    missed.push(format!("round {round} env {e}: {windows:?}"));
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        c.close_pool(pb::ClosePoolRequest {
            pool_id: p.pool_id.clone(),
        })
        .await
        .unwrap();
    }
    assert!(missed.is_empty(), "no terminal opened in {missed:#?}");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&data);
}
