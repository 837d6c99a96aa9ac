//! Top-level windows through the window manager (EWMH): list, activate, close, move,
//! resize. Requests go to the root window as client messages with source indication
//! "pager" (2), the way taskbars and `wmctrl` ask, so the window manager applies its
//! own policy (focus stealing, constraints) as for a user.

use x11rb::connection::Connection;
use x11rb::protocol::xproto::{self, AtomEnum, ConnectionExt as _, EventMask};
use x11rb::rust_connection::RustConnection;

use crate::error::{DesktopError, Result};

/// One top-level window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowInfo {
    /// X window id.
    pub id: u32,
    /// `_NET_WM_NAME` (or `WM_NAME`).
    pub title: String,
    /// The class part of `WM_CLASS`.
    pub class: String,
    /// `_NET_WM_PID`, when the application set it.
    pub pid: Option<u32>,
    /// Left edge on screen.
    pub x: i32,
    /// Top edge on screen.
    pub y: i32,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
    /// It is `_NET_ACTIVE_WINDOW`.
    pub focused: bool,
}

/// Source indication of requests: a pager (EWMH), so they are honoured like a user's.
const SOURCE_PAGER: u32 = 2;

/// An X request that failed, as a desktop error (shared with `clipboard`).
pub(crate) fn err(e: impl std::fmt::Display) -> DesktopError {
    DesktopError::X11(e.to_string())
}

/// Interns an atom (shared with `clipboard`).
pub(crate) fn atom(conn: &RustConnection, name: &str) -> Result<u32> {
    Ok(conn
        .intern_atom(false, name.as_bytes())
        .map_err(err)?
        .reply()
        .map_err(err)?
        .atom)
}

fn property(conn: &RustConnection, w: u32, prop: u32, ty: u32, long: u32) -> Result<Vec<u8>> {
    Ok(conn
        .get_property(false, w, prop, ty, 0, long)
        .map_err(err)?
        .reply()
        .map(|r| r.value)
        .unwrap_or_default())
}

