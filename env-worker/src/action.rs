//! Actions as the worker executes them: already in pixels and already validated by the
//! caller against the screen (the worker re-checks bounds, since it owns the screen).

/// A mouse button, numbered as X numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Button {
    /// Button 1.
    Left,
    /// Button 2.
    Middle,
    /// Button 3.
    Right,
}

impl Button {
    /// The stored name (`"left"`, `"middle"`, `"right"`), as the wire's `MouseButton`
    /// spells it in lower case; never `Debug` output.
    pub fn name(self) -> &'static str {
        match self {
            Self::Left => "left",
            Self::Middle => "middle",
            Self::Right => "right",
        }
    }

    /// The X button number.
    pub fn x_button(self) -> u8 {
        match self {
            Button::Left => 1,
            Button::Middle => 2,
            Button::Right => 3,
        }
    }
}

/// A point in screen pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Point {
    /// Column.
    pub x: i32,
    /// Row.
    pub y: i32,
}

/// One input action.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Move to `at`, then press and release `button` `count` times.
    Click {
        /// Where.
        at: Point,
        /// Which button.
        button: Button,
        /// How many clicks (1..=3).
        count: u32,
    },
    /// Move the pointer.
    Move {
        /// Where.
        to: Point,
    },
    /// Move to `at`, then turn the wheel; positive `dy` scrolls down, positive `dx` right.
    Scroll {
        /// Where.
        at: Point,
        /// Horizontal clicks.
        dx: i32,
        /// Vertical clicks.
        dy: i32,
    },
    /// Press at `from`, move to `to` in steps, release.
    Drag {
        /// Press position.
        from: Point,
        /// Release position.
        to: Point,
        /// Which button.
        button: Button,
        /// How long the move takes (0: as fast as the steps go).
        duration_ms: u32,
        /// A chord of keys held during the drag (e.g. `shift`), or empty.
        modifiers: String,
    },
    /// Press a button (after moving to `at` when given).
    MouseDown {
        /// Optional position.
        at: Option<Point>,
        /// Which button.
        button: Button,
    },
    /// Release a button (after moving to `at` when given).
    MouseUp {
        /// Optional position.
        at: Option<Point>,
        /// Which button.
        button: Button,
    },
    /// Type Unicode text.
    TypeText(String),
    /// Press a chord such as `ctrl+s`.
    Key(String),
    /// Press and hold the keys of a chord (released by `KeyUp` or the next reset).
    KeyDown(String),
    /// Release the keys of a chord.
    KeyUp(String),
    /// Let `ms` milliseconds pass.
    Wait(u32),
    /// Do nothing.
    Noop,
    /// Start a program in the sandbox (argv, resolved from the profile's apps by the
    /// server) and wait up to 10 s for a new window.
    LaunchApp(Vec<String>),
    /// Raise and focus a window.
    ActivateWindow(u32),
    /// Raise and focus the first window whose title contains this, ignoring case.
    ActivateApp(String),
    /// Ask a window to close.
    CloseWindow(u32),
    /// Move a window's frame.
    MoveWindow {
        /// Window id.
        window: u32,
        /// New left edge.
        x: i32,
        /// New top edge.
        y: i32,
    },
    /// Perform an element's accessibility action (its first when `action` is empty).
    InvokeAction {
        /// Element identity ([`crate::a11y::Node::id`]).
        element: String,
        /// Action name.
        action: String,
    },
    /// Set an element's text or number through its accessibility interface.
    SetValue {
        /// Element identity.
        element: String,
        /// New value.
        value: String,
    },
    /// Resize a window.
    ResizeWindow {
        /// Window id.
        window: u32,
        /// New width.
        width: u32,
        /// New height.
        height: u32,
    },
}

