//! Wire to worker conversion: every verb, its field-named errors and bounds.

use super::*;
use crate::env::Geometry;
use pb::action::Verb;
use pb::target::Kind;

const SCREEN: Screen = Screen {
    width: 1280,
    height: 720,
};

fn act(v: Verb) -> pb::Action {
    pb::Action {
        verb: Some(v),
        extension: None,
    }
}

fn px(x: i32, y: i32) -> Option<pb::Target> {
    Some(pb::Target {
        kind: Some(Kind::PointPx(pb::PointPx { x, y })),
    })
}

fn err_field(a: pb::Action) -> String {
    match action(
        Some(&a),
        SCREEN,
        &Limits::default(),
        &BTreeMap::new(),
        &BTreeMap::new(),
    ) {
        Err(Invalid { field, .. }) => field,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

// spec: aci:3.targets
#[test]
fn normalised_points_map_to_the_last_pixel() {
    let t = Some(pb::Target {
        kind: Some(Kind::PointNorm(pb::PointNorm { x: 1.0, y: 0.5 })),
    });
    let a = action(
        Some(&act(Verb::Move(pb::Move { target: t }))),
        SCREEN,
        &Limits::default(),
        &BTreeMap::new(),
        &BTreeMap::new(),
    )
    .unwrap();
    assert_eq!(
        a.action,
        Action::Move {
            to: Point { x: 1279, y: 360 }
        }
    );
}

#[test]
fn every_rejection_names_its_field() {
    assert_eq!(err_field(pb::Action::default()), "action.verb");
    assert_eq!(
        err_field(act(Verb::Click(pb::Click {
            target: px(1280, 0),
            ..Default::default()
        }))),
        "action.click.target.point_px"
    );
    assert_eq!(
        err_field(act(Verb::Click(pb::Click::default()))),
        "action.click.target"
    );
    let norm = Some(pb::Target {
        kind: Some(Kind::PointNorm(pb::PointNorm { x: 0.5, y: 1.5 })),
    });
    assert_eq!(
        err_field(act(Verb::Move(pb::Move { target: norm }))),
        "action.move.target.point_norm.y"
    );
    let nan = Some(pb::Target {
        kind: Some(Kind::PointNorm(pb::PointNorm {
            x: f64::NAN,
            y: 0.0,
        })),
    });
    assert_eq!(
        err_field(act(Verb::Move(pb::Move { target: nan }))),
        "action.move.target.point_norm.x"
    );
    assert_eq!(
        err_field(act(Verb::TypeText(pb::TypeText {
            text: String::new()
        }))),
        "action.type_text.text"
    );
    assert_eq!(
        err_field(act(Verb::Key(pb::Key {
            keys: "ctrl+nope".into()
        }))),
        "action.key.keys"
    );
    assert_eq!(
        err_field(act(Verb::Wait(pb::Wait { ms: 1_000_000 }))),
        "action.wait.ms"
    );
    assert_eq!(
        err_field(act(Verb::Drag(pb::Drag {
            from: px(0, 0),
            to: px(-1, 0),
            ..Default::default()
        }))),
        "action.drag.to.point_px"
    );
    assert_eq!(
        err_field(act(Verb::Drag(pb::Drag {
            from: px(0, 0),
            to: px(1, 0),
            modifiers: "shift+nope".into(),
            ..Default::default()
        }))),
        "action.drag.modifiers"
    );
    assert_eq!(
        err_field(act(Verb::KeyDown(pb::KeyDown {
            keys: "hyper+nope".into()
        }))),
        "action.key_down.keys"
    );
    assert_eq!(
        err_field(act(Verb::Click(pb::Click {
            target: px(1, 1),
            button: 9,
            count: 1
        }))),
        "action.click.button"
    );
}

// spec: aci:3.verbs
#[test]
fn verbs_list_matches_the_proto_oneof() {
    // Every name in VERBS must be a oneof case: the prost-generated Debug prints the
    // variant, whose snake_case form is the field name.
    let all = [
        Verb::Click(Default::default()),
        Verb::DoubleClick(Default::default()),
        Verb::RightClick(Default::default()),
        Verb::Move(Default::default()),
        Verb::Scroll(Default::default()),
        Verb::Drag(Default::default()),
        Verb::MouseDown(Default::default()),
        Verb::MouseUp(Default::default()),
        Verb::TypeText(Default::default()),
        Verb::Key(Default::default()),
        Verb::Wait(Default::default()),
        Verb::Noop(Default::default()),
        Verb::LaunchApp(Default::default()),
        Verb::ActivateWindow(Default::default()),
        Verb::CloseWindow(Default::default()),
        Verb::MoveWindow(Default::default()),
        Verb::ResizeWindow(Default::default()),
        Verb::KeyDown(Default::default()),
        Verb::KeyUp(Default::default()),
        Verb::InvokeAction(Default::default()),
        Verb::SetValue(Default::default()),
    ];
    assert_eq!(all.len(), VERBS.len());
    for (v, name) in all.iter().zip(VERBS) {
        let dbg = format!("{v:?}");
        let camel: String = name
            .split('_')
            .map(|p| p[..1].to_uppercase() + &p[1..])
            .collect();
        assert!(dbg.starts_with(&camel), "{dbg} vs {name}");
    }
}

/// ACI's mapping from a delivered pixel back to the screen.
fn to_screen(g: Geometry, delivered: (u32, u32), d: (u32, u32)) -> (u32, u32) {
    let [sx, sy, sw, sh] = g.source;
    (sx + d.0 * sw / delivered.0, sy + d.1 * sh / delivered.1)
}

// spec: aci:3.mapping aci:4.pointer-metadata
#[test]
fn the_pointer_in_frame_pixels_inverts_acis_mapping() {
    // A 640x480 screen's 301x211 window at (50, 40), scaled to 128x90, and the whole
    // screen scaled to 320x240: every delivered pixel maps back to itself, and every
    // screen point lands in the delivered pixel whose span holds it.
    for (source, delivered) in [
        ([50, 40, 301, 211], (128, 90)),
        ([0, 0, 640, 480], (320, 240)),
    ] {
        let g = Geometry {
            screen: (640, 480),
            source,
        };
        for dx in 0..delivered.0 {
            let (x, y) = to_screen(g, delivered, (dx, dx % delivered.1));
            let p = frame_point(
                g,
                delivered,
                Point {
                    x: x as i32,
                    y: y as i32,
                },
            )
            .unwrap();
            assert_eq!((p.x as u32, p.y as u32), (dx, dx % delivered.1));
        }
        let [sx, sy, sw, sh] = source;
        for x in sx..sx + sw {
            let p = frame_point(
                g,
                delivered,
                Point {
                    x: x as i32,
                    y: sy as i32,
                },
            )
            .unwrap();
            let (lo, _) = to_screen(g, delivered, (p.x as u32, 0));
            let (hi, _) = to_screen(g, delivered, (p.x as u32 + 1, 0));
            assert!(
                lo <= x && (x < hi || p.x as u32 == delivered.0 - 1),
                "{x} -> {}",
                p.x
            );
        }
        // Outside the source: no point in the frame.
        let outside = Point {
            x: (sx + sw) as i32,
            y: (sy + sh) as i32,
        };
        assert!(frame_point(g, delivered, outside).is_none() || sw == 640);
        assert!(frame_point(g, delivered, Point { x: -1, y: 0 }).is_none());
    }
}

// spec: aci:3.observe-after-act
#[test]
fn observe_levers_are_checked_by_field() {
    let e = shape("items[0].observe.", 9, 0, 0, 0).unwrap_err();
    assert_eq!(e.field, "items[0].observe.scope");
    let e = shape("observe.", 0, 0, 0, 101).unwrap_err();
    assert_eq!(e.field, "observe.jpeg_quality");
    let s = shape("", pb::ScreenshotScope::Window as i32, 7, 320, 50).unwrap();
    assert_eq!(
        (s.window, s.max_long_edge, s.jpeg_quality),
        (Some(Some(7)), 320, 50)
    );
    assert!(shape("", 0, 0, 0, 0).unwrap().is_whole());
}

fn converted(a: pb::Action) -> Action {
    action(
        Some(&a),
        SCREEN,
        &Limits::default(),
        &BTreeMap::new(),
        &BTreeMap::new(),
    )
    .unwrap()
    .action
}

// spec: aci:3.activate-window
#[test]
fn pixel_scrolls_become_wheel_clicks_and_windows_are_found_by_title() {
    let scroll = |dx, dy, pixels| {
        act(Verb::Scroll(pb::Scroll {
            target: px(5, 5),
            dx,
            dy,
            pixels,
        }))
    };
    // ACI's pixel deltas: 100 px a click, rounded, a small delta still one click.
    for (px_dy, clicks) in [(-300, -3), (149, 1), (151, 2), (1, 1), (-40, -1), (0, 0)] {
        let Action::Scroll { dy, .. } = converted(scroll(0, px_dy, true)) else {
            panic!()
        };
        assert_eq!(dy, clicks, "{px_dy} px");
    }
    let Action::Scroll { dy, .. } = converted(scroll(0, 3, false)) else {
        panic!()
    };
    assert_eq!(dy, 3);
    assert_eq!(err_field(scroll(0, 5001, true)), "action.scroll.dy");
    assert_eq!(err_field(scroll(51, 0, false)), "action.scroll.dx");
    let by_title = |window, app: &str| {
        act(Verb::ActivateWindow(pb::ActivateWindow {
            window,
            app: app.into(),
        }))
    };
    assert_eq!(
        converted(by_title(0, "Text Editor")),
        Action::ActivateApp("Text Editor".into())
    );
    assert_eq!(converted(by_title(7, "ignored")), Action::ActivateWindow(7));
    assert_eq!(err_field(by_title(0, "")), "action.activate_window");
}
