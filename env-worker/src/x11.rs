//! One X11 client connection per desktop: XTEST input, MIT-SHM capture of the root
//! window (GetImage fallback) and XDamage-based settling.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use x11rb::connection::{Connection, RequestConnection};
use x11rb::errors::{ConnectionError, ReplyError, ReplyOrIdError};
use x11rb::protocol::Event;
use x11rb::protocol::damage::{self, ConnectionExt as _};
use x11rb::protocol::shm::{self, ConnectionExt as _};
use x11rb::protocol::xfixes::ConnectionExt as _;
use x11rb::protocol::xproto::{self, ConnectionExt as _, ImageFormat};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;

use crate::action::{Action, Button, Point};
use crate::error::{DesktopError, Result};
use crate::frame::{Frame, bgrx_to_rgb};
use crate::keys::{self, Keysym};
use crate::settle::{Settle, SettleReport};
use crate::windows;

/// Number of intermediate pointer positions in a drag, so apps see real motion.
const DRAG_STEPS: i32 = 8;

/// An attached MIT-SHM segment, detached and freed on drop.
struct ShmSegment {
    seg: shm::Seg,
    addr: *mut u8,
    size: usize,
}

/// A live connection to one display.
pub struct XSession {
    conn: RustConnection,
    display: u32,
    root: xproto::Window,
    width: u16,
    height: u16,
    shm: Option<ShmSegment>,
    damage: damage::Damage,
    min_keycode: u8,
    per_keycode: u8,
    keymap: Vec<Keysym>,
    /// Keycodes with no symbols, borrowed round-robin to type characters that are not
    /// on the keymap. Kept mapped so an app that re-reads the mapping late still agrees.
    scratch: Vec<u8>,
    next_scratch: usize,
    remapped: HashMap<Keysym, u8>,
    pointer: Point,
    held: Vec<Button>,
    /// Keycodes pressed by `KeyDown` and not released yet.
    held_keys: Vec<u8>,
    bgrx: Vec<u8>,
    /// The hash of the pixels the last capture left in the SHM segment (or `bgrx`), and
    /// their length: while XDamage reports nothing, the screen still shows them.
    captured: Option<(u128, usize)>,
    /// XDamage reported drawing since the last capture.
    damaged: bool,
}

// SAFETY: the raw SHM pointer is owned exclusively by this session and only touched
// through `&mut self`; moving the session between threads is sound.
unsafe impl Send for XSession {}

impl XSession {
    /// Connects to `:display` (one of this process's, with its cookie) and sets up XTEST, SHM (when available) and DAMAGE.
    pub fn connect(display: u32) -> Result<Self> {
        let conn = crate::xvfb::connect(display)?;
        let screen = &conn.setup().roots[0];
        let (root, width, height) = (screen.root, screen.width_in_pixels, screen.height_in_pixels);
        let gone = |e: &dyn std::fmt::Display| DesktopError::DisplayGone {
            display,
            reason: e.to_string(),
        };
        for ext in [
            x11rb::protocol::xtest::X11_EXTENSION_NAME,
            damage::X11_EXTENSION_NAME,
        ] {
            if conn
                .extension_information(ext)
                .map_err(|e| gone(&e))?
                .is_none()
            {
                return Err(DesktopError::X11(format!(
                    "X server lacks the {ext} extension"
                )));
            }
        }
        conn.xtest_get_version(2, 2)
            .map_err(|e| gone(&e))?
            .reply()
            .map_err(|e| gone(&e))?;
        conn.xfixes_query_version(5, 0)
            .map_err(|e| gone(&e))?
            .reply()
            .map_err(|e| gone(&e))?;
        conn.damage_query_version(1, 1)
            .map_err(|e| gone(&e))?
            .reply()
            .map_err(|e| gone(&e))?;
        let damage = conn.generate_id().map_err(|e| gone(&e))?;
        conn.damage_create(damage, root, damage::ReportLevel::NON_EMPTY)
            .map_err(|e| gone(&e))?;

        let setup = conn.setup();
        let (min_keycode, max_keycode) = (setup.min_keycode, setup.max_keycode);
        let km = conn
            .get_keyboard_mapping(min_keycode, max_keycode - min_keycode + 1)
            .map_err(|e| gone(&e))?
            .reply()
            .map_err(|e| gone(&e))?;
        let per_keycode = km.keysyms_per_keycode;
        let scratch = km
            .keysyms
            .chunks(usize::from(per_keycode.max(1)))
            .enumerate()
            .filter(|(_, syms)| syms.iter().all(|&s| s == x11rb::NO_SYMBOL))
            .map(|(i, _)| min_keycode + i as u8)
            .rev()
            .take(16)
            .collect();

        let mut s = Self {
            conn,
            display,
            root,
            width,
            height,
            shm: None,
            damage,
            min_keycode,
            per_keycode,
            keymap: km.keysyms,
            scratch,
            next_scratch: 0,
            remapped: HashMap::new(),
            pointer: Point::default(),
            held: Vec::new(),
            held_keys: Vec::new(),
            bgrx: Vec::new(),
            captured: None,
            damaged: true,
        };
        s.shm = s.attach_shm();
        s.sync()?;
        Ok(s)
    }

