//! The deskgym gRPC server: pools of real X11 desktops behind `deskgym.v1.Deskgym`.
//!
//! # Layout
//! Modules depend one way (`scripts/check_layers.py` fails CI on a cycle; `--layers`
//! prints them), lowest first:
//! - leaves: `capability` (the boundary capabilities a grant check names), `unlock`
//!   (powers unlocked per env: policy, scopes, grants), `egress` (a `net.egress`
//!   unlock's proxy), `invalid` (a
//!   malformed field and the one 64-character quoting rule), `conn`
//!   (connection budgets), `encode` (RAW/PNG/JPEG), `metrics` (the
//!   hot-path counters), `profiles` (the profile catalog), `sync`;
//! - `config` (limits, server settings, the token file), `families` (each task
//!   family's loading, options, settle default and shares), `tasks` (the task registry);
//! - `auth` (principals and quotas on each request), `spec` (a validated CreatePool
//!   request and the desktop/pixel accounting unit), `artifacts` (the content-addressed
//!   artifact store, one blob per content, refs and shares per principal);
//! - `a11y` (element refs, element targets, the tree's renderings), `frame_cache` (the
//!   fleet-wide content-addressed cache), `pool_state` (the pool as its envs see it),
//!   `record` (recording pools as `.skn` bundles through `deskgym-datasets`);
//! - `env`: one env's desktop and episode (reset, step, observe, save, restore; one
//!   call in flight);
//! - `convert` (worker and env results → wire messages), `pool` (the manager:
//!   capacity and quotas, pools, checkpoints, fork, the blocking step pool with bounded
//!   admission and deadlines), `tunnel` (a port on an env's own loopback over a stream);
//! - `checked` (each wire request → a validated command, every error naming its field);
//! - `calls` (a step and a reset started on the step pool, shared by the RPC handlers,
//!   the axstream driver and the console), `error` (the one mapping from each module's error enum to
//!   `tonic::Status`), `metrics_http` (the `/metrics` endpoint);
//! - `screen_streams` (screencasts: one producer per stream, the viewers' slots);
//! - `axstream` (the `Drive` RPC's line runner), then `service` (the RPC handlers) and
//!   `console` (the web console), side by side.
//!
//! [`run`] takes an already-bound listener and a shutdown future, so tests bind port 0
//! and stop the server at will (as mini-redis does).

mod a11y;
mod artifacts;
mod auth;
mod axstream;
mod calls;
mod capability;
mod checked;
mod config;
mod conn;
mod console;
mod convert;
mod egress;
mod encode;
mod env;
mod error;
mod families;
mod frame_cache;
mod invalid;
mod metrics;
mod metrics_http;
mod pool;
mod pool_state;
mod profiles;
mod record;
mod ring;
mod screen_streams;
mod service;
mod shutdown;
mod spec;
mod sync;
mod tasks;
mod tunnel;
mod unlock;

use std::future::Future;
use std::sync::Arc;

use deskgym_proto::v1::deskgym_server::DeskgymServer;
use tokio::net::TcpListener;
use tonic_health::ServingStatus;

pub use config::{
    BackendKind, Limits, PrincipalSpec, ServerConfig, parse_egress_hosts, parse_token_file,
};
pub use conn::{ConnLimits, Listener};
pub use env::episode_seed;
pub use families::find_miniwob;
use pool::PoolManager;
use service::DeskgymService;

/// The service name health checks report on.
pub const SERVICE_NAME: &str = "deskgym.v1.Deskgym";

/// Largest request the server accepts (requests are small; replies carry the frames).
const MAX_REQUEST_BYTES: usize = 16 << 20;
/// How often idle pools are reaped and warm spares topped up.
const HOUSEKEEPING_PERIOD: std::time::Duration = std::time::Duration::from_millis(200);
/// How often the frame cache counters are logged.
const CACHE_LOG_PERIOD: std::time::Duration = std::time::Duration::from_secs(60);

fn log_cache(mgr: &PoolManager) {
    let s = mgr.cache.stats();
    tracing::info!(
        hits = s.hits,
        misses = s.misses,
        encodes = s.encodes,
        encodes_saved = s.encodes_saved,
        not_modified = s.not_modified,
        bytes_saved = s.bytes_saved,
        evictions = s.evictions,
        entries = s.entries,
        bytes = s.bytes,
        "frame cache"
    );
}

