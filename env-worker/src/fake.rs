//! In-memory desktops (the server's `--backend fake`, and its pool's unit tests): the
//! bundled tasks' own logic (`families::task_app`) fed the task app's inputs, and frames
//! drawn from the task's scene (shapes in their colours; text as blocks), so a client
//! test that finds the red target by its pixels works without X. Same seed and actions,
//! same frame hash, as on a real desktop.
//!
//! Public, not behind a cargo feature: the server's release binary offers
//! `--backend fake` (the Python client's fast test tier runs against it), so every
//! build that matters would turn a feature on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};

use crate::a11y::{Limits, Live, Tree};
use crate::action::{Action, Button, Point};
use crate::contract::{Backend, Desktop, Replayed};
use crate::error::{DesktopError, Result};
use crate::families::{Color, DesktopConfig, Draw, Episode, FontMetrics, Input, widget_tree};
use crate::frame::Frame;
use crate::keys::{char_keysym, parse_chord};
use crate::runner::{AppState, Outcome};
use crate::settle::SettleReport;
use crate::windows::WindowInfo;

/// Knobs tests turn: starts that fail, desktops that die.
#[derive(Debug, Default)]
pub struct FakeBackend {
    /// Desktops started so far.
    pub started: AtomicU32,
    /// Starts left before every further start fails (negative: never fail).
    pub fail_after: AtomicI64,
    /// Set on every desktop started: when true they report themselves dead.
    pub dead: Arc<AtomicBool>,
    /// When true, a fast replay loses the first key it sends without a settle (as an
    /// app that reads input timing would differ).
    pub fast_replay_loses_a_key: Arc<AtomicBool>,
    /// Replays done with every action settled, fast ones not counted.
    pub settled_replays: Arc<AtomicU32>,
}

impl FakeBackend {
    /// A backend whose starts never fail.
    pub fn new() -> Self {
        Self {
            fail_after: AtomicI64::new(-1),
            ..Self::default()
        }
    }
}

impl Backend for FakeBackend {
    fn start(&self, config: DesktopConfig) -> Result<Box<dyn Desktop>> {
        // Check and count down in one atomic step: starts run in parallel.
        let left = self
            .fail_after
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| match n {
                0 => None,
                n if n > 0 => Some(n - 1),
                n => Some(n),
            });
        if left.is_err() {
            return Err(DesktopError::XvfbStart("injected start failure".into()));
        }
        let n = self.started.fetch_add(1, Ordering::AcqRel);
        Ok(Box::new(FakeDesktop {
            config,
            display: 1000 + n,
            episode: None,
            pointer: Point { x: 0, y: 0 },
            dead: self.dead.clone(),
            lossy: self.fast_replay_loses_a_key.clone(),
            settled_replays: self.settled_replays.clone(),
        }))
    }
}

#[derive(Debug)]
struct FakeDesktop {
    config: DesktopConfig,
    display: u32,
    episode: Option<Episode>,
    pointer: Point,
    dead: Arc<AtomicBool>,
    lossy: Arc<AtomicBool>,
    settled_replays: Arc<AtomicU32>,
}

const FONT: FontMetrics = FontMetrics {
    char_width: 10,
    ascent: 16,
    descent: 4,
};

impl FakeDesktop {
    fn app(&self) -> AppState {
        let e = self.episode.as_ref();
        AppState {
            reward: e.map_or(0.0, |e| e.reward()),
            done: e.is_some_and(|e| e.done()),
            instruction: e.map(|e| e.instruction().to_string()).unwrap_or_default(),
            extra: Vec::new(),
        }
    }

    fn outcome(&self) -> Outcome {
        Outcome {
            app: self.app(),
            settle: SettleReport {
                policy: self.config.settle.policy,
                quiesced: true,
                ..Default::default()
            },
        }
    }
}

