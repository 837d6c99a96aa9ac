//! axstream (`../shared/seeds/axstream-spec.txt`): a model's text stream as actions.
//!
//! The model writes narration, then a fence of JSON lines; each line inside the fence
//! runs the moment its newline arrives, while the model is still generating. The
//! newline is the commit signal: a line cut by the end of the stream never runs.
//!
//! Three parts: [`Framer`] splits text into fence lines, [`parse`] turns a line into an
//! [`Op`] over the wire's own `Action`, and [`drive`] runs a `Drive` stream on one env
//! through the same validation and step path as `Step`, so an axstream action and the
//! same `Step` behave identically (element targets resolve when the line runs).

use std::time::Instant;

use deskgym_proto::v1 as pb;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tonic::Status;

use crate::auth::Principal;
use crate::calls::Calls;
use crate::env::{Call, ObsOptions};
use crate::pool::PoolError;
use crate::spec::Invalid;

/// A line longer than this is skipped (its bytes are not kept while it streams in).
pub(crate) const MAX_LINE: usize = 64 * 1024;
/// The most text one `DriveRequest` may carry.
pub(crate) const MAX_CHUNK: usize = 1 << 20;
/// Characters of a line echoed in its report.
const ECHO: usize = 1024;
/// Reports queued towards a slow client before execution waits for it.
const QUEUE: usize = 64;

/// A complete line inside a fence.
#[derive(Debug, PartialEq)]
pub(crate) struct Framed {
    /// 1-based line number in the stream.
    pub line: u32,
    /// 1-based fence number.
    pub burst: u32,
    /// The line, trimmed; `None` when it was longer than [`MAX_LINE`].
    pub text: Option<String>,
}

/// Splits a text stream into lines and tracks the fence: a line starting with three
/// backticks opens it (any tag), a line of exactly three backticks closes it. Only
/// lines inside a fence come out; narration and blank lines do not.
#[derive(Debug, Default)]
pub(crate) struct Framer {
    buf: String,
    /// The line in `buf` outgrew [`MAX_LINE`]: its bytes are dropped until its newline.
    overlong: bool,
    in_fence: bool,
    line: u32,
    burst: u32,
}

impl Framer {
    /// Feeds text; returns the fence lines it completed, in order.
    pub(crate) fn push(&mut self, mut text: &str) -> Vec<Framed> {
        let mut out = Vec::new();
        while let Some(i) = text.find('\n') {
            let (head, rest) = (&text[..i], &text[i + 1..]);
            self.append(head);
            let line = std::mem::take(&mut self.buf);
            let overlong = std::mem::take(&mut self.overlong);
            self.line = self.line.saturating_add(1);
            if let Some(f) = self.commit(&line, overlong) {
                out.push(f);
            }
            text = rest;
        }
        self.append(text);
        out
    }

    /// The line still waiting for its newline (inside a fence, non-blank), if any:
    /// what a stream cut there would have run.
    pub(crate) fn pending(&self) -> Option<&str> {
        let t = self.buf.trim();
        (self.in_fence && (self.overlong || !t.is_empty())).then_some(t)
    }

    /// The number the pending line would get.
    pub(crate) fn next_line(&self) -> (u32, u32) {
        (self.line.saturating_add(1), self.burst)
    }

    fn append(&mut self, s: &str) {
        if self.overlong {
            return;
        }
        if self.buf.len() + s.len() > MAX_LINE {
            self.overlong = true;
            self.buf.clear();
        } else {
            self.buf.push_str(s);
        }
    }

    fn commit(&mut self, line: &str, overlong: bool) -> Option<Framed> {
        let t = line.trim();
        if !self.in_fence {
            if !overlong && t.starts_with("```") {
                self.in_fence = true;
                self.burst = self.burst.saturating_add(1);
            }
            return None;
        }
        if !overlong && t == "```" {
            self.in_fence = false;
            return None;
        }
        if t.is_empty() && !overlong {
            return None;
        }
        Some(Framed {
            line: self.line,
            burst: self.burst,
            text: (!overlong).then(|| t.to_string()),
        })
    }
}

