//! The text side of axstream: [`Framer`] splits a model's stream into fence lines, and
//! [`parse`] turns a line into an [`Op`] over the wire's own `Action`.

use deskgym_proto::v1 as pb;
use serde_json::{Map, Value};

/// A line longer than this is skipped (its bytes are not kept while it streams in).
pub(crate) const MAX_LINE: usize = 64 * 1024;
/// The most text one `DriveRequest` may carry.
pub(crate) const MAX_CHUNK: usize = 1 << 20;
/// Characters of a line echoed in its report.
pub(crate) const ECHO: usize = 1024;

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
    /// A well-formed action this env cannot run (`open` of an app it does not have):
    /// reported failed with `code`, and the rest of its burst aborted.
    Refused {
        name: String,
        code: tonic::Code,
        why: String,
    },
    /// Resolve a target; the burst aborts when it does not.
    Assert(pb::Target),
    /// End the burst with a fresh observation.
    Observe,
    /// The agent's verdict; ends the task.
    Done { success: bool, reason: String },
}

impl Op {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Act { .. } | Op::Refused { .. } => "act",
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

/// Roles as models write them (macOS accessibility roles, as in the spec's `AXButton`,
/// and plain or ARIA words) as the AT-SPI roles deskgym trees use; `|` separates
/// alternatives the live tree may use for the same thing. Any other role is used as
/// written (matched ignoring case, spaces, `_` and `-`).
const AX_ROLES: &[(&str, &str)] = &[
    ("AXButton", "push button|toggle button"),
    ("AXCheckBox", "check box|check menu item"),
    ("AXRadioButton", "radio button|radio menu item|page tab"),
    ("AXRadioGroup", "panel|grouping|page tab list"),
    ("AXTextField", "text|entry|password text|spin button"),
    ("AXSecureTextField", "password text"),
    ("AXTextArea", "text|paragraph|document text"),
    ("AXSearchField", "text|entry"),
    ("AXStaticText", "label|static|text"),
    ("AXLink", "link"),
    ("AXMenuItem", "menu item|check menu item|radio menu item"),
    ("AXMenu", "menu"),
    ("AXMenuBar", "menu bar"),
    ("AXMenuBarItem", "menu"),
    ("AXMenuButton", "push button|menu"),
    ("AXPopUpButton", "combo box|push button|menu"),
    ("AXComboBox", "combo box"),
    ("AXList", "list|list box"),
    ("AXListItem", "list item"),
    ("AXTable", "table|tree table"),
    ("AXGrid", "table"),
    ("AXOutline", "tree|tree table"),
    ("AXRow", "table row|list item|tree item"),
    ("AXOutlineRow", "tree item|table row"),
    ("AXColumn", "table column header|column header"),
    ("AXCell", "table cell"),
    ("AXImage", "image|icon"),
    ("AXSlider", "slider"),
    ("AXValueIndicator", "slider"),
    ("AXIncrementor", "spin button"),
    ("AXStepper", "spin button"),
    ("AXProgressIndicator", "progress bar"),
    ("AXBusyIndicator", "progress bar"),
    ("AXLevelIndicator", "level bar"),
    ("AXScrollBar", "scroll bar"),
    ("AXScrollArea", "scroll pane|viewport"),
    ("AXSplitGroup", "split pane"),
    ("AXSplitter", "separator|split pane"),
    ("AXTabGroup", "page tab list"),
    ("AXTab", "page tab"),
    ("AXTabButton", "page tab"),
    ("AXToolbar", "tool bar"),
    ("AXDisclosureTriangle", "toggle button|push button"),
    ("AXSwitch", "toggle button|check box"),
    ("AXToggle", "toggle button|check box"),
    ("AXDateField", "date editor|text"),
    ("AXColorWell", "push button|color chooser"),
    ("AXHelpTag", "tool tip"),
    ("AXWindow", "frame|window|dialog"),
    ("AXDialog", "dialog|alert|file chooser"),
    ("AXSheet", "dialog|alert"),
    ("AXDrawer", "panel"),
    ("AXPopover", "window|panel"),
    ("AXApplication", "application"),
    ("AXWebArea", "document web|document frame"),
    ("AXDocument", "document frame|document text|document web"),
    ("AXParagraph", "paragraph"),
    ("AXHeading", "heading"),
    ("AXGroup", "panel|grouping|section|filler"),
    ("AXLayoutArea", "panel|filler"),
    // Plain and ARIA words.
    ("button", "push button|toggle button"),
    ("textbox", "text|entry|password text"),
    ("textfield", "text|entry|password text"),
    ("input", "text|entry"),
    ("checkbox", "check box"),
    ("radio", "radio button"),
    ("combobox", "combo box"),
    ("menuitem", "menu item"),
    ("listitem", "list item"),
    ("row", "table row|list item|tree item"),
    ("cell", "table cell"),
    ("gridcell", "table cell"),
    ("tab", "page tab"),
    ("tablist", "page tab list"),
    ("img", "image|icon"),
    ("treeitem", "tree item"),
    ("progressbar", "progress bar"),
    ("scrollbar", "scroll bar"),
    ("spinbutton", "spin button"),
    ("switch", "toggle button|check box"),
];

/// The AT-SPI role (or `|` alternatives) a model's role names.
pub(crate) fn atspi_role(role: &str) -> String {
    AX_ROLES
        .iter()
        .find(|(ax, _)| ax.eq_ignore_ascii_case(role))
        .map_or_else(|| role.to_string(), |(_, atspi)| (*atspi).to_string())
}

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
        let role = atspi_role(&role);
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
            // axstream's `"unit": "px"`: pixel deltas as ACI has them.
            pixels: o.get("unit").and_then(Value::as_str) == Some("px"),
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
        "open" => match open(str_field(o, "target")?, apps) {
            Ok(launch) => Verb::LaunchApp(launch),
            Err(why) => {
                return Ok(Op::Refused {
                    name: name.to_string(),
                    code: tonic::Code::FailedPrecondition,
                    why,
                });
            }
        },
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
