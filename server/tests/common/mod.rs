//! Starts the real server on 127.0.0.1:0 in-process and hands out generated clients.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;

use deskgym_proto::v1 as pb;
use deskgym_proto::v1::deskgym_client::DeskgymClient;
use deskgym_server::{Limits, ServerConfig};
use tokio::sync::oneshot;
use tonic::transport::Channel;

pub const RED: u32 = 0xd62828;

/// The generated client.
pub type Client = DeskgymClient<Channel>;

/// A running server; `stop` shuts it down and waits until every pool is closed.
pub struct TestServer {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<Result<(), deskgym_server::RunError>>>,
}

impl TestServer {
    pub async fn start(config: ServerConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(deskgym_server::run(listener, config, async {
            let _ = rx.await;
        }));
        Self {
            addr,
            stop: Some(tx),
            handle: Some(handle),
        }
    }

    pub async fn with_limits(max_envs: u32, max_batch: u32) -> Self {
        Self::start(ServerConfig {
            limits: Limits {
                max_envs,
                max_batch,
                ..Limits::default()
            },
            step_threads: 16,
            ..ServerConfig::default()
        })
        .await
    }

    pub async fn client(&self) -> DeskgymClient<Channel> {
        let uri = format!("http://{}", self.addr);
        for _ in 0..50 {
            if let Ok(c) = deskgym_server::connect(self.addr).await {
                return c;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("server at {uri} did not accept connections");
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.handle.take() {
            h.await.unwrap().unwrap();
        }
    }
}

pub fn px(x: i32, y: i32) -> Option<pb::Target> {
    Some(pb::Target {
        kind: Some(pb::target::Kind::PointPx(pb::PointPx { x, y })),
    })
}

pub fn click(x: i32, y: i32) -> Option<pb::Action> {
    Some(pb::Action {
        verb: Some(pb::action::Verb::Click(pb::Click {
            target: px(x, y),
            button: 0,
            count: 1,
        })),
        extension: None,
    })
}

/// A step of `env` with `action`, everything else default.
pub fn step_req(env: impl Into<String>, action: Option<pb::Action>) -> pb::StepRequest {
    pb::StepRequest {
        env_id: env.into(),
        action,
        ..Default::default()
    }
}

pub fn noop() -> Option<pb::Action> {
    Some(pb::Action {
        verb: Some(pb::action::Verb::Noop(pb::Noop {})),
        extension: None,
    })
}

pub async fn pool(
    c: &mut DeskgymClient<Channel>,
    task: &str,
    n: u32,
    w: u32,
    h: u32,
) -> pb::CreatePoolResponse {
    c.create_pool(pb::CreatePoolRequest {
        task: task.into(),
        num_envs: n,
        screen: Some(pb::ScreenSize {
            width: w,
            height: h,
        }),
        seed: 0,
        ..Default::default()
    })
    .await
    .expect("create pool (needs the Debian package `xvfb`)")
    .into_inner()
}

pub async fn reset(c: &mut DeskgymClient<Channel>, env: &str, seed: u64) -> pb::ResetResponse {
    c.reset(pb::ResetRequest {
        env_id: env.into(),
        seed: Some(seed),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// Centroid of pixels of `color` in a RAW_RGB observation.
pub fn find(obs: &pb::Observation, color: u32) -> Option<(i32, i32)> {
    assert_eq!(obs.encoding, pb::ImageEncoding::RawRgb as i32);
    deskgym_worker::Frame::from_rgb(obs.width, obs.height, obs.frame.to_vec()).find_color(color)
}

/// Display number of an env, from its step info.
pub fn display(info: &pb::StepInfo) -> u32 {
    info.extra["display"]
        .trim_start_matches(':')
        .parse()
        .unwrap()
}

/// Pid of the Xvfb serving `:display`: the child Xvfb holding the socket whose path is
/// `/tmp/.X11-unix/X<display>` (with `-displayfd`, Xvfb writes no lock file).
pub fn xvfb_pid(display: u32) -> Option<i32> {
    let path = format!("/tmp/.X11-unix/X{display}");
    let table = std::fs::read_to_string("/proc/net/unix").ok()?;
    let inodes: Vec<String> = table
        .lines()
        .filter(|l| l.ends_with(&path))
        .filter_map(|l| l.split_whitespace().nth(6).map(|i| format!("socket:[{i}]")))
        .collect();
    children_named("Xvfb").into_iter().find(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|t| inodes.iter().any(|i| t.to_string_lossy() == *i))
            })
        })
    })
}

