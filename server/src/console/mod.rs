//! The web console (`--console-listen`): a person watches every desktop of their pools
//! live, reads what each agent does, and takes one over.
//!
//! Plain HTTP/1 on axum (tonic's own neighbour on tokio): pages and a script embedded
//! in the binary, a JSON API, live frames as one streamed response per viewer (length-
//! prefixed JSON + JPEG, from the same producers as the `Screencast` RPC, so the
//! console's viewers count against `--max-screencasts` too), and each env's feed of
//! steps as server-sent events. No WebSocket: nothing here needs the browser to send
//! on a live connection; a person's input is one POST per action.
//!
//! Who is calling: with tokens, the bearer header or the `deskgym_console` cookie (set
//! by the login page), the same principals as gRPC; each sees only its own pools and
//! another's env is NOT FOUND. Without tokens the console, like `--listen`, is for
//! loopback only: requests must name a loopback host (a DNS-rebinding page cannot),
//! and every POST must carry `x-deskgym-console: 1`, a header no cross-site form or
//! simple request can send, so another site open in the same browser cannot act.

mod act;
mod api;
mod demos;
mod replay;

use std::sync::Arc;

use axum::Router;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;

use crate::auth::{Auth, Principal};
use crate::calls::Calls;
use crate::invalid::quote;
use crate::pool::PoolManager;
use crate::screen_streams::Screencasts;

/// The cookie the login page sets (HttpOnly, SameSite=Strict).
const COOKIE: &str = "deskgym_console";
/// The header every POST must carry (see the module docs).
const CSRF_HEADER: &str = "x-deskgym-console";

/// What the console's handlers share.
#[derive(Clone)]
pub(crate) struct Console {
    mgr: Arc<PoolManager>,
    calls: Calls,
    auth: Auth,
    screencasts: Screencasts,
    /// Bundles opened for replay, by directory (their frame indexes are kept).
    bundles: replay::Bundles,
    /// Demonstrations recorded from the console.
    demos: demos::Demos,
}

impl Console {
    /// A console over `mgr`, checking callers with `auth`, streaming through
    /// `screencasts` (shared with the RPC).
    pub(crate) fn new(mgr: Arc<PoolManager>, auth: Auth, screencasts: Screencasts) -> Self {
        Self {
            calls: Calls::new(mgr.clone()),
            mgr,
            auth,
            screencasts,
            bundles: replay::Bundles::default(),
            demos: demos::Demos::default(),
        }
    }

    /// The caller of a request, or why it is refused.
    fn who(&self, headers: &HeaderMap) -> Result<Principal, Refusal> {
        if !self.auth.required() && !loopback_host(headers) {
            return Err(Refusal(
                StatusCode::FORBIDDEN,
                "this console has no token and answers only requests addressed to a loopback \
                 host (127.0.0.1, [::1], localhost); start the server with --token-file to \
                 serve it beyond this machine"
                    .into(),
            ));
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let token = bearer.or_else(|| cookie(headers, COOKIE));
        self.auth
            .principal_for(token)
            .map_err(|e| Refusal(StatusCode::UNAUTHORIZED, format!("{e}; log in at /login")))
    }

    /// [`Self::who`] for a request that changes something: also the CSRF header.
    fn who_acting(&self, headers: &HeaderMap) -> Result<Principal, Refusal> {
        if headers.get(CSRF_HEADER).map(HeaderValue::as_bytes) != Some(b"1") {
            return Err(Refusal(
                StatusCode::FORBIDDEN,
                format!("a console action must carry the header `{CSRF_HEADER}: 1`"),
            ));
        }
        self.who(headers)
    }
}

/// The caller and one of its envs, named by the path's `{id}`: what every env route
/// starts from. `ACT`: a request that changes something (the CSRF header is required).
pub(crate) struct EnvOf<const ACT: bool> {
    who: Principal,
    env: Arc<crate::env::Env>,
}

impl<const ACT: bool> FromRequestParts<Console> for EnvOf<ACT> {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, c: &Console) -> Result<Self, Refusal> {
        let who = if ACT {
            c.who_acting(&parts.headers)?
        } else {
            c.who(&parts.headers)?
        };
        let Path(id) = Path::<String>::from_request_parts(parts, c)
            .await
            .map_err(|e| Refusal(StatusCode::BAD_REQUEST, quote(&e.body_text())))?;
        let env = c.mgr.env_of(&id, &who)?;
        Ok(Self { who, env })
    }
}

