//! The CLIPBOARD selection of a display, as text.
//!
//! Reading converts the selection to `UTF8_STRING` into a property of a window of our
//! own and reads it back. Writing makes a thread of ours the selection owner, on its own
//! connection, so applications can paste at any time (not only while a step runs); it
//! answers `TARGETS`, `UTF8_STRING`, `STRING` and `TEXT` until another client takes the
//! selection or the display goes. Text is limited to [`MAX_CLIPBOARD_BYTES`]; other
//! targets and incremental (INCR) transfers are typed errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use x11rb::connection::Connection;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{self, AtomEnum, ConnectionExt as _, EventMask, PropMode};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

use crate::error::{DesktopError, Result};
use crate::windows::{atom, err};

/// Largest clipboard text either way.
pub const MAX_CLIPBOARD_BYTES: usize = 1 << 20;
/// How long the selection's owner may take to answer a read.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

fn connect(display: u32) -> Result<(RustConnection, xproto::Window)> {
    let conn = crate::xvfb::connect(display)?;
    let root = conn.setup().roots[0].root;
    let win = conn.generate_id().map_err(err)?;
    conn.create_window(
        0,
        win,
        root,
        -10,
        -10,
        1,
        1,
        0,
        xproto::WindowClass::INPUT_ONLY,
        0,
        &xproto::CreateWindowAux::new().event_mask(EventMask::PROPERTY_CHANGE),
    )
    .map_err(err)?;
    conn.flush().map_err(err)?;
    Ok((conn, win))
}

/// The window that owns `selection` now (`x11rb::NONE` when nobody does): one query for
/// a read (is there anything to read?) and a write (did we win the selection?).
fn owner_of(conn: &RustConnection, selection: xproto::Atom) -> Result<xproto::Window> {
    Ok(conn
        .get_selection_owner(selection)
        .map_err(err)?
        .reply()
        .map_err(err)?
        .owner)
}

/// Reads the CLIPBOARD as text ("" when nobody owns it).
pub(crate) fn get(display: u32) -> Result<String> {
    let (conn, win) = connect(display)?;
    let clipboard = atom(&conn, "CLIPBOARD")?;
    let owner = owner_of(&conn, clipboard)?;
    if owner == x11rb::NONE {
        return Ok(String::new());
    }
    let (utf8, prop, incr) = (
        atom(&conn, "UTF8_STRING")?,
        atom(&conn, "DESKGYM_CLIPBOARD")?,
        atom(&conn, "INCR")?,
    );
    conn.convert_selection(win, clipboard, utf8, prop, x11rb::CURRENT_TIME)
        .map_err(err)?;
    conn.flush().map_err(err)?;
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        match conn.poll_for_event().map_err(err)? {
            Some(Event::SelectionNotify(n)) if n.requestor == win => {
                if n.property == x11rb::NONE {
                    return Err(DesktopError::Clipboard(
                        "the clipboard holds no text (its owner offers other targets only)".into(),
                    ));
                }
                break;
            }
            Some(_) => {}
            None if Instant::now() >= deadline => {
                return Err(DesktopError::Clipboard(format!(
                    "the clipboard's owner did not answer within {} s",
                    READ_TIMEOUT.as_secs()
                )));
            }
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    let limit = (MAX_CLIPBOARD_BYTES / 4 + 1) as u32;
    let r = conn
        .get_property(true, win, prop, AtomEnum::ANY, 0, limit)
        .map_err(err)?
        .reply()
        .map_err(err)?;
    if r.type_ == incr {
        return Err(DesktopError::Clipboard(
            "the clipboard's owner sends its text incrementally (INCR), which deskgym does \
             not read; it is over the 1 MiB limit or close to it"
                .into(),
        ));
    }
    if r.bytes_after > 0 || r.value.len() > MAX_CLIPBOARD_BYTES {
        return Err(DesktopError::Clipboard(format!(
            "the clipboard holds more than {MAX_CLIPBOARD_BYTES} bytes of text"
        )));
    }
    String::from_utf8(r.value)
        .map_err(|_| DesktopError::Clipboard("the clipboard's text is not UTF-8".into()))
}

/// The thread that owns the CLIPBOARD after a `set`; stopped when dropped.
#[derive(Debug)]
pub(crate) struct Owner {
    stop: Arc<AtomicBool>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Makes `text` the CLIPBOARD: a thread of ours owns the selection and serves pastes
/// until another client takes it, the returned [`Owner`] drops, or the display goes.
pub(crate) fn set(display: u32, text: &str) -> Result<Owner> {
    if text.len() > MAX_CLIPBOARD_BYTES {
        return Err(DesktopError::invalid(
            "text",
            format!(
                "{} bytes is over the clipboard limit of {MAX_CLIPBOARD_BYTES}",
                text.len()
            ),
        ));
    }
    let (conn, win) = connect(display)?;
    let clipboard = atom(&conn, "CLIPBOARD")?;
    let atoms = Atoms {
        targets: atom(&conn, "TARGETS")?,
        utf8: atom(&conn, "UTF8_STRING")?,
        text: atom(&conn, "TEXT")?,
    };
    conn.set_selection_owner(win, clipboard, x11rb::CURRENT_TIME)
        .map_err(err)?;
    let owner = owner_of(&conn, clipboard)?;
    if owner != win {
        return Err(DesktopError::Clipboard(
            "another client kept the clipboard".into(),
        ));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let data = text.as_bytes().to_vec();
    let s = stop.clone();
    std::thread::Builder::new()
        .name(format!("deskgym-clipboard-{display}"))
        .spawn(move || serve(&conn, win, &atoms, &data, &s))
        .map_err(DesktopError::Io)?;
    Ok(Owner { stop })
}

struct Atoms {
    targets: u32,
    utf8: u32,
    text: u32,
}

/// Answers selection requests until the selection is lost or `stop` is set.
fn serve(conn: &RustConnection, win: xproto::Window, a: &Atoms, data: &[u8], stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let event = match conn.poll_for_event() {
            Ok(Some(e)) => e,
            Ok(None) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(_) => return, // the display is gone
        };
        match event {
            Event::SelectionClear(_) => return,
            Event::SelectionRequest(r) => {
                let string: u32 = AtomEnum::STRING.into();
                let property = if r.property == x11rb::NONE {
                    r.target // obsolete clients
                } else {
                    r.property
                };
                let done = if r.target == a.targets {
                    let offered = [a.targets, a.utf8, a.text, string];
                    conn.change_property32(
                        PropMode::REPLACE,
                        r.requestor,
                        property,
                        AtomEnum::ATOM,
                        &offered,
                    )
                    .is_ok()
                } else if r.target == a.utf8 || r.target == a.text || r.target == string {
                    let ty = if r.target == string { string } else { a.utf8 };
                    conn.change_property8(PropMode::REPLACE, r.requestor, property, ty, data)
                        .is_ok()
                } else {
                    false
                };
                let notify = xproto::SelectionNotifyEvent {
                    response_type: xproto::SELECTION_NOTIFY_EVENT,
                    sequence: 0,
                    time: r.time,
                    requestor: r.requestor,
                    selection: r.selection,
                    target: r.target,
                    property: if done { property } else { x11rb::NONE },
                };
                let _ = conn.send_event(false, r.requestor, EventMask::NO_EVENT, notify);
                let _ = conn.flush();
            }
            _ => {}
        }
    }
    let _ = conn.destroy_window(win);
    let _ = conn.flush();
}