/// HTTP/2 flow-control window, sized for a batch of raw frames in flight.
pub const WINDOW_BYTES: u32 = 32 << 20;

/// How often the server pings an idle HTTP/2 connection (and how long it waits for
/// the answer): a live client's answers keep its connection from going idle.
const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(30);

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Listening beyond loopback without a token would expose desktops to the network.
    #[error("refusing to listen on non-loopback address {0} without a token; pass --token-file")]
    InsecureBind(std::net::SocketAddr),
    /// The profile catalog or the task files cannot be loaded.
    #[error("{0}")]
    Profiles(String),
    /// An `--allow-unlock` entry is malformed.
    #[error("--allow-unlock: {0}")]
    Unlock(String),
    /// An `--ask-unlock` entry is malformed.
    #[error("--ask-unlock: {0}")]
    Ask(String),
    /// An I/O error while setting up.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The gRPC transport failed.
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
}

/// Serves until `shutdown` resolves, then drains in-flight calls, closes every pool
/// (killing every Xvfb and task app) and returns.
///
/// Start order: step pool → pool manager → health → the long-lived tasks → gRPC.
/// Stop order is the reverse.
pub async fn run(
    listener: impl Into<Listener>,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    run_with(listener, Listeners::default(), config, shutdown).await
}

/// The server's other listeners, each off unless given.
#[derive(Debug, Default)]
pub struct Listeners {
    /// Prometheus metrics (`GET /metrics`).
    pub metrics: Option<TcpListener>,
    /// The web console.
    pub console: Option<TcpListener>,
}

/// [`run`], also serving the [`Listeners`] given.
///
/// Start order: housekeeping → metrics → console → ring handoff → gRPC. On shutdown
/// one signal reaches them all; each is awaited in the reverse order (see `shutdown`),
/// then every pool is closed.
pub async fn run_with(
    listener: impl Into<Listener>,
    extra: Listeners,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let listener = listener.into();
    let addr = describe(&listener)?;
    let rings = Arc::new(ring::Rings::new(matches!(listener, Listener::Unix(_))));
    let tcp = match &listener {
        Listener::Tcp(l) => Some(l.local_addr()?),
        Listener::Unix(_) => None,
    };
    let console_addr = extra.console.as_ref().and_then(|c| c.local_addr().ok());
    for a in [tcp, console_addr].into_iter().flatten() {
        if !a.ip().is_loopback() && config.principals.is_empty() {
            return Err(RunError::InsecureBind(a));
        }
    }
    let open_files = recover_and_raise_limits(&config);
    let mgr = Arc::new(manager(&config)?);
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, ServingStatus::Serving).await;

    let mut tasks = shutdown::Tasks::new();
    let (m, idle) = (mgr.clone(), config.idle_timeout);
    tasks.spawn("housekeeping", move |closing| {
        housekeeping(m, idle, closing)
    });
    let unlock = unlock::UnlockPolicy::parse(&config.allow_unlock).map_err(RunError::Unlock)?;
    let ask = unlock::UnlockPolicy::parse(&config.ask_unlock).map_err(RunError::Ask)?;
    let auth = auth::Auth::new(
        &config.principals,
        &config.limits,
        config.step_threads,
        &unlock,
        &ask,
    );
    if let Some(l) = extra.metrics {
        let (m, a) = (mgr.clone(), auth.clone());
        tasks.spawn("metrics", move |mut closing| async move {
            // Each scrape is one short reply: nothing to finish once the signal comes.
            tokio::select! {
                () = metrics_http::serve(l, m, a) => {}
                () = shutdown::signalled(&mut closing) => {}
            }
        });
    }
    let auth_required = auth.required();
    let screencasts = screen_streams::Screencasts::new(&config.limits, tasks.closing());
    if let Some(l) = extra.console {
        let console = console::Console::new(mgr.clone(), auth.clone(), screencasts.clone());
        tasks.spawn("console", move |closing| {
            console::serve(l, console, closing)
        });
    }
    // Unix connections that are not gRPC collect frame rings.
    let (side, handoffs) = tokio::sync::mpsc::channel(16);
    let r = rings.clone();
    tasks.spawn("ring handoff", move |closing| {
        hand_off(handoffs, r, closing)
    });

    let store = Arc::new(artifacts::Store::new(&config.data_dir));
    if let Some(idle) = config.upload_idle {
        let s = store.clone();
        tasks.spawn("upload sweep", move |closing| {
            sweep_uploads(s, idle, closing)
        });
    }
    let svc = DeskgymServer::new(DeskgymService::new(
        mgr.clone(),
        tasks.closing(),
        screencasts,
        rings,
        store,
    ))
    .max_decoding_message_size(MAX_REQUEST_BYTES)
    .max_encoding_message_size(usize::MAX);
    let svc = tonic::service::interceptor::InterceptedService::new(svc, move |r| auth.check(r));
    tracing::info!(%addr, auth = auth_required, principals = config.principals.len(),
        max_envs = config.limits.max_envs, "serving");

    // Step replies are small (PNG, not_modified) or large (raw frames): without NODELAY a
    // small reply waits for the client's delayed ACK (tens of ms); with a 64 KiB HTTP/2
    // window a raw 1280x720 frame needs a dozen window updates.
    let incoming = conn::incoming(listener, connection_limits(&config, open_files), side);
    let signal = tasks.signal();
    let result = tonic::transport::Server::builder()
        // Live clients answer pings, so only a silent peer goes idle (see `conn`).
        .http2_keepalive_interval(Some(KEEPALIVE))
        .http2_keepalive_timeout(Some(KEEPALIVE))
        .initial_connection_window_size(Some(WINDOW_BYTES))
        .initial_stream_window_size(Some(WINDOW_BYTES))
        .add_service(health_service)
        .add_service(svc)
        .serve_with_incoming_shutdown(incoming, async move {
            shutdown.await;
            tracing::info!("shutting down: draining in-flight calls");
            // Tunnels and screencasts stay open as long as their peers do: end them now.
            signal();
            set_health(&health, ServingStatus::NotServing).await;
        })
        .await;
    tasks.drain(DRAIN_LIMIT).await;
    log_cache(&mgr);
    tracing::info!(envs = mgr.env_count(), "closing pools");
    mgr.close_all().await;
    // Every sandbox and display of this server is gone (each removed its own files):
    // the roots go too unless another server of this process still has some there.
    let _ = std::fs::remove_dir(deskgym_worker::sandboxes_root());
    let _ = std::fs::remove_dir(deskgym_worker::displays_root());
    // The cgroup directory is the process's, not this server's: `main` removes it at
    // exit. Removing it here let one server of a process (a test binary runs many)
    // delete another's cgroup between its creation and its child entering it.
    tracing::info!("stopped");
    result.map_err(Into::into)
}

