//! Input over DevTools: pointer, keys (an X keysym as the DOM key, code and virtual key
//! code Chromium expects), text, the element's own click. Events are posted (sent
//! without waiting, [`Cdp::post`]): a click's three and a word's keys go out back to
//! back, and the settle's call after them waits for their answers first.

use super::*;

/// Pixels one wheel click scrolls (Chromium's step for an X wheel click).
pub(super) const WHEEL_PX: i32 = 53;

/// A key as DevTools dispatches it.
pub(super) struct KeyDef {
    pub(super) key: String,
    pub(super) code: String,
    pub(super) vk: u32,
    pub(super) text: Option<String>,
}

pub(super) fn modifier_bit(k: Keysym) -> u32 {
    match k {
        0xffe9 | 0xffea => 1,          // Alt
        0xffe3 | 0xffe4 => 2,          // Control
        0xffe7 | 0xffeb | 0xffec => 4, // Meta / Super
        0xffe1 | 0xffe2 => 8,          // Shift
        _ => 0,
    }
}

/// The DOM key, code and Windows virtual key code of an X keysym: printable ASCII and
/// the named keys MiniWoB++'s tasks read.
pub(super) fn key_def(k: Keysym) -> Option<KeyDef> {
    let named = |key: &str, code: &str, vk: u32, text: Option<&str>| KeyDef {
        key: key.into(),
        code: code.into(),
        vk,
        text: text.map(str::to_string),
    };
    Some(match k {
        0xff08 => named("Backspace", "Backspace", 8, None),
        0xff09 => named("Tab", "Tab", 9, None),
        0xff0d => named("Enter", "Enter", 13, Some("\r")),
        0xff8d => named("Enter", "NumpadEnter", 13, Some("\r")),
        0xff1b => named("Escape", "Escape", 27, None),
        0xffff => named("Delete", "Delete", 46, None),
        0xff50 => named("Home", "Home", 36, None),
        0xff51 => named("ArrowLeft", "ArrowLeft", 37, None),
        0xff52 => named("ArrowUp", "ArrowUp", 38, None),
        0xff53 => named("ArrowRight", "ArrowRight", 39, None),
        0xff54 => named("ArrowDown", "ArrowDown", 40, None),
        0xff55 => named("PageUp", "PageUp", 33, None),
        0xff56 => named("PageDown", "PageDown", 34, None),
        0xff57 => named("End", "End", 35, None),
        0xffe1 => named("Shift", "ShiftLeft", 16, None),
        0xffe2 => named("Shift", "ShiftRight", 16, None),
        0xffe3 => named("Control", "ControlLeft", 17, None),
        0xffe4 => named("Control", "ControlRight", 17, None),
        0xffe9 => named("Alt", "AltLeft", 18, None),
        0xffea => named("Alt", "AltRight", 18, None),
        0xffe7 | 0xffeb => named("Meta", "MetaLeft", 91, None),
        0xffec => named("Meta", "MetaRight", 92, None),
        0xff63 => named("Insert", "Insert", 45, None),
        // F1..F12.
        0xffbe..=0xffc9 => {
            let n = k - 0xffbe + 1;
            let f = format!("F{n}");
            named(&f, &f, 111 + n, None)
        }
        // The keypad, as WebDriver's numpad keys (MiniWoB++'s `<Numpad0>`...) send it.
        0xffb0..=0xffb9 => {
            let d = char::from_digit(k - 0xffb0, 10)?.to_string();
            named(&d, &format!("Numpad{d}"), 96 + k - 0xffb0, Some(&d))
        }
        0xffaa => named("*", "NumpadMultiply", 106, Some("*")),
        0xffab => named("+", "NumpadAdd", 107, Some("+")),
        0xffac => named(",", "NumpadComma", 108, Some(",")),
        0xffad => named("-", "NumpadSubtract", 109, Some("-")),
        0xffae => named(".", "NumpadDecimal", 110, Some(".")),
        0xffaf => named("/", "NumpadDivide", 111, Some("/")),
        0x20..=0x7e => {
            let c = char::from_u32(k)?;
            let (code, vk) = match c {
                'a'..='z' => (
                    format!("Key{}", c.to_ascii_uppercase()),
                    c.to_ascii_uppercase() as u32,
                ),
                'A'..='Z' => (format!("Key{c}"), c as u32),
                '0'..='9' => (format!("Digit{c}"), c as u32),
                ' ' => ("Space".into(), 32),
                _ => (String::new(), 0),
            };
            KeyDef {
                key: c.to_string(),
                code,
                vk,
                text: Some(c.to_string()),
            }
        }
        _ => return None,
    })
}

