//! Fuzzing the request checker with hostile input (bounded: proptest's 256 cases per property,
//! run by `cargo test` in CI). The wire bytes themselves are fuzzed too: whatever
//! decodes as a `StepRequest` goes through the checker.

use super::*;
use crate::spec::Screen;
use deskgym_worker::Action;
use pb::action::Verb;
use pb::target::Kind;
use proptest::prelude::*;
use prost::Message as _;

fn any_target() -> impl Strategy<Value = Option<pb::Target>> {
    prop_oneof![
        Just(None),
        Just(Some(pb::Target { kind: None })),
        (any::<i32>(), any::<i32>()).prop_map(|(x, y)| Some(pb::Target {
            kind: Some(Kind::PointPx(pb::PointPx { x, y }))
        })),
        (any::<f64>(), any::<f64>()).prop_map(|(x, y)| Some(pb::Target {
            kind: Some(Kind::PointNorm(pb::PointNorm { x, y }))
        })),
        prop_oneof![".{0,4000}", "e[0-9]{0,25}"].prop_map(|r| Some(pb::Target {
            kind: Some(Kind::ElementRef(r))
        })),
        (".{0,40}", ".{0,3000}").prop_map(|(role, name)| Some(pb::Target {
            kind: Some(Kind::Element(pb::ElementQuery { role, name }))
        })),
    ]
}

fn any_verb() -> impl Strategy<Value = Verb> {
    prop_oneof![
        (any_target(), any::<i32>(), any::<u32>()).prop_map(|(target, button, count)| {
            Verb::Click(pb::Click {
                target,
                button,
                count,
            })
        }),
        (any_target(), any::<i32>(), any::<i32>(), any::<bool>()).prop_map(
            |(target, dx, dy, pixels)| Verb::Scroll(pb::Scroll {
                target,
                dx,
                dy,
                pixels
            })
        ),
        (
            any_target(),
            any_target(),
            any::<i32>(),
            any::<u32>(),
            ".{0,200}"
        )
            .prop_map(
                |(from, to, button, duration_ms, modifiers)| Verb::Drag(pb::Drag {
                    from,
                    to,
                    button,
                    duration_ms,
                    modifiers,
                })
            ),
        ".{0,300}".prop_map(|keys| Verb::Key(pb::Key { keys })),
        "[+a-z]{0,4000}".prop_map(|keys| Verb::Key(pb::Key { keys })),
        ".{0,2000}".prop_map(|text| Verb::TypeText(pb::TypeText { text })),
        any::<u32>().prop_map(|ms| Verb::Wait(pb::Wait { ms })),
        (any_target(), any::<i32>())
            .prop_map(|(target, button)| Verb::MouseDown(pb::MouseDown { target, button })),
        (".{0,80}", proptest::collection::vec(".{0,80}", 0..100))
            .prop_map(|(app, args)| Verb::LaunchApp(pb::LaunchApp { app, args })),
        (any_target(), ".{0,2000}")
            .prop_map(|(target, action)| Verb::InvokeAction(pb::InvokeAction { target, action })),
        (any_target(), ".{0,3000}")
            .prop_map(|(target, value)| Verb::SetValue(pb::SetValue { target, value })),
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(window, width, height)| {
            Verb::ResizeWindow(pb::ResizeWindow {
                window,
                width,
                height,
            })
        }),
    ]
}

fn check(a: Option<&pb::Action>, w: u32, h: u32) {
    let screen = Screen {
        width: w,
        height: h,
    };
    match action(
        a,
        screen,
        &Limits::default(),
        &BTreeMap::new(),
        &BTreeMap::new(),
    )
    .map(|p| p.action)
    {
        Ok(Action::Click { at, .. }) => {
            assert!(
                (0..w as i32).contains(&at.x) && (0..h as i32).contains(&at.y),
                "{at:?}"
            );
        }
        Ok(Action::Scroll { at, dx, dy }) => {
            assert!(
                (0..w as i32).contains(&at.x) && (0..h as i32).contains(&at.y),
                "{at:?}"
            );
            assert!(
                dx.unsigned_abs() <= 50 && dy.unsigned_abs() <= 50,
                "{dx} {dy}"
            );
        }
        Ok(Action::Key(k)) => assert!(k.len() <= MAX_CHORD_BYTES),
        Ok(Action::ResizeWindow { width, height, .. }) => {
            assert!((1..=4096).contains(&width) && (1..=4096).contains(&height));
        }
        Ok(_) => {}
        Err(Invalid { field, message }) => {
            assert!(field.starts_with("action"), "{field}");
            // Bounded whatever the input length (quotes are cut, escapes may grow).
            assert!(message.len() < 1024, "a {} byte message", message.len());
        }
    }
}

proptest! {
    #[test]
    fn hostile_actions_are_refused_or_in_range(v in any_verb(), w in 64u32..4096, h in 64u32..4096) {
        check(Some(&pb::Action { verb: Some(v), extension: None }), w, h);
    }

    #[test]
    fn hostile_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(req) = pb::StepRequest::decode(bytes.as_slice()) {
            check(req.action.as_ref(), 1280, 720);
        }
    }
}
