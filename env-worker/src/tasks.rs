//! The bundled MiniWoB-style tasks: seeded layouts, input handling and scenes.
//!
//! Pure logic, no X11: the task app (`app` module) feeds X input into an [`Episode`]
//! and draws the [`Draw`] list it returns. Same task + seed + screen = same scene.

/// One bundled task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskSpec {
    /// Id used on the wire, e.g. `click-target`.
    pub id: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// Episode bound used when a pool does not set one.
    pub default_max_steps: u32,
    /// How the server knows the screen is final after an action, unless a pool
    /// overrides it. The bundled app acknowledges after drawing: `Sync`.
    pub settle: crate::SettlePolicy,
}

/// Every bundled task.
pub const TASKS: &[TaskSpec] = &[
    TaskSpec {
        id: "click-target",
        description: "Click the red circle among distractor squares.",
        default_max_steps: 10,
        settle: crate::SettlePolicy::Sync,
    },
    TaskSpec {
        id: "click-button",
        description: "Click the button whose label the instruction names; a wrong button ends the episode.",
        default_max_steps: 10,
        settle: crate::SettlePolicy::Sync,
    },
    TaskSpec {
        id: "drag-to-zone",
        description: "Drag the orange square into the green zone.",
        default_max_steps: 10,
        settle: crate::SettlePolicy::Sync,
    },
    TaskSpec {
        id: "type-word",
        description: "Click the text field, type the word and press Enter; a wrong word ends the episode.",
        default_max_steps: 20,
        settle: crate::SettlePolicy::Sync,
    },
];

/// Looks up a bundled task by id.
pub fn task_spec(id: &str) -> Option<&'static TaskSpec> {
    TASKS.iter().find(|t| t.id == id)
}

/// An RGB colour as X's TrueColor pixel value.
pub type Color = u32;

const BACKGROUND: Color = 0xf0f0f0;
const BAR: Color = 0x2d3340;
const WHITE: Color = 0xffffff;
const BLACK: Color = 0x000000;
const RED: Color = 0xd62828;
const BLUE: Color = 0x3a6ea5;
const ORANGE: Color = 0xf77f00;
const GREEN: Color = 0x2a9d8f;
const GRAY: Color = 0xb8b8b8;
const BUTTON: Color = 0xdfe6ee;
/// Text field fill; distinct from the bar's white text so the field is findable by colour.
const FIELD: Color = 0xfcfcfc;

/// Height of the instruction bar at the top of every task screen.
pub const BAR_HEIGHT: i32 = 32;

/// One drawing operation, in screen pixels.
#[allow(missing_docs)] // fields are plain geometry and colours, described on each variant
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Draw {
    /// Filled rectangle.
    Rect {
        x: i32,
        y: i32,
        w: i32,
        h: i32,
        color: Color,
    },
    /// Rectangle outline `width` pixels thick.
    Frame {
        x: i32,
        y: i32,
        w: i32,
        h: i32,
        color: Color,
        width: i32,
    },
    /// Filled circle.
    Circle {
        cx: i32,
        cy: i32,
        r: i32,
        color: Color,
    },
    /// Text whose baseline starts at (x, y), on a background of `bg`.
    Text {
        x: i32,
        y: i32,
        text: String,
        fg: Color,
        bg: Color,
    },
}

/// Size of the fixed-width font the app draws with, needed to centre labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FontMetrics {
    /// Advance of one character.
    pub char_width: i32,
    /// Pixels above the baseline.
    pub ascent: i32,
    /// Pixels below the baseline.
    pub descent: i32,
}

/// An input event as the task sees it.
#[allow(missing_docs)] // fields are button numbers, pixels and keysyms
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// A button went down at (x, y).
    Press { button: u8, x: i32, y: i32 },
    /// A button came up at (x, y).
    Release { button: u8, x: i32, y: i32 },
    /// The pointer moved to (x, y).
    Motion { x: i32, y: i32 },
    /// A key producing `keysym` was pressed.
    Key { keysym: u32 },
}

