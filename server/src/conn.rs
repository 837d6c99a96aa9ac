//! Connection budgets: a cap on open connections (in all and per peer address) and an
//! idle timeout, so a tenant that opens connections and sends nothing cannot take the
//! server's descriptors from everyone else.
//!
//! Admission never refuses a newcomer while an idle connection can make room: at a cap
//! the connection idle the longest is closed instead, preferring those that never sent
//! a byte (a half-open flood) over clients that are between calls. A client that is
//! alive answers the server's HTTP/2 keepalive pings, so only a silent peer goes idle.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::time::{Instant, Sleep};

/// What every HTTP/2 client sends first ("PRI * HTTP/2.0..."): a unix connection that
/// opens with another byte speaks a side protocol and goes to the caller's channel.
const HTTP2_FIRST_BYTE: u8 = b'P';
/// How long a unix peer may take to send its first byte.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the server takes gRPC connections.
#[derive(Debug)]
pub enum Listener {
    /// A TCP address.
    Tcp(TcpListener),
    /// A unix socket: clients on this host, who may also collect frame rings on it.
    Unix(UnixListener),
}

impl From<TcpListener> for Listener {
    fn from(l: TcpListener) -> Self {
        Self::Tcp(l)
    }
}

impl From<UnixListener> for Listener {
    fn from(l: UnixListener) -> Self {
        Self::Unix(l)
    }
}

/// Where a connection comes from, for the per-peer cap: an IP address, or this host's
/// unix socket (one peer for all).
type Peer = Option<IpAddr>;

/// A connection of either kind.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

macro_rules! either {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Tcp($s) => {
                let $s = Pin::new($s);
                $e
            }
            Stream::Unix($s) => {
                let $s = Pin::new($s);
                $e
            }
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        either!(self, s => s.poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        either!(self, s => s.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        either!(self, s => s.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        either!(self, s => s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
        }
    }
}

/// The budgets.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// Most open connections in all.
    pub max_total: usize,
    /// Most open connections from one IP address.
    pub max_per_peer: usize,
    /// A connection that sends nothing for this long is closed.
    pub idle: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_total: 4096,
            max_per_peer: 1024,
            idle: Duration::from_secs(120),
        }
    }
}

/// What the registry knows of one open connection.
struct Shared {
    /// Milliseconds since the registry's epoch at its last byte read; 0: none yet.
    last_read_ms: AtomicU64,
    killed: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Shared {
    fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        if let Some(w) = self.waker.lock().unwrap_or_else(|p| p.into_inner()).take() {
            w.wake();
        }
    }
}

struct Entry {
    peer: Peer,
    opened_ms: u64,
    shared: Arc<Shared>,
}

/// The open connections.
struct Registry {
    limits: ConnLimits,
    epoch: Instant,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Entry>>,
}

impl Registry {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Makes room for one more connection from `peer`: false when none can be made.
    fn admit(&self, open: &mut HashMap<u64, Entry>, peer: Peer) -> bool {
        let from_peer = open.values().filter(|e| e.peer == peer).count();
        let (full, same_peer) = if from_peer >= self.limits.max_per_peer {
            (true, true)
        } else {
            (open.len() >= self.limits.max_total, false)
        };
        if !full {
            return true;
        }
        // The longest idle: never-read first (by age), then by last read.
        let victim = open
            .iter()
            .filter(|(_, e)| !same_peer || e.peer == peer)
            .filter(|(_, e)| !e.shared.killed.load(Ordering::Acquire))
            .min_by_key(|(_, e)| {
                let last = e.shared.last_read_ms.load(Ordering::Acquire);
                (last != 0, if last == 0 { e.opened_ms } else { last })
            })
            .map(|(id, _)| *id);
        match victim.and_then(|id| open.remove(&id)) {
            Some(e) => {
                e.shared.kill();
                true
            }
            None => false,
        }
    }
}

/// A connection under the budgets: reads fail once it is evicted or idle too long.
pub(crate) struct Guarded {
    inner: Stream,
    id: u64,
    shared: Arc<Shared>,
    registry: Arc<Registry>,
    opened_ms: u64,
    idle: Pin<Box<Sleep>>,
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.registry
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

fn closed(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, why)
}

