//! A blocking Chrome DevTools Protocol client: JSON commands over one WebSocket to a
//! page target, carried through the sandbox agent's `Connect` (the browser listens on
//! the sandbox's own loopback, which only its env can reach).
//!
//! Blocking on purpose: the worker runs on the server's blocking step pool, one call
//! at a time per env, so a command is a write and a read on one stream, bounded by the
//! stream's timeouts. Events the page sends meanwhile are read and dropped.
//!
//! Input is posted ([`Cdp::post`]): a step's events go out back to back and their
//! answers are collected before the next call is sent. Chromium queues one page's input
//! in order, so nothing is reordered, but a call in another domain (`Runtime.evaluate`
//! reaches the renderer by another route) could overtake input still queued: hence
//! every call first waits for what was posted.

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

use crate::error::{DesktopError, Result};
use crate::sandbox::Sandbox;

/// The longest a command may take (a page's script that does not return, a browser
/// that stopped answering): the stream's read timeout.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// The most commands posted and not yet answered: a long text's keys would otherwise
/// fill the socket buffers both ways (answers unread while commands are written) and
/// stall both ends until the timeout.
const MAX_POSTED: usize = 64;
/// The most bytes of a `/json/list` answer read.
const MAX_LIST_BYTES: u64 = 1 << 20;

/// The browser failed: gone, or answering nonsense. The desktop is restarted.
fn lost(what: impl std::fmt::Display) -> DesktopError {
    DesktopError::App(format!("the browser stopped answering: {what}"))
}

/// A DevTools session on one page.
pub(crate) struct Cdp {
    ws: WebSocket<UnixStream>,
    next_id: u64,
    /// Posted commands not answered yet (id, method).
    posted: Vec<(u64, &'static str)>,
}

impl std::fmt::Debug for Cdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cdp")
            .field("next_id", &self.next_id)
            .field("posted", &self.posted)
            .finish()
    }
}

impl Cdp {
    /// Attaches to the first page target of the browser whose DevTools listen on
    /// `port` in `sandbox`, waiting up to `wait` for them to come up.
    pub(crate) fn attach(sandbox: &Sandbox, port: u16, wait: Duration) -> Result<Self> {
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(5);
        let path = loop {
            match page_path(sandbox, port) {
                Ok(Some(p)) => break p,
                Ok(None) | Err(DesktopError::Exec(_)) if Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Ok(None) => return Err(lost("no page target came up")),
                Err(DesktopError::Exec(m)) => {
                    return Err(DesktopError::App(format!(
                        "the browser's DevTools did not come up within {} s: {m}",
                        wait.as_secs()
                    )));
                }
                Err(e) => return Err(e),
            }
        };
        let stream = sandbox.connect(port, COMMAND_TIMEOUT)?;
        let url = format!("ws://127.0.0.1:{port}{path}");
        let (ws, _) = tungstenite::client::client(url.as_str(), stream).map_err(lost)?;
        Ok(Self {
            ws,
            next_id: 1,
            posted: Vec::new(),
        })
    }