/// A tiny deterministic PRNG (SplitMix64): layouts must not depend on a crate's
/// algorithm choices across versions.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeds the generator.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x6a09_e667_f3bc_c909)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform integer in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: i32, hi: i32) -> i32 {
        if hi <= lo {
            return lo;
        }
        lo + (self.next_u64() % (hi - lo) as u64) as i32
    }
}

/// An axis-aligned box.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rect {
    /// Left.
    pub x: i32,
    /// Top.
    pub y: i32,
    /// Width.
    pub w: i32,
    /// Height.
    pub h: i32,
}

impl Rect {
    /// True when (px, py) lies inside.
    pub fn contains(&self, px: i32, py: i32) -> bool {
        px >= self.x && py >= self.y && px < self.x + self.w && py < self.y + self.h
    }

    /// Centre point.
    pub fn center(&self) -> (i32, i32) {
        (self.x + self.w / 2, self.y + self.h / 2)
    }

    fn overlaps(&self, o: &Rect, pad: i32) -> bool {
        self.x - pad < o.x + o.w
            && o.x - pad < self.x + self.w
            && self.y - pad < o.y + o.h
            && o.y - pad < self.y + self.h
    }
}

/// Places `n` boxes of the given sizes without overlap inside the task area.
fn place(rng: &mut Rng, w: i32, h: i32, sizes: &[(i32, i32)]) -> Vec<Rect> {
    let mut out: Vec<Rect> = Vec::with_capacity(sizes.len());
    for &(bw, bh) in sizes {
        let mut r = Rect {
            x: 0,
            y: 0,
            w: bw,
            h: bh,
        };
        for _attempt in 0..200 {
            r.x = rng.range(8, (w - bw - 8).max(9));
            r.y = rng.range(BAR_HEIGHT + 8, (h - bh - 8).max(BAR_HEIGHT + 9));
            if !out.iter().any(|o| o.overlaps(&r, 8)) {
                break;
            }
        }
        out.push(r);
    }
    out
}

const WORDS: &[&str] = &[
    "apple", "river", "stone", "cloud", "piano", "tiger", "lemon", "orbit", "maple", "pixel",
    "ocean", "amber", "delta", "honey", "ivory", "jelly", "karma", "lunar", "mango", "noble",
];
const LABELS: &[&str] = &[
    "Submit", "Cancel", "OK", "Next", "Back", "Save", "Delete", "Open", "Close", "Help", "Yes",
    "No", "Retry", "Apply", "Reset", "Search",
];

