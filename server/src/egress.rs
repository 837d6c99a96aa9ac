//! The egress proxy of a `net.egress` unlock: an HTTP proxy (CONNECT and absolute-form
//! requests) that the server serves on a port of the env's own loopback, reaching the
//! grant's hosts and nothing else.
//!
//! Why a proxy and not a filter: a sandbox's network namespace holds only `lo` and no
//! route, and an unprivileged server cannot add firewall rules or routes to it (nftables
//! needs CAP_NET_ADMIN over the namespace; pasta forwards everything). So the port is
//! the env's only way out: the agent opens a listener inside the namespace and hands it
//! over (`AgentPeer::listen`), and every connection to it is decided here, by host name.
//! What follows from it, by construction:
//! - an IP literal, a name the env resolves itself, IPv6: no route, refused at once by
//!   the kernel inside the namespace; through the proxy, an address is never in scope;
//! - another env's proxy listens on that env's loopback, which no other env can reach;
//! - a scoped name that resolves to a loopback, private or link-local address (the
//!   server's own ports, the cloud's metadata service) is refused, unless the operator
//!   pinned that name to an address (`--egress-hosts`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::unlock::{Host, in_scope};

/// Longest request head the proxy reads before deciding.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long resolving and connecting to a scoped host may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections one env's proxy carries at once; more are answered 503 at once.
const MAX_CONNECTIONS: usize = 64;

/// Names the operator pins to addresses (`--egress-hosts`): used instead of DNS, and
/// allowed to be private addresses (a mirror on the operator's network, a test host).
#[derive(Debug, Default, Clone)]
pub(crate) struct Pinned(HashMap<String, Vec<IpAddr>>);

impl Pinned {
    /// The pinned names, from (name, address) pairs.
    pub(crate) fn new(pairs: &[(String, IpAddr)]) -> Self {
        let mut m: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for (name, ip) in pairs {
            m.entry(name.to_ascii_lowercase()).or_default().push(*ip);
        }
        Self(m)
    }
}

/// One connection's outcome, for the env's recording.
#[derive(Debug)]
pub(crate) struct Decision {
    /// The host asked for (as the client wrote it, quoted).
    pub(crate) host: String,
    /// The port asked for.
    pub(crate) port: u16,
    /// Refused: why (`None`: connected).
    pub(crate) refused: Option<String>,
}

/// Serves the proxy on `listener` until the returned task is aborted (the grant ends);
/// each connection's decision goes to `log`.
pub(crate) fn serve(
    listener: std::net::TcpListener,
    scope: Vec<Host>,
    pinned: Arc<Pinned>,
    log: impl Fn(Decision) + Send + Sync + 'static,
) -> std::io::Result<tokio::task::AbortHandle> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let scope: Arc<[Host]> = scope.into();
    let log = Arc::new(log);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let task = tokio::spawn(async move {
        // Owned by this task: aborting it (the grant's end) drops the set, which aborts
        // every connection still open.
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((mut client, _)) = accepted else { continue };
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        conns.spawn(async move {
                            let _ = refuse(&mut client, "503 Service Unavailable", "too many connections through this env's egress proxy at once").await;
                        });
                        continue;
                    };
                    let (scope, pinned, log) = (scope.clone(), pinned.clone(), log.clone());
                    conns.spawn(async move {
                        let _slot = slot;
                        if let Some(d) = handle(client, &scope, &pinned).await {
                            log(d);
                        }
                    });
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    });
    Ok(task.abort_handle())
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
struct Ask {
    /// CONNECT (a tunnel) or an absolute-form request forwarded as origin-form.
    tunnel: bool,
    host: String,
    port: u16,
    /// Absolute form: the head rewritten to origin form.
    head: Vec<u8>,
}

/// Reads the head, decides, connects and relays. `None` when the client sent nothing
/// to decide on.
async fn handle(mut client: TcpStream, scope: &[Host], pinned: &Pinned) -> Option<Decision> {
    let mut buf = Vec::with_capacity(1024);
    let end = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client, &mut buf)).await {
        Ok(Ok(Some(end))) => end,
        _ => {
            let _ = refuse(&mut client, "400 Bad Request", "no complete request head").await;
            return None;
        }
    };
    let ask = match parse_head(&buf[..end]) {
        Ok(a) => a,
        Err(why) => {
            let _ = refuse(&mut client, "400 Bad Request", &why).await;
            return None;
        }
    };
    let mut decision = Decision {
        host: crate::invalid::quote(&ask.host),
        port: ask.port,
        refused: None,
    };
    let upstream = match connect(&ask, scope, pinned).await {
        Ok(s) => s,
        Err((status, why)) => {
            let _ = refuse(&mut client, status, &why).await;
            decision.refused = Some(why);
            return Some(decision);
        }
    };
    let mut upstream = upstream;
    let sent = if ask.tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
    } else {
        upstream.write_all(&ask.head).await
    };
    // Bytes the client sent behind its head (a body, a TLS hello) go on unchanged.
    if sent.is_ok() && upstream.write_all(&buf[end..]).await.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
    Some(decision)
}