impl Desktop for FakeDesktop {
    fn reset(&mut self, seed: u64) -> Result<Outcome> {
        self.check_alive()?;
        let c = &self.config;
        self.episode = Episode::new(&c.task, seed, c.width, c.height);
        Ok(self.outcome())
    }

    fn replay(
        &mut self,
        actions: &[Action],
        _seen: &[crate::contract::Seen],
        pace: crate::contract::Pace,
        mut out: Outcome,
    ) -> Result<Replayed> {
        let fast = pace.is_fast();
        if !fast {
            self.settled_replays.fetch_add(1, Ordering::AcqRel);
        }
        let mut unsettled = 0;
        for (i, a) in actions.iter().enumerate() {
            if fast && Action::in_unsettled_run(actions, i) {
                unsettled += 1;
                if unsettled == 1 && self.lossy.load(Ordering::Acquire) {
                    continue;
                }
            }
            out = self.step(a)?;
        }
        Ok(Replayed {
            unsettled,
            ..Replayed::new(out)
        })
    }

    fn step(&mut self, action: &Action) -> Result<Outcome> {
        self.check_alive()?;
        // The task app's inputs for each action, as X would deliver them.
        let mut inputs = Vec::new();
        let button = |b: &Button| match b {
            Button::Left => 1,
            Button::Middle => 2,
            Button::Right => 3,
        };
        match action {
            Action::Click {
                at,
                button: b,
                count,
            } => {
                inputs.push(Input::Motion { x: at.x, y: at.y });
                for _ in 0..*count {
                    inputs.push(Input::Press {
                        button: button(b),
                        x: at.x,
                        y: at.y,
                    });
                    inputs.push(Input::Release {
                        button: button(b),
                        x: at.x,
                        y: at.y,
                    });
                }
                self.pointer = *at;
            }
            Action::Move { to } => {
                inputs.push(Input::Motion { x: to.x, y: to.y });
                self.pointer = *to;
            }
            Action::Drag {
                from,
                to,
                button: b,
                ..
            } => {
                inputs.push(Input::Motion {
                    x: from.x,
                    y: from.y,
                });
                inputs.push(Input::Press {
                    button: button(b),
                    x: from.x,
                    y: from.y,
                });
                inputs.push(Input::Motion { x: to.x, y: to.y });
                inputs.push(Input::Release {
                    button: button(b),
                    x: to.x,
                    y: to.y,
                });
                self.pointer = *to;
            }
            Action::MouseDown { at, button: b } | Action::MouseUp { at, button: b } => {
                let p = at.unwrap_or(self.pointer);
                inputs.push(Input::Motion { x: p.x, y: p.y });
                inputs.push(if matches!(action, Action::MouseDown { .. }) {
                    Input::Press {
                        button: button(b),
                        x: p.x,
                        y: p.y,
                    }
                } else {
                    Input::Release {
                        button: button(b),
                        x: p.x,
                        y: p.y,
                    }
                });
                self.pointer = p;
            }
            Action::TypeText(t) => inputs.extend(t.chars().map(|c| Input::Key {
                keysym: char_keysym(c),
            })),
            Action::Key(chord) => {
                // A chord's last key is the one that types (modifiers do not reach tasks).
                let keys =
                    parse_chord(chord).map_err(|m| DesktopError::invalid("action.key.keys", m))?;
                inputs.extend(keys.last().map(|k| Input::Key { keysym: *k }));
            }
            Action::Wait(ms) => std::thread::sleep(std::time::Duration::from_millis((*ms).into())),
            _ => {}
        }
        if let Some(e) = self.episode.as_mut() {
            for i in inputs {
                e.handle(i);
            }
        }
        Ok(self.outcome())
    }

    fn quiesce(&mut self, _: u32, _: u32) -> Result<SettleReport> {
        // A fake screen never changes on its own: it is quiet at once.
        self.check_alive()?;
        Ok(SettleReport {
            quiesced: true,
            ..Default::default()
        })
    }

