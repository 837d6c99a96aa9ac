//! The bundled task app: a native X11 program (drawn with x11rb, no toolkit) that shows
//! one [`Episode`] full-screen and reports reward and done to its worker over a socket.
//!
//! Control protocol (one line each way, the worker speaks first):
//! - `reset <seed>` → lays out a new episode, draws it.
//! - `sync` → processes every X input event delivered so far, redraws if needed.
//! - `tree` → `tree <json>`: the scene's widgets as an [`crate::a11y::Tree`].
//! - `quit` → exits.
//!
//! Each request is answered, after the X server has finished drawing, with
//! `ok <reward> <done 0|1> <instruction>` or `err <message>`. Because the app makes a
//! round trip to the X server before answering, input the worker injected before
//! `sync` is guaranteed to be handled and drawn: the worker can capture right away.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

use x11rb::connection::Connection;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{self, ConnectionExt as _, EventMask};
use x11rb::rust_connection::RustConnection;

use super::tasks::{Draw, Episode, FontMetrics, Input};

/// Error type of the app binary (it only reports and exits).
pub(crate) type AppError = Box<dyn std::error::Error + Send + Sync>;

struct Ui {
    conn: RustConnection,
    window: xproto::Window,
    pixmap: xproto::Pixmap,
    gc: xproto::Gcontext,
    width: u16,
    height: u16,
    font: FontMetrics,
    min_keycode: u8,
    per_keycode: u8,
    keymap: Vec<u32>,
}

impl Ui {
    fn open(width: u16, height: u16) -> Result<Self, AppError> {
        let (conn, screen_num) = x11rb::connect(None)?;
        let screen = conn.setup().roots[screen_num].clone();
        let window = conn.generate_id()?;
        let events = EventMask::EXPOSURE
            | EventMask::BUTTON_PRESS
            | EventMask::BUTTON_RELEASE
            | EventMask::POINTER_MOTION
            | EventMask::KEY_PRESS;
        conn.create_window(
            screen.root_depth,
            window,
            screen.root,
            0,
            0,
            width,
            height,
            0,
            xproto::WindowClass::INPUT_OUTPUT,
            screen.root_visual,
            // Override-redirect: there is no window manager; the app owns the screen.
            &xproto::CreateWindowAux::new()
                .override_redirect(1)
                .background_pixel(0xf0f0f0)
                .event_mask(events),
        )?;
        let pixmap = conn.generate_id()?;
        conn.create_pixmap(screen.root_depth, pixmap, window, width, height)?;
        let font = conn.generate_id()?;
        // 10x20 comes with xfonts-base; "fixed" is built into every X server.
        if conn.open_font(font, b"10x20")?.check().is_err() {
            conn.open_font(font, b"fixed")?.check()?;
        }
        let q = conn.query_font(font)?.reply()?;
        let metrics = FontMetrics {
            char_width: i32::from(q.max_bounds.character_width),
            ascent: i32::from(q.font_ascent),
            descent: i32::from(q.font_descent),
        };
        let gc = conn.generate_id()?;
        conn.create_gc(
            gc,
            window,
            &xproto::CreateGCAux::new().font(font).graphics_exposures(0),
        )?;
        conn.map_window(window)?;
        let mut ui = Self {
            conn,
            window,
            pixmap,
            gc,
            width,
            height,
            font: metrics,
            min_keycode: 0,
            per_keycode: 0,
            keymap: Vec::new(),
        };
        ui.reload_keymap()?;
        ui.round_trip()?;
        Ok(ui)
    }

    fn reload_keymap(&mut self) -> Result<(), AppError> {
        let setup = self.conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let km = self
            .conn
            .get_keyboard_mapping(min, max - min + 1)?
            .reply()?;
        self.min_keycode = min;
        self.per_keycode = km.keysyms_per_keycode;
        self.keymap = km.keysyms;
        Ok(())
    }

    fn keysym(&self, keycode: u8, shift: bool) -> u32 {
        let per = usize::from(self.per_keycode.max(1));
        let base = usize::from(keycode.saturating_sub(self.min_keycode)) * per;
        let at = |level: usize| self.keymap.get(base + level).copied().unwrap_or(0);
        let (lower, upper) = (at(0), at(1));
        if shift && upper != 0 { upper } else { lower }
    }

    fn round_trip(&self) -> Result<(), AppError> {
        self.conn.get_input_focus()?.reply()?;
        Ok(())
    }

    /// Reads every event the server has delivered so far (a round trip first, so that
    /// input injected before the worker's request is included).
    fn drain(&mut self) -> Result<(Vec<Input>, bool), AppError> {
        self.round_trip()?;
        let mut inputs = Vec::new();
        let mut exposed = false;
        while let Some(ev) = self.conn.poll_for_event()? {
            match ev {
                Event::Expose(_) => exposed = true,
                Event::ButtonPress(e) => inputs.push(Input::Press {
                    button: e.detail,
                    x: i32::from(e.event_x),
                    y: i32::from(e.event_y),
                }),
                Event::ButtonRelease(e) => inputs.push(Input::Release {
                    button: e.detail,
                    x: i32::from(e.event_x),
                    y: i32::from(e.event_y),
                }),
                Event::MotionNotify(e) => inputs.push(Input::Motion {
                    x: i32::from(e.event_x),
                    y: i32::from(e.event_y),
                }),
                Event::KeyPress(e) => {
                    let shift = u16::from(e.state) & u16::from(xproto::KeyButMask::SHIFT) != 0;
                    inputs.push(Input::Key {
                        keysym: self.keysym(e.detail, shift),
                    });
                }
                Event::MappingNotify(_) => self.reload_keymap()?,
                _ => {}
            }
        }
        Ok((inputs, exposed))
    }