/// Serves the console on `listener` until the server closes.
pub(crate) async fn serve(
    listener: TcpListener,
    console: Console,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    let app = Router::new()
        .route("/", get(|| page(FLEET_HTML)))
        .route("/env/{id}", get(|| page(ENV_HTML)))
        .route("/login", get(|| page(LOGIN_HTML)))
        .route(
            "/assets/console.js",
            get(|| asset(CONSOLE_JS, "text/javascript")),
        )
        .route(
            "/assets/console.css",
            get(|| asset(CONSOLE_CSS, "text/css")),
        )
        .route("/api/fleet", get(api::fleet))
        .route("/api/envs/{id}", get(api::env))
        .route("/api/envs/{id}/thumb.jpg", get(api::thumb))
        .route("/api/envs/{id}/live", get(api::live))
        .route("/api/envs/{id}/feed", get(api::feed))
        .route("/api/envs/{id}/tree", get(api::tree))
        .route("/api/envs/{id}/takeover", post(act::take_over))
        .route("/api/envs/{id}/release", post(act::release))
        .route("/api/envs/{id}/act", post(act::act))
        .route("/api/login", post(act::login))
        .route("/api/tasks", get(demos::tasks))
        .route("/api/demos", post(demos::start))
        .route("/api/demos/{pool}/finish", post(demos::finish))
        .route("/api/envs/{id}/reset", post(demos::next_episode))
        .route("/replay", get(|| page(REPLAY_HTML)))
        .route(
            "/assets/replay.js",
            get(|| asset(REPLAY_JS, "text/javascript")),
        )
        .route("/api/runs", get(replay::runs))
        .route("/api/runs/{run}/episodes", get(replay::episodes))
        .route("/api/runs/{run}/steps", get(replay::steps))
        .route("/api/runs/{run}/frames/{hash}", get(replay::frame))
        .with_state(console);
    let stop = async move {
        let _ = closing.wait_for(|c| *c).await;
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
    {
        tracing::warn!(error = %e, "the console stopped");
    }
}

/// An HTTP refusal with a message a person can act on (JSON `{"error": ...}`).
#[derive(Debug)]
pub(crate) struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, axum::Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl From<tonic::Status> for Refusal {
    /// The gRPC codes as HTTP statuses (the message is the server's own, unchanged).
    fn from(s: tonic::Status) -> Self {
        use tonic::Code;
        let code = match s.code() {
            Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists | Code::Aborted | Code::FailedPrecondition => StatusCode::CONFLICT,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self(code, s.message().to_string())
    }
}

impl From<crate::pool::PoolError> for Refusal {
    fn from(e: crate::pool::PoolError) -> Self {
        tonic::Status::from(e).into()
    }
}

/// True when the request names a loopback host (any port).
fn loopback_host(headers: &HeaderMap) -> bool {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(deskgym_datasets::loopback_host)
}

/// A cookie's value from the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

const FLEET_HTML: &str = include_str!("assets/fleet.html");
const ENV_HTML: &str = include_str!("assets/env.html");
const LOGIN_HTML: &str = include_str!("assets/login.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
// The replay page, its script and the stylesheet are the offline viewer's too.
use deskgym_datasets::{CONSOLE_CSS, REPLAY_HTML, REPLAY_JS};

/// A page: the same headers for every page, so none is framed by another site or
/// runs a script from elsewhere.
async fn page(html: &'static str) -> Response {
    asset(html, "text/html; charset=utf-8").await
}

async fn asset(body: &'static str, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::X_FRAME_OPTIONS, "DENY"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' blob: data:; frame-ancestors 'none'",
            ),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn only_loopback_hosts_pass_without_a_token() {
        for ok in [
            "127.0.0.1:80",
            "localhost:9",
            "[::1]:8080",
            "LOCALHOST",
            "127.9.9.9",
        ] {
            assert!(loopback_host(&headers(&[("host", ok)])), "{ok}");
        }
        for bad in [
            "evil.example:80",
            "10.0.0.1:80",
            "[::2]:1",
            "localhost.evil.example",
            "",
        ] {
            assert!(!loopback_host(&headers(&[("host", bad)])), "{bad}");
        }
        assert!(!loopback_host(&HeaderMap::new()));
    }

    #[test]
    fn cookies_are_found_by_name() {
        let h = headers(&[("cookie", "a=1; deskgym_console=tok; b=2")]);
        assert_eq!(cookie(&h, COOKIE), Some("tok"));
        assert_eq!(cookie(&h, "c"), None);
    }
}
