//! `deskgym-server`: flags, logging, bind, then [`deskgym_server::run`].

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use deskgym_server::{BackendKind, Limits, ServerConfig};

/// `--backend`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum Backend {
    /// Real X11 desktops.
    Real,
    /// In-memory desktops, for tests.
    Fake,
}

/// Gym-style environment server over real X11 desktops.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Address to listen on: host:port (non-loopback addresses require --token-file), or
    /// unix:PATH, a socket only this user may open, where clients on this host also
    /// receive their frames through shared memory.
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: String,
    /// File holding the bearer token clients must send (`authorization: Bearer <token>`),
    /// or one `name: token [desktops=N] [checkpoints=N]` line per principal.
    #[arg(long)]
    token_file: Option<std::path::PathBuf>,
    /// Most envs alive at once across all pools.
    #[arg(long, default_value_t = Limits::default().max_envs)]
    max_envs: u32,
    /// Most Screencast streams open at once (viewers of live desktops).
    #[arg(long, default_value_t = Limits::default().max_screencasts)]
    max_screencasts: u32,
    /// Most parked replicas held at once (desktops kept at checkpoints' states for
    /// forks, `SaveRequest.park`); 0 turns parking off.
    #[arg(long, default_value_t = Limits::default().max_parked)]
    max_parked: u32,
    /// Most items in one StepBatch.
    #[arg(long, default_value_t = Limits::default().max_batch)]
    max_batch: u32,
    /// Time bound of one blocking desktop operation in milliseconds; past it the call
    /// answers DEADLINE_EXCEEDED and the desktop is killed (the next Reset restarts it).
    #[arg(long, default_value_t = Limits::default().op_timeout.as_millis() as u64)]
    op_timeout_ms: u64,
    /// Most memory one sandboxed desktop may use, in MiB (a cgroup where the host
    /// allows one, else each process's address space; GetCapabilities says which).
    #[arg(long, default_value_t = Limits::default().sandbox_memory_mb)]
    sandbox_memory_mb: u64,
    /// Size of a sandboxed desktop's home, and of its /tmp, each, in MiB.
    #[arg(long, default_value_t = Limits::default().sandbox_disk_mb)]
    sandbox_disk_mb: u64,
    /// Most open files per sandboxed process.
    #[arg(long, default_value_t = Limits::default().sandbox_open_files)]
    sandbox_open_files: u64,
    /// Most processes a sandboxed desktop's user may run at once.
    #[arg(long, default_value_t = Limits::default().max_sandbox_processes)]
    sandbox_processes: u32,
    /// Most open client connections; at the cap the longest-idle one is closed.
    #[arg(long, default_value_t = deskgym_server::ConnLimits::default().max_total)]
    max_connections: usize,
    /// Most open client connections from one IP address.
    #[arg(long, default_value_t = deskgym_server::ConnLimits::default().max_per_peer)]
    max_connections_per_peer: usize,
    /// A client connection that sends nothing (not even keepalive answers) for this
    /// many seconds is closed.
    #[arg(long, default_value_t = deskgym_server::ConnLimits::default().idle.as_secs())]
    connection_idle_s: u64,
    /// Threads driving desktops (they mostly wait on X, so more than cores is fine).
    #[arg(long, default_value_t = 64)]
    step_threads: usize,
    /// What a desktop is: `real` (Xvfb, apps, sandboxes), or `fake`: in memory, for
    /// fast client tests (no X, no apps; the bundled tasks' logic, deterministic frames).
    #[arg(long, value_enum, default_value_t = Backend::Real)]
    backend: Backend,
    /// A profile catalog (TOML) adding to or overriding the bundled profiles.
    #[arg(long)]
    profiles: Option<std::path::PathBuf>,
    /// A directory of declarative task files (`*.toml`) added to the bundled tasks.
    #[arg(long)]
    tasks_dir: Option<std::path::PathBuf>,
    /// The installed `miniwob` package directory (MiniWoB++'s pages become tasks
    /// `miniwob/<name>`). Default: `$DESKGYM_MINIWOB_DIR`, else where `python3` finds it.
    #[arg(long)]
    miniwob_dir: Option<std::path::PathBuf>,
    /// Capabilities pools may be granted, comma-separated (e.g. `exec`). Boundary verbs
    /// are off unless listed here and asked for by the pool.
    #[arg(long, value_delimiter = ',')]
    allow_capabilities: Vec<String>,
    /// What every principal may unlock on its envs at run time (the Unlock RPC) unless
    /// its token-file line says `unlock=`; repeat the flag per entry: `exec`, `files`,
    /// `clipboard`, `windows`, `net.egress` (any host) or
    /// `net.egress:pypi.org,.pythonhosted.org`. Default: nothing.
    #[arg(long)]
    allow_unlock: Vec<String>,
    /// What every principal may ask a controller for unless its token-file line says
    /// `ask=`; entries as for --allow-unlock, one per flag. A call that needs such a
    /// power emits a `capability_required` event and waits for AnswerCapability (or
    /// --ask-timeout-s, then it is refused). Default: nothing is asked.
    #[arg(long)]
    ask_unlock: Vec<String>,
    /// How long a call waits for a controller's answer to its capability request.
    #[arg(long, default_value_t = 60.0)]
    ask_timeout_s: f64,
    /// Removes an unfinished artifact upload (UploadArtifact cut before its end) that
    /// nobody resumed for this many seconds, releasing its bytes from its principal's
    /// share; 0 keeps them until DeleteArtifact.
    #[arg(long, default_value_t = 86_400.0)]
    upload_idle_s: f64,
    /// A file of `NAME ADDRESS...` lines: names a net.egress proxy reaches at these
    /// addresses instead of asking DNS (private addresses allowed: a mirror, a test host).
    #[arg(long)]
    egress_hosts: Option<std::path::PathBuf>,
    /// Close pools untouched for this many seconds (0 disables).
    #[arg(long, default_value_t = 600)]
    idle_timeout_s: u64,
    /// Where recordings (`<run>.skn` bundles) are written. Clients only name runs.
    #[arg(long, default_value = "deskgym-data")]
    data_dir: std::path::PathBuf,
    /// Roll recording chunks at about this many buffered bytes.
    #[arg(long, default_value_t = 64 << 20)]
    record_roll_bytes: usize,
    /// Roll recording chunks at least every this many seconds.
    #[arg(long, default_value_t = 30.0)]
    record_roll_s: f64,
    /// When a recording's writer falls behind: `block` the steps, or `drop` records
    /// (counted in the manifest).
    #[arg(long, default_value = "block", value_parser = ["block", "drop"])]
    record_overflow: String,
    /// Most MiB all recordings on the data dir may hold, shared out per principal
    /// (`recording_mb=N` in the token file; by default this divided by the number of
    /// principals). A recording is refused once its principal's bundles hold its
    /// share, and one that reaches it stops (its pool steps on).
    #[arg(long, default_value_t = Limits::default().max_recording_mb)]
    max_recording_mb: u64,
    /// Most MiB the artifact store (`<data-dir>/artifacts`) may hold, shared out per
    /// principal (`artifact_mb=N` in the token file; by default this divided by the
    /// number of principals). An upload past its principal's share is refused.
    #[arg(long, default_value_t = Limits::default().max_artifact_mb)]
    max_artifact_mb: u64,
    /// Records queued per recording before the overflow policy applies.
    #[arg(long, default_value_t = 4096)]
    record_queue: usize,
    /// How long (ms) a `block` recording waits for a stalled writer (a hung disk)
    /// before it drops records until the writer moves again.
    #[arg(long, default_value_t = 10_000)]
    record_block_ms: u64,
    /// Frames per second of the per-episode H.264 videos in recordings (each step's
    /// frame is one video frame); 0 records no video.
    #[arg(long, default_value_t = 10)]
    record_video_fps: u32,
    /// Elide repeated frames in recorded videos (variable frame rate): cheaper to
    /// record, but the videos no longer hold one frame per step, so the LeRobot export
    /// leaves them out (its images stay).
    #[arg(long)]
    record_video_variable_rate: bool,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (off unless given; port 0
    /// picks a free port, printed on stdout after the gRPC address). Non-loopback
    /// addresses require --token-file, as for --listen.
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Serve the web console at `http://ADDR/` (off unless given; port 0 picks a free
    /// port, printed on stdout after the gRPC address): watch every desktop of your
    /// pools live and take one over. Non-loopback addresses require --token-file.
    #[arg(long)]
    console_listen: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let principals = match &args.token_file {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .with_context(|| format!("reading token file {}", p.display()))?;
            deskgym_server::parse_token_file(&t)
                .map_err(|e| anyhow::anyhow!("token file {}: {e}", p.display()))?
        }
        None => Vec::new(),
    };
    let egress_hosts = match &args.egress_hosts {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .with_context(|| format!("reading egress hosts {}", p.display()))?;
            deskgym_server::parse_egress_hosts(&t)
                .map_err(|e| anyhow::anyhow!("egress hosts {}: {e}", p.display()))?
        }
        None => Vec::new(),
    };
    let config = server_config(&args, principals, egress_hosts);
    // Install the signal handlers before announcing the address, so a SIGTERM that
    // follows the announcement at once still drains and cleans up.
    let shutdown = shutdown_signal()?;
    let (listener, socket) = match args.listen.strip_prefix("unix:") {
        Some(path) => {
            let path = std::path::PathBuf::from(path);
            (bind_unix(&path)?.into(), Some(path))
        }
        None => {
            let l = tokio::net::TcpListener::bind(&args.listen)
                .await
                .with_context(|| format!("binding {}", args.listen))?;
            let addr = l.local_addr()?;
            // Refuse before announcing: scripts take the announcement as "up".
            if !addr.ip().is_loopback() && config.principals.is_empty() {
                return Err(deskgym_server::RunError::InsecureBind(addr).into());
            }
            (deskgym_server::Listener::Tcp(l), None)
        }
    };
    let metrics = bind_extra(args.metrics_listen.as_deref(), "metrics", &config).await?;
    let console = bind_extra(args.console_listen.as_deref(), "console", &config).await?;
    announce(
        &listener,
        socket.as_deref(),
        metrics.as_ref(),
        console.as_ref(),
    )?;
    let extra = deskgym_server::Listeners { metrics, console };
    let served = deskgym_server::run_with(listener, extra, config, shutdown).await;
    if let Some(path) = socket {
        let _ = std::fs::remove_file(path);
    }
    // This process's cgroups, now that its one server and every sandbox are gone.
    deskgym_worker::remove_cgroups();
    deskgym_worker::release_owner_lock();
    served?;
    Ok(())
}

