//! `type-word`: click the text field, type the word, press Enter; a wrong word ends the
//! episode with 0. Keys count only while the field has the focus.

use super::{
    Area, BLACK, BLUE, Draw, FIELD, FontMetrics, GRAY, Handled, Input, Rect, Rng, Task, TaskSpec,
    Widget, keysym_char, place, text_y,
};

/// The registry entry.
pub(super) const SPEC: TaskSpec = TaskSpec::bundled(
    "type-word",
    "Click the text field, type the word and press Enter; a wrong word ends the episode.",
    20,
    layout,
);

const WORDS: &[&str] = &[
    "apple", "river", "stone", "cloud", "piano", "tiger", "lemon", "orbit", "maple", "pixel",
    "ocean", "amber", "delta", "honey", "ivory", "jelly", "karma", "lunar", "mango", "noble",
];

/// Longest text the field takes.
const MAX_CHARS: usize = 64;

#[derive(Clone, Debug)]
struct TypeWord {
    field: Rect,
    word: &'static str,
    text: String,
    focused: bool,
}

fn layout(rng: &mut Rng, a: Area) -> (String, Box<dyn Task>) {
    let word = WORDS[rng.range(0, WORDS.len() as i32) as usize];
    let field = place(rng, a.w, a.h, &[((a.w / 3).max(120), a.unit.max(28))])[0];
    let task = TypeWord {
        field,
        word,
        text: String::new(),
        focused: false,
    };
    (
        format!("Click the text field, type \"{word}\" and press Enter."),
        Box::new(task),
    )
}

impl Task for TypeWord {
    fn handle(&mut self, input: Input, _: Area) -> Handled {
        match input {
            Input::Press { button: 1, x, y } => {
                let now = self.field.contains(x, y);
                let changed = now != self.focused;
                self.focused = now;
                if changed {
                    Handled::CHANGED
                } else {
                    Handled::NOTHING
                }
            }
            Input::Key { keysym } if self.focused => match keysym {
                crate::keys::RETURN | 0xff8d => {
                    Handled::finished(if self.text == self.word { 1.0 } else { 0.0 })
                }
                crate::keys::BACKSPACE if self.text.pop().is_some() => Handled::CHANGED,
                k => match keysym_char(k) {
                    Some(c) if self.text.chars().count() < MAX_CHARS => {
                        self.text.push(c);
                        Handled::CHANGED
                    }
                    _ => Handled::NOTHING,
                },
            },
            _ => Handled::NOTHING,
        }
    }

    fn draw(&self, font: FontMetrics, d: &mut Vec<Draw>) {
        let f = self.field;
        d.push(Draw::Rect {
            x: f.x,
            y: f.y,
            w: f.w,
            h: f.h,
            color: FIELD,
        });
        let (color, width) = if self.focused { (BLUE, 3) } else { (GRAY, 1) };
        d.push(Draw::Frame {
            x: f.x,
            y: f.y,
            w: f.w,
            h: f.h,
            color,
            width,
        });
        let shown = if self.focused {
            format!("{}|", self.text)
        } else {
            self.text.clone()
        };
        if !shown.is_empty() {
            d.push(Draw::Text {
                x: f.x + 6,
                y: text_y(font, f.y, f.h),
                text: shown,
                fg: BLACK,
                bg: FIELD,
            });
        }
    }

    fn hint(&self) -> Vec<(i32, i32)> {
        vec![self.field.center()]
    }

    fn widgets(&self) -> Vec<Widget> {
        vec![Widget {
            text: Some(self.text.clone()),
            ..Widget::new("text", "text field", self.field)
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::super::Episode;
    use super::*;

    fn word_of(e: &Episode) -> String {
        e.instruction().split('"').nth(1).unwrap().to_string()
    }

    #[test]
    fn typing_needs_focus_and_the_right_word() {
        let mut e = Episode::new("type-word", 5, 1280, 720).unwrap();
        let word = word_of(&e);
        e.handle(Input::Key { keysym: 'x' as u32 });
        let (x, y) = e.hint()[0];
        e.handle(Input::Press { button: 1, x, y });
        for c in word.chars() {
            e.handle(Input::Key { keysym: c as u32 });
        }
        e.handle(Input::Key {
            keysym: crate::keys::RETURN,
        });
        assert_eq!(e.reward(), 1.0, "unfocused keys must not count");

        let mut e = Episode::new("type-word", 5, 1280, 720).unwrap();
        e.handle(Input::Press { button: 1, x, y });
        e.handle(Input::Key { keysym: 'q' as u32 });
        e.handle(Input::Key {
            keysym: crate::keys::RETURN,
        });
        assert!(e.done());
        assert_eq!(e.reward(), 0.0);
    }
}
