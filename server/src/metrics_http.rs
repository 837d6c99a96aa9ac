//! The Prometheus endpoint (`--metrics-listen`): a plain HTTP/1.1 `GET /metrics` on its
//! own listener, so a scrape never touches the gRPC server; the gauges are read from the
//! pool manager when scraped, the counters from [`crate::metrics`].
//!
//! The figures are the whole server's (every principal's envs and cache): on an
//! address beyond loopback a scrape needs `authorization: Bearer <token>`, the token
//! file's `@metrics` token when it has one (what a Prometheus scrape config holds),
//! else any principal's. Loopback is not reachable from sandboxes (each has its own
//! network namespace, and pasta maps no host loopback), so a loopback endpoint serves
//! the host's own users only, as before.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::auth::Auth;
use crate::metrics::{Gauges, METRICS, render};
use crate::pool::PoolManager;

/// How long a scrape may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest request head a scrape may send.
const MAX_REQUEST: usize = 8 * 1024;

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub(crate) async fn serve(listener: TcpListener, mgr: Arc<PoolManager>, auth: Auth) {
    let open = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
    let auth = Arc::new(auth);
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            // Out of descriptors, say: wait rather than spin.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let (mgr, auth) = (mgr.clone(), auth.clone());
        tokio::spawn(async move {
            let mut head = Vec::with_capacity(512);
            let mut buf = [0u8; 1024];
            let read = tokio::time::timeout(READ_TIMEOUT, async {
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return false,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                true
            })
            .await;
            if !matches!(read, Ok(true)) {
                return;
            }
            let (status, body) = if !head.starts_with(b"GET /metrics ") {
                (
                    "404 Not Found",
                    "only GET /metrics is served here\n".to_string(),
                )
            } else if !open && !auth.may_scrape(bearer(&head)) {
                (
                    "401 Unauthorized",
                    "this endpoint needs `authorization: Bearer <token>`\n".to_string(),
                )
            } else {
                match gauges(&mgr).await {
                    Some(g) => ("200 OK", render(&METRICS, &g)),
                    None => ("500 Internal Server Error", "gauges unavailable\n".into()),
                }
            };
            let reply = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
        });
    }
}

/// The bearer token of a request head (header names are case-insensitive).
fn bearer(head: &[u8]) -> Option<&str> {
    let head = std::str::from_utf8(head).ok()?;
    head.split("\r\n").skip(1).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("authorization")
            .then(|| value.trim().strip_prefix("Bearer "))
            .flatten()
    })
}

async fn gauges(mgr: &Arc<PoolManager>) -> Option<Gauges> {
    let m = mgr.clone();
    // The pool tables are behind short std locks and the encoder probe runs a pipeline
    // once: read them off the runtime.
    tokio::task::spawn_blocking(move || {
        let s = m.cache.stats();
        let (pools, recordings) = m.pool_counts();
        Gauges {
            envs: m.env_count(),
            max_envs: m.limits().max_envs,
            pools,
            recordings,
            cache_hits: s.hits,
            cache_misses: s.misses,
            cache_bytes: s.bytes,
            encoder: deskgym_datasets::h264_encoder().ok().map(|c| c.element),
        }
    })
    .await
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_token_is_read_from_any_case_of_the_header() {
        let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t0k\r\n\r\n";
        assert_eq!(bearer(head), Some("t0k"));
        let head = b"GET /metrics HTTP/1.1\r\nauthorization: Basic t0k\r\n\r\n";
        assert_eq!(bearer(head), None);
        assert_eq!(bearer(b"GET /metrics HTTP/1.1\r\n\r\n"), None);
    }
}
