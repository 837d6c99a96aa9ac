//! Real Xvfb, real task app: start, reset, act, capture.

use deskgym_worker::{
    Action, Button, Desktop, DesktopConfig, LocalDesktop, Point, Settle, SettlePolicy,
};

const RED: u32 = 0xd62828;
const ORANGE: u32 = 0xf77f00;
const GREEN: u32 = 0x2a9d8f;

fn desktop(task: &str, w: u32, h: u32) -> LocalDesktop {
    LocalDesktop::start(DesktopConfig {
        task: task.into(),
        width: w,
        height: h,
        settle: Settle {
            policy: SettlePolicy::Sync,
            settle_ms: 0,
            settle_max_ms: 1000,
        },
        family: deskgym_worker::Family::TaskApp,
    })
    .expect("desktop starts (needs the Debian package `xvfb`)")
}

fn click(x: i32, y: i32) -> Action {
    Action::Click {
        at: Point { x, y },
        button: Button::Left,
        count: 1,
    }
}

#[test]
fn click_target_pixels_to_reward() {
    let mut d = desktop("click-target", 640, 480);
    assert!(d.uses_shm(), "MIT-SHM should work against a local Xvfb");
    let out = d.reset(42).unwrap();
    assert!(!out.app.done);
    assert!(out.app.instruction.contains("red circle"));
    let frame = d.capture().unwrap();
    assert_eq!((frame.width, frame.height), (640, 480));
    let (x, y) = frame.find_color(RED).expect("red target visible");
    let miss = d.step(&click(2, 470)).unwrap();
    assert_eq!((miss.app.reward, miss.app.done), (0.0, false));
    let hit = d.step(&click(x, y)).unwrap();
    assert_eq!((hit.app.reward, hit.app.done), (1.0, true));
}

#[test]
fn same_seed_same_pixels_on_two_displays() {
    let mut a = desktop("click-button", 320, 240);
    let mut b = desktop("click-button", 320, 240);
    assert_ne!(a.display(), b.display());
    a.reset(9).unwrap();
    b.reset(9).unwrap();
    let (fa, fb) = (a.capture().unwrap(), b.capture().unwrap());
    assert_eq!(fa.hash, fb.hash);
    b.reset(10).unwrap();
    assert_ne!(fa.hash, b.capture().unwrap().hash);
}

// spec: aci:3.gestures
#[test]
fn drag_moves_the_item_into_the_zone() {
    let mut d = desktop("drag-to-zone", 640, 480);
    d.reset(3).unwrap();
    let f = d.capture().unwrap();
    let from = f.find_color(ORANGE).unwrap();
    let zone = f.find_color(GREEN).unwrap();
    let out = d
        .step(&Action::Drag {
            from: Point {
                x: from.0,
                y: from.1,
            },
            to: Point {
                x: zone.0,
                y: zone.1,
            },
            button: Button::Left,
            duration_ms: 0,
            modifiers: String::new(),
        })
        .unwrap();
    assert_eq!(out.app.reward, 1.0);
    assert_ne!(d.capture().unwrap().hash, f.hash);
}

#[test]
fn typing_a_word_with_unicode_and_enter() {
    let mut d = desktop("type-word", 640, 480);
    let out = d.reset(1).unwrap();
    let word = out.app.instruction.split('"').nth(1).unwrap().to_string();
    let before = d.capture().unwrap();
    let field = before.find_color(0xfcfcfc).unwrap();
    d.step(&click(field.0, field.1)).unwrap();
    // A non-keymap character goes through a remapped spare keycode, then is erased.
    d.step(&Action::TypeText("é€".into())).unwrap();
    d.step(&Action::Key("BackSpace".into())).unwrap();
    d.step(&Action::Key("backspace".into())).unwrap();
    d.step(&Action::TypeText(word)).unwrap();
    let out = d.step(&Action::Key("Return".into())).unwrap();
    assert_eq!((out.app.reward, out.app.done), (1.0, true));
}

#[test]
fn bad_actions_are_rejected_before_anything_is_sent() {
    let mut d = desktop("click-target", 320, 240);
    d.reset(0).unwrap();
    let e = d.step(&click(320, 10)).unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");
    let e = d.step(&Action::Key("ctrl+bogus".into())).unwrap_err();
    assert!(e.to_string().contains("bogus"), "{e}");
    let e = d.step(&Action::TypeText(String::new())).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    assert!(!e.is_fatal());
}

#[test]
fn killed_xvfb_is_reported_and_cleaned_up() {
    let mut d = desktop("click-target", 320, 240);
    d.reset(0).unwrap();
    let display = d.display();
    // SAFETY: plain kill of the Xvfb we started.
    unsafe { libc::kill(d.xvfb_pid() as i32, libc::SIGKILL) };
    std::thread::sleep(std::time::Duration::from_millis(100));
    let e = d.step(&Action::Noop).unwrap_err();
    assert!(e.is_fatal(), "{e}");
    let socket = format!("/tmp/.X11-unix/X{display}");
    let lock = format!("/tmp/.X{display}-lock");
    drop(d);
    assert!(
        !std::path::Path::new(&lock).exists(),
        "no lock file left behind"
    );
    // Either gone, or a concurrently started Xvfb took the free display number over.
    let path = std::path::Path::new(&socket);
    assert!(
        !path.exists() || std::os::unix::net::UnixStream::connect(path).is_ok(),
        "drop leaves no stale socket"
    );
}

