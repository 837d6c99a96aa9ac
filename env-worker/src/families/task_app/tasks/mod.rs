//! The bundled MiniWoB-style tasks: seeded layouts, input handling and scenes.
//!
//! Pure logic, no X11: the task app (`app` module) feeds X input into an [`Episode`]
//! and draws the [`Draw`] list it returns. Same task + seed + screen = same scene.
//!
//! # Adding a task
//! One file per task implementing [`Task`] (layout from a seed, input, drawing) plus a
//! [`TaskSpec`] constant; list the spec in [`TASKS`]. Nothing else changes: the app,
//! the worker and the server find tasks through the registry.

mod blank;
mod click_button;
mod click_target;
mod drag_to_zone;
mod type_word;

use crate::SettlePolicy;

/// One bundled task: what the wire and the server know of it, and how to start one.
#[derive(Clone, Copy, Debug)]
pub struct TaskSpec {
    /// Id used on the wire, e.g. `click-target`.
    pub id: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// Episode bound used when a pool does not set one.
    pub default_max_steps: u32,
    /// How the server knows the screen is final after an action, unless a pool
    /// overrides it. The bundled app acknowledges after drawing: `Sync`.
    pub settle: SettlePolicy,
    /// Lays out a new episode from a seeded generator: its instruction and its state.
    pub layout: Layout,
    /// The desktop profile a pool of this task runs unless it names another.
    pub profile: &'static str,
    /// Runs on every profile (its logic needs no app of its own).
    pub any_profile: bool,
}

impl TaskSpec {
    /// A task of the bundled app: it acknowledges after drawing (`Sync`) and runs on
    /// the `tasks` profile that starts the app. The rule every task here shares, so
    /// an entry states only what is its own.
    const fn bundled(
        id: &'static str,
        description: &'static str,
        default_max_steps: u32,
        layout: Layout,
    ) -> Self {
        Self {
            id,
            description,
            default_max_steps,
            settle: SettlePolicy::Sync,
            layout,
            profile: "tasks",
            any_profile: false,
        }
    }
}

/// A task's layout function: a seeded generator and the area in, the episode's
/// instruction and state out.
pub(crate) type Layout = fn(&mut Rng, Area) -> (String, Box<dyn Task>);

impl PartialEq for TaskSpec {
    fn eq(&self, o: &Self) -> bool {
        self.id == o.id
    }
}

/// Every bundled task: the one registry.
pub const TASKS: &[TaskSpec] = &[
    click_target::SPEC,
    click_button::SPEC,
    drag_to_zone::SPEC,
    type_word::SPEC,
    blank::SPEC,
];

/// Looks up a bundled task by id.
pub fn task_spec(id: &str) -> Option<&'static TaskSpec> {
    TASKS.iter().find(|t| t.id == id)
}

/// The screen a task lays itself out on, and the unit its sizes derive from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Area {
    /// Screen width.
    pub w: i32,
    /// Screen height.
    pub h: i32,
    /// A size unit: a twelfth of the short side, at least 16 pixels.
    pub unit: i32,
}

/// What handling one input did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Handled {
    /// The scene changed (the app redraws).
    pub changed: bool,
    /// The episode ended with this reward.
    pub finished: Option<f64>,
}

impl Handled {
    /// Nothing happened.
    pub const NOTHING: Self = Self {
        changed: false,
        finished: None,
    };
    /// The scene changed; the episode goes on.
    pub const CHANGED: Self = Self {
        changed: true,
        finished: None,
    };

    /// The episode ended with `reward` (the scene changed).
    pub fn finished(reward: f64) -> Self {
        Self {
            changed: true,
            finished: Some(reward),
        }
    }
}

/// One task's episode state and behaviour.
pub trait Task: std::fmt::Debug + Send + CloneTask {
    /// Applies one input event (never called after the episode ended).
    fn handle(&mut self, input: Input, area: Area) -> Handled;
    /// Appends the task's drawing (over the background and instruction bar).
    fn draw(&self, font: FontMetrics, out: &mut Vec<Draw>);
    /// Where an oracle would act (tests and the scripted demo agent's ground truth).
    fn hint(&self) -> Vec<(i32, i32)>;
    /// The scene's widgets as an accessibility tree shows them, in drawing order.
    fn widgets(&self) -> Vec<Widget> {
        Vec::new()
    }
}

/// A copy of a task behind `Box<dyn Task>` (episodes are cloned by tests and
/// checkpoints of the app's state). Every task copies itself the same way, by `Clone`,
/// so the blanket impl below is the one definition of it.
pub trait CloneTask {
    /// A boxed copy of the task.
    fn clone_box(&self) -> Box<dyn Task>;
}

impl<T: Task + Clone + 'static> CloneTask for T {
    fn clone_box(&self) -> Box<dyn Task> {
        Box::new(self.clone())
    }
}

/// One widget of a task's scene, as the accessibility tree shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Widget {
    /// AT-SPI role name (`push button`, `text`, `panel`...).
    pub role: &'static str,
    /// Accessible name (a button's label, a shape's description).
    pub name: String,
    /// Where it is on screen.
    pub rect: Rect,
    /// What a text field holds.
    pub text: Option<String>,
}