/// One operation of a line.
#[derive(Debug, PartialEq)]
pub(crate) enum Op {
    /// Perform an action (`do` name, the wire action, risky or not).
    Act {
        name: String,
        action: pb::Action,
        risky: bool,
    },
    /// Resolve a target; the burst aborts when it does not.
    Assert(pb::Target),
    /// End the burst with a fresh observation.
    Observe,
    /// The agent's verdict; ends the task.
    Done { success: bool, reason: String },
}

impl Op {
    fn name(&self) -> &'static str {
        match self {
            Op::Act { .. } => "act",
            Op::Assert(_) => "assert",
            Op::Observe => "observe",
            Op::Done { .. } => "done",
        }
    }
}

/// The actions `do` accepts.
pub(crate) const ACTIONS: &[&str] = &[
    "click",
    "double_click",
    "right_click",
    "move",
    "drag",
    "scroll",
    "type",
    "key",
    "wait",
    "open",
    "set_value",
    "invoke",
];

/// Parses one fence line. `apps` are the profile's applications (for `open`).
pub(crate) fn parse(line: &str, apps: &[&str]) -> Result<Op, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(o) = v else {
        return Err("not a JSON object".into());
    };
    let op = str_field(&o, "op")?;
    match op {
        "observe" => Ok(Op::Observe),
        "assert" => Ok(Op::Assert(target(field(&o, "target")?, "target")?)),
        "done" => {
            let success = match str_field(&o, "status")? {
                "success" => true,
                "failure" => false,
                s => return Err(format!("status {s:?} is not success or failure")),
            };
            let reason = match o.get("reason") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.chars().take(ECHO).collect(),
                Some(_) => return Err("reason is not a string".into()),
            };
            Ok(Op::Done { success, reason })
        }
        "act" => act(str_field(&o, "do")?, &o, apps),
        // The spec's shorthand: {"op": "<action>", ...}.
        other if ACTIONS.contains(&other) => act(other, &o, apps),
        other => Err(format!(
            "unknown op {other:?}; ops: act, assert, observe, done (or an action name: {})",
            ACTIONS.join(", ")
        )),
    }
}

fn field<'a>(o: &'a Map<String, Value>, k: &str) -> Result<&'a Value, String> {
    o.get(k).ok_or_else(|| format!("missing {k:?}"))
}

fn str_field<'a>(o: &'a Map<String, Value>, k: &str) -> Result<&'a str, String> {
    field(o, k)?
        .as_str()
        .ok_or_else(|| format!("{k:?} is not a string"))
}

fn int_field(o: &Map<String, Value>, k: &str, default: i64) -> Result<i64, String> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_i64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.is_finite())
                    .map(|f| f.round() as i64)
            })
            .ok_or_else(|| format!("{k:?} is not a number")),
    }
}

/// A checked conversion of a client number (`field` names it in the error).
fn fit<T: TryFrom<i64>>(v: i64, field: &str) -> Result<T, String> {
    T::try_from(v).map_err(|_| format!("{field:?} = {v} is out of range"))
}

/// macOS accessibility roles (what models write, as in the spec's `AXButton`) as the
/// AT-SPI roles deskgym trees use; any other role is used as written.
const AX_ROLES: &[(&str, &str)] = &[
    ("AXButton", "push button"),
    ("AXCheckBox", "check box"),
    ("AXRadioButton", "radio button"),
    ("AXTextField", "text"),
    ("AXTextArea", "text"),
    ("AXSearchField", "text"),
    ("AXStaticText", "label"),
    ("AXLink", "link"),
    ("AXMenuItem", "menu item"),
    ("AXMenu", "menu"),
    ("AXMenuBar", "menu bar"),
    ("AXMenuButton", "push button"),
    ("AXPopUpButton", "combo box"),
    ("AXComboBox", "combo box"),
    ("AXList", "list"),
    ("AXTable", "table"),
    ("AXCell", "table cell"),
    ("AXImage", "image"),
    ("AXSlider", "slider"),
    ("AXTabGroup", "page tab list"),
    ("AXToolbar", "tool bar"),
    ("AXWindow", "frame"),
    ("AXDialog", "dialog"),
    ("AXSheet", "dialog"),
    ("AXHeading", "heading"),
    ("AXGroup", "panel"),
    ("AXScrollArea", "scroll pane"),
];