/// Child processes of this test process with the given command name.
pub fn children_named(name: &str) -> Vec<i32> {
    children_of(std::process::id() as i32, name)
}

/// Child processes of `parent` with the given command name (comm is cut at 15 chars).
pub fn children_of(parent: i32, name: &str) -> Vec<i32> {
    let me = parent;
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // comm is in parentheses; ppid is the second field after it.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let ppid: i32 = stat[close + 2..]
            .split(' ')
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if ppid == me && name.starts_with(comm) {
            out.push(pid);
        }
    }
    out
}

pub fn desktop_request(n: u32, caps: &[&str]) -> pb::CreatePoolRequest {
    pb::CreatePoolRequest {
        task: "blank".into(),
        profile: "desktop".into(),
        capabilities: caps.iter().map(|s| s.to_string()).collect(),
        num_envs: n,
        screen: Some(pb::ScreenSize {
            width: 640,
            height: 480,
        }),
        ..Default::default()
    }
}

pub async fn desktop_pool(c: &mut Client, n: u32, caps: &[&str]) -> pb::CreatePoolResponse {
    c.create_pool(desktop_request(n, caps))
        .await
        .expect("a desktop pool (needs `scripts/setup.sh --desktop`)")
        .into_inner()
}

pub fn sh(env: &str, line: &str) -> pb::ExecRequest {
    pb::ExecRequest {
        env_id: env.into(),
        shell: line.into(),
        timeout_ms: 20_000,
        ..Default::default()
    }
}

pub async fn run(c: &mut Client, req: pb::ExecRequest) -> pb::ExecResponse {
    let what = format!("{:?} {:?}", req.argv, req.shell);
    c.exec(req)
        .await
        .unwrap_or_else(|e| panic!("exec {what}: {e:?}"))
        .into_inner()
}

pub fn out(r: &pb::ExecResponse) -> String {
    String::from_utf8_lossy(&r.stdout).trim().to_string()
}

/// Pids of processes whose command line contains `needle`.
pub fn pids_running(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd).contains(needle)
        {
            found.push(pid);
        }
    }
    found
}

/// Opens a tunnel; the sender carries the client's bytes, the first message the port.
pub async fn tunnel(
    c: &mut Client,
    env: &str,
    port: u32,
) -> Result<
    (
        tokio::sync::mpsc::Sender<pb::TunnelData>,
        tonic::Streaming<pb::TunnelData>,
    ),
    tonic::Status,
> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(pb::TunnelData {
        env_id: env.into(),
        port,
        data: Default::default(),
    })
    .await
    .unwrap();
    let inbound = c
        .tunnel(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok((tx, inbound))
}

/// A request as the principal holding `token`.
pub fn as_<T>(token: &str, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    r
}

/// The server binary with `args`, its stdout piped (for [`spawn_server`]).
pub fn server_command(args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_deskgym-server"));
    cmd.args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    cmd
}

/// Spawns a server command and reads the address it announces.
pub fn spawn_server(mut cmd: std::process::Command) -> (std::process::Child, SocketAddr) {
    use std::io::BufRead;
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().parse().unwrap();
    (child, addr)
}

/// Stops a spawned server with SIGTERM and waits: true when it exited cleanly.
pub fn sigterm(mut child: std::process::Child) -> bool {
    // SAFETY: signalling a server the test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap().success()
}
