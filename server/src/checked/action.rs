//! `Action` messages: one small checker per verb, each naming its own fields.

use std::collections::BTreeMap;

use deskgym_proto::v1 as pb;
use deskgym_worker::{Action, Button};
use pb::action::Verb;

use super::Field;
use super::target::{
    Elements, MAX_QUERY_BYTES, button, chord, element_only, optional_target, target,
};
use crate::a11y::{Planned, Slot};
use crate::capability::Capability;
use crate::config::Limits;
use crate::profiles::AppArgs;
use crate::spec::{Invalid, Screen, quote};

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

/// Largest scroll in wheel clicks per axis.
const MAX_SCROLL: i32 = 50;
/// Pixels per wheel click of a pixel scroll (Chromium's and GTK's step).
const SCROLL_PX: i32 = 100;
/// Most extra arguments of one `launch_app`.
const MAX_LAUNCH_ARGS: usize = 64;

/// The verb's field name under `action`: the entry of [`VERBS`] for it.
pub(crate) fn verb_name(v: &Verb) -> &'static str {
    match v {
        Verb::Click(_) => "click",
        Verb::DoubleClick(_) => "double_click",
        Verb::RightClick(_) => "right_click",
        Verb::Move(_) => "move",
        Verb::Scroll(_) => "scroll",
        Verb::Drag(_) => "drag",
        Verb::MouseDown(_) => "mouse_down",
        Verb::MouseUp(_) => "mouse_up",
        Verb::TypeText(_) => "type_text",
        Verb::Key(_) => "key",
        Verb::Wait(_) => "wait",
        Verb::Noop(_) => "noop",
        Verb::LaunchApp(_) => "launch_app",
        Verb::ActivateWindow(_) => "activate_window",
        Verb::CloseWindow(_) => "close_window",
        Verb::MoveWindow(_) => "move_window",
        Verb::ResizeWindow(_) => "resize_window",
        Verb::KeyDown(_) => "key_down",
        Verb::KeyUp(_) => "key_up",
        Verb::InvokeAction(_) => "invoke_action",
        Verb::SetValue(_) => "set_value",
    }
}

/// What one verb's checker needs: the screen and limits it is checked against, the
/// apps it may launch, the verb's own field, and the element targets met so far.
struct Check<'a> {
    screen: Screen,
    limits: &'a Limits,
    apps: &'a BTreeMap<String, Vec<String>>,
    app_args: &'a BTreeMap<String, AppArgs>,
    /// `action.<verb>`.
    field: Field,
    elements: Elements,
}

impl Check<'_> {
    /// A member of the verb's message.
    fn f(&self, name: &str) -> Field {
        self.field.at(name)
    }

    /// A target named `name` in the verb's message, for `slot`.
    fn target(
        &mut self,
        t: Option<&pb::Target>,
        name: &str,
        slot: Slot,
    ) -> Result<deskgym_worker::Point, Invalid> {
        target(
            t,
            &self.field.at(name),
            self.screen,
            slot,
            &mut self.elements,
        )
    }
}