/// A target object: `{"x","y"}`, `{"ax": {"id"}}` or `{"ax": {"role", "title"}}`.
fn target(v: &Value, name: &str) -> Result<pb::Target, String> {
    use pb::target::Kind;
    let Value::Object(o) = v else {
        return Err(format!(
            "{name:?} is not a target object ({{\"x\",\"y\"}} or {{\"ax\": ...}})"
        ));
    };
    if let Some(ax) = o.get("ax") {
        let Value::Object(ax) = ax else {
            return Err(format!("{name}.ax is not an object"));
        };
        if let Some(id) = ax.get("id") {
            let id = id
                .as_str()
                .ok_or_else(|| format!("{name}.ax.id is not a string"))?;
            return Ok(pb::Target {
                kind: Some(Kind::ElementRef(id.to_string())),
            });
        }
        let text = |k: &str| match ax.get(k) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("{name}.ax.{k} is not a string")),
        };
        let (role, title) = (text("role")?, text("title")?);
        if role.is_empty() && title.is_empty() {
            return Err(format!("{name}.ax needs an id, a role or a title"));
        }
        let role = AX_ROLES
            .iter()
            .find(|(ax, _)| ax.eq_ignore_ascii_case(&role))
            .map_or(role, |(_, atspi)| (*atspi).to_string());
        return Ok(pb::Target {
            kind: Some(Kind::Element(pb::ElementQuery { role, name: title })),
        });
    }
    if o.contains_key("x") || o.contains_key("y") {
        let (x, y) = (int_field(o, "x", i64::MIN)?, int_field(o, "y", i64::MIN)?);
        if x == i64::MIN || y == i64::MIN {
            return Err(format!("{name} needs both x and y"));
        }
        return Ok(pb::Target {
            kind: Some(Kind::PointPx(pb::PointPx {
                x: fit(x, "x")?,
                y: fit(y, "y")?,
            })),
        });
    }
    Err(format!(
        "{name} is neither a point {{\"x\",\"y\"}} nor an element {{\"ax\": ...}}"
    ))
}

/// Key names models write (lower-case, macOS words) as deskgym chord names. `cmd` is
/// `ctrl`: the shortcuts a model means by cmd are ctrl shortcuts on Linux.
fn key_name(k: &str) -> String {
    let lower = k.to_ascii_lowercase();
    let mapped = match lower.as_str() {
        "cmd" | "command" | "meta" | "control" | "ctl" => "ctrl",
        "option" | "opt" => "alt",
        "win" | "windows" | "super" => "super",
        "return" | "enter" => "Return",
        "escape" | "esc" => "Escape",
        "tab" => "Tab",
        "space" => "space",
        "backspace" => "BackSpace",
        "delete" | "del" => "Delete",
        "home" => "Home",
        "end" => "End",
        "pageup" | "page_up" => "Prior",
        "pagedown" | "page_down" => "Next",
        "up" | "arrowup" => "Up",
        "down" | "arrowdown" => "Down",
        "left" | "arrowleft" => "Left",
        "right" | "arrowright" => "Right",
        _ => {
            // F1..F24 as their keysym; anything else as written (X keysym names).
            let f = lower
                .strip_prefix('f')
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            return match f {
                Some(n) => format!("F{n}"),
                None => k.to_string(),
            };
        }
    };
    mapped.to_string()
}