/// How long shutdown waits for each long-lived task, all together, before aborting it.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the log calls the address; a unix socket is this host only.
fn describe(listener: &Listener) -> std::io::Result<String> {
    Ok(match listener {
        Listener::Tcp(l) => l.local_addr()?.to_string(),
        Listener::Unix(l) => {
            let path = l.local_addr()?;
            let path = path.as_pathname().map(|p| p.display().to_string());
            format!("unix:{}", path.unwrap_or_default())
        }
    })
}

/// Closes out what a crashed predecessor left (open recordings, sandbox directories and
/// cgroups) before anything new, and raises the open-file limit; returns that limit.
fn recover_and_raise_limits(config: &ServerConfig) -> u64 {
    record::recover_all(&config.data_dir);
    let swept = deskgym_worker::sweep_leftovers();
    if swept > 0 {
        tracing::info!(swept, "removed sandboxes left by servers that are gone");
    }
    let open_files = deskgym_worker::raise_open_files();
    tracing::info!(
        open_files,
        memory_bound = deskgym_worker::memory_bound().name(),
        "limits"
    );
    open_files
}

/// The pool manager the config asks for: its recording settings, policy and backend.
fn manager(config: &ServerConfig) -> Result<PoolManager, RunError> {
    let settings = record::RecordSettings {
        data_dir: config.data_dir.clone(),
        roll_bytes: config.record_roll_bytes,
        roll_every: config.record_roll_every,
        overflow: config.record_overflow,
        queue: config.record_queue,
        block_limit: config.record_block_limit,
        video_fps: config.record_video_fps,
        video_variable_rate: config.record_video_variable_rate,
    };
    let mut hide = config.sandbox_hide.clone();
    hide.push(std::path::absolute(&config.data_dir)?);
    let catalog =
        profiles::Catalog::load(config.profiles.as_deref()).map_err(RunError::Profiles)?;
    let tasks = tasks::Tasks::load(
        config.tasks_dir.as_deref(),
        config.miniwob_dir.as_deref(),
        &catalog,
    )
    .map_err(RunError::Profiles)?;
    let policy = spec::Policy {
        catalog,
        tasks,
        allow: spec::ALLOWED_BY_DEFAULT
            .iter()
            .map(|c| c.to_string())
            .chain(config.allow_capabilities.iter().cloned())
            .fold(Vec::new(), |mut all, c| {
                if !all.contains(&c) {
                    all.push(c);
                }
                all
            }),
        hide,
        tenants: !config.principals.is_empty(),
        egress_hosts: Arc::new(egress::Pinned::new(&config.egress_hosts)),
        ask_timeout: config.ask_timeout,
    };
    let backend: Arc<dyn deskgym_worker::Backend> = match config.backend {
        BackendKind::Real => Arc::new(deskgym_worker::LocalBackend),
        BackendKind::Fake => {
            tracing::warn!("--backend fake: desktops are in memory (no X, no apps), for tests");
            Arc::new(deskgym_worker::fake::FakeBackend::new())
        }
    };
    Ok(PoolManager::with_backend(
        config.limits.clone(),
        config.step_threads,
        settings,
        backend,
    )?
    .with_policy(policy))
}