    /// Sends `method` with `params` and waits for its answer (its `result`), after
    /// the answers to everything posted before it. A protocol error is the browser's
    /// answer, not a lost browser: `Exec` with it. A posted command's error is
    /// returned instead, and then this call is not sent (its step failed already).
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        self.collect()?;
        let id = self.send(method, params)?;
        loop {
            let (got, mut v) = self.answer()?;
            if got != id {
                // The answer to nothing of ours: dropped.
                continue;
            }
            if let Some(e) = v.get("error") {
                return Err(cdp_error(method, e));
            }
            return Ok(v.get_mut("result").map(Value::take).unwrap_or(Value::Null));
        }
    }

    /// Sends `method` with `params` without waiting: its answer is read before the
    /// next [`Cdp::call`] is sent, and an error in it is that call's.
    pub(crate) fn post(&mut self, method: &'static str, params: Value) -> Result<()> {
        if self.posted.len() >= MAX_POSTED {
            self.collect()?;
        }
        let id = self.send(method, params)?;
        self.posted.push((id, method));
        Ok(())
    }

    /// Reads the answers to every posted command (in whatever order they come); the
    /// first error among them is returned once all are in, so the stream stays in step.
    pub(crate) fn collect(&mut self) -> Result<()> {
        let mut failed = None;
        while !self.posted.is_empty() {
            let (got, v) = self.answer()?;
            let Some(i) = self.posted.iter().position(|(id, _)| *id == got) else {
                continue;
            };
            let (_, method) = self.posted.swap_remove(i);
            if let (None, Some(e)) = (&failed, v.get("error")) {
                failed = Some(cdp_error(method, e));
            }
        }
        failed.map_or(Ok(()), Err)
    }

    fn send(&mut self, method: &str, params: Value) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(Message::text(msg)).map_err(lost)?;
        Ok(id)
    }

    /// The next answer (an id and the whole message); events are dropped.
    fn answer(&mut self) -> Result<(u64, Value)> {
        loop {
            let text = match self.ws.read().map_err(lost)? {
                Message::Text(t) => t,
                Message::Close(_) => return Err(lost("the DevTools connection closed")),
                _ => continue,
            };
            let v: Value = serde_json::from_str(text.as_str()).map_err(lost)?;
            if let Some(id) = v.get("id").and_then(Value::as_u64) {
                return Ok((id, v));
            }
        }
    }

    /// Evaluates `expr` in the page (awaiting a promise) and returns its value. An
    /// exception in the page is `Exec` with its text.
    pub(crate) fn eval(&mut self, expr: &str) -> Result<Value> {
        let mut r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        )?;
        if let Some(ex) = r.get("exceptionDetails") {
            let text = ex
                .pointer("/exception/description")
                .and_then(Value::as_str)
                .or_else(|| ex.get("text").and_then(Value::as_str))
                .unwrap_or("an exception");
            return Err(DesktopError::Exec(format!("the page threw: {text}")));
        }
        Ok(r.pointer_mut("/result/value")
            .map(Value::take)
            .unwrap_or(Value::Null))
    }
}

/// A DevTools error answer: a page whose renderer is gone (killed, crashed) means the
/// desktop must restart (UNAVAILABLE), not that the call was wrong.
fn cdp_error(method: &str, e: &Value) -> DesktopError {
    let message = e.get("message").and_then(Value::as_str).unwrap_or("");
    let gone = [
        "Target crashed",
        "Target closed",
        "No target with given id",
        "Session closed",
    ];
    if gone.iter().any(|g| message.contains(g)) {
        lost(format!("the page's renderer is gone ({message})"))
    } else {
        DesktopError::Exec(format!("{method}: {e}"))
    }
}

/// The WebSocket path of the first page target, `None` before there is one.
fn page_path(sandbox: &Sandbox, port: u16) -> Result<Option<String>> {
    use std::io::{Read, Write};
    let mut s = sandbox.connect(port, COMMAND_TIMEOUT)?;
    // HTTP/1.1 (DevTools answers 1.0 with nothing); the body is Content-Length long
    // and the connection stays open, so read just that.
    s.write_all(b"GET /json/list HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut got = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        got.extend_from_slice(&buf[..n]);
        let Some(at) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            if got.len() as u64 > MAX_LIST_BYTES {
                return Ok(None);
            }
            continue;
        };
        let head = String::from_utf8_lossy(&got[..at]).to_ascii_lowercase();
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
            .min(MAX_LIST_BYTES) as usize;
        while got.len() < at + 4 + len {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(None);
            }
            got.extend_from_slice(&buf[..n]);
        }
        let Ok(targets) = serde_json::from_slice::<Vec<Value>>(&got[at + 4..at + 4 + len]) else {
            return Ok(None);
        };
        return Ok(targets
            .iter()
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("page"))
            .find_map(|t| t.get("webSocketDebuggerUrl").and_then(Value::as_str))
            .and_then(|u| u.find("/devtools/").map(|i| u[i..].to_string())));
    }
}