fn act(name: &str, o: &Map<String, Value>, apps: &[&str]) -> Result<Op, String> {
    use pb::action::Verb;
    let risky = match o.get("risk") {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) if s == "safe" => false,
        // Any other class is treated as risky: an unknown class fails safe.
        Some(_) => true,
    };
    let tgt = |k: &str| target(field(o, k)?, k);
    let verb = match name {
        "click" => {
            let button = match o.get("button").and_then(Value::as_str) {
                None | Some("left") => pb::MouseButton::Left,
                Some("right") => pb::MouseButton::Right,
                Some("middle") => pb::MouseButton::Middle,
                Some(b) => return Err(format!("button {b:?} is not left, right or middle")),
            };
            Verb::Click(pb::Click {
                target: Some(tgt("target")?),
                button: button as i32,
                count: fit(int_field(o, "count", 1)?, "count")?,
            })
        }
        "double_click" => Verb::DoubleClick(pb::DoubleClick {
            target: Some(tgt("target")?),
        }),
        "right_click" => Verb::RightClick(pb::RightClick {
            target: Some(tgt("target")?),
        }),
        "move" => Verb::Move(pb::Move {
            target: Some(tgt("target")?),
        }),
        "drag" => Verb::Drag(pb::Drag {
            from: Some(tgt(if o.contains_key("from") {
                "from"
            } else {
                "target"
            })?),
            to: Some(tgt("to")?),
            duration_ms: fit(int_field(o, "ms", 0)?, "ms")?,
            ..Default::default()
        }),
        "scroll" => Verb::Scroll(pb::Scroll {
            target: Some(tgt("target")?),
            dx: fit(int_field(o, "dx", 0)?, "dx")?,
            dy: fit(int_field(o, "dy", 0)?, "dy")?,
        }),
        "type" => Verb::TypeText(pb::TypeText {
            text: str_field(o, "text")?.to_string(),
        }),
        "key" => {
            let keys = match field(o, "keys")? {
                Value::Array(a) if !a.is_empty() => a
                    .iter()
                    .map(|k| k.as_str().map(key_name))
                    .collect::<Option<Vec<_>>>()
                    .ok_or("keys holds a non-string")?,
                Value::String(s) if !s.is_empty() => s.split('+').map(key_name).collect(),
                _ => return Err("keys is not a non-empty array of key names".into()),
            };
            Verb::Key(pb::Key {
                keys: keys.join("+"),
            })
        }
        "wait" => Verb::Wait(pb::Wait {
            ms: fit(int_field(o, "ms", 0)?, "ms")?,
        }),
        "open" => Verb::LaunchApp(open(str_field(o, "target")?, apps)?),
        "set_value" => Verb::SetValue(pb::SetValue {
            target: Some(tgt("target")?),
            value: str_field(o, "value")?.to_string(),
        }),
        "invoke" => Verb::InvokeAction(pb::InvokeAction {
            target: Some(tgt("target")?),
            action: o
                .get("action")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        }),
        other => {
            return Err(format!(
                "unknown action {other:?}; actions: {}",
                ACTIONS.join(", ")
            ));
        }
    };
    Ok(Op::Act {
        name: name.to_string(),
        action: pb::Action {
            verb: Some(verb),
            extension: None,
        },
        risky,
    })
}

/// Browsers `open` uses for a URL, in order of preference.
const BROWSERS: &[&str] = &["chromium", "google-chrome", "firefox"];