#[test]
fn settle_reports_quiet_window() {
    let mut d = LocalDesktop::start(DesktopConfig {
        task: "click-target".into(),
        width: 320,
        height: 240,
        settle: Settle {
            policy: SettlePolicy::Damage,
            settle_ms: 20,
            settle_max_ms: 500,
        },
        family: deskgym_worker::Family::TaskApp,
    })
    .unwrap();
    let out = d.reset(0).unwrap();
    assert!(out.settle.quiesced);
    assert!(out.settle.waited_ms >= 20.0, "{:?}", out.settle);
    let out = d.step(&Action::Noop).unwrap();
    assert!(out.settle.quiesced);
}

/// A capture that reuses the last one's pixels (XDamage saw no drawing) equals a
/// fresh one, and drawing by another client, with no step and no settle in between, is
/// in the very next capture.
#[test]
fn an_unchanged_screen_is_reused_and_drawing_by_another_client_is_seen_at_once() {
    use x11rb::connection::Connection as _;
    use x11rb::protocol::xproto::{ConnectionExt as _, CreateWindowAux, WindowClass};
    const MAGENTA: u32 = 0xff00ff;
    let mut d = desktop("click-button", 320, 240);
    d.reset(3).unwrap();
    let first = d.capture().unwrap();
    let again = d.capture().unwrap();
    assert_eq!((again.hash, &again.rgb), (first.hash, &first.rgb));
    assert!(first.find_color(MAGENTA).is_none());
    let conn = connect(d.display(), &cookie(d.xauthority())).unwrap();
    let root = conn.setup().roots[0].root;
    let sync = |c: &x11rb::rust_connection::RustConnection| {
        c.get_input_focus().unwrap().reply().unwrap();
    };
    for round in 0..20i16 {
        let win = conn.generate_id().unwrap();
        let aux = CreateWindowAux::new()
            .background_pixel(MAGENTA)
            .override_redirect(1);
        let x = 10 + round * 8;
        conn.create_window(
            0,
            win,
            root,
            x,
            10,
            30,
            30,
            0,
            WindowClass::INPUT_OUTPUT,
            0,
            &aux,
        )
        .unwrap();
        conn.map_window(win).unwrap();
        // Drawn by the X server before this returns; the desktop's own session learns
        // of it only through XDamage.
        sync(&conn);
        let seen = d.capture().unwrap();
        let at = seen.find_color(MAGENTA);
        assert_eq!(
            at,
            Some((i32::from(x) + 14, 24)),
            "round {round}: the new window is missing"
        );
        conn.destroy_window(win).unwrap();
        sync(&conn);
        let gone = d.capture().unwrap();
        assert!(
            gone.find_color(MAGENTA).is_none(),
            "round {round}: a destroyed window stays"
        );
    }
}

/// The cookie of the FamilyWild entry of an Xauthority file (the one libXau and x11rb
/// use whatever the host is called), read as those libraries read the format.
fn cookie(file: &std::path::Path) -> Vec<u8> {
    let bytes = std::fs::read(file).unwrap();
    let mut at = &bytes[..];
    let field = |at: &mut &[u8]| {
        let n = usize::from(u16::from_be_bytes([at[0], at[1]]));
        let f = at[2..2 + n].to_vec();
        *at = &at[2 + n..];
        f
    };
    while !at.is_empty() {
        let family = u16::from_be_bytes([at[0], at[1]]);
        at = &at[2..];
        let (_address, _number, name, data) = (
            field(&mut at),
            field(&mut at),
            field(&mut at),
            field(&mut at),
        );
        if family == 0xffff && name == b"MIT-MAGIC-COOKIE-1" {
            return data;
        }
    }
    panic!("no FamilyWild MIT-MAGIC-COOKIE-1 entry in {file:?}");
}

/// A client of `:display` presenting `cookie` (none when empty), as any other process
/// of the host would connect.
fn connect(
    display: u32,
    cookie: &[u8],
) -> Result<x11rb::rust_connection::RustConnection, x11rb::errors::ConnectError> {
    use x11rb::rust_connection::{DefaultStream, RustConnection};
    let stream = std::os::unix::net::UnixStream::connect(format!("/tmp/.X11-unix/X{display}"))?;
    let (stream, _) = DefaultStream::from_unix_stream(stream)?;
    let name = if cookie.is_empty() {
        vec![]
    } else {
        b"MIT-MAGIC-COOKIE-1".to_vec()
    };
    RustConnection::connect_to_stream_with_auth_info(stream, 0, name, cookie.to_vec())
}

/// Each display takes only clients with its own cookie, kept in a file only this
/// user reads: no cookie, another display's cookie and a forged one are refused.
#[test]
fn a_display_refuses_clients_without_its_own_cookie() {
    use std::os::unix::fs::PermissionsExt as _;
    let a = desktop("click-target", 320, 240);
    let b = desktop("click-target", 320, 240);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(a.xauthority()), 0o600);
    assert_eq!(mode(a.xauthority().parent().unwrap()), 0o700);
    let (mine, theirs) = (cookie(a.xauthority()), cookie(b.xauthority()));
    assert_eq!(mine.len(), 16);
    assert_ne!(mine, theirs, "every display has a cookie of its own");
    for (what, key) in [
        ("no cookie", vec![]),
        ("another display's cookie", theirs),
        ("a forged cookie", vec![0; 16]),
    ] {
        let refused = connect(a.display(), &key);
        assert!(
            matches!(
                refused,
                Err(x11rb::errors::ConnectError::SetupFailed(_)
                    | x11rb::errors::ConnectError::SetupAuthenticate(_))
            ),
            "{what}: {:?}",
            refused.map(|_| "accepted")
        );
    }
    connect(a.display(), &mine).expect("the display's own cookie is accepted");
    let file = a.xauthority().to_path_buf();
    drop(a);
    assert!(!file.exists(), "a stopped display leaves its cookie behind");
}
