//! Wire → worker conversions with validation. Every rejection names the field.

use std::collections::BTreeMap;

use deskgym_proto::v1 as pb;
use deskgym_worker::parse_chord;
use deskgym_worker::{Action, Button, Point};

use crate::a11y::{Planned, Sel, Slot, parse_ref};
use crate::config::Limits;
use crate::env::Shape;
pub(crate) use crate::spec::Screen;
use crate::spec::{Invalid, quote};
use deskgym_worker::ExecSpec;
use deskgym_worker::WindowInfo;
use deskgym_worker::{Executed, Listing};

/// The verbs this server accepts, as `Action.verb` field names.
pub(crate) const VERBS: &[&str] = &[
    "click",
    "double_click",
    "right_click",
    "move",
    "scroll",
    "drag",
    "mouse_down",
    "mouse_up",
    "type_text",
    "key",
    "wait",
    "noop",
    "launch_app",
    "activate_window",
    "close_window",
    "move_window",
    "resize_window",
    "key_down",
    "key_up",
    "invoke_action",
    "set_value",
];

/// ACI's observe levers (`StepRequest.observe`) checked; `None` is the whole screen.
pub(crate) fn shape(
    field: &str,
    scope: i32,
    window: u32,
    max_long_edge: u32,
    jpeg_quality: u32,
) -> Result<Shape, Invalid> {
    let window = match pb::ScreenshotScope::try_from(scope) {
        Ok(pb::ScreenshotScope::Screen) => None,
        Ok(pb::ScreenshotScope::ActiveWindow) => Some(None),
        Ok(pb::ScreenshotScope::Window) => Some(Some(window)),
        Err(_) => {
            return Err(Invalid::new(
                format!("{field}scope"),
                format!("unknown scope {scope}"),
            ));
        }
    };
    if jpeg_quality > 100 {
        return Err(Invalid::new(
            format!("{field}jpeg_quality"),
            format!("{jpeg_quality} is outside 1..=100 (0: the default)"),
        ));
    }
    Ok(Shape {
        window,
        max_long_edge,
        jpeg_quality: jpeg_quality as u8,
    })
}

/// Largest scroll in wheel clicks per axis.
const MAX_SCROLL: i32 = 50;
/// Pixels per wheel click of a pixel scroll (Chromium's and GTK's step).
const SCROLL_PX: i32 = 100;

/// Longest key chord in bytes: real chords are a few names joined by `+`
/// (`ctrl+shift+Page_Down` is 20); the bound keeps a hostile chord from holding a
/// step thread (a 4-million-key chord took 5 s) or bloating the error message.
pub(crate) const MAX_CHORD_BYTES: usize = 128;

/// Element targets of one action, filled in by [`target`] as it meets them.
type Elements = Vec<(Slot, Sel, String)>;

/// Longest element query name or role, in bytes.
const MAX_QUERY_BYTES: usize = 1024;

/// A target in pixels; an element target adds itself to `elements` (resolved when the
/// action runs) and stands in as (0, 0).
fn target(
    t: Option<&pb::Target>,
    field: &str,
    screen: Screen,
    slot: Slot,
    elements: &mut Elements,
) -> Result<Point, Invalid> {
    use pb::target::Kind;
    let (w, h) = (screen.width as i32, screen.height as i32);
    match t.and_then(|t| t.kind.as_ref()) {
        None => Err(Invalid::new(
            field,
            "target is not set; set point_px, point_norm, element_ref or element",
        )),
        Some(Kind::ElementRef(r)) => {
            let field = format!("{field}.element_ref");
            elements.push((slot, Sel::Ref(parse_ref(r, &field)?), field));
            Ok(Point::default())
        }
        Some(Kind::Element(q)) => {
            let field = format!("{field}.element");
            if q.name.is_empty() && q.role.trim().is_empty() {
                return Err(Invalid::new(
                    format!("{field}.name"),
                    "name and role are empty; give the element's name, its role, or both \
                     (or use element_ref)",
                ));
            }
            for (f, v) in [("name", &q.name), ("role", &q.role)] {
                if v.len() > MAX_QUERY_BYTES || v.contains('\0') {
                    return Err(Invalid::new(
                        format!("{field}.{f}"),
                        format!("contains a NUL byte or is over {MAX_QUERY_BYTES} bytes"),
                    ));
                }
            }
            let sel = Sel::Query {
                role: q.role.trim().to_string(),
                name: q.name.clone(),
            };
            elements.push((slot, sel, field));
            Ok(Point::default())
        }
        Some(Kind::PointPx(p)) => {
            if p.x < 0 || p.y < 0 || p.x >= w || p.y >= h {
                return Err(Invalid::new(
                    format!("{field}.point_px"),
                    format!(
                        "({}, {}) is outside the {w}x{h} screen (0 <= x < {w}, 0 <= y < {h})",
                        p.x, p.y
                    ),
                ));
            }
            Ok(Point { x: p.x, y: p.y })
        }
        Some(Kind::PointNorm(p)) => {
            for (axis, v) in [("x", p.x), ("y", p.y)] {
                if !(0.0..=1.0).contains(&v) {
                    return Err(Invalid::new(
                        format!("{field}.point_norm.{axis}"),
                        format!("{v} is outside [0, 1]"),
                    ));
                }
            }
            Ok(Point {
                x: (p.x * f64::from(w - 1)).round() as i32,
                y: (p.y * f64::from(h - 1)).round() as i32,
            })
        }
    }
}