/// `open`: an app of the profile by name (any case), or a URL in its browser.
fn open(what: &str, apps: &[&str]) -> Result<pb::LaunchApp, String> {
    let listed = || {
        if apps.is_empty() {
            "this env's profile has no apps".to_string()
        } else {
            format!("its apps: {}", apps.join(", "))
        }
    };
    let is_url = ["http://", "https://", "file://", "about:"]
        .iter()
        .any(|p| what.starts_with(p));
    if is_url {
        let browser = BROWSERS
            .iter()
            .find(|b| apps.contains(b))
            .ok_or_else(|| format!("no browser to open {what:?}: {}", listed()))?;
        return Ok(pb::LaunchApp {
            app: (*browser).to_string(),
            args: vec![what.to_string()],
        });
    }
    let app = apps
        .iter()
        .find(|a| a.eq_ignore_ascii_case(what))
        .ok_or_else(|| format!("no app named {what:?}: {}", listed()))?;
    Ok(pb::LaunchApp {
        app: (*app).to_string(),
        args: vec![],
    })
}

/// Where a burst stands.
#[derive(Default)]
struct Burst {
    number: u32,
    /// Set when a line ended the burst early: the status and reason of the rest.
    halted: Option<(pb::LineStatus, String)>,
}

/// Runs a `Drive` stream. `first` was validated by the caller (env, policy, options).
pub(crate) struct Driver {
    svc: Calls,
    who: Principal,
    env_id: String,
    apps: Vec<String>,
    allow_risky: bool,
    encoding: i32,
    observe: ObsOptions,
    started: Instant,
    framer: Framer,
    burst: Burst,
    /// The line of a `done`: everything after it is skipped.
    done_at: Option<u32>,
}

/// The response stream of `Drive`.
pub(crate) type Outbound = tokio_stream::wrappers::ReceiverStream<Result<pb::DriveEvent, Status>>;

impl Driver {
    /// Validates the first message and prepares a driver.
    pub(crate) fn new(
        svc: Calls,
        who: Principal,
        first: &pb::DriveRequest,
        observe: ObsOptions,
    ) -> Result<Self, PoolError> {
        let env = svc.manager().env(&first.env_id, &who)?;
        let allow_risky = match pb::RiskPolicy::try_from(first.risky) {
            Ok(p) => p == pb::RiskPolicy::Allow,
            Err(_) => {
                return Err(Invalid::new(
                    "risky",
                    format!(
                        "unknown policy {}; 0: hold risky actions, 1: allow them",
                        first.risky
                    ),
                )
                .into());
            }
        };
        Ok(Self {
            apps: env.pool.spec.profile.apps.keys().cloned().collect(),
            env_id: first.env_id.clone(),
            svc,
            who,
            allow_risky,
            encoding: first.encoding,
            observe,
            started: Instant::now(),
            framer: Framer::default(),
            burst: Burst::default(),
            done_at: None,
        })
    }

