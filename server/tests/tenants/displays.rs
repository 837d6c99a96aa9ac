//! Displays for their desktop only (issue 46, item 6): each Xvfb takes only clients
//! that present its own cookie, which lives in a file only the server's user reads and,
//! inside, in the env's own sandbox. Before, any host user could drive any display.

use std::os::unix::fs::PermissionsExt as _;

use x11rb::errors::ConnectError;
use x11rb::rust_connection::{DefaultStream, RustConnection};

use super::common::{display, reset, xvfb_pid};
use super::{Desktops, shell};

/// The Xauthority file `:display`'s Xvfb reads (its `-auth` argument, where an
/// operator finds it with `ps`).
fn auth_file(display: u32) -> std::path::PathBuf {
    let pid = xvfb_pid(display).expect("an Xvfb child serves the display");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let at = args
        .iter()
        .position(|a| *a == b"-auth")
        .expect("Xvfb runs with -auth");
    std::path::PathBuf::from(String::from_utf8(args[at + 1].to_vec()).unwrap())
}

/// The cookie of the file's FamilyWild entry (the format as libXau reads it).
fn cookie(file: &std::path::Path) -> Vec<u8> {
    let bytes = std::fs::read(file).unwrap();
    let mut at = &bytes[..];
    let field = |at: &mut &[u8]| {
        let n = usize::from(u16::from_be_bytes([at[0], at[1]]));
        let f = at[2..2 + n].to_vec();
        *at = &at[2 + n..];
        f
    };
    while at.len() >= 2 {
        let family = u16::from_be_bytes([at[0], at[1]]);
        at = &at[2..];
        let (_, _, name, data) = (
            field(&mut at),
            field(&mut at),
            field(&mut at),
            field(&mut at),
        );
        if family == 0xffff && name == b"MIT-MAGIC-COOKIE-1" {
            return data;
        }
    }
    panic!("no FamilyWild cookie in {file:?}");
}

/// A host process's connection to `:display` presenting `cookie` (none when empty).
fn connect(display: u32, cookie: &[u8]) -> Result<RustConnection, ConnectError> {
    let stream = std::os::unix::net::UnixStream::connect(format!("/tmp/.X11-unix/X{display}"))?;
    let (stream, _) = DefaultStream::from_unix_stream(stream)?;
    let name = if cookie.is_empty() {
        vec![]
    } else {
        b"MIT-MAGIC-COOKIE-1".to_vec()
    };
    RustConnection::connect_to_stream_with_auth_info(stream, 0, name, cookie.to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_display_takes_only_clients_with_its_own_cookie() {
    let Desktops {
        server,
        mut c,
        data,
        envs,
    } = Desktops::start("xauth", 2, &["exec"]).await;
    let (a, b) = (&envs[0], &envs[1]);
    let da = display(&reset(&mut c, a, 1).await.info.unwrap());
    let db = display(&reset(&mut c, b, 1).await.info.unwrap());
    let (fa, fb) = (auth_file(da), auth_file(db));
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode(&fa), mode(fa.parent().unwrap())), (0o600, 0o700));
    let (ka, kb) = (cookie(&fa), cookie(&fb));
    assert_ne!(ka, kb, "each display has a cookie of its own");

    // From the host: no cookie, another env's cookie, a forged one are refused.
    for (what, key) in [
        ("no cookie", vec![]),
        ("b's cookie", kb),
        ("forged", vec![7; 16]),
    ] {
        let r = connect(da, &key);
        assert!(
            matches!(
                r,
                Err(ConnectError::SetupFailed(_) | ConnectError::SetupAuthenticate(_))
            ),
            "{what}: {:?}",
            r.map(|_| "accepted")
        );
    }
    connect(da, &ka).expect("the display's own cookie is accepted");

    // Inside: the session's programs hold the cookie (libX11 through xdotool, and
    // python-xlib, which prints a warning on stdout without a matching entry); a
    // client without it is refused there too.
    let (code, out, err) = shell(
        &mut c,
        a,
        "xdotool getmouselocation >/dev/null && echo libx11; \
         python3 -c 'import Xlib.display; Xlib.display.Display(); print(\"python-xlib\")'; \
         XAUTHORITY=/dev/null xdotool getmouselocation >/dev/null 2>&1 || echo refused",
    )
    .await;
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "libx11\npython-xlib\nrefused"),
        "{err}"
    );
    server.stop().await;
    assert!(!fa.exists(), "a closed display leaves its cookie behind");
    let _ = std::fs::remove_dir_all(&data);
}