/// [`key_def`], or the error that names the key a web task cannot take.
fn dom_key(k: Keysym) -> Result<KeyDef> {
    key_def(k).ok_or_else(|| {
        DesktopError::invalid("key", format!("key 0x{k:x} has no DOM key in a web task"))
    })
}

impl Page {
    pub(super) fn modifiers(&self) -> u32 {
        self.held.iter().fold(0, |m, k| m | modifier_bit(*k))
    }

    pub(super) fn mouse(
        &mut self,
        kind: &str,
        at: Point,
        button: Option<Button>,
        clicks: u32,
    ) -> Result<()> {
        self.pointer = at;
        let (name, buttons) = match button {
            None => ("none", 0),
            Some(Button::Left) => ("left", 1),
            Some(Button::Right) => ("right", 2),
            Some(Button::Middle) => ("middle", 4),
        };
        let buttons = if kind == "mouseReleased" { 0 } else { buttons };
        let params = json!({"type": kind, "x": at.x, "y": at.y, "button": name,
                            "buttons": buttons, "clickCount": clicks,
                            "modifiers": self.modifiers()});
        self.cdp.post("Input.dispatchMouseEvent", params)
    }

    pub(super) fn key_event(&mut self, kind: &str, k: Keysym) -> Result<()> {
        let def = dom_key(k)?;
        let mods = self.modifiers();
        // Text only for a printable key without Ctrl/Alt/Meta (as a browser does).
        let text = (kind == "keyDown" && mods & 0b111 == 0)
            .then_some(def.text)
            .flatten();
        let kind = if kind == "keyDown" && text.is_none() {
            "rawKeyDown"
        } else {
            kind
        };
        let mut p = json!({"type": kind, "key": def.key, "code": def.code,
                           "windowsVirtualKeyCode": def.vk, "modifiers": mods});
        if let Some(t) = text {
            p["text"] = json!(t);
            p["unmodifiedText"] = json!(t);
        }
        self.cdp.post("Input.dispatchKeyEvent", p)
    }

    pub(super) fn chord(&mut self, chord: &str, down: bool, up: bool) -> Result<()> {
        let syms = keys::parse_chord(chord).map_err(|m| DesktopError::invalid("key", m))?;
        // The whole chord is checked before any key goes down: a key refused halfway
        // would leave the ones before it held.
        for &k in &syms {
            dom_key(k)?;
        }
        if down {
            for &k in &syms {
                self.key_event("keyDown", k)?;
                self.held.push(k);
            }
        }
        if up {
            for &k in syms.iter().rev() {
                if let Some(i) = self.held.iter().rposition(|h| *h == k) {
                    self.held.remove(i);
                }
                self.key_event("keyUp", k)?;
            }
        }
        Ok(())
    }

    pub(super) fn type_text(&mut self, text: &str) -> Result<()> {
        for c in text.chars() {
            let k = match c {
                '\n' | '\r' => keys::RETURN,
                '\t' => keys::TAB,
                c => keys::char_keysym(c),
            };
            if key_def(k).is_some() {
                self.key_event("keyDown", k)?;
                self.key_event("keyUp", k)?;
            } else {
                // Beyond the key table (non-ASCII): the text arrives as an IME would,
                // by another route than key events, so after their answers (a call).
                self.cdp
                    .call("Input.insertText", json!({"text": c.to_string()}))?;
            }
        }
        Ok(())
    }

    pub(super) fn clicks(&mut self, at: Point, button: Button, count: u32) -> Result<()> {
        self.mouse("mouseMoved", at, None, 0)?;
        for i in 1..=count {
            self.mouse("mousePressed", at, Some(button), i)?;
            self.mouse("mouseReleased", at, Some(button), i)?;
        }
        Ok(())
    }

    pub(super) fn click(&mut self, at: Point) -> Result<()> {
        self.clicks(at, Button::Left, 1)
    }