/// Per-task episode state.
#[derive(Clone, Debug)]
enum State {
    ClickTarget {
        target: (i32, i32, i32),
        distractors: Vec<Rect>,
    },
    ClickButton {
        buttons: Vec<(Rect, &'static str)>,
        answer: usize,
    },
    DragToZone {
        item: Rect,
        zone: Rect,
        grab: Option<(i32, i32)>,
    },
    TypeWord {
        field: Rect,
        word: &'static str,
        text: String,
        focused: bool,
    },
}

/// One episode of a bundled task.
#[derive(Clone, Debug)]
pub struct Episode {
    task: &'static TaskSpec,
    width: i32,
    height: i32,
    instruction: String,
    state: State,
    reward: f64,
    done: bool,
}

impl Episode {
    /// Lays out a new episode. Returns `None` for an unknown task id.
    pub fn new(task: &str, seed: u64, width: u32, height: u32) -> Option<Self> {
        let spec = task_spec(task)?;
        let (w, h) = (width as i32, height as i32);
        let mut rng = Rng::new(seed);
        let unit = (w.min(h) / 12).max(16);
        let (instruction, state) = match spec.id {
            "click-target" => {
                let r = rng.range(unit / 2, unit);
                let mut sizes = vec![(2 * r, 2 * r)];
                let n = rng.range(2, 5) as usize;
                for _ in 0..n {
                    let s = rng.range(unit / 2, unit * 3 / 2);
                    sizes.push((s, s));
                }
                let boxes = place(&mut rng, w, h, &sizes);
                let (cx, cy) = boxes[0].center();
                (
                    "Click the red circle.".to_string(),
                    State::ClickTarget {
                        target: (cx, cy, r),
                        distractors: boxes[1..].to_vec(),
                    },
                )
            }
            "click-button" => {
                let n = rng.range(3, 6) as usize;
                let mut labels: Vec<&'static str> = Vec::with_capacity(n);
                while labels.len() < n {
                    let l = LABELS[rng.range(0, LABELS.len() as i32) as usize];
                    if !labels.contains(&l) {
                        labels.push(l);
                    }
                }
                let sizes = vec![(unit * 2 + 20, unit); n];
                let boxes = place(&mut rng, w, h, &sizes);
                let answer = rng.range(0, n as i32) as usize;
                (
                    format!("Click the button labelled \"{}\".", labels[answer]),
                    State::ClickButton {
                        buttons: boxes.into_iter().zip(labels).collect(),
                        answer,
                    },
                )
            }
            "drag-to-zone" => {
                let boxes = place(&mut rng, w, h, &[(unit, unit), (unit * 3, unit * 3)]);
                (
                    "Drag the orange square into the green zone.".to_string(),
                    State::DragToZone {
                        item: boxes[0],
                        zone: boxes[1],
                        grab: None,
                    },
                )
            }
            "type-word" => {
                let word = WORDS[rng.range(0, WORDS.len() as i32) as usize];
                let field = place(&mut rng, w, h, &[((w / 3).max(120), unit.max(28))])[0];
                (
                    format!("Click the text field, type \"{word}\" and press Enter."),
                    State::TypeWord {
                        field,
                        word,
                        text: String::new(),
                        focused: false,
                    },
                )
            }
            _ => return None,
        };
        Some(Self {
            task: spec,
            width: w,
            height: h,
            instruction,
            state,
            reward: 0.0,
            done: false,
        })
    }

    /// The task this episode runs.
    pub fn task(&self) -> &'static TaskSpec {
        self.task
    }

    /// The instruction shown in the bar.
    pub fn instruction(&self) -> &str {
        &self.instruction
    }

    /// Reward so far (1.0 after success).
    pub fn reward(&self) -> f64 {
        self.reward
    }

    /// True once the episode reached a terminal state.
    pub fn done(&self) -> bool {
        self.done
    }

    /// Where an oracle would act: the point to click, or the drag start (used by tests
    /// and the scripted demo agent's ground truth; agents see only pixels).
    pub fn hint(&self) -> Vec<(i32, i32)> {
        match &self.state {
            State::ClickTarget { target, .. } => vec![(target.0, target.1)],
            State::ClickButton { buttons, answer } => vec![buttons[*answer].0.center()],
            State::DragToZone { item, zone, .. } => vec![item.center(), zone.center()],
            State::TypeWord { field, .. } => vec![field.center()],
        }
    }

    fn finish(&mut self, reward: f64) {
        self.reward = reward;
        self.done = true;
    }