impl Widget {
    fn new(role: &'static str, name: impl Into<String>, rect: Rect) -> Self {
        Self {
            role,
            name: name.into(),
            rect,
            text: None,
        }
    }
}

impl Clone for Box<dyn Task> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// An RGB colour as X's TrueColor pixel value.
pub type Color = u32;

pub(crate) const BACKGROUND: Color = 0xf0f0f0;
pub(crate) const BAR: Color = 0x2d3340;
pub(crate) const WHITE: Color = 0xffffff;
pub(crate) const BLACK: Color = 0x000000;
pub(crate) const RED: Color = 0xd62828;
pub(crate) const BLUE: Color = 0x3a6ea5;
pub(crate) const ORANGE: Color = 0xf77f00;
pub(crate) const GREEN: Color = 0x2a9d8f;
pub(crate) const GRAY: Color = 0xb8b8b8;
pub(crate) const BUTTON: Color = 0xdfe6ee;
/// Text field fill; distinct from the bar's white text so the field is findable by colour.
pub(crate) const FIELD: Color = 0xfcfcfc;

/// Height of the instruction bar at the top of every task screen.
pub(crate) const BAR_HEIGHT: i32 = 32;

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
pub(crate) fn place(rng: &mut Rng, w: i32, h: i32, sizes: &[(i32, i32)]) -> Vec<Rect> {
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

/// The printable character a keysym types, if any (Latin-1 and the Unicode range).
pub(crate) fn keysym_char(k: u32) -> Option<char> {
    let cp = match k {
        0x20..=0x7e | 0xa0..=0xff => k,
        0x0100_0000..=0x0110_ffff => k - 0x0100_0000,
        _ => return None,
    };
    char::from_u32(cp).filter(|c| !c.is_control())
}

/// Baseline of text vertically centred in a box at `top` of `height`.
pub(crate) fn text_y(font: FontMetrics, top: i32, height: i32) -> i32 {
    top + (height + font.ascent - font.descent) / 2
}

/// One episode of a bundled task.
#[derive(Clone, Debug)]
pub struct Episode {
    area: Area,
    instruction: String,
    state: Box<dyn Task>,
    reward: f64,
    done: bool,
}

impl Episode {
    /// Lays out a new episode. Returns `None` for an unknown task id.
    pub fn new(task: &str, seed: u64, width: u32, height: u32) -> Option<Self> {
        let spec = task_spec(task)?;
        let (w, h) = (width as i32, height as i32);
        let area = Area {
            w,
            h,
            unit: (w.min(h) / 12).max(16),
        };
        let (instruction, state) = (spec.layout)(&mut Rng::new(seed), area);
        Some(Self {
            area,
            instruction,
            state,
            reward: 0.0,
            done: false,
        })
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
        self.state.hint()
    }

    /// The instruction bar and the task's widgets.
    pub fn widgets(&self) -> Vec<Widget> {
        let bar = Rect {
            x: 0,
            y: 0,
            w: self.area.w,
            h: BAR_HEIGHT,
        };
        let mut w = vec![Widget::new("label", self.instruction.clone(), bar)];
        w.extend(self.state.widgets());
        w
    }

    /// Applies one input event. Returns true when the scene changed.
    pub fn handle(&mut self, input: Input) -> bool {
        if self.done {
            return false;
        }
        let h = self.state.handle(input, self.area);
        if let Some(reward) = h.finished {
            self.reward = reward;
            self.done = true;
        }
        h.changed
    }

    /// The scene to draw, back to front.
    pub fn scene(&self, font: FontMetrics) -> Vec<Draw> {
        let Area { w, h, .. } = self.area;
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
                y: text_y(font, 0, BAR_HEIGHT),
                text: self.instruction.clone(),
                fg: WHITE,
                bg: BAR,
            },
        ];
        self.state.draw(font, &mut d);
        d
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const FONT: FontMetrics = FontMetrics {
        char_width: 10,
        ascent: 16,
        descent: 4,
    };

    #[test]
    fn same_seed_same_scene_other_seed_differs() {
        // `blank` has no layout for a seed to vary.
        for t in TASKS.iter().filter(|t| t.id != "blank") {
            let a = Episode::new(t.id, 7, 1280, 720).unwrap();
            let b = Episode::new(t.id, 7, 1280, 720).unwrap();
            let c = Episode::new(t.id, 8, 1280, 720).unwrap();
            assert_eq!(a.scene(FONT), b.scene(FONT), "{}", t.id);
            assert_ne!(a.scene(FONT), c.scene(FONT), "{}", t.id);
        }
    }

    #[test]
    fn ids_are_unique_and_found() {
        for t in TASKS {
            assert_eq!(task_spec(t.id).map(|s| s.id), Some(t.id));
            assert_eq!(TASKS.iter().filter(|o| o.id == t.id).count(), 1);
        }
        assert!(task_spec("nope").is_none());
    }
}