impl Action {
    /// Whether a replay may send `actions[i]` without a settle: it, the action before
    /// and the action after all [replay unsettled](Self::replays_unsettled). A run's
    /// last key waits for the run, and its first key waits for the app to take it: the
    /// first key after a click may start an edit mode (Impress's text box, Calc's
    /// cell), and keys sent while the app enters it land out of order.
    pub fn in_unsettled_run(actions: &[Action], i: usize) -> bool {
        i > 0
            && actions[i - 1].replays_unsettled()
            && actions.get(i).is_some_and(Action::replays_unsettled)
            && actions.get(i + 1).is_some_and(Action::replays_unsettled)
    }

    /// Whether a replay may send this key without waiting for the screen before the
    /// next one: text without line breaks or tabs, and single keys that edit where the
    /// focus is (a character, BackSpace, Delete, arrows, Home, End, space). Enter, Tab,
    /// Escape, function keys and chords may run a command, move the focus or open a
    /// window, so the replay waits after them.
    pub fn replays_unsettled(&self) -> bool {
        match self {
            Action::TypeText(t) => !t.contains(['\n', '\r', '\t']),
            Action::Key(k) => {
                k.chars().count() == 1 && k != "+"
                    || matches!(
                        k.to_ascii_lowercase().as_str(),
                        "backspace"
                            | "delete"
                            | "left"
                            | "right"
                            | "up"
                            | "down"
                            | "home"
                            | "end"
                            | "space"
                    )
            }
            _ => false,
        }
    }

    /// Whether the focused app answers this input by drawing (a typed character, an
    /// edit, a command's output): typed text and keys, except a bare modifier, which
    /// draws nothing anywhere.
    pub fn answered_by_drawing(&self) -> bool {
        match self {
            Action::TypeText(_) => true,
            Action::Key(k) => !matches!(
                k.to_ascii_lowercase().as_str(),
                "shift" | "ctrl" | "control" | "alt" | "super" | "meta" | "win" | "cmd"
            ),
            _ => false,
        }
    }

    /// The points this action touches, with the field name each came from.
    pub fn points(&self) -> Vec<(&'static str, Point)> {
        match self {
            Action::Click { at, .. } | Action::Scroll { at, .. } => vec![("target", *at)],
            Action::Move { to } => vec![("target", *to)],
            Action::Drag { from, to, .. } => vec![("from", *from), ("to", *to)],
            Action::MouseDown { at, .. } | Action::MouseUp { at, .. } => {
                at.iter().map(|p| ("target", *p)).collect()
            }
            _ => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_that_edit_in_place_replay_unsettled() {
        let text = |t: &str| Action::TypeText(t.into());
        let key = |k: &str| Action::Key(k.into());
        for a in [
            text("echo hi"),
            key("a"),
            key("BackSpace"),
            key("left"),
            key("space"),
        ] {
            assert!(a.replays_unsettled(), "{a:?}");
        }
        for a in [
            text("ls\n"),
            text("a\tb"),
            key("Return"),
            key("Tab"),
            key("Escape"),
            key("F2"),
            key("ctrl+alt+t"),
            key("+"),
            Action::KeyDown("shift".into()),
            Action::Click {
                at: Point { x: 1, y: 1 },
                button: Button::Left,
                count: 1,
            },
            Action::Wait(10),
        ] {
            assert!(!a.replays_unsettled(), "{a:?}");
        }
    }

    #[test]
    fn a_run_sends_only_its_middle_keys_unsettled() {
        let key = |k: &str| Action::Key(k.into());
        let click = Action::Click {
            at: Point { x: 1, y: 1 },
            button: Button::Left,
            count: 1,
        };
        let actions = [click, key("a"), key("b"), key("c"), key("d"), key("Return")];
        let unsettled: Vec<bool> = (0..actions.len())
            .map(|i| Action::in_unsettled_run(&actions, i))
            .collect();
        assert_eq!(unsettled, [false, false, true, true, false, false]);
        assert!(!Action::in_unsettled_run(&[key("a"), key("b")], 0));
        assert!(!Action::in_unsettled_run(&[key("a"), key("b")], 1));
    }
}
