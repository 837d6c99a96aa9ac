//! The deskgym gRPC server: pools of real X11 desktops behind `deskgym.v1.Deskgym`.
//!
//! # Layout
//! Modules depend one way (`scripts/check_layers.py` fails CI on a cycle; `--layers`
//! prints them), lowest first:
//! - leaves: `capability` (the boundary capabilities a grant check names), `conn`
//!   (connection budgets), `encode` (RAW/PNG/JPEG), `metrics` (the
//!   hot-path counters), `profiles` (the profile catalog), `sync`;
//! - `config` (limits, server settings, the token file), `tasks` (declarative tasks);
//! - `auth` (principals and quotas on each request), `spec` (a validated CreatePool
//!   request and the desktop/pixel accounting unit);
//! - `a11y` (element refs, element targets, the tree's renderings), `frame_cache` (the
//!   fleet-wide content-addressed cache), `handle` (the pool as its envs see it),
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
//! - `watch` (screencasts: one producer per stream, the viewers' slots);
//! - `axstream` (the `Drive` RPC's line runner), then `service` (the RPC handlers) and
//!   `console` (the web console), side by side.
//!
//! [`run`] takes an already-bound listener and a shutdown future, so tests bind port 0
//! and stop the server at will (as mini-redis does).

mod a11y;
mod auth;
mod axstream;
mod calls;
mod capability;
mod checked;
mod config;
mod conn;
mod console;
mod convert;
mod encode;
mod env;
mod error;
mod families;
mod frame_cache;
mod handle;
mod invalid;
mod metrics;
mod metrics_http;
mod pool;
mod profiles;
mod record;
mod ring;
mod service;
mod spec;
mod sync;
mod tasks;
mod tunnel;
mod watch;

use std::future::Future;
use std::sync::Arc;

use deskgym_proto::v1::deskgym_server::DeskgymServer;
use tokio::net::TcpListener;
use tonic_health::ServingStatus;

pub use config::{BackendKind, Limits, PrincipalSpec, ServerConfig, parse_token_file};
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
/// Start order: step pool → pool manager → health → gRPC. Stop order is the reverse.
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
pub async fn run_with(
    listener: impl Into<Listener>,
    extra: Listeners,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let listener = listener.into();
    // What the log calls the address; a unix socket is this host only.
    let (addr, tcp) = match &listener {
        Listener::Tcp(l) => (l.local_addr()?.to_string(), Some(l.local_addr()?)),
        Listener::Unix(l) => {
            let path = l.local_addr()?;
            let path = path.as_pathname().map(|p| p.display().to_string());
            (format!("unix:{}", path.unwrap_or_default()), None)
        }
    };
    let rings = Arc::new(ring::Rings::new(matches!(listener, Listener::Unix(_))));
    for a in [
        tcp,
        extra.console.as_ref().and_then(|c| c.local_addr().ok()),
    ]
    .into_iter()
    .flatten()
    {
        if !a.ip().is_loopback() && config.principals.is_empty() {
            return Err(RunError::InsecureBind(a));
        }
    }
    // Recordings a crashed predecessor left open are closed out before anything new,
    // and its sandboxes' directories and cgroups swept.
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
    };
    let backend: Arc<dyn deskgym_worker::Backend> = match config.backend {
        BackendKind::Real => Arc::new(deskgym_worker::LocalBackend),
        BackendKind::Fake => {
            tracing::warn!("--backend fake: desktops are in memory (no X, no apps), for tests");
            Arc::new(deskgym_worker::fake::FakeBackend::new())
        }
    };
    let mgr = Arc::new(
        PoolManager::with_backend(
            config.limits.clone(),
            config.step_threads,
            settings,
            backend,
        )?
        .with_policy(policy),
    );
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status(SERVICE_NAME, ServingStatus::Serving)
        .await;
    health.set_service_status("", ServingStatus::Serving).await;

    // Housekeeping: reap idle pools, top up warm spares, log cache counters.
    let housekeeping = {
        let (mgr, idle) = (mgr.clone(), config.idle_timeout);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(HOUSEKEEPING_PERIOD);
            let mut last_logged = std::time::Instant::now();
            loop {
                tick.tick().await;
                // Leases apply even when the idle timeout is off.
                mgr.reap_idle(idle).await;
                mgr.top_up_spares();
                if last_logged.elapsed() >= CACHE_LOG_PERIOD {
                    last_logged = std::time::Instant::now();
                    log_cache(&mgr);
                }
            }
        })
    };

    let auth = auth::Auth::new(&config.principals, &config.limits, config.step_threads);
    let metrics = extra
        .metrics
        .map(|l| tokio::spawn(metrics_http::serve(l, mgr.clone(), auth.clone())));
    let auth_required = auth.required();
    let (closing, closing_rx) = tokio::sync::watch::channel(false);
    let screencasts = watch::Screencasts::new(&config.limits, closing_rx.clone());
    let console = extra.console.map(|l| {
        tokio::spawn(console::serve(
            l,
            console::Console::new(mgr.clone(), auth.clone(), screencasts.clone()),
            closing_rx.clone(),
        ))
    });
    let svc = DeskgymServer::new(DeskgymService::new(
        mgr.clone(),
        closing_rx,
        screencasts,
        rings.clone(),
    ))
    .max_decoding_message_size(MAX_REQUEST_BYTES)
    .max_encoding_message_size(usize::MAX);
    let svc = tonic::service::interceptor::InterceptedService::new(svc, move |r| auth.check(r));
    tracing::info!(%addr, auth = auth_required, principals = config.principals.len(),
        max_envs = config.limits.max_envs, "serving");

    // Step replies are small (PNG, not_modified) or large (raw frames): without NODELAY a
    // small reply waits for the client's delayed ACK (tens of ms); with a 64 KiB HTTP/2
    // window a raw 1280x720 frame needs a dozen window updates.
    // Connections may hold at most half the descriptors: desktops, recordings and
    // health checks need the rest.
    let mut connections = config.connections;
    let cap = usize::try_from(open_files / 2)
        .unwrap_or(usize::MAX)
        .max(16);
    connections.max_total = connections.max_total.min(cap);
    connections.max_per_peer = connections.max_per_peer.min(connections.max_total);
    // Unix connections that are not gRPC collect frame rings.
    let (side, mut handoffs) = tokio::sync::mpsc::channel(16);
    let handoff = {
        let rings = rings.clone();
        tokio::spawn(async move {
            while let Some(stream) = handoffs.recv().await {
                tokio::spawn(ring::serve_handoff(stream, rings.clone()));
            }
        })
    };
    let incoming = conn::incoming(listener, connections, side);
    let health_down = health.clone();
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
            // Tunnels stay open as long as their peers do: end them now.
            let _ = closing.send(true);
            health_down
                .set_service_status(SERVICE_NAME, ServingStatus::NotServing)
                .await;
            health_down
                .set_service_status("", ServingStatus::NotServing)
                .await;
        })
        .await;
    housekeeping.abort();
    handoff.abort();
    if let Some(m) = metrics {
        m.abort();
    }
    if let Some(c) = console {
        c.abort();
    }
    log_cache(&mgr);
    tracing::info!(envs = mgr.env_count(), "closing pools");
    mgr.close_all().await;
    // Every sandbox of this server is gone (each removed its own directory): the
    // root goes too unless another server of this process still has sandboxes there.
    let _ = std::fs::remove_dir(deskgym_worker::sandboxes_root());
    deskgym_worker::remove_cgroups();
    tracing::info!("stopped");
    result.map_err(Into::into)
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