    fn color(&self, c: u32) -> Result<(), AppError> {
        self.conn
            .change_gc(self.gc, &xproto::ChangeGCAux::new().foreground(c))?;
        Ok(())
    }

    /// Draws the scene into the back buffer, then copies it in one request so a capture
    /// never sees half a frame.
    fn draw(&self, episode: &Episode) -> Result<(), AppError> {
        let (p, gc) = (self.pixmap, self.gc);
        let rect = |x: i32, y: i32, w: i32, h: i32| xproto::Rectangle {
            x: x as i16,
            y: y as i16,
            width: w.max(0) as u16,
            height: h.max(0) as u16,
        };
        for op in episode.scene(self.font) {
            match op {
                Draw::Rect { x, y, w, h, color } => {
                    self.color(color)?;
                    self.conn.poly_fill_rectangle(p, gc, &[rect(x, y, w, h)])?;
                }
                Draw::Frame {
                    x,
                    y,
                    w,
                    h,
                    color,
                    width: t,
                } => {
                    self.color(color)?;
                    let sides = [
                        rect(x, y, w, t),
                        rect(x, y + h - t, w, t),
                        rect(x, y, t, h),
                        rect(x + w - t, y, t, h),
                    ];
                    self.conn.poly_fill_rectangle(p, gc, &sides)?;
                }
                Draw::Circle { cx, cy, r, color } => {
                    self.color(color)?;
                    let arc = xproto::Arc {
                        x: (cx - r) as i16,
                        y: (cy - r) as i16,
                        width: (2 * r) as u16,
                        height: (2 * r) as u16,
                        angle1: 0,
                        angle2: 360 * 64,
                    };
                    self.conn.poly_fill_arc(p, gc, &[arc])?;
                }
                Draw::Text { x, y, text, fg, bg } => {
                    self.conn.change_gc(
                        gc,
                        &xproto::ChangeGCAux::new().foreground(fg).background(bg),
                    )?;
                    let bytes: Vec<u8> = text
                        .chars()
                        .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
                        .take(255)
                        .collect();
                    self.conn.image_text8(p, gc, x as i16, y as i16, &bytes)?;
                }
            }
        }
        self.conn
            .copy_area(p, self.window, gc, 0, 0, 0, 0, self.width, self.height)?;
        self.round_trip()
    }
}

/// Runs the app until the worker says `quit` or closes the socket.
pub fn run(task: &str, width: u16, height: u16, ctl: UnixStream) -> Result<(), AppError> {
    let mut ui = Ui::open(width, height)?;
    let mut out = ctl.try_clone()?;
    let lines = BufReader::new(ctl).lines();
    let mut episode: Option<Episode> = None;
    out.write_all(b"ready\n")?;
    for line in lines {
        let line = line?;
        let mut words = line.split_whitespace();
        let reply = match (words.next(), words.next()) {
            (Some("reset"), Some(seed)) => match seed.parse::<u64>() {
                Ok(seed) => {
                    // Input that arrived between episodes belongs to neither.
                    ui.drain()?;
                    let ep = Episode::new(task, seed, u32::from(width), u32::from(height))
                        .ok_or_else(|| format!("unknown task {task:?}"))?;
                    ui.conn.set_input_focus(
                        xproto::InputFocus::POINTER_ROOT,
                        ui.window,
                        x11rb::CURRENT_TIME,
                    )?;
                    ui.draw(&ep)?;
                    episode = Some(ep);
                    None
                }
                Err(_) => Some(format!("err bad seed {seed:?}")),
            },
            (Some("sync"), None) => {
                let (inputs, exposed) = ui.drain()?;
                if let Some(ep) = episode.as_mut() {
                    let mut changed = exposed;
                    for i in inputs {
                        changed |= ep.handle(i);
                    }
                    if changed {
                        ui.draw(ep)?;
                    }
                }
                None
            }
            (Some("tree"), None) => Some(match &episode {
                Some(ep) => {
                    let tree = super::widget_tree(
                        "deskgym tasks",
                        &ep.widgets(),
                        i32::from(width),
                        i32::from(height),
                    );
                    format!("tree {}", serde_json::to_string(&tree)?)
                }
                None => "err no episode: send reset first".to_string(),
            }),
            (Some("quit"), None) => return Ok(()),
            _ => Some(format!("err unknown request {line:?}")),
        };
        let reply = reply.unwrap_or_else(|| match &episode {
            Some(ep) => format!(
                "ok {} {} {}",
                ep.reward(),
                u8::from(ep.done()),
                ep.instruction()
            ),
            None => "err no episode: send reset first".to_string(),
        });
        out.write_all(reply.as_bytes())?;
        out.write_all(b"\n")?;
    }
    Ok(())
}