/// Validates a wire action against the screen and limits and turns it into pixels.
pub(crate) fn action(
    a: Option<&pb::Action>,
    screen: Screen,
    limits: &Limits,
    apps: &BTreeMap<String, Vec<String>>,
    app_args: &BTreeMap<String, AppArgs>,
) -> Result<Planned, Invalid> {
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
    let mut k = Check {
        screen,
        limits,
        apps,
        app_args,
        field: Field::named("action").at(verb_name(verb)),
        elements: Elements::new(),
    };
    let action = match verb {
        Verb::Click(c) => click(c, &mut k)?,
        Verb::DoubleClick(c) => Action::Click {
            at: k.target(c.target.as_ref(), "target", Slot::At)?,
            button: Button::Left,
            count: 2,
        },
        Verb::RightClick(c) => Action::Click {
            at: k.target(c.target.as_ref(), "target", Slot::At)?,
            button: Button::Right,
            count: 1,
        },
        Verb::Move(m) => Action::Move {
            to: k.target(m.target.as_ref(), "target", Slot::At)?,
        },
        Verb::Scroll(s) => scroll(s, &mut k)?,
        Verb::Drag(d) => drag(d, &mut k)?,
        Verb::MouseDown(m) => Action::MouseDown {
            at: optional_target(m.target.as_ref(), &k.f("target"), screen, &mut k.elements)?,
            button: button(m.button, &k.f("button"))?,
        },
        Verb::MouseUp(m) => Action::MouseUp {
            at: optional_target(m.target.as_ref(), &k.f("target"), screen, &mut k.elements)?,
            button: button(m.button, &k.f("button"))?,
        },
        Verb::TypeText(t) => type_text(t, &k)?,
        Verb::Key(c) => Action::Key(chord(&c.keys, &k.f("keys"))?),
        Verb::KeyDown(c) => Action::KeyDown(chord(&c.keys, &k.f("keys"))?),
        Verb::KeyUp(c) => Action::KeyUp(chord(&c.keys, &k.f("keys"))?),
        Verb::Wait(w) => wait(w, &k)?,
        Verb::Noop(_) => Action::Noop,
        Verb::LaunchApp(l) => launch_app(l, &k)?,
        Verb::ActivateWindow(w) => activate_window(w, &k)?,
        Verb::CloseWindow(w) => Action::CloseWindow(w.window),
        Verb::MoveWindow(m) => Action::MoveWindow {
            window: m.window,
            x: m.x,
            y: m.y,
        },
        Verb::ResizeWindow(r) => resize_window(r, &k)?,
        Verb::InvokeAction(a) => invoke_action(a, &mut k)?,
        Verb::SetValue(v) => set_value(v, &mut k)?,
    };
    Ok(Planned {
        action,
        elements: k.elements,
        actor: deskgym_datasets::Actor::Agent,
    })
}

/// A target on its own (axstream's `locate`): checked as a move to it would be, its
/// errors named from `target`.
pub(crate) fn locate(t: Option<&pb::Target>, screen: Screen) -> Result<Planned, Invalid> {
    let mut elements = Elements::new();
    let to = target(t, &Field::named("target"), screen, Slot::At, &mut elements)?;
    Ok(Planned {
        action: Action::Move { to },
        elements,
        actor: deskgym_datasets::Actor::Agent,
    })
}

fn click(c: &pb::Click, k: &mut Check<'_>) -> Result<Action, Invalid> {
    let count = if c.count == 0 { 1 } else { c.count };
    if count > 3 {
        return Err(Invalid::new(
            k.f("count"),
            format!("{count} is not in 1..=3"),
        ));
    }
    Ok(Action::Click {
        at: k.target(c.target.as_ref(), "target", Slot::At)?,
        button: button(c.button, &k.f("button"))?,
        count,
    })
}