/// Binds a unix socket at `path`, readable and writable by this user only. A socket
/// file left by a server that is gone is replaced; one a live server answers on is not.
fn bind_unix(path: &std::path::Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            anyhow::bail!(
                "--listen {}: the path exists and is not a socket",
                path.display()
            );
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!("--listen {}: another server listens there", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    }
    let l = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("binding unix:{}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("restricting {}", path.display()))?;
    Ok(l)
}

/// Binds `--metrics-listen` or `--console-listen` when given, refusing a non-loopback
/// address on a server without tokens before anything is announced.
async fn bind_extra(
    addr: Option<&str>,
    what: &str,
    config: &ServerConfig,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let Some(a) = addr else { return Ok(None) };
    let l = tokio::net::TcpListener::bind(a)
        .await
        .with_context(|| format!("binding the {what} address {a}"))?;
    let at = l.local_addr()?;
    if !at.ip().is_loopback() && config.principals.is_empty() {
        return Err(deskgym_server::RunError::InsecureBind(at).into());
    }
    Ok(Some(l))
}

/// A future that resolves on SIGTERM or Ctrl-C; the handlers are installed now.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM"),
            _ = int.recv() => tracing::info!("SIGINT"),
        }
    })
}

/// The server's config from its flags and the principals of its token file.
fn server_config(
    args: &Args,
    principals: Vec<deskgym_server::PrincipalSpec>,
    egress_hosts: Vec<(String, std::net::IpAddr)>,
) -> ServerConfig {
    ServerConfig {
        limits: Limits {
            max_envs: args.max_envs,
            max_batch: args.max_batch,
            max_screencasts: args.max_screencasts,
            max_parked: args.max_parked,
            op_timeout: Duration::from_millis(args.op_timeout_ms.max(1)),
            sandbox_memory_mb: args.sandbox_memory_mb,
            sandbox_disk_mb: args.sandbox_disk_mb,
            sandbox_open_files: args.sandbox_open_files,
            max_sandbox_processes: args.sandbox_processes,
            max_recording_mb: args.max_recording_mb,
            max_artifact_mb: args.max_artifact_mb,
            ..Limits::default()
        },
        connections: deskgym_server::ConnLimits {
            max_total: args.max_connections.max(1),
            max_per_peer: args.max_connections_per_peer.max(1),
            idle: Duration::from_secs(args.connection_idle_s.max(1)),
        },
        principals,
        step_threads: args.step_threads,
        idle_timeout: (args.idle_timeout_s > 0).then(|| Duration::from_secs(args.idle_timeout_s)),
        data_dir: args.data_dir.clone(),
        record_roll_bytes: args.record_roll_bytes,
        record_roll_every: Duration::from_secs_f64(args.record_roll_s.max(0.01)),
        record_video_fps: (args.record_video_fps > 0).then_some(args.record_video_fps),
        record_video_variable_rate: args.record_video_variable_rate,
        backend: match args.backend {
            Backend::Real => BackendKind::Real,
            Backend::Fake => BackendKind::Fake,
        },
        profiles: args.profiles.clone(),
        tasks_dir: args.tasks_dir.clone(),
        miniwob_dir: args
            .miniwob_dir
            .clone()
            .or_else(|| {
                std::env::var_os("DESKGYM_MINIWOB_DIR")
                    .filter(|d| !d.is_empty())
                    .map(Into::into)
            })
            .or_else(deskgym_server::find_miniwob),
        allow_capabilities: args.allow_capabilities.clone(),
        allow_unlock: args.allow_unlock.clone(),
        ask_unlock: args.ask_unlock.clone(),
        ask_timeout: Duration::from_secs_f64(args.ask_timeout_s.clamp(0.1, 86_400.0)),
        upload_idle: (args.upload_idle_s > 0.0)
            .then(|| Duration::from_secs_f64(args.upload_idle_s.min(365.0 * 86_400.0))),
        egress_hosts,
        // Sandboxes never see the token file (the data dir is masked by `run`), nor the
        // unix socket, wherever an operator put it.
        sandbox_hide: args
            .token_file
            .iter()
            .cloned()
            .chain(args.listen.strip_prefix("unix:").map(Into::into))
            .filter_map(|p| std::path::absolute(p).ok())
            .collect(),
        record_queue: args.record_queue.max(1),
        record_block_limit: Duration::from_millis(args.record_block_ms),
        record_overflow: if args.record_overflow == "drop" {
            deskgym_datasets::Overflow::Drop
        } else {
            deskgym_datasets::Overflow::Block
        },
    }
}

/// Prints where the server listens: scripts that pass port 0 read the real address from
/// these lines.
fn announce(
    listener: &deskgym_server::Listener,
    socket: Option<&std::path::Path>,
    metrics: Option<&tokio::net::TcpListener>,
    console: Option<&tokio::net::TcpListener>,
) -> std::io::Result<()> {
    match (listener, socket) {
        (deskgym_server::Listener::Tcp(l), _) => {
            println!("deskgym-server listening on {}", l.local_addr()?)
        }
        (_, Some(path)) => println!("deskgym-server listening on unix:{}", path.display()),
        _ => {}
    }
    if let Some(m) = metrics {
        println!(
            "deskgym-server metrics on http://{}/metrics",
            m.local_addr()?
        );
    }
    if let Some(c) = console {
        println!("deskgym-server console on http://{}/", c.local_addr()?);
    }
    Ok(())
}