impl Guarded {
    /// Errors once evicted; else arms the waker so an eviction ends a pending read.
    fn check(&self, cx: &Context<'_>) -> io::Result<()> {
        if self.shared.killed.load(Ordering::Acquire) {
            return Err(closed("closed to make room for another connection"));
        }
        let mut w = self.shared.waker.lock().unwrap_or_else(|p| p.into_inner());
        if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *w = Some(cx.waker().clone());
        }
        Ok(())
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check(cx)?;
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let now = self.registry.now_ms();
            self.shared.last_read_ms.store(now, Ordering::Release);
        }
        if r.is_pending() {
            // The idle timer is checked lazily: it fires, then moves to the last read.
            let idle = self.registry.limits.idle;
            while self.idle.as_mut().poll(cx).is_ready() {
                let last = self.shared.last_read_ms.load(Ordering::Acquire);
                let due =
                    self.registry.epoch + Duration::from_millis(last.max(self.opened_ms)) + idle;
                if due <= Instant::now() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the connection was idle too long",
                    )));
                }
                self.idle.as_mut().reset(due);
            }
        }
        r
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check(cx)?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Guarded {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        match &self.inner {
            Stream::Tcp(s) => s.connect_info(),
            // No addresses: a unix peer is this host.
            Stream::Unix(_) => tonic::transport::server::TcpConnectInfo {
                local_addr: None,
                remote_addr: None,
            },
        }
    }
}

/// Accepts connections on `listener` under `limits`, as a stream for tonic's
/// `serve_with_incoming`. Accept errors (out of descriptors) pause briefly instead of
/// spinning. On a unix socket a connection that does not open as HTTP/2 does (a
/// client collecting its frame ring) is handed to `side` instead.
pub(crate) fn incoming(
    listener: Listener,
    limits: ConnLimits,
    side: tokio::sync::mpsc::Sender<UnixStream>,
) -> impl tokio_stream::Stream<Item = io::Result<Guarded>> {
    let registry = Arc::new(Registry {
        limits,
        epoch: Instant::now(),
        next: AtomicU64::new(0),
        open: Mutex::new(HashMap::new()),
    });
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            // The listener closes when the server stops serving (the stream is dropped),
            // not at the next connection after that.
            let accepted = tokio::select! {
                a = accept(&listener) => a,
                () = tx.closed() => return,
            };
            let (stream, peer) = match accepted {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed; pausing");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Stream::Unix(unix) = stream else {
                let Some(g) = registry.clone().guard(stream, peer) else {
                    continue;
                };
                if tx.send(Ok(g)).await.is_err() {
                    return;
                }
                continue;
            };
            // Which protocol a unix peer speaks is known at its first byte: read it
            // off the accept loop, so a silent peer holds up no one.
            let (registry, tx, side) = (registry.clone(), tx.clone(), side.clone());
            tokio::spawn(async move {
                // A gRPC client sends its preface at once; a side peer its ticket.
                let wait = limits.idle.min(FIRST_BYTE_TIMEOUT);
                let first = tokio::time::timeout(wait, peek_byte(&unix)).await;
                match first {
                    Ok(Ok(Some(b))) if b != HTTP2_FIRST_BYTE => {
                        let _ = side.send(unix).await;
                    }
                    Ok(Ok(Some(_))) => {
                        if let Some(g) = registry.guard(Stream::Unix(unix), peer) {
                            let _ = tx.send(Ok(g)).await;
                        }
                    }
                    _ => {}
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

async fn accept(listener: &Listener) -> io::Result<(Stream, Peer)> {
    match listener {
        Listener::Tcp(l) => {
            let (s, addr) = l.accept().await?;
            // Step replies are small (PNG, not_modified) or large (raw frames): without
            // NODELAY a small reply waits for the client's delayed ACK (tens of ms).
            let _ = s.set_nodelay(true);
            Ok((Stream::Tcp(s), Some(addr.ip())))
        }
        Listener::Unix(l) => Ok((Stream::Unix(l.accept().await?.0), None)),
    }
}

/// The first byte a peer sent, left unread; `None` when it closed first.
async fn peek_byte(s: &UnixStream) -> io::Result<Option<u8>> {
    use std::os::fd::AsRawFd as _;
    loop {
        s.readable().await?;
        let mut b = [0u8; 1];
        let r = s.try_io(tokio::io::Interest::READABLE, || {
            // SAFETY: reads at most one byte into `b`.
            let n = unsafe { libc::recv(s.as_raw_fd(), b.as_mut_ptr().cast(), 1, libc::MSG_PEEK) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n)
            }
        });
        match r {
            Ok(0) => return Ok(None),
            Ok(_) => return Ok(Some(b[0])),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

impl Registry {
    /// Admits `stream` under the budgets (evicting the longest idle at a cap), or
    /// `None` when no room can be made.
    fn guard(self: Arc<Self>, stream: Stream, peer: Peer) -> Option<Guarded> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if !self.admit(&mut open, peer) {
            tracing::debug!(?peer, "connection refused: at the cap");
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(Shared {
            last_read_ms: AtomicU64::new(0),
            killed: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        let opened_ms = self.now_ms();
        open.insert(
            id,
            Entry {
                peer,
                opened_ms,
                shared: shared.clone(),
            },
        );
        drop(open);
        let idle = Box::pin(tokio::time::sleep(self.limits.idle));
        Some(Guarded {
            inner: stream,
            id,
            shared,
            registry: self,
            opened_ms,
            idle,
        })
    }
}