/// Sets the health of the service and of the server as a whole.
async fn set_health(health: &tonic_health::server::HealthReporter, status: ServingStatus) {
    health.set_service_status(SERVICE_NAME, status).await;
    health.set_service_status("", status).await;
}

/// Reaps idle pools, tops up warm spares and logs cache counters until the signal. A
/// round once begun runs to its end: a reap closing a pool finishes its recording.
async fn housekeeping(
    mgr: Arc<PoolManager>,
    idle: Option<std::time::Duration>,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(HOUSEKEEPING_PERIOD);
    let mut last_logged = std::time::Instant::now();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shutdown::signalled(&mut closing) => return,
        }
        // Leases apply even when the idle timeout is off.
        mgr.reap_idle(idle).await;
        mgr.top_up_spares();
        if last_logged.elapsed() >= CACHE_LOG_PERIOD {
            last_logged = std::time::Instant::now();
            log_cache(&mgr);
        }
    }
}

/// Sweeps abandoned artifact uploads (idle for `idle`) a few times per `idle`, at most
/// every ten minutes, until the signal; each sweep on a blocking thread (it walks and
/// removes files).
async fn sweep_uploads(
    store: Arc<artifacts::Store>,
    idle: std::time::Duration,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let period = (idle / 4).clamp(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(600),
    );
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shutdown::signalled(&mut closing) => return,
        }
        let s = store.clone();
        let _ = tokio::task::spawn_blocking(move || s.sweep(idle)).await;
    }
}

/// Hands each unix connection that is not gRPC to the frame rings, until the signal.
async fn hand_off(
    mut handoffs: tokio::sync::mpsc::Receiver<tokio::net::UnixStream>,
    rings: Arc<ring::Rings>,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            stream = handoffs.recv() => match stream {
                Some(stream) => drop(tokio::spawn(ring::serve_handoff(stream, rings.clone()))),
                None => return,
            },
            () = shutdown::signalled(&mut closing) => return,
        }
    }
}

/// The connection budget: connections may hold at most half the descriptors, since
/// desktops, recordings and health checks need the rest.
fn connection_limits(config: &ServerConfig, open_files: u64) -> ConnLimits {
    let mut connections = config.connections;
    let cap = usize::try_from(open_files / 2)
        .unwrap_or(usize::MAX)
        .max(16);
    connections.max_total = connections.max_total.min(cap);
    connections.max_per_peer = connections.max_per_peer.min(connections.max_total);
    connections
}

/// Connects a client with the same large HTTP/2 windows and NODELAY as the server, so
/// raw frames stream without window-update stalls (used by tests and benches).
pub async fn connect(
    addr: std::net::SocketAddr,
) -> Result<
    deskgym_proto::v1::deskgym_client::DeskgymClient<tonic::transport::Channel>,
    tonic::transport::Error,
> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .initial_connection_window_size(WINDOW_BYTES)
        .initial_stream_window_size(WINDOW_BYTES)
        .connect()
        .await?;
    Ok(
        deskgym_proto::v1::deskgym_client::DeskgymClient::new(channel)
            .max_decoding_message_size(usize::MAX),
    )
}