fn scroll(s: &pb::Scroll, k: &mut Check<'_>) -> Result<Action, Invalid> {
    let max = if s.pixels {
        MAX_SCROLL * SCROLL_PX
    } else {
        MAX_SCROLL
    };
    for (axis, v) in [("dx", s.dx), ("dy", s.dy)] {
        // unsigned_abs: `i32::MIN.abs()` wraps to itself and would pass.
        if v.unsigned_abs() > max.unsigned_abs() {
            return Err(Invalid::new(
                k.f(axis),
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
    Ok(Action::Scroll {
        at: k.target(s.target.as_ref(), "target", Slot::At)?,
        dx: clicks(s.dx),
        dy: clicks(s.dy),
    })
}

fn drag(d: &pb::Drag, k: &mut Check<'_>) -> Result<Action, Invalid> {
    if d.duration_ms > k.limits.max_wait_ms {
        return Err(Invalid::new(
            k.f("duration_ms"),
            format!(
                "{} ms is more than the limit of {}",
                d.duration_ms, k.limits.max_wait_ms
            ),
        ));
    }
    Ok(Action::Drag {
        from: k.target(d.from.as_ref(), "from", Slot::From)?,
        to: k.target(d.to.as_ref(), "to", Slot::To)?,
        button: button(d.button, &k.f("button"))?,
        duration_ms: d.duration_ms,
        modifiers: if d.modifiers.is_empty() {
            String::new()
        } else {
            chord(&d.modifiers, &k.f("modifiers"))?
        },
    })
}

fn type_text(t: &pb::TypeText, k: &Check<'_>) -> Result<Action, Invalid> {
    if t.text.is_empty() {
        return Err(Invalid::new(k.f("text"), "text is empty"));
    }
    let n = t.text.chars().count();
    if n > k.limits.max_text_len as usize {
        return Err(Invalid::new(
            k.f("text"),
            format!(
                "{n} characters is more than the limit of {}",
                k.limits.max_text_len
            ),
        ));
    }
    Ok(Action::TypeText(t.text.clone()))
}

fn wait(w: &pb::Wait, k: &Check<'_>) -> Result<Action, Invalid> {
    if w.ms > k.limits.max_wait_ms {
        return Err(Invalid::new(
            k.f("ms"),
            format!(
                "{} ms is more than the limit of {} ms",
                w.ms, k.limits.max_wait_ms
            ),
        ));
    }
    Ok(Action::Wait(w.ms))
}

fn launch_app(l: &pb::LaunchApp, k: &Check<'_>) -> Result<Action, Invalid> {
    let Some(argv) = k.apps.get(&l.app) else {
        let known: Vec<&str> = k.apps.keys().map(String::as_str).collect();
        return Err(Invalid::new(
            k.f("app"),
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
            k.f("args"),
            format!("more than {MAX_LAUNCH_ARGS} arguments"),
        ));
    }
    let takes = k.app_args.get(&l.app).copied().unwrap_or_default();
    for (i, a) in l.args.iter().enumerate() {
        let field = k.f("args").index(i);
        if a.len() > k.limits.max_text_len as usize {
            return Err(Invalid::new(
                field,
                format!("is over {} bytes", k.limits.max_text_len),
            ));
        }
        if let Some(why) = takes.refuses(a) {
            return Err(Invalid::new(
                field,
                format!("{} {why} (app {})", quote(a), quote(&l.app)),
            ));
        }
    }
    Ok(Action::LaunchApp(
        argv.iter().chain(&l.args).cloned().collect(),
    ))
}

fn activate_window(w: &pb::ActivateWindow, k: &Check<'_>) -> Result<Action, Invalid> {
    match (w.window, w.app.as_str()) {
        (0, "") => Err(Invalid::new(
            &k.field,
            "name a window (an id from ListWindows) or an app (a title substring)",
        )),
        (0, app) => {
            if app.len() > MAX_QUERY_BYTES || app.contains('\0') {
                return Err(Invalid::new(
                    k.f("app"),
                    format!("is over {MAX_QUERY_BYTES} bytes or holds a NUL"),
                ));
            }
            Ok(Action::ActivateApp(app.to_string()))
        }
        (id, _) => Ok(Action::ActivateWindow(id)),
    }
}

fn resize_window(r: &pb::ResizeWindow, k: &Check<'_>) -> Result<Action, Invalid> {
    for (f, v) in [("width", r.width), ("height", r.height)] {
        if !(1..=4096).contains(&v) {
            return Err(Invalid::new(k.f(f), format!("{v} is outside 1..=4096")));
        }
    }
    Ok(Action::ResizeWindow {
        window: r.window,
        width: r.width,
        height: r.height,
    })
}

fn invoke_action(a: &pb::InvokeAction, k: &mut Check<'_>) -> Result<Action, Invalid> {
    element_only(a.target.as_ref(), &k.f("target"), k.screen, &mut k.elements)?;
    if a.action.len() > MAX_QUERY_BYTES || a.action.contains('\0') {
        return Err(Invalid::new(
            k.f("action"),
            format!("contains a NUL byte or is over {MAX_QUERY_BYTES} bytes"),
        ));
    }
    Ok(Action::InvokeAction {
        element: String::new(),
        action: a.action.clone(),
    })
}

fn set_value(v: &pb::SetValue, k: &mut Check<'_>) -> Result<Action, Invalid> {
    element_only(v.target.as_ref(), &k.f("target"), k.screen, &mut k.elements)?;
    if v.value.chars().count() > k.limits.max_text_len as usize || v.value.contains('\0') {
        return Err(Invalid::new(
            k.f("value"),
            format!(
                "contains a NUL byte or is over {} characters",
                k.limits.max_text_len
            ),
        ));
    }
    Ok(Action::SetValue {
        element: String::new(),
        value: v.value.clone(),
    })
}

/// The capability a verb needs beyond the core ones, if any.
pub(crate) fn capability_of(a: Option<&pb::Action>) -> Option<Capability> {
    match a?.verb.as_ref()? {
        Verb::LaunchApp(_) => Some(Capability::LaunchApp),
        Verb::ActivateWindow(_)
        | Verb::CloseWindow(_)
        | Verb::MoveWindow(_)
        | Verb::ResizeWindow(_) => Some(Capability::Windows),
        _ => None,
    }
}