    /// Applies one input event. Returns true when the scene changed.
    pub fn handle(&mut self, input: Input) -> bool {
        if self.done {
            return false;
        }
        match (&mut self.state, input) {
            (
                State::ClickTarget {
                    target: (cx, cy, r),
                    ..
                },
                Input::Press { button: 1, x, y },
            ) => {
                let (dx, dy) = ((x - *cx) as i64, (y - *cy) as i64);
                if dx * dx + dy * dy <= (*r as i64) * (*r as i64) {
                    self.finish(1.0);
                    return true;
                }
                false
            }
            (State::ClickButton { buttons, answer }, Input::Press { button: 1, x, y }) => {
                match buttons.iter().position(|(b, _)| b.contains(x, y)) {
                    Some(i) => {
                        let reward = if i == *answer { 1.0 } else { 0.0 };
                        self.finish(reward);
                        true
                    }
                    None => false,
                }
            }
            (State::DragToZone { item, grab, .. }, Input::Press { button: 1, x, y }) => {
                if item.contains(x, y) {
                    *grab = Some((x - item.x, y - item.y));
                }
                false
            }
            (
                State::DragToZone {
                    item,
                    grab: Some((ox, oy)),
                    ..
                },
                Input::Motion { x, y },
            ) => {
                let (w, h) = (self.width, self.height);
                item.x = (x - *ox).clamp(0, w - item.w);
                item.y = (y - *oy).clamp(BAR_HEIGHT, h - item.h);
                true
            }
            (State::DragToZone { item, zone, grab }, Input::Release { button: 1, .. }) => {
                if grab.take().is_some() {
                    let (cx, cy) = item.center();
                    if zone.contains(cx, cy) {
                        self.finish(1.0);
                    }
                    return true;
                }
                false
            }
            (State::TypeWord { field, focused, .. }, Input::Press { button: 1, x, y }) => {
                let now = field.contains(x, y);
                let changed = now != *focused;
                *focused = now;
                changed
            }
            (
                State::TypeWord {
                    focused: true,
                    text,
                    word,
                    ..
                },
                Input::Key { keysym },
            ) => match keysym {
                crate::keys::RETURN | 0xff8d => {
                    let reward = if text == word { 1.0 } else { 0.0 };
                    self.finish(reward);
                    true
                }
                crate::keys::BACKSPACE => text.pop().is_some(),
                k => match keysym_char(k) {
                    Some(c) if text.chars().count() < 64 => {
                        text.push(c);
                        true
                    }
                    _ => false,
                },
            },
            _ => false,
        }
    }

    /// The scene to draw, back to front.
    pub fn scene(&self, font: FontMetrics) -> Vec<Draw> {
        let (w, h) = (self.width, self.height);
        let text_y = |top: i32, height: i32| top + (height + font.ascent - font.descent) / 2;
        let mut d = vec![
            Draw::Rect {
                x: 0,
                y: 0,
                w,
                h,
                color: BACKGROUND,
            },
            Draw::Rect {
                x: 0,
                y: 0,
                w,
                h: BAR_HEIGHT,
                color: BAR,
            },
            Draw::Text {
                x: 8,
                y: text_y(0, BAR_HEIGHT),
                text: self.instruction.clone(),
                fg: WHITE,
                bg: BAR,
            },
        ];
        match &self.state {
            State::ClickTarget {
                target: (cx, cy, r),
                distractors,
            } => {
                for b in distractors {
                    d.push(Draw::Rect {
                        x: b.x,
                        y: b.y,
                        w: b.w,
                        h: b.h,
                        color: BLUE,
                    });
                }
                d.push(Draw::Circle {
                    cx: *cx,
                    cy: *cy,
                    r: *r,
                    color: RED,
                });
            }
            State::ClickButton { buttons, .. } => {
                for (b, label) in buttons {
                    d.push(Draw::Rect {
                        x: b.x,
                        y: b.y,
                        w: b.w,
                        h: b.h,
                        color: BUTTON,
                    });
                    d.push(Draw::Frame {
                        x: b.x,
                        y: b.y,
                        w: b.w,
                        h: b.h,
                        color: GRAY,
                        width: 2,
                    });
                    let tw = font.char_width * label.len() as i32;
                    d.push(Draw::Text {
                        x: b.x + (b.w - tw) / 2,
                        y: text_y(b.y, b.h),
                        text: (*label).to_string(),
                        fg: BLACK,
                        bg: BUTTON,
                    });
                }
            }
            State::DragToZone { item, zone, .. } => {
                d.push(Draw::Frame {
                    x: zone.x,
                    y: zone.y,
                    w: zone.w,
                    h: zone.h,
                    color: GREEN,
                    width: 4,
                });
                d.push(Draw::Rect {
                    x: item.x,
                    y: item.y,
                    w: item.w,
                    h: item.h,
                    color: ORANGE,
                });
            }
            State::TypeWord {
                field,
                text,
                focused,
                ..
            } => {
                d.push(Draw::Rect {
                    x: field.x,
                    y: field.y,
                    w: field.w,
                    h: field.h,
                    color: FIELD,
                });
                let (color, width) = if *focused { (BLUE, 3) } else { (GRAY, 1) };
                d.push(Draw::Frame {
                    x: field.x,
                    y: field.y,
                    w: field.w,
                    h: field.h,
                    color,
                    width,
                });
                let shown = if *focused {
                    format!("{text}|")
                } else {
                    text.clone()
                };
                if !shown.is_empty() {
                    d.push(Draw::Text {
                        x: field.x + 6,
                        y: text_y(field.y, field.h),
                        text: shown,
                        fg: BLACK,
                        bg: FIELD,
                    });
                }
            }
        }
        d
    }
}