fn optional_target(
    t: Option<&pb::Target>,
    field: &str,
    screen: Screen,
    elements: &mut Elements,
) -> Result<Option<Point>, Invalid> {
    match t {
        Some(t) if t.kind.is_some() => target(Some(t), field, screen, Slot::At, elements).map(Some),
        _ => Ok(None),
    }
}

fn button(raw: i32, field: &str) -> Result<Button, Invalid> {
    match pb::MouseButton::try_from(raw) {
        Ok(pb::MouseButton::Unspecified | pb::MouseButton::Left) => Ok(Button::Left),
        Ok(pb::MouseButton::Middle) => Ok(Button::Middle),
        Ok(pb::MouseButton::Right) => Ok(Button::Right),
        Err(_) => Err(Invalid::new(field, format!("unknown mouse button {raw}"))),
    }
}

/// Validates a wire action against the screen and limits and turns it into pixels.
pub(crate) fn action(
    a: Option<&pb::Action>,
    screen: Screen,
    limits: &Limits,
    apps: &BTreeMap<String, Vec<String>>,
    app_args: &BTreeMap<String, crate::profiles::AppArgs>,
) -> Result<Planned, Invalid> {
    use pb::action::Verb;
    let a = a.ok_or_else(|| Invalid::new("action", "action is missing"))?;
    if a.extension.is_some() {
        return Err(Invalid::new(
            "action.extension",
            "no experimental verbs are supported by this server",
        ));
    }
    let verb = a.verb.as_ref().ok_or_else(|| {
        Invalid::new(
            "action.verb",
            format!("no verb is set; set exactly one of: {}", VERBS.join(", ")),
        )
    })?;
    let mut elements = Elements::new();
    let action = match verb {
        Verb::Click(c) => {
            let count = if c.count == 0 { 1 } else { c.count };
            if count > 3 {
                return Err(Invalid::new(
                    "action.click.count",
                    format!("{count} is not in 1..=3"),
                ));
            }
            Action::Click {
                at: target(
                    c.target.as_ref(),
                    "action.click.target",
                    screen,
                    Slot::At,
                    &mut elements,
                )?,
                button: button(c.button, "action.click.button")?,
                count,
            }
        }
        Verb::DoubleClick(c) => Action::Click {
            at: target(
                c.target.as_ref(),
                "action.double_click.target",
                screen,
                Slot::At,
                &mut elements,
            )?,
            button: Button::Left,
            count: 2,
        },
        Verb::RightClick(c) => Action::Click {
            at: target(
                c.target.as_ref(),
                "action.right_click.target",
                screen,
                Slot::At,
                &mut elements,
            )?,
            button: Button::Right,
            count: 1,
        },
        Verb::Move(m) => Action::Move {
            to: target(
                m.target.as_ref(),
                "action.move.target",
                screen,
                Slot::At,
                &mut elements,
            )?,
        },
        Verb::Scroll(s) => {
            let max = if s.pixels {
                MAX_SCROLL * SCROLL_PX
            } else {
                MAX_SCROLL
            };
            for (axis, v) in [("dx", s.dx), ("dy", s.dy)] {
                // unsigned_abs: `i32::MIN.abs()` wraps to itself and would pass.
                if v.unsigned_abs() > max.unsigned_abs() {
                    return Err(Invalid::new(
                        format!("action.scroll.{axis}"),
                        format!(
                            "{v} is outside -{max}..={max}{}",
                            if s.pixels { " pixels" } else { "" }
                        ),
                    ));
                }
            }
            // Pixels as wheel clicks: rounded, and never a non-zero delta lost.
            let clicks = |v: i32| {
                if !s.pixels || v == 0 {
                    return v;
                }
                let c = (f64::from(v) / f64::from(SCROLL_PX)).round() as i32;
                if c == 0 { v.signum() } else { c }
            };
            Action::Scroll {
                at: target(
                    s.target.as_ref(),
                    "action.scroll.target",
                    screen,
                    Slot::At,
                    &mut elements,
                )?,
                dx: clicks(s.dx),
                dy: clicks(s.dy),
            }
        }
        Verb::Drag(d) => {
            if d.duration_ms > limits.max_wait_ms {
                return Err(Invalid::new(
                    "action.drag.duration_ms",
                    format!(
                        "{} ms is more than the limit of {}",
                        d.duration_ms, limits.max_wait_ms
                    ),
                ));
            }
            Action::Drag {
                from: target(
                    d.from.as_ref(),
                    "action.drag.from",
                    screen,
                    Slot::From,
                    &mut elements,
                )?,
                to: target(
                    d.to.as_ref(),
                    "action.drag.to",
                    screen,
                    Slot::To,
                    &mut elements,
                )?,
                button: button(d.button, "action.drag.button")?,
                duration_ms: d.duration_ms,
                modifiers: if d.modifiers.is_empty() {
                    String::new()
                } else {
                    chord(&d.modifiers, "action.drag.modifiers")?
                },
            }
        }
        Verb::MouseDown(m) => Action::MouseDown {
            at: optional_target(
                m.target.as_ref(),
                "action.mouse_down.target",
                screen,
                &mut elements,
            )?,
            button: button(m.button, "action.mouse_down.button")?,
        },
        Verb::MouseUp(m) => Action::MouseUp {
            at: optional_target(
                m.target.as_ref(),
                "action.mouse_up.target",
                screen,
                &mut elements,
            )?,
            button: button(m.button, "action.mouse_up.button")?,
        },
        Verb::TypeText(t) => {
            if t.text.is_empty() {
                return Err(Invalid::new("action.type_text.text", "text is empty"));
            }
            let n = t.text.chars().count();
            if n > limits.max_text_len as usize {
                return Err(Invalid::new(
                    "action.type_text.text",
                    format!(
                        "{n} characters is more than the limit of {}",
                        limits.max_text_len
                    ),
                ));
            }
            Action::TypeText(t.text.clone())
        }
        Verb::Key(k) => Action::Key(chord(&k.keys, "action.key.keys")?),
        Verb::KeyDown(k) => Action::KeyDown(chord(&k.keys, "action.key_down.keys")?),
        Verb::KeyUp(k) => Action::KeyUp(chord(&k.keys, "action.key_up.keys")?),
        Verb::Wait(w) => {
            if w.ms > limits.max_wait_ms {
                return Err(Invalid::new(
                    "action.wait.ms",
                    format!(
                        "{} ms is more than the limit of {} ms",
                        w.ms, limits.max_wait_ms
                    ),
                ));
            }
            Action::Wait(w.ms)
        }
        Verb::Noop(_) => Action::Noop,
        Verb::LaunchApp(l) => {
            let Some(argv) = apps.get(&l.app) else {
                let known: Vec<&str> = apps.keys().map(String::as_str).collect();
                return Err(Invalid::new(
                    "action.launch_app.app",
                    format!(
                        "unknown app {}; this profile's apps: {} (a program by PATH name or \
                         absolute path needs the pool's exec grant)",
                        quote(&l.app),
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            };
            if l.args.len() > MAX_LAUNCH_ARGS {
                return Err(Invalid::new(
                    "action.launch_app.args",
                    format!("more than {MAX_LAUNCH_ARGS} arguments"),
                ));
            }
            let takes = app_args.get(&l.app).copied().unwrap_or_default();
            for (i, a) in l.args.iter().enumerate() {
                let field = format!("action.launch_app.args[{i}]");
                if a.len() > limits.max_text_len as usize {
                    return Err(Invalid::new(
                        field,
                        format!("is over {} bytes", limits.max_text_len),
                    ));
                }
                if let Some(why) = takes.refuses(a) {
                    return Err(Invalid::new(
                        field,
                        format!("{} {why} (app {})", quote(a), quote(&l.app)),
                    ));
                }
            }
            Action::LaunchApp(argv.iter().chain(&l.args).cloned().collect())
        }
        Verb::ActivateWindow(w) => match (w.window, w.app.as_str()) {
            (0, "") => {
                return Err(Invalid::new(
                    "action.activate_window",
                    "name a window (an id from ListWindows) or an app (a title substring)",
                ));
            }
            (0, app) => {
                if app.len() > MAX_QUERY_BYTES || app.contains('\0') {
                    return Err(Invalid::new(
                        "action.activate_window.app",
                        format!("is over {MAX_QUERY_BYTES} bytes or holds a NUL"),
                    ));
                }
                Action::ActivateApp(app.to_string())
            }
            (id, _) => Action::ActivateWindow(id),
        },
        Verb::CloseWindow(w) => Action::CloseWindow(w.window),
        Verb::MoveWindow(m) => Action::MoveWindow {
            window: m.window,
            x: m.x,
            y: m.y,
        },
        Verb::ResizeWindow(r) => {
            for (f, v) in [("width", r.width), ("height", r.height)] {
                if !(1..=4096).contains(&v) {
                    return Err(Invalid::new(
                        format!("action.resize_window.{f}"),
                        format!("{v} is outside 1..=4096"),
                    ));
                }
            }
            Action::ResizeWindow {
                window: r.window,
                width: r.width,
                height: r.height,
            }
        }
        Verb::InvokeAction(a) => {
            let field = "action.invoke_action.target";
            element_only(a.target.as_ref(), field, screen, &mut elements)?;
            if a.action.len() > MAX_QUERY_BYTES || a.action.contains('\0') {
                return Err(Invalid::new(
                    "action.invoke_action.action",
                    format!("contains a NUL byte or is over {MAX_QUERY_BYTES} bytes"),
                ));
            }
            Action::InvokeAction {
                element: String::new(),
                action: a.action.clone(),
            }
        }
        Verb::SetValue(v) => {
            let field = "action.set_value.target";
            element_only(v.target.as_ref(), field, screen, &mut elements)?;
            if v.value.chars().count() > limits.max_text_len as usize || v.value.contains('\0') {
                return Err(Invalid::new(
                    "action.set_value.value",
                    format!(
                        "contains a NUL byte or is over {} characters",
                        limits.max_text_len
                    ),
                ));
            }
            Action::SetValue {
                element: String::new(),
                value: v.value.clone(),
            }
        }
    };
    Ok(Planned {
        action,
        elements,
        actor: deskgym_datasets::Actor::Agent,
    })
}

/// The target of an element verb: an element ref or query, never a point.
fn element_only(
    t: Option<&pb::Target>,
    field: &str,
    screen: Screen,
    elements: &mut Elements,
) -> Result<(), Invalid> {
    use pb::target::Kind;
    match t.and_then(|t| t.kind.as_ref()) {
        Some(Kind::ElementRef(_) | Kind::Element(_)) => {
            target(t, field, screen, Slot::Element, elements).map(|_| ())
        }
        _ => Err(Invalid::new(
            field,
            "this verb acts on an element: set element_ref (or element {role, name})",
        )),
    }
}

/// A validated key chord (bounded length, every name known).
fn chord(keys: &str, field: &str) -> Result<String, Invalid> {
    if keys.len() > MAX_CHORD_BYTES {
        return Err(Invalid::new(
            field,
            format!(
                "a chord of {} bytes is longer than the limit of {MAX_CHORD_BYTES}",
                keys.len()
            ),
        ));
    }
    parse_chord(keys).map_err(|m| Invalid::new(field, m))?;
    Ok(keys.to_string())
}

/// Most extra arguments of one `launch_app`.
const MAX_LAUNCH_ARGS: usize = 64;

/// The capability a verb needs beyond the core ones, if any.
pub(crate) fn capability_of(a: Option<&pb::Action>) -> Option<&'static str> {
    use pb::action::Verb;
    match a?.verb.as_ref()? {
        Verb::LaunchApp(_) => Some("launch_app"),
        Verb::ActivateWindow(_)
        | Verb::CloseWindow(_)
        | Verb::MoveWindow(_)
        | Verb::ResizeWindow(_) => Some("windows"),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Exec.
// ---------------------------------------------------------------------------

/// Default time bound of an Exec that names none.
pub(crate) const DEFAULT_EXEC_MS: u32 = 60_000;

fn no_nul(field: String, v: &str) -> Result<(), Invalid> {
    if v.contains('\0') {
        return Err(Invalid::new(field, "contains a NUL byte"));
    }
    Ok(())
}

/// A wire Exec request → what the sandbox agent runs, within the server's limits.
pub(crate) fn exec_spec(r: &pb::ExecRequest, l: &Limits) -> Result<ExecSpec, Invalid> {
    let argv = match (r.argv.is_empty(), r.shell.is_empty()) {
        (true, true) => {
            return Err(Invalid::new(
                "argv",
                "give the program and its arguments in argv, or a command line in shell",
            ));
        }
        (false, false) => {
            return Err(Invalid::new("shell", "give argv or shell, not both"));
        }
        (false, true) => r.argv.clone(),
        (true, false) => vec!["/bin/sh".into(), "-c".into(), r.shell.clone()],
    };
    if argv[0].is_empty() {
        return Err(Invalid::new("argv[0]", "the program name is empty"));
    }
    for (i, a) in r.argv.iter().enumerate() {
        no_nul(format!("argv[{i}]"), a)?;
    }
    no_nul("shell".into(), &r.shell)?;
    no_nul("cwd".into(), &r.cwd)?;
    for (k, v) in &r.env {
        if k.is_empty() || k.contains('=') {
            return Err(Invalid::new(
                "env",
                format!("variable name {} is empty or has '='", quote(k)),
            ));
        }
        no_nul(format!("env[{}]", quote(k)), &format!("{k}{v}"))?;
    }
    if r.timeout_ms > l.max_exec_ms {
        return Err(Invalid::new(
            "timeout_ms",
            format!(
                "{} ms is over the server's max_exec_ms={}",
                r.timeout_ms, l.max_exec_ms
            ),
        ));
    }
    if r.stdin.len() > l.max_exec_stdin as usize {
        return Err(Invalid::new(
            "stdin",
            format!(
                "{} bytes is over the server's max_exec_stdin={}; put large inputs in a file",
                r.stdin.len(),
                l.max_exec_stdin
            ),
        ));
    }
    let mut env: Vec<(String, String)> = r.env.clone().into_iter().collect();
    env.sort();
    Ok(ExecSpec {
        argv,
        cwd: (!r.cwd.is_empty()).then(|| r.cwd.clone()),
        env,
        timeout_ms: u64::from(if r.timeout_ms == 0 {
            DEFAULT_EXEC_MS
        } else {
            r.timeout_ms
        }),
        max_output: l.max_exec_output as usize,
        stdin_len: 0,
        stream: false,
        cancel: Default::default(),
    })
}

/// A directory listing on the wire.
pub(crate) fn listing(
    Listing {
        path,
        entries,
        truncated,
    }: Listing,
) -> pb::ListDirectoryResponse {
    pb::ListDirectoryResponse {
        path,
        entries: entries
            .into_iter()
            .map(|e| pb::DirEntry {
                path: e.path,
                kind: e.kind,
                size: e.size,
                mtime_ms: e.mtime_ms,
            })
            .collect(),
        truncated,
    }
}

/// Windows on the wire.
pub(crate) fn windows_response(ws: Vec<WindowInfo>) -> pb::ListWindowsResponse {
    pb::ListWindowsResponse {
        windows: ws
            .into_iter()
            .map(|w| pb::WindowInfo {
                id: w.id,
                title: w.title,
                wm_class: w.class,
                pid: w.pid,
                x: w.x,
                y: w.y,
                width: w.width,
                height: w.height,
                focused: w.focused,
            })
            .collect(),
    }
}

/// How a command ended, on the wire.
pub(crate) fn exec_response(
    Executed {
        end,
        stdout,
        stderr,
    }: Executed,
) -> pb::ExecResponse {
    pb::ExecResponse {
        exit_code: end.exit_code,
        signal: end.signal,
        stdout,
        stderr,
        stdout_truncated: end.stdout_truncated,
        stderr_truncated: end.stderr_truncated,
        timed_out: end.timed_out,
        duration_ms: end.duration_ms,
    }
}

mod results;
pub(crate) use results::*;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;
