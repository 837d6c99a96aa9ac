//! The Prometheus endpoint (`--metrics-listen`): a plain HTTP/1.1 `GET /metrics` on its
//! own listener, so a scrape never touches the gRPC server; the gauges are read from the
//! pool manager when scraped, the counters from [`crate::metrics`].

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::metrics::{Gauges, METRICS, render};
use crate::pool::PoolManager;

/// How long a scrape may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest request head a scrape may send.
const MAX_REQUEST: usize = 8 * 1024;

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub(crate) async fn serve(listener: TcpListener, mgr: Arc<PoolManager>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            // Out of descriptors, say: wait rather than spin.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mgr = mgr.clone();
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
            let (status, body) = if head.starts_with(b"GET /metrics ") {
                match gauges(&mgr).await {
                    Some(g) => ("200 OK", render(&METRICS, &g)),
                    None => ("500 Internal Server Error", "gauges unavailable\n".into()),
                }
            } else {
                (
                    "404 Not Found",
                    "only GET /metrics is served here\n".to_string(),
                )
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
            encoder: deskgym_datasets::video::encoder().ok().map(|c| c.element),
        }
    })
    .await
    .ok()
}