    /// Reads the client's messages and answers on a channel until either side ends.
    pub(crate) fn run(
        mut self,
        first: pb::DriveRequest,
        mut inbound: tonic::Streaming<pb::DriveRequest>,
        mut closing: tokio::sync::watch::Receiver<bool>,
    ) -> Outbound {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(async move {
            let mut msg = Some(first);
            while let Some(m) = msg.take() {
                if let Err(status) = self.message(&m, &tx).await {
                    let _ = tx.send(Err(status)).await;
                    return;
                }
                tokio::select! {
                    next = inbound.message() => match next {
                        Ok(Some(m)) => msg = Some(m),
                        Ok(None) => break,
                        Err(_) => return, // the client went away: nobody to answer
                    },
                    _ = closing.changed() => {
                        let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
                        return;
                    }
                }
            }
            // The stream ended: a line without its newline never runs.
            if let Some(cut) = self.framer.pending() {
                let (line, burst) = self.framer.next_line();
                let mut r = self.report(line, burst, cut);
                r.status = pb::LineStatus::Skipped as i32;
                r.reason = "cut: the stream ended before its newline".into();
                let _ = send(&tx, r).await;
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(rx)
    }

    async fn message(
        &mut self,
        m: &pb::DriveRequest,
        tx: &mpsc::Sender<Result<pb::DriveEvent, Status>>,
    ) -> Result<(), Status> {
        if m.text.len() > MAX_CHUNK {
            return Err(Invalid::new(
                "text",
                format!(
                    "{} bytes in one message is over {MAX_CHUNK}; send the text in smaller chunks",
                    m.text.len()
                ),
            )
            .into());
        }
        let received = self.ms();
        for framed in self.framer.push(&m.text) {
            let report = self.line(framed, received).await;
            if !send(tx, report).await {
                return Ok(());
            }
        }
        if m.ack != 0 {
            let ack = pb::DriveEvent {
                kind: Some(pb::drive_event::Kind::Ack(m.ack)),
            };
            let _ = tx.send(Ok(ack)).await;
        }
        Ok(())
    }

    fn ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e3
    }

    fn report(&self, line: u32, burst: u32, text: &str) -> pb::LineReport {
        pb::LineReport {
            line,
            burst,
            text: text.chars().take(ECHO).collect(),
            ..Default::default()
        }
    }

    /// Runs one fence line and reports it.
    async fn line(&mut self, f: Framed, received: f64) -> pb::LineReport {
        use pb::LineStatus as S;
        if f.burst != self.burst.number {
            self.burst = Burst {
                number: f.burst,
                halted: None,
            };
        }
        let text = f.text.as_deref().unwrap_or("");
        let mut r = self.report(f.line, f.burst, text);
        r.received_ms = received;
        let apps: Vec<&str> = self.apps.iter().map(String::as_str).collect();
        let parsed = match &f.text {
            None => Err(format!("a line over {MAX_LINE} bytes")),
            Some(t) => parse(t, &apps),
        };
        let op = match parsed {
            Ok(op) => op,
            Err(why) => {
                r.status = S::Skipped as i32;
                r.reason = why;
                return r;
            }
        };
        r.op = op.name().into();
        if let Op::Act { name, .. } = &op {
            r.action = name.clone();
        }
        if let Some(done) = self.done_at {
            r.status = S::Skipped as i32;
            r.reason = format!("the task ended at done on line {done}");
            return r;
        }
        if let Some((status, why)) = &self.burst.halted {
            r.status = *status as i32;
            r.reason = why.clone();
            return r;
        }
        r.started_ms = self.ms();
        match op {
            Op::Act { action, risky, .. } => {
                if risky && !self.allow_risky {
                    r.status = S::Held as i32;
                    r.reason = "a risky action; the policy holds risky actions".into();
                    self.halt(S::Aborted, format!("line {} (risky) was held", f.line));
                } else {
                    match self.step(action).await {
                        Ok(mut result) => {
                            result.observation = None;
                            if let Some(reset) = result.reset.as_mut() {
                                reset.observation = None;
                            }
                            r.status = S::Executed as i32;
                            r.result = Some(result);
                        }
                        Err(e) => self.failed(&mut r, e),
                    }
                }
            }
            Op::Assert(t) => match self.locate(t).await {
                Ok(()) => r.status = S::Executed as i32,
                Err(e) => self.failed(&mut r, e),
            },
            Op::Observe => match self.observe().await {
                Ok(obs) => {
                    r.status = S::Executed as i32;
                    r.observation = Some(obs);
                    self.halt(
                        S::Skipped,
                        format!("the burst ended at observe on line {}", f.line),
                    );
                }
                Err(e) => self.failed(&mut r, e),
            },
            Op::Done { success, reason } => match self.done(success, reason.clone()).await {
                Ok(info) => {
                    r.status = S::Executed as i32;
                    r.info = Some(info);
                    r.done_status = if success { "success" } else { "failure" }.into();
                    r.done_reason = reason;
                    self.done_at = Some(f.line);
                }
                Err(e) => self.failed(&mut r, e),
            },
        }
        r.finished_ms = self.ms();
        r
    }

    fn halt(&mut self, status: pb::LineStatus, why: String) {
        self.burst.halted = Some((status, why));
    }

    /// A line that ran and failed: an invalid action is skipped (the stream goes on, as
    /// the spec drops invalid lines); anything else fails and aborts the burst.
    fn failed(&mut self, r: &mut pb::LineReport, e: PoolError) {
        let s = Status::from(e);
        r.code = s.code() as i32;
        r.reason = s.message().to_string();
        if s.code() == tonic::Code::InvalidArgument {
            r.status = pb::LineStatus::Skipped as i32;
        } else {
            r.status = pb::LineStatus::Failed as i32;
            self.halt(
                pb::LineStatus::Aborted,
                format!("line {} failed: {}", r.line, s.message()),
            );
        }
    }

    async fn step(&self, action: pb::Action) -> Result<pb::StepResult, PoolError> {
        let item = pb::StepRequest {
            env_id: self.env_id.clone(),
            action: Some(action),
            // The frame is not returned; raw costs no encode.
            encoding: pb::ImageEncoding::RawRgb as i32,
            ..Default::default()
        };
        self.svc
            .start_step(item, "", &[], &self.who)?
            .finish()
            .await
    }

    async fn locate(&self, t: pb::Target) -> Result<(), PoolError> {
        let mgr = self.svc.manager();
        let env = mgr.env(&self.env_id, &self.who)?;
        let action = pb::Action {
            verb: Some(pb::action::Verb::Move(pb::Move { target: Some(t) })),
            extension: None,
        };
        let planned = crate::convert::action(
            Some(&action),
            env.pool.spec.screen,
            mgr.limits(),
            &env.pool.spec.profile.apps,
            &env.pool.spec.profile.app_args,
        )
        .map_err(|i| Invalid::new(i.field.replace("action.move.target", "target"), i.message))?;
        mgr.on_env(&env, Call::Observe, mgr.op_timeout(), move |e, _| {
            e.locate(&planned)
        })?
        .finish()
        .await
    }

    async fn observe(&self) -> Result<pb::Observation, PoolError> {
        let mgr = self.svc.manager();
        let env = mgr.env(&self.env_id, &self.who)?;
        let mut opts = self.observe.clone();
        opts.encoding = self.encoding;
        mgr.on_env(&env, Call::Observe, mgr.op_timeout(), move |e, cache| {
            e.observe(cache, &opts).map(crate::convert::observation)
        })?
        .finish()
        .await
    }

    async fn done(&self, success: bool, reason: String) -> Result<pb::StepInfo, PoolError> {
        let mgr = self.svc.manager();
        let env = mgr.env(&self.env_id, &self.who)?;
        mgr.on_env(&env, Call::Observe, mgr.op_timeout(), move |e, _| {
            e.agent_done(success, &reason)
                .map(crate::convert::step_info)
        })?
        .finish()
        .await
    }
}

/// Sends a report; false when the client is gone.
async fn send(tx: &mpsc::Sender<Result<pb::DriveEvent, Status>>, r: pb::LineReport) -> bool {
    tx.send(Ok(pb::DriveEvent {
        kind: Some(pb::drive_event::Kind::Line(r)),
    }))
    .await
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESPONSE: &str = "I'll click it {\"op\":\"act\"}.\n```jsonl\n{\"op\":\"act\",\"do\":\"click\",\"target\":{\"x\":1,\"y\":2}}\n\n{\"op\":\"observe\"}\n```\nnarration\n```\n{\"op\":\"done\",\"status\":\"success\"}\n```\n";

    fn frame_in_chunks(text: &str, n: usize) -> Vec<Framed> {
        let mut f = Framer::default();
        let chars: Vec<char> = text.chars().collect();
        chars
            .chunks(n)
            .flat_map(|c| f.push(&c.iter().collect::<String>()))
            .collect()
    }

    #[test]
    fn lines_commit_at_newlines_whatever_the_chunking() {
        let whole = frame_in_chunks(RESPONSE, usize::MAX >> 1);
        assert_eq!(
            whole.iter().map(|f| (f.line, f.burst)).collect::<Vec<_>>(),
            vec![(3, 1), (5, 1), (9, 2)]
        );
        for n in [1, 2, 7, 4096] {
            assert_eq!(frame_in_chunks(RESPONSE, n), whole, "chunks of {n}");
        }
    }

    #[test]
    fn a_cut_line_stays_pending_and_narration_never_frames() {
        let mut f = Framer::default();
        assert!(
            f.push("{\"op\":\"observe\"}\n```\n{\"op\":\"obs")
                .is_empty()
        );
        assert_eq!(f.pending(), Some("{\"op\":\"obs"));
        assert_eq!(f.next_line(), (3, 1));
        let mut g = Framer::default();
        assert!(g.push("narration {\"op\":\"observe\"}").is_empty());
        assert_eq!(g.pending(), None);
    }

    #[test]
    fn any_tag_opens_and_only_bare_backticks_close() {
        let mut f = Framer::default();
        let out = f.push("```spec\na\n```json\nb\n ``` \nc\n");
        let texts: Vec<_> = out.iter().map(|f| f.text.clone().unwrap()).collect();
        assert_eq!(texts, vec!["a", "```json", "b"]);
    }

    #[test]
    fn an_overlong_line_is_framed_without_its_bytes() {
        let mut f = Framer::default();
        f.push("```\n");
        let big = "x".repeat(MAX_LINE + 10);
        assert!(f.push(&big).is_empty());
        let out = f.push("tail\n{}\n");
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].text, None);
        assert_eq!(out[1].text.as_deref(), Some("{}"));
    }