    /// True when captures go through MIT-SHM rather than GetImage.
    pub fn uses_shm(&self) -> bool {
        self.shm.is_some()
    }

    /// Where the pointer is (as last placed by this session).
    pub fn pointer(&self) -> Point {
        self.pointer
    }

    fn gone(&self, e: impl std::fmt::Display) -> DesktopError {
        DesktopError::DisplayGone {
            display: self.display,
            reason: e.to_string(),
        }
    }

    fn conn_err(&self, e: ConnectionError) -> DesktopError {
        self.gone(e)
    }

    fn reply_err(&self, e: ReplyError) -> DesktopError {
        match e {
            ReplyError::ConnectionError(c) => self.gone(c),
            ReplyError::X11Error(x) => DesktopError::X11(format!("{x:?}")),
        }
    }

    /// Tries to set up MIT-SHM with a memfd passed to the X server (`ShmAttachFd`,
    /// MIT-SHM 1.2); any failure falls back to GetImage, which is slower but always
    /// works. Never a SysV segment: an X client of the same display (a tenant's program
    /// in its sandbox) could attach a SysV segment this X server has attached by its
    /// id, without a permission check, and read or write the frames we capture.
    fn attach_shm(&mut self) -> Option<ShmSegment> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        self.conn
            .extension_information(shm::X11_EXTENSION_NAME)
            .ok()??;
        let v = self.conn.shm_query_version().ok()?.reply().ok()?;
        if (v.major_version, v.minor_version) < (1, 2) {
            tracing::warn!(
                display = self.display,
                "MIT-SHM 1.2 unavailable, using GetImage"
            );
            return None;
        }
        let size = usize::from(self.width) * usize::from(self.height) * 4;
        // SAFETY: memfd_create/ftruncate/mmap on a descriptor this function owns; the
        // mapping is checked before use and unmapped in Drop.
        unsafe {
            let fd = libc::memfd_create(c"deskgym-capture".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return None;
            }
            let fd = OwnedFd::from_raw_fd(fd);
            if libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) != 0 {
                return None;
            }
            let addr = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            if addr == libc::MAP_FAILED {
                return None;
            }
            let seg = self.conn.generate_id().ok();
            let attached = seg.and_then(|seg| {
                self.conn.shm_attach_fd(seg, fd, false).ok()?.check().ok()?;
                Some(seg)
            });
            match attached {
                Some(seg) => Some(ShmSegment {
                    seg,
                    addr: addr.cast(),
                    size,
                }),
                None => {
                    libc::munmap(addr, size);
                    tracing::warn!(
                        display = self.display,
                        "MIT-SHM unavailable, using GetImage"
                    );
                    None
                }
            }
        }
    }

    /// One round trip: afterwards the server has processed every request sent so far.
    pub fn sync(&self) -> Result<()> {
        self.conn
            .get_input_focus()
            .map_err(|e| self.conn_err(e))?
            .reply()
            .map(|_| ())
            .map_err(|e| self.reply_err(e))
    }

    fn fake(&self, kind: u8, detail: u8, x: i16, y: i16) -> Result<()> {
        self.conn
            .xtest_fake_input(kind, detail, x11rb::CURRENT_TIME, self.root, x, y, 0)
            .map_err(|e| self.conn_err(e))?;
        Ok(())
    }

    fn check_point(&self, field: &str, p: Point) -> Result<()> {
        let (w, h) = (i32::from(self.width), i32::from(self.height));
        if p.x < 0 || p.y < 0 || p.x >= w || p.y >= h {
            return Err(DesktopError::invalid(
                field,
                format!("point ({}, {}) is outside the {w}x{h} screen", p.x, p.y),
            ));
        }
        Ok(())
    }

    fn move_to(&mut self, p: Point) -> Result<()> {
        self.fake(xproto::MOTION_NOTIFY_EVENT, 0, p.x as i16, p.y as i16)?;
        self.pointer = p;
        Ok(())
    }

    fn press(&mut self, b: Button) -> Result<()> {
        self.fake(xproto::BUTTON_PRESS_EVENT, b.x_button(), 0, 0)?;
        if !self.held.contains(&b) {
            self.held.push(b);
        }
        Ok(())
    }

    fn release(&mut self, b: Button) -> Result<()> {
        self.fake(xproto::BUTTON_RELEASE_EVENT, b.x_button(), 0, 0)?;
        self.held.retain(|&h| h != b);
        Ok(())
    }

    fn wheel(&self, button: u8, clicks: i32) -> Result<()> {
        for _ in 0..clicks.unsigned_abs() {
            self.fake(xproto::BUTTON_PRESS_EVENT, button, 0, 0)?;
            self.fake(xproto::BUTTON_RELEASE_EVENT, button, 0, 0)?;
        }
        Ok(())
    }

    /// A drag from `from` to `to` with `button` held (and the `modifiers` chord around
    /// it), in at least [`DRAG_STEPS`] moves so apps see real motion; with a duration,
    /// paced like a 60 Hz pointer and synced at each step so the time is real.
    fn drag(
        &mut self,
        from: Point,
        to: Point,
        button: Button,
        duration_ms: u32,
        modifiers: &str,
    ) -> Result<()> {
        let mods = if modifiers.is_empty() {
            Vec::new()
        } else {
            self.chord_codes(modifiers, "drag.modifiers")?
        };
        for &kc in &mods {
            self.fake(xproto::KEY_PRESS_EVENT, kc, 0, 0)?;
        }
        self.move_to(from)?;
        self.press(button)?;
        // A timed drag moves about every 16 ms (a 60 Hz pointer), at least
        // DRAG_STEPS times.
        let steps = (duration_ms / 16).clamp(DRAG_STEPS as u32, 512) as i32;
        let pause = Duration::from_millis(u64::from(duration_ms)) / steps as u32;
        for i in 1..=steps {
            let x = from.x + (to.x - from.x) * i / steps;
            let y = from.y + (to.y - from.y) * i / steps;
            self.move_to(Point { x, y })?;
            if duration_ms > 0 {
                self.sync()?;
                std::thread::sleep(pause);
            }
        }
        self.release(button)?;
        for &kc in mods.iter().rev() {
            self.fake(xproto::KEY_RELEASE_EVENT, kc, 0, 0)?;
        }
        Ok(())
    }

    /// Performs `action` and waits until the X server has processed all of its input.
    /// Validates every point first, so a bad action sends nothing.
    pub fn perform(&mut self, action: &Action) -> Result<()> {
        for (field, p) in action.points() {
            self.check_point(field, p)?;
        }
        match action {
            Action::Click { at, button, count } => {
                self.move_to(*at)?;
                for _ in 0..(*count).clamp(1, 3) {
                    self.press(*button)?;
                    self.release(*button)?;
                }
            }
            Action::Move { to } => self.move_to(*to)?,
            Action::Scroll { at, dx, dy } => {
                self.move_to(*at)?;
                self.wheel(if *dy > 0 { 5 } else { 4 }, *dy)?;
                self.wheel(if *dx > 0 { 7 } else { 6 }, *dx)?;
            }
            Action::Drag {
                from,
                to,
                button,
                duration_ms,
                modifiers,
            } => self.drag(*from, *to, *button, *duration_ms, modifiers)?,
            Action::MouseDown { at, button } => {
                if let Some(p) = at {
                    self.move_to(*p)?;
                }
                self.press(*button)?;
            }
            Action::MouseUp { at, button } => {
                if let Some(p) = at {
                    self.move_to(*p)?;
                }
                self.release(*button)?;
            }
            Action::TypeText(text) => self.type_text(text)?,
            Action::Key(chord) => self.key_chord(chord)?,
            Action::KeyDown(chord) => self.key_down(chord)?,
            Action::KeyUp(chord) => self.key_up(chord)?,
            Action::Wait(ms) => std::thread::sleep(Duration::from_millis(u64::from(*ms))),
            Action::Noop => {}
            Action::ActivateWindow(id) => windows::activate(&self.conn, self.root, *id)?,
            Action::ActivateApp(title) => {
                let id = windows::titled(&self.conn, self.root, title)?;
                windows::activate(&self.conn, self.root, id)?;
            }
            Action::CloseWindow(id) => windows::close(&self.conn, self.root, *id)?,
            Action::MoveWindow { window, x, y } => windows::move_resize(
                &self.conn,
                self.root,
                "move_window.window",
                *window,
                Some((*x, *y)),
                None,
            )?,
            Action::ResizeWindow {
                window,
                width,
                height,
            } => windows::move_resize(
                &self.conn,
                self.root,
                "resize_window.window",
                *window,
                None,
                Some((*width, *height)),
            )?,
            Action::LaunchApp(_) => {
                return Err(DesktopError::invalid(
                    "launch_app",
                    "this desktop has no sandbox to launch applications in",
                ));
            }
            // Element verbs go through the accessibility tree (see `Desktop::step`).
            Action::InvokeAction { .. } | Action::SetValue { .. } => {
                return Err(DesktopError::invalid(
                    "action",
                    "element actions need the desktop's accessibility tree",
                ));
            }
        }
        self.sync()
    }

    /// The top-level windows, through the window manager.
    pub fn windows(&self) -> Result<Vec<windows::WindowInfo>> {
        windows::list(&self.conn, self.root)
    }

    /// The window manager's client ids (to see a new window appear).
    pub fn window_ids(&self) -> Result<Vec<u32>> {
        windows::client_ids(&self.conn, self.root)
    }

    /// Releases every button and key this session holds and parks the pointer at
    /// `park`, so an episode never starts with a drag left over from the previous one.
    pub fn release_all(&mut self, park: Point) -> Result<()> {
        for b in std::mem::take(&mut self.held) {
            self.fake(xproto::BUTTON_RELEASE_EVENT, b.x_button(), 0, 0)?;
        }
        for kc in std::mem::take(&mut self.held_keys).into_iter().rev() {
            self.fake(xproto::KEY_RELEASE_EVENT, kc, 0, 0)?;
        }
        self.move_to(park)?;
        self.sync()
    }

    /// Takes the pointer for this session (a grab on the root window that asks for no
    /// events): no other client sees the X pointer move or enter its windows. A web
    /// task's browser gets its input through DevTools only, so a parked X pointer
    /// never hovers an element of the page.
    pub fn grab_pointer(&mut self) -> Result<()> {
        let reply = self
            .conn
            .grab_pointer(
                false,
                self.root,
                xproto::EventMask::NO_EVENT,
                xproto::GrabMode::ASYNC,
                xproto::GrabMode::ASYNC,
                x11rb::NONE,
                x11rb::NONE,
                x11rb::CURRENT_TIME,
            )
            .map_err(|e| self.conn_err(e))?
            .reply()
            .map_err(|e| DesktopError::X11(format!("GrabPointer: {e}")))?;
        if reply.status != xproto::GrabStatus::SUCCESS {
            return Err(DesktopError::X11(format!(
                "GrabPointer answered {:?}",
                reply.status
            )));
        }
        Ok(())
    }

    /// Finds a keycode (and whether Shift is needed) that produces `sym`, remapping a
    /// spare keycode when the keymap has none.
    fn keycode_for(&mut self, sym: Keysym) -> Result<(u8, bool)> {
        let per = usize::from(self.per_keycode.max(1));
        for (i, syms) in self.keymap.chunks(per).enumerate() {
            for (level, &s) in syms.iter().take(2).enumerate() {
                if s == sym {
                    return Ok((self.min_keycode + i as u8, level == 1));
                }
            }
        }
        if let Some(&kc) = self.remapped.get(&sym) {
            return Ok((kc, false));
        }
        if self.scratch.is_empty() {
            return Err(DesktopError::invalid(
                "key",
                format!("no spare keycode to type keysym {sym:#x}"),
            ));
        }
        let kc = self.scratch[self.next_scratch % self.scratch.len()];
        self.next_scratch += 1;
        self.remapped.retain(|_, &mut k| k != kc);
        let syms = vec![sym; per];
        self.conn
            .change_keyboard_mapping(1, kc, self.per_keycode, &syms)
            .map_err(|e| self.conn_err(e))?;
        self.remapped.insert(sym, kc);
        Ok((kc, false))
    }

    fn tap(&mut self, sym: Keysym) -> Result<()> {
        let (kc, shift) = self.keycode_for(sym)?;
        let (shift_kc, _) = if shift {
            self.keycode_for(keys::SHIFT_L)?
        } else {
            (0, false)
        };
        if shift {
            self.fake(xproto::KEY_PRESS_EVENT, shift_kc, 0, 0)?;
        }
        self.fake(xproto::KEY_PRESS_EVENT, kc, 0, 0)?;
        self.fake(xproto::KEY_RELEASE_EVENT, kc, 0, 0)?;
        if shift {
            self.fake(xproto::KEY_RELEASE_EVENT, shift_kc, 0, 0)?;
        }
        Ok(())
    }

    fn type_text(&mut self, text: &str) -> Result<()> {
        for c in text.chars() {
            self.tap(keys::char_keysym(c))?;
        }
        Ok(())
    }

    /// The keycodes that press `chord` (Shift added where a key needs it), in order.
    fn chord_codes(&mut self, chord: &str, field: &str) -> Result<Vec<u8>> {
        let syms = keys::parse_chord(chord).map_err(|m| DesktopError::invalid(field, m))?;
        let mut codes = Vec::with_capacity(syms.len() + 1);
        for &sym in &syms {
            let (kc, shift) = self.keycode_for(sym)?;
            if shift {
                let (skc, _) = self.keycode_for(keys::SHIFT_L)?;
                if !codes.contains(&skc) {
                    codes.push(skc);
                }
            }
            codes.push(kc);
        }
        Ok(codes)
    }

    fn key_chord(&mut self, chord: &str) -> Result<()> {
        let codes = self.chord_codes(chord, "key.keys")?;
        for &kc in &codes {
            self.fake(xproto::KEY_PRESS_EVENT, kc, 0, 0)?;
        }
        for &kc in codes.iter().rev() {
            self.fake(xproto::KEY_RELEASE_EVENT, kc, 0, 0)?;
        }
        Ok(())
    }

    /// Presses `chord`'s keys in order and keeps them held (remembered in `held_keys`,
    /// so [`release_all`](Self::release_all) can let go of them at the episode's end).
    fn key_down(&mut self, chord: &str) -> Result<()> {
        for kc in self.chord_codes(chord, "key_down.keys")? {
            self.fake(xproto::KEY_PRESS_EVENT, kc, 0, 0)?;
            if !self.held_keys.contains(&kc) {
                self.held_keys.push(kc);
            }
        }
        Ok(())
    }

    /// Releases `chord`'s keys in reverse order (a `key_down`'s counterpart).
    fn key_up(&mut self, chord: &str) -> Result<()> {
        for kc in self.chord_codes(chord, "key_up.keys")?.into_iter().rev() {
            self.fake(xproto::KEY_RELEASE_EVENT, kc, 0, 0)?;
            self.held_keys.retain(|&k| k != kc);
        }
        Ok(())
    }

    /// Waits until XDamage has been quiet for `settle.settle_ms` (at most
    /// `settle.settle_max_ms`), re-arming the damage object after each notification.
    ///
    /// With `SettlePolicy::Sync` the quiet window is zero: the caller has already had
    /// the app acknowledge its drawing, so one round trip (draining the damage it caused)
    /// is all that is left.
    pub fn settle(&mut self, settle: Settle) -> Result<SettleReport> {
        self.settle_responding(settle, Duration::ZERO)
    }

    /// [`Self::settle`] after an input the app answers by drawing (a key): the quiet
    /// window only counts once the screen changed, or once `respond` passed without a
    /// change. An app that draws its answer from its next frame (a terminal echoing
    /// through its shell: key, pty, shell, pty, frame clock) is often still silent
    /// when a plain quiet window ends, and the step would show the screen before the key.
    pub(crate) fn settle_responding(
        &mut self,
        settle: Settle,
        respond: Duration,
    ) -> Result<SettleReport> {
        let start = Instant::now();
        let (quiet, cap) = settle.window();
        // A round trip first: damage caused by everything processed so far is then
        // already in our input buffer.
        self.sync()?;
        let mut last_change = start;
        let mut events = 0u32;
        loop {
            let seen = self.take_damage()?;
            events += seen;
            let now = Instant::now();
            if seen > 0 {
                last_change = now;
            }
            let waited = now - start;
            let report = |quiesced| SettleReport {
                policy: settle.policy,
                waited_ms: waited.as_secs_f64() * 1e3,
                quiesced,
                damage_events: events,
            };
            // Until the app answered (or gave up answering), the quiet is not its own.
            let waiting_answer = events == 0 && waited < respond;
            if now - last_change >= quiet && !waiting_answer {
                return Ok(report(true));
            }
            if waited >= cap {
                return Ok(report(false));
            }
            let mut until = (last_change + quiet).min(start + cap);
            if waiting_answer {
                until = until.max(start + respond.min(cap));
            }
            self.wait_readable(until.saturating_duration_since(now))?;
        }
    }

    /// Reads the damage notifications received so far and re-arms the damage object
    /// after any: how many there were (each marks the screen as changed).
    fn take_damage(&mut self) -> Result<u32> {
        let mut seen = 0;
        while let Some(ev) = self.conn.poll_for_event().map_err(|e| self.conn_err(e))? {
            if let Event::DamageNotify(_) = ev {
                seen += 1;
            }
        }
        if seen > 0 {
            self.damaged = true;
            self.conn
                .damage_subtract(self.damage, x11rb::NONE, x11rb::NONE)
                .map_err(|e| self.conn_err(e))?;
            self.conn.flush().map_err(|e| self.conn_err(e))?;
        }
        Ok(seen)
    }

    fn wait_readable(&self, timeout: Duration) -> Result<()> {
        let fd = self.conn.stream().as_raw_fd();
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd on a descriptor the connection keeps open.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r > 0 && pfd.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
            return Err(self.gone("connection closed"));
        }
        Ok(())
    }

    /// Captures the root window as RGB (no cursor: X servers leave it out of images).
    ///
    /// While XDamage has reported no drawing since the last capture, the screen still
    /// shows what that capture read: its pixels are converted again from the buffer
    /// they are still in, under the same hash, without asking the X server for them
    /// (a step that changes nothing skips the image transfer and the hash). A round
    /// trip first makes that exact: the server sends a drawing's notification before
    /// the reply to any later request.
    pub fn capture(&mut self) -> Result<Frame> {
        let (w, h) = (self.width, self.height);
        self.take_damage()?;
        let mut reuse = self.captured.filter(|_| !self.damaged);
        if reuse.is_some() {
            // One round trip: the notification of any drawing the server did before it
            // is read by its reply, so reusing is exact as of this moment.
            self.sync()?;
            self.take_damage()?;
            if self.damaged {
                reuse = None;
            }
        }
        if reuse.is_none() {
            // Drawing from here on is reported after this capture: seen next time.
            self.damaged = false;
        }
        let mut rgb = Vec::new();
        // How many bytes of the buffer hold the pixels (kept for the next reuse).
        let len = if let Some(shm) = &self.shm {
            let len = match reuse {
                Some((_, len)) => len,
                None => {
                    let reply = self
                        .conn
                        .shm_get_image(
                            self.root,
                            0,
                            0,
                            w,
                            h,
                            !0,
                            ImageFormat::Z_PIXMAP.into(),
                            shm.seg,
                            0,
                        )
                        .map_err(|e| self.conn_err(e))?
                        .reply()
                        .map_err(|e| self.reply_err(e))?;
                    (reply.size as usize).min(shm.size)
                }
            };
            // SAFETY: the segment is `shm.size` bytes, mapped for the session's lifetime,
            // and the server finished writing before it sent the reply; nothing else
            // writes it between captures.
            let px = unsafe { std::slice::from_raw_parts(shm.addr, len) };
            bgrx_to_rgb(px, &mut rgb);
            len
        } else {
            if reuse.is_none() {
                let reply = self
                    .conn
                    .get_image(ImageFormat::Z_PIXMAP, self.root, 0, 0, w, h, !0)
                    .map_err(|e| self.conn_err(e))?
                    .reply()
                    .map_err(|e| self.reply_err(e))?;
                self.bgrx = reply.data;
            }
            bgrx_to_rgb(&self.bgrx, &mut rgb);
            self.bgrx.len()
        };
        let frame = match reuse {
            Some((hash, _)) => Frame {
                width: u32::from(w),
                height: u32::from(h),
                rgb,
                hash,
            },
            None => Frame::from_rgb(u32::from(w), u32::from(h), rgb),
        };
        self.captured = Some((frame.hash, len));
        Ok(frame)
    }
}

impl Drop for XSession {
    fn drop(&mut self) {
        if let Some(shm) = self.shm.take() {
            let _ = self.conn.shm_detach(shm.seg);
            let _ = self.conn.flush();
            // SAFETY: the mapping came from mmap of `size` bytes and is unmapped once.
            unsafe { libc::munmap(shm.addr.cast(), shm.size) };
        }
    }
}

impl From<ReplyOrIdError> for DesktopError {
    fn from(e: ReplyOrIdError) -> Self {
        DesktopError::X11(e.to_string())
    }
}