/// A DevTools peer on the other end of a socket pair, for tests: it answers what
/// `script` says.
#[cfg(test)]
pub(crate) fn peer(script: impl FnOnce(&mut WebSocket<UnixStream>) + Send + 'static) -> Cdp {
    let (ours, theirs) = UnixStream::pair().unwrap();
    std::thread::spawn(move || {
        let mut ws = tungstenite::accept(theirs).unwrap();
        script(&mut ws);
    });
    let (ws, _) = tungstenite::client::client("ws://127.0.0.1/devtools/page/x", ours).unwrap();
    Cdp {
        ws,
        next_id: 1,
        posted: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(m: Message) -> u64 {
        let v: Value = serde_json::from_str(m.to_text().unwrap()).unwrap();
        v["id"].as_u64().unwrap()
    }

    fn answer(ws: &mut WebSocket<UnixStream>, msg: Value) {
        ws.send(Message::text(msg.to_string())).unwrap();
    }

    /// Asserts that no message comes within 100 ms.
    fn nothing_more(ws: &mut WebSocket<UnixStream>, why: &str) {
        ws.get_ref()
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        assert!(ws.read().is_err(), "{why}");
        ws.get_ref().set_read_timeout(None).unwrap();
    }

    #[test]
    fn a_call_waits_for_the_posted_answers_before_it_is_sent_and_reports_their_error() {
        let mut cdp = peer(|ws| {
            let a = id_of(ws.read().unwrap());
            let b = id_of(ws.read().unwrap());
            // Nothing more comes until both are answered: a call must not overtake them.
            nothing_more(ws, "the call was sent before the posted answers");
            // Out of order, an event between, the first posted one refused.
            answer(ws, json!({"id": b, "result": {}}));
            answer(ws, json!({"method": "Page.frameNavigated", "params": {}}));
            answer(
                ws,
                json!({"id": a, "error": {"code": -32602, "message": "Invalid parameters"}}),
            );
            // The failed call was never sent: the next message is the call after it.
            let c = id_of(ws.read().unwrap());
            assert_eq!(c, b + 1, "the call that failed on a posted error was sent");
            answer(ws, json!({"id": c, "result": {"n": 1}}));
        });
        cdp.post("Input.dispatchKeyEvent", json!({})).unwrap();
        cdp.post("Input.dispatchMouseEvent", json!({})).unwrap();
        let e = cdp.call("Runtime.evaluate", json!({})).unwrap_err();
        assert!(
            e.to_string().contains("Input.dispatchKeyEvent"),
            "the posted command's error is the call's: {e}"
        );
        assert!(!e.is_fatal());
        // The stream stayed in step: the next call gets its own answer.
        assert_eq!(cdp.call("Runtime.evaluate", json!({})).unwrap()["n"], 1);
    }

    #[test]
    fn posting_stops_at_its_bound_until_the_answers_are_read() {
        let mut cdp = peer(|ws| {
            let first: Vec<u64> = (0..MAX_POSTED).map(|_| id_of(ws.read().unwrap())).collect();
            nothing_more(ws, "posted past the bound without reading answers");
            for id in first {
                answer(ws, json!({"id": id, "result": {}}));
            }
            for _ in 0..11 {
                let id = id_of(ws.read().unwrap());
                answer(ws, json!({"id": id, "result": {"last": id}}));
            }
        });
        for _ in 0..MAX_POSTED + 10 {
            cdp.post("Input.dispatchKeyEvent", json!({})).unwrap();
        }
        let last = cdp.call("Runtime.evaluate", json!({})).unwrap();
        assert_eq!(last["last"], MAX_POSTED as u64 + 11);
    }

    #[test]
    fn a_crashed_renderer_restarts_the_desktop_and_a_bad_call_does_not() {
        let crashed = json!({"code": -32000, "message": "Target crashed"});
        let e = cdp_error("Runtime.evaluate", &crashed);
        assert!(e.is_fatal(), "{e}");
        let bad = json!({"code": -32602, "message": "Invalid parameters"});
        assert!(!cdp_error("Input.dispatchKeyEvent", &bad).is_fatal());
    }
}