    #[test]
    fn actions_map_to_wire_verbs() {
        use pb::action::Verb;
        let apps = ["terminal", "chromium"];
        let op = parse(r#"{"op":"act","do":"key","keys":["cmd","n"]}"#, &apps).unwrap();
        let Op::Act { action, risky, .. } = op else {
            panic!()
        };
        assert!(!risky);
        assert_eq!(
            action.verb,
            Some(Verb::Key(pb::Key {
                keys: "ctrl+n".into()
            }))
        );
        let Op::Act { action, .. } =
            parse(r#"{"op":"open","target":"https://example.org"}"#, &apps).unwrap()
        else {
            panic!()
        };
        let Some(Verb::LaunchApp(l)) = action.verb else {
            panic!()
        };
        assert_eq!((l.app.as_str(), l.args.len()), ("chromium", 1));
        let Op::Act { action, risky, .. } = parse(
            r#"{"op":"act","do":"click","target":{"ax":{"role":"AXButton","title":"Save"}},"risk":"risky"}"#,
            &apps,
        )
        .unwrap() else {
            panic!()
        };
        assert!(risky);
        let Some(Verb::Click(c)) = action.verb else {
            panic!()
        };
        assert_eq!(
            c.target.unwrap().kind,
            Some(pb::target::Kind::Element(pb::ElementQuery {
                role: "push button".into(),
                name: "Save".into()
            }))
        );
    }

    #[test]
    fn invalid_lines_say_why() {
        for (line, why) in [
            ("{\"op\":\"act\"", "not JSON"),
            ("[1]", "not a JSON object"),
            (r#"{"do":"click"}"#, "missing \"op\""),
            (r#"{"op":"fly"}"#, "unknown op"),
            (r#"{"op":"act","do":"click"}"#, "missing \"target\""),
            (
                r#"{"op":"act","do":"click","target":{"x":1}}"#,
                "needs both x and y",
            ),
            (r#"{"op":"act","do":"wait","ms":-1}"#, "out of range"),
            (
                r#"{"op":"act","do":"click","target":{"x":1,"y":99999999999}}"#,
                "out of range",
            ),
            (
                r#"{"op":"done","status":"maybe"}"#,
                "not success or failure",
            ),
            (r#"{"op":"open","target":"Notes"}"#, "no app named"),
        ] {
            let e = parse(line, &["terminal"]).unwrap_err();
            assert!(e.contains(why), "{line}: {e}");
        }
    }
}