fn u32s(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The window manager's client list (`_NET_CLIENT_LIST`).
pub(crate) fn client_ids(conn: &RustConnection, root: u32) -> Result<Vec<u32>> {
    let list = atom(conn, "_NET_CLIENT_LIST")?;
    Ok(u32s(&property(
        conn,
        root,
        list,
        AtomEnum::WINDOW.into(),
        4096,
    )?))
}

/// True when a window manager runs (EWMH's `_NET_SUPPORTING_WM_CHECK` on the root).
fn managed(conn: &RustConnection, root: u32) -> Result<bool> {
    let check = atom(conn, "_NET_SUPPORTING_WM_CHECK")?;
    Ok(!property(conn, root, check, AtomEnum::WINDOW.into(), 1)?.is_empty())
}

/// The top-level windows: the window manager's clients, or on a display without one
/// (the bundled task app's bare Xvfb) the root's mapped children, as ACI specifies.
fn top_level(conn: &RustConnection, root: u32) -> Result<Vec<u32>> {
    if managed(conn, root)? {
        return client_ids(conn, root);
    }
    let children = conn
        .query_tree(root)
        .map_err(err)?
        .reply()
        .map_err(err)?
        .children;
    let mut out = Vec::with_capacity(children.len());
    for id in children {
        let Ok(a) = conn.get_window_attributes(id).map_err(err)?.reply() else {
            continue;
        };
        if a.map_state == xproto::MapState::VIEWABLE {
            out.push(id);
        }
    }
    Ok(out)
}

/// The focused top-level window: `_NET_ACTIVE_WINDOW`, or without a window manager the
/// root child that holds the input focus.
fn focused(conn: &RustConnection, root: u32) -> Result<Option<u32>> {
    if managed(conn, root)? {
        let active_atom = atom(conn, "_NET_ACTIVE_WINDOW")?;
        return Ok(u32s(&property(
            conn,
            root,
            active_atom,
            AtomEnum::WINDOW.into(),
            1,
        )?)
        .first()
        .copied());
    }
    let mut w = conn
        .get_input_focus()
        .map_err(err)?
        .reply()
        .map_err(err)?
        .focus;
    // Up to the root's child; a bounded walk (X trees are shallow).
    for _ in 0..64 {
        if w == root || w == x11rb::NONE || w == 1 {
            return Ok(None); // PointerRoot (1) or None: no window holds the focus
        }
        let Ok(t) = conn.query_tree(w).map_err(err)?.reply() else {
            return Ok(None);
        };
        if t.parent == root {
            return Ok(Some(w));
        }
        w = t.parent;
    }
    Ok(None)
}

/// Every top-level window with its title, class, pid and geometry.
pub(crate) fn list(conn: &RustConnection, root: u32) -> Result<Vec<WindowInfo>> {
    let active = focused(conn, root)?;
    let (net_name, utf8, net_pid) = (
        atom(conn, "_NET_WM_NAME")?,
        atom(conn, "UTF8_STRING")?,
        atom(conn, "_NET_WM_PID")?,
    );
    let mut out = Vec::new();
    for id in top_level(conn, root)? {
        // A window may vanish between the list and these requests: skip it.
        let Ok(geo) = conn.get_geometry(id).map_err(err)?.reply() else {
            continue;
        };
        let Ok(pos) = conn
            .translate_coordinates(id, root, 0, 0)
            .map_err(err)?
            .reply()
        else {
            continue;
        };
        let mut title = property(conn, id, net_name, utf8, 1024)?;
        if title.is_empty() {
            title = property(
                conn,
                id,
                AtomEnum::WM_NAME.into(),
                AtomEnum::STRING.into(),
                1024,
            )?;
        }
        let class = property(
            conn,
            id,
            AtomEnum::WM_CLASS.into(),
            AtomEnum::STRING.into(),
            256,
        )?;
        let class = class
            .split(|b| *b == 0)
            .nth(1)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .unwrap_or_default();
        out.push(WindowInfo {
            id,
            title: String::from_utf8_lossy(&title).into_owned(),
            class,
            pid: u32s(&property(conn, id, net_pid, AtomEnum::CARDINAL.into(), 1)?)
                .first()
                .copied(),
            x: i32::from(pos.dst_x),
            y: i32::from(pos.dst_y),
            width: u32::from(geo.width),
            height: u32::from(geo.height),
            focused: active == Some(id),
        });
    }
    Ok(out)
}

/// The first top-level window whose title contains `title`, ignoring case (ACI's
/// `activate_window {app}`).
pub(crate) fn titled(conn: &RustConnection, root: u32, title: &str) -> Result<u32> {
    let want = title.to_lowercase();
    let ws = list(conn, root)?;
    ws.iter()
        .find(|w| w.title.to_lowercase().contains(&want))
        .map(|w| w.id)
        .ok_or_else(|| {
            let titles: Vec<String> = ws
                .iter()
                .take(10)
                .map(|w| format!("{:?}", w.title))
                .collect();
            DesktopError::invalid(
                "activate_window.app",
                format!(
                    "no window title contains {:?}; titles: {}",
                    title,
                    if titles.is_empty() {
                        "none".into()
                    } else {
                        titles.join(", ")
                    }
                ),
            )
        })
}

/// Fails unless `id` is a top-level window (see [`top_level`]).
fn check(conn: &RustConnection, root: u32, field: &str, id: u32) -> Result<()> {
    if top_level(conn, root)?.contains(&id) {
        Ok(())
    } else {
        Err(DesktopError::invalid(
            field,
            format!(
                "no window {id:#x} on this desktop (closed, or never existed); ListWindows \
                 gives the live ones"
            ),
        ))
    }
}

fn message(
    conn: &RustConnection,
    root: u32,
    window: u32,
    kind: &str,
    data: [u32; 5],
) -> Result<()> {
    let ty = atom(conn, kind)?;
    let event = xproto::ClientMessageEvent::new(32, window, ty, data);
    conn.send_event(
        false,
        root,
        EventMask::SUBSTRUCTURE_REDIRECT | EventMask::SUBSTRUCTURE_NOTIFY,
        event,
    )
    .map_err(err)?;
    conn.flush().map_err(err)
}

/// Raises and focuses a window: through the window manager, or without one by raising
/// it and setting the input focus (ACI's WM-less fallback).
pub(crate) fn activate(conn: &RustConnection, root: u32, id: u32) -> Result<()> {
    check(conn, root, "activate_window.window", id)?;
    if !managed(conn, root)? {
        let raise = xproto::ConfigureWindowAux::new().stack_mode(xproto::StackMode::ABOVE);
        conn.configure_window(id, &raise).map_err(err)?;
        conn.set_input_focus(xproto::InputFocus::PARENT, id, x11rb::CURRENT_TIME)
            .map_err(err)?;
        return conn.flush().map_err(err);
    }
    message(
        conn,
        root,
        id,
        "_NET_ACTIVE_WINDOW",
        [SOURCE_PAGER, 0, 0, 0, 0],
    )
}

/// Asks a window to close (the application may ask to save first).
pub(crate) fn close(conn: &RustConnection, root: u32, id: u32) -> Result<()> {
    check(conn, root, "close_window.window", id)?;
    message(
        conn,
        root,
        id,
        "_NET_CLOSE_WINDOW",
        [0, SOURCE_PAGER, 0, 0, 0],
    )
}

/// Moves (`Some` position) and/or resizes (`Some` size) a window's frame.
pub(crate) fn move_resize(
    conn: &RustConnection,
    root: u32,
    field: &str,
    id: u32,
    pos: Option<(i32, i32)>,
    size: Option<(u32, u32)>,
) -> Result<()> {
    check(conn, root, field, id)?;
    // Flags: bits 8-11 say which of x, y, width, height are set; 12-13 the source.
    let mut flags = SOURCE_PAGER << 12;
    let (mut x, mut y, mut w, mut h) = (0u32, 0u32, 0u32, 0u32);
    if let Some((px, py)) = pos {
        flags |= 0b0011 << 8;
        (x, y) = (px as u32, py as u32);
    }
    if let Some((sw, sh)) = size {
        flags |= 0b1100 << 8;
        (w, h) = (sw, sh);
    }
    message(
        conn,
        root,
        id,
        "_NET_MOVERESIZE_WINDOW",
        [flags, x, y, w, h],
    )
}
