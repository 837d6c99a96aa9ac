//! The replay view without a server: `deskgym-datasets view BUNDLE` serves one bundle's
//! replay page on loopback, with no X stack and no gRPC, for a bundle copied to a
//! laptop. The page and its script are the console's own (`deskgym-server` embeds
//! these same files), so both show a run the same way; this side answers the four
//! reads the page makes, from [`crate::replay::Bundle`].
//!
//! Plain blocking HTTP/1.0 on std (a thread per connection, GET only): a viewer for
//! one person needs nothing more, and the crate stays free of an async runtime. Like
//! the console without a token it answers only requests addressed to a loopback host,
//! so a web page elsewhere cannot read the bundle through DNS rebinding.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::replay::Bundle;

/// The replay page (shared with the console).
pub const REPLAY_HTML: &str = include_str!("replay.html");
/// The replay page's script (shared with the console).
pub const REPLAY_JS: &str = include_str!("replay.js");
/// The stylesheet of the replay page and the console's pages.
pub const CONSOLE_CSS: &str = include_str!("console.css");

/// The most a request head may be.
const MAX_HEAD: u64 = 16 * 1024;

/// Serves `bundle` (run name `run`) on `listener` until the process ends.
pub fn serve(listener: TcpListener, bundle: Bundle, run: String) {
    let shared = Arc::new((bundle, run));
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("deskgym-view".into())
            .spawn(move || {
                let _ = answer(stream, &shared.0, &shared.1);
            });
        if spawned.is_err() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A reply: status, content type, body, cacheable forever (frames) or not.
struct Reply(&'static str, &'static str, Vec<u8>, bool);

fn json_reply(status: &'static str, v: serde_json::Value) -> Reply {
    Reply(
        status,
        "application/json",
        v.to_string().into_bytes(),
        false,
    )
}

fn error(status: &'static str, why: impl std::fmt::Display) -> Reply {
    json_reply(status, json!({ "error": why.to_string() }))
}

fn answer(stream: TcpStream, bundle: &Bundle, run: &str) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    // A reader that stops reading holds its thread no longer than this.
    stream.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(std::io::Read::take(stream.try_clone()?, MAX_HEAD));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut host = String::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.trim().eq_ignore_ascii_case("host")
        {
            host = v.trim().to_string();
        }
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let reply = if method != "GET" {
        error("405 Method Not Allowed", "this viewer only reads")
    } else if !loopback_host(&host) {
        error(
            "403 Forbidden",
            "this viewer answers only requests addressed to a loopback host",
        )
    } else {
        route(target, bundle, run)
    };
    let Reply(status, kind, body, immutable) = reply;
    let cache = if immutable {
        "private, max-age=86400, immutable"
    } else {
        "no-cache"
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.0 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\ncache-control: {cache}\r\n\
         x-frame-options: DENY\r\ncontent-security-policy: default-src 'self'; img-src 'self' blob: data:\r\n\
         connection: close\r\n\r\n",
        body.len()
    )?;
    out.write_all(&body)
}

fn route(target: &str, bundle: &Bundle, run: &str) -> Reply {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let page = |body: &str, kind| Reply("200 OK", kind, body.as_bytes().to_vec(), false);
    match path {
        "/" | "/replay" => page(REPLAY_HTML, "text/html; charset=utf-8"),
        "/assets/replay.js" => page(REPLAY_JS, "text/javascript"),
        "/assets/console.css" => page(CONSOLE_CSS, "text/css"),
        "/api/runs" => json_reply(
            "200 OK",
            json!({"runs": [{"run": run, "status": crate::read_manifest(bundle.dir()).map(|m| m.status).unwrap_or_default()}]}),
        ),
        _ => {
            let Some(rest) = path.strip_prefix("/api/runs/") else {
                return error("404 Not Found", format!("no page {path}"));
            };
            let (name, what) = rest.split_once('/').unwrap_or((rest, ""));
            if decode(name) != run {
                return error("404 Not Found", format!("this viewer shows run {run} only"));
            }
            api(what, query, bundle)
        }
    }
}

fn api(what: &str, query: &str, bundle: &Bundle) -> Reply {
    let read_error = |e: crate::replay::ReplayError| error("409 Conflict", e);
    if what == "episodes" {
        return match bundle.episodes() {
            Ok(eps) => json_reply("200 OK", json!({ "episodes": eps })),
            Err(e) => read_error(e),
        };
    }
    if what == "steps" {
        let episode = query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "episode")
            .map(|(_, v)| decode(v));
        let Some(episode) = episode else {
            return error("400 Bad Request", "which episode? (?episode=ID)");
        };
        return match bundle.steps(&episode) {
            Ok(steps) => json_reply("200 OK", json!({ "steps": steps })),
            Err(e) => read_error(e),
        };
    }
    if let Some(hash) = what.strip_prefix("frames/") {
        if hash.len() != 32 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return error("400 Bad Request", format!("{hash:?} is not a frame hash"));
        }
        return match bundle.frame_png(hash) {
            Ok(Some(png)) => Reply("200 OK", "image/png", png, true),
            Ok(None) => error("404 Not Found", format!("no frame {hash} in this run")),
            Err(e) => read_error(e),
        };
    }
    error("404 Not Found", format!("no such read: {what}"))
}

/// True when `host` (a Host header) names a loopback host, any port.
pub fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Percent-decoding of a path segment or query value (`+` is a space in a query).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 3;
                        continue;
                    }
                    _ => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_browsers_encode() {
        assert_eq!(decode("e1%2F3"), "e1/3");
        assert_eq!(decode("a+b%20c"), "a b c");
        assert_eq!(decode("bad%zz%"), "bad%zz%");
        assert_eq!(decode("%e2%9c%93"), "✓");
    }

    #[test]
    fn only_loopback_hosts() {
        for ok in ["127.0.0.1:80", "localhost:9", "[::1]:8080", "127.1.2.3"] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in ["evil.example:80", "10.0.0.1", "", "localhost.evil"] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }
}