/// The printable character a keysym types, if any (Latin-1 and the Unicode range).
fn keysym_char(k: u32) -> Option<char> {
    let cp = match k {
        0x20..=0x7e | 0xa0..=0xff => k,
        0x0100_0000..=0x0110_ffff => k - 0x0100_0000,
        _ => return None,
    };
    char::from_u32(cp).filter(|c| !c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FONT: FontMetrics = FontMetrics {
        char_width: 10,
        ascent: 16,
        descent: 4,
    };

    #[test]
    fn same_seed_same_scene_other_seed_differs() {
        for t in TASKS {
            let a = Episode::new(t.id, 7, 1280, 720).unwrap();
            let b = Episode::new(t.id, 7, 1280, 720).unwrap();
            let c = Episode::new(t.id, 8, 1280, 720).unwrap();
            assert_eq!(a.scene(FONT), b.scene(FONT), "{}", t.id);
            assert_ne!(a.scene(FONT), c.scene(FONT), "{}", t.id);
        }
    }

    #[test]
    fn click_target_rewards_only_a_hit() {
        let mut e = Episode::new("click-target", 3, 640, 480).unwrap();
        assert!(!e.handle(Input::Press {
            button: 1,
            x: 0,
            y: 0
        }));
        assert!(!e.done());
        let (x, y) = e.hint()[0];
        e.handle(Input::Press { button: 1, x, y });
        assert!(e.done());
        assert_eq!(e.reward(), 1.0);
    }

    #[test]
    fn wrong_button_ends_with_zero() {
        for seed in 0..20 {
            let e = Episode::new("click-button", seed, 640, 480).unwrap();
            let State::ClickButton { buttons, answer } = &e.state else {
                unreachable!()
            };
            let wrong = (answer + 1) % buttons.len();
            let (x, y) = buttons[wrong].0.center();
            let mut e2 = e.clone();
            e2.handle(Input::Press { button: 1, x, y });
            assert!(e2.done());
            assert_eq!(e2.reward(), 0.0);
            let (x, y) = e.hint()[0];
            let mut e3 = e.clone();
            e3.handle(Input::Press { button: 1, x, y });
            assert_eq!(e3.reward(), 1.0);
        }
    }

    #[test]
    fn drag_into_zone_succeeds() {
        let mut e = Episode::new("drag-to-zone", 11, 1280, 720).unwrap();
        let h = e.hint();
        e.handle(Input::Press {
            button: 1,
            x: h[0].0,
            y: h[0].1,
        });
        e.handle(Input::Motion {
            x: h[1].0,
            y: h[1].1,
        });
        e.handle(Input::Release {
            button: 1,
            x: h[1].0,
            y: h[1].1,
        });
        assert_eq!(e.reward(), 1.0);
    }

    #[test]
    fn typing_needs_focus_and_the_right_word() {
        let mut e = Episode::new("type-word", 5, 1280, 720).unwrap();
        let State::TypeWord { word, .. } = e.state.clone() else {
            unreachable!()
        };
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