    pub(super) fn act(&mut self, action: &Action) -> Result<()> {
        match action {
            Action::Click { at, button, count } => self.clicks(*at, *button, *count)?,
            Action::Move { to } => self.mouse("mouseMoved", *to, None, 0)?,
            Action::Scroll { at, dx, dy } => {
                self.mouse("mouseMoved", *at, None, 0)?;
                self.cdp.post(
                    "Input.dispatchMouseEvent",
                    json!({"type": "mouseWheel", "x": at.x, "y": at.y,
                           "deltaX": dx.saturating_mul(WHEEL_PX), "deltaY": dy.saturating_mul(WHEEL_PX),
                           "modifiers": self.modifiers()}),
                )?;
            }
            Action::Drag {
                from,
                to,
                button,
                duration_ms,
                modifiers,
            } => {
                if !modifiers.is_empty() {
                    self.chord(modifiers, true, false)?;
                }
                self.mouse("mouseMoved", *from, None, 0)?;
                self.mouse("mousePressed", *from, Some(*button), 1)?;
                const STEPS: i32 = 8;
                let pause = Duration::from_millis(u64::from(*duration_ms) / STEPS as u64);
                for i in 1..=STEPS {
                    let p = Point {
                        x: from.x + (to.x - from.x) * i / STEPS,
                        y: from.y + (to.y - from.y) * i / STEPS,
                    };
                    std::thread::sleep(pause);
                    self.mouse("mouseMoved", p, Some(*button), 0)?;
                }
                self.mouse("mouseReleased", *to, Some(*button), 1)?;
                if !modifiers.is_empty() {
                    self.chord(modifiers, false, true)?;
                }
            }
            Action::MouseDown { at, button } => {
                let at = at.unwrap_or(self.pointer);
                self.mouse("mousePressed", at, Some(*button), 1)?;
            }
            Action::MouseUp { at, button } => {
                let at = at.unwrap_or(self.pointer);
                self.mouse("mouseReleased", at, Some(*button), 1)?;
            }
            Action::TypeText(t) => self.type_text(t)?,
            Action::Key(c) => self.chord(c, true, true)?,
            Action::KeyDown(c) => self.chord(c, true, false)?,
            Action::KeyUp(c) => self.chord(c, false, true)?,
            Action::Wait(ms) => std::thread::sleep(Duration::from_millis((*ms).into())),
            Action::Noop => {}
            Action::InvokeAction { element, action } => {
                if !(action.is_empty() || action.eq_ignore_ascii_case("click")) {
                    return Err(DesktopError::element(
                        crate::error::ElementFailure::Unsupported,
                        format!("the element has no action {action:?}; it offers [\"click\"]"),
                    ));
                }
                self.element_click(element)?;
            }
            Action::SetValue { element, value } => {
                let at = self.target(element)?;
                self.click(at)?;
                // Select what the field holds, so the new text replaces it.
                self.cdp.eval(
                    "(() => { const e = document.activeElement; if (e && e.select) e.select(); })()",
                )?;
                if value.is_empty() {
                    self.chord("BackSpace", true, true)?;
                } else {
                    self.type_text(value)?;
                }
            }
            Action::LaunchApp(_)
            | Action::ActivateWindow(_)
            | Action::ActivateApp(_)
            | Action::CloseWindow(_)
            | Action::MoveWindow { .. }
            | Action::ResizeWindow { .. } => {
                return Err(DesktopError::invalid(
                    "action",
                    "a web task shows one page: window and application actions do not apply",
                ));
            }
        }
        Ok(())
    }

    /// The element's own click, as MiniWoB++'s `CLICK_ELEMENT` does it
    /// (`core.elementClick`: the DOM's `click()` and `focus()`, an element drawn over it
    /// or not); no pointer event, as an accessibility action is none.
    pub(super) fn element_click(&mut self, id: &str) -> Result<()> {
        // No re-reading here: each `core.getDOMInfo()` numbers the text runs anew, and
        // `core.elementClick` looks up the elements the last reading (the ref's) saw.
        let wob: i64 = id
            .strip_prefix("wob:")
            .and_then(|r| r.parse().ok())
            .filter(|r| *r > 0)
            .ok_or_else(|| {
                DesktopError::element(
                    crate::error::ElementFailure::Unsupported,
                    "a text run has no click of its own: click its element, or a point",
                )
            })?;
        let click = format!("core.previousDOMInfo[{wob}] ? core.elementClick({wob}) : 'unread'");
        let mut answer = self.cdp.eval(&click)?;
        if answer.as_str() == Some("unread") {
            // Not on the page at the last reading (hidden then, say): read it now.
            self.live(id)?;
            answer = self.cdp.eval(&click)?;
        }
        match answer {
            Value::Bool(true) => Ok(()),
            other => Err(DesktopError::element(
                crate::error::ElementFailure::Gone,
                format!(
                    "the page refused the click: {}",
                    crate::error::quote(&other.to_string())
                ),
            )),
        }
    }

    /// Where a pointer action on element `id` lands (its centre), if it shows.
    pub(super) fn target(&mut self, id: &str) -> Result<Point> {
        self.live(id)?.target().ok_or_else(|| {
            DesktopError::element(
                crate::error::ElementFailure::Gone,
                "the element is not showing",
            )
        })
    }
}