    fn capture(&mut self) -> Result<Frame> {
        self.check_alive()?;
        let (w, h) = (self.config.width, self.config.height);
        let mut canvas = Canvas {
            w: w as i32,
            h: h as i32,
            rgb: vec![0; (w * h * 3) as usize],
        };
        if let Some(e) = &self.episode {
            for d in e.scene(FONT) {
                canvas.draw(&d);
            }
        }
        Ok(Frame::from_rgb(w, h, canvas.rgb))
    }

    fn pointer(&self) -> Point {
        self.pointer
    }

    fn display(&self) -> u32 {
        self.display
    }

    fn check_alive(&mut self) -> Result<()> {
        if self.dead.load(Ordering::Acquire) {
            return Err(DesktopError::DisplayGone {
                display: self.display,
                reason: "fake desktop marked dead".into(),
            });
        }
        Ok(())
    }

    fn pids(&self) -> Vec<u32> {
        Vec::new()
    }

    fn windows(&mut self) -> Result<Vec<WindowInfo>> {
        Ok(Vec::new())
    }

    fn clipboard(&mut self) -> Result<String> {
        Ok(String::new())
    }

    fn set_clipboard(&mut self, _: &str) -> Result<()> {
        Ok(())
    }

    fn tree(&mut self, _: &Limits) -> Result<Tree> {
        self.check_alive()?;
        let widgets = self
            .episode
            .as_ref()
            .map(|e| e.widgets())
            .unwrap_or_default();
        let (w, h) = (self.config.width as i32, self.config.height as i32);
        Ok(widget_tree("fake", &widgets, w, h))
    }

    fn live(&mut self, id: &str) -> Result<Live> {
        let n = self.tree(&Limits::default())?.take(id)?;
        Ok(Live::from(&n))
    }
}

/// The scene drawn in software: shapes in their colours, each character of a text a
/// block of its colour (what a client reads from pixels is where things are and what
/// colour they are, not glyphs).
struct Canvas {
    w: i32,
    h: i32,
    rgb: Vec<u8>,
}

impl Canvas {
    fn fill(
        &mut self,
        x: i32,
        y: i32,
        w: i32,
        h: i32,
        color: Color,
        inside: impl Fn(i32, i32) -> bool,
    ) {
        for py in y.max(0)..(y + h).min(self.h) {
            for px in x.max(0)..(x + w).min(self.w) {
                if inside(px, py) {
                    let i = ((py * self.w + px) * 3) as usize;
                    self.rgb[i..i + 3].copy_from_slice(&[
                        (color >> 16) as u8,
                        (color >> 8) as u8,
                        color as u8,
                    ]);
                }
            }
        }
    }

    fn draw(&mut self, d: &Draw) {
        match *d {
            Draw::Rect { x, y, w, h, color } => self.fill(x, y, w, h, color, |_, _| true),
            Draw::Frame {
                x,
                y,
                w,
                h,
                color,
                width,
            } => self.fill(x, y, w, h, color, |px, py| {
                px < x + width || px >= x + w - width || py < y + width || py >= y + h - width
            }),
            Draw::Circle { cx, cy, r, color } => {
                self.fill(cx - r, cy - r, 2 * r + 1, 2 * r + 1, color, |px, py| {
                    (px - cx).pow(2) + (py - cy).pow(2) <= r * r
                })
            }
            Draw::Text {
                x,
                y,
                ref text,
                fg,
                bg,
            } => {
                let top = y - FONT.ascent;
                let cell = FONT.char_width;
                let n = text.chars().count() as i32;
                self.fill(x, top, n * cell, FONT.ascent + FONT.descent, bg, |_, _| {
                    true
                });
                for (i, c) in text.chars().enumerate() {
                    if !c.is_whitespace() {
                        let cx = x + i as i32 * cell;
                        self.fill(cx + 1, top + 4, cell - 2, FONT.ascent - 4, fg, |_, _| true);
                    }
                }
            }
        }
    }
}