/// Reads until the end of the head (`\r\n\r\n`); its length, or `None` at end of stream
/// or past [`MAX_HEAD`].
async fn read_head(client: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some(i + 4));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Parses a proxy request head: `CONNECT host:port HTTP/1.1` or
/// `GET http://host[:port]/path HTTP/1.1` (forwarded as `GET /path HTTP/1.1`).
fn parse_head(head: &[u8]) -> Result<Ask, String> {
    let text = std::str::from_utf8(head).map_err(|_| "a request head that is not UTF-8")?;
    let (first, rest) = text.split_once("\r\n").ok_or("no request line")?;
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("a request line other than METHOD TARGET VERSION".into());
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = host_port(target, None)?;
        return Ok(Ask {
            tunnel: true,
            host,
            port,
            head: Vec::new(),
        });
    }
    let Some(after) = target.strip_prefix("http://") else {
        return Err(format!(
            "{} is not a proxy request: use CONNECT host:port, or an absolute http:// URL",
            crate::invalid::quote(target)
        ));
    };
    let (authority, path) = after.find('/').map_or((after, "/"), |i| after.split_at(i));
    let (host, port) = host_port(authority, Some(80))?;
    let head = format!("{method} {path} {version}\r\n{rest}").into_bytes();
    Ok(Ask {
        tunnel: false,
        host,
        port,
        head,
    })
}

/// `host:port` (or `host` with `default`), IPv6 literals in brackets kept as written.
fn host_port(authority: &str, default: Option<u16>) -> Result<(String, u16), String> {
    let bad = || format!("{} is not host:port", crate::invalid::quote(authority));
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (inner, tail) = v6.split_once(']').ok_or_else(bad)?;
        (format!("[{inner}]"), tail.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    let port = match (port, default) {
        (Some(p), _) => p.parse().map_err(|_| bad())?,
        (None, Some(d)) => d,
        (None, None) => return Err(bad()),
    };
    if host.is_empty() || host.contains('@') {
        return Err(bad());
    }
    Ok((host, port))
}

/// Decides and connects: the host must be a name in scope, resolving (pinned, or else
/// through DNS to public addresses only) to an address that accepts in time.
async fn connect(
    ask: &Ask,
    scope: &[Host],
    pinned: &Pinned,
) -> Result<TcpStream, (&'static str, String)> {
    let forbidden = |why: String| ("403 Forbidden", why);
    let host = ask.host.trim_start_matches('[').trim_end_matches(']');
    if host.parse::<IpAddr>().is_ok() {
        return Err(forbidden(format!(
            "egress to the address {host} refused: this env may reach named hosts only ({})",
            scope_text(scope)
        )));
    }
    if !in_scope(scope, host) {
        return Err(forbidden(format!(
            "egress to {} refused: not in this env's net.egress scope ({}); Unlock it \
             with that host in the scope",
            crate::invalid::quote(host),
            scope_text(scope)
        )));
    }
    let addrs: Vec<SocketAddr> = match pinned.0.get(&host.to_ascii_lowercase()) {
        Some(ips) => ips
            .iter()
            .map(|ip| SocketAddr::new(*ip, ask.port))
            .collect(),
        None => {
            let found =
                tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((host, ask.port)))
                    .await
                    .map_err(|_| ("504 Gateway Timeout", format!("resolving {host} timed out")))?
                    .map_err(|e| ("502 Bad Gateway", format!("cannot resolve {host}: {e}")))?;
            let all: Vec<SocketAddr> = found.collect();
            let public: Vec<SocketAddr> =
                all.iter().copied().filter(|a| is_public(a.ip())).collect();
            if public.is_empty() && !all.is_empty() {
                return Err(forbidden(format!(
                    "egress to {host} refused: it resolves to non-public addresses only \
                     (loopback, private, link-local); an operator pins such hosts with \
                     --egress-hosts"
                )));
            }
            public
        }
    };
    let mut last = format!("{host} has no address");
    for a in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = format!("cannot connect to {host} ({a}): {e}"),
            Err(_) => last = format!("connecting to {host} ({a}) timed out"),
        }
    }
    Err(("502 Bad Gateway", last))
}

/// The scope as a list, for messages.
fn scope_text(scope: &[Host]) -> String {
    scope
        .iter()
        .map(Host::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// True for addresses on the public internet (what a name from DNS may lead to).
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || o[0] == 0
                // Shared address space (carrier NAT, RFC 6598) and 240/4.
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // Unique local fc00::/7, link-local fe80::/10.
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80)
        }
    }
}

/// Answers a refusal and closes: at once, so a client never hangs on a host it may not
/// reach.
async fn refuse(client: &mut TcpStream, status: &str, why: &str) -> std::io::Result<()> {
    let body = format!("deskgym egress: {why}\n");
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_parse_to_what_they_ask() {
        let c = parse_head(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n").unwrap();
        assert_eq!((c.tunnel, c.host.as_str(), c.port), (true, "pypi.org", 443));
        let g = parse_head(b"GET http://a.test:8080/x?y HTTP/1.1\r\nHost: a.test\r\n\r\n").unwrap();
        assert_eq!((g.tunnel, g.host.as_str(), g.port), (false, "a.test", 8080));
        assert_eq!(g.head, b"GET /x?y HTTP/1.1\r\nHost: a.test\r\n\r\n");
        let v6 = parse_head(b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(v6.host, "[::1]");
        for bad in [
            &b"GET /x HTTP/1.1\r\n\r\n"[..],
            b"CONNECT pypi.org HTTP/1.1\r\n\r\n",
            b"CONNECT u@pypi.org:1 HTTP/1.1\r\n\r\n",
            b"GET https://a.test/ HTTP/1.1\r\n\r\n",
            b"nonsense\r\n\r\n",
        ] {
            assert!(
                parse_head(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn only_public_addresses_count_as_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["151.101.0.223", "2a04:4e42::223"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }
}
