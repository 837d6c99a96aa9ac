//! Request checking: every verb, its field-named errors and bounds.

use super::*;
use crate::spec::Screen;
use deskgym_worker::{Action, Point};
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

/// One of each action verb (every case of the proto's oneof).
fn every_verb() -> Vec<Verb> {
    vec![
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
    ]
}

// spec: aci:3.verbs
#[test]
fn verbs_list_matches_the_proto_oneof() {
    // Every name in VERBS must be a oneof case: the prost-generated Debug prints the
    // variant, whose snake_case form is the field name.
    let all = every_verb();
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

// spec: aci:3.observe-after-act
#[test]
fn observe_levers_are_checked_by_field() {
    let e = shape(&Field::named("items").index(0).at("observe"), 9, 0, 0, 0).unwrap_err();
    assert_eq!(e.field, "items[0].observe.scope");
    let e = shape(&Field::named("observe"), 0, 0, 0, 101).unwrap_err();
    assert_eq!(e.field, "observe.jpeg_quality");
    let s = shape(
        &Field::root(),
        pb::ScreenshotScope::Window as i32,
        7,
        320,
        50,
    )
    .unwrap();
    assert_eq!(
        (s.window, s.max_long_edge, s.jpeg_quality),
        (Some(Some(7)), 320, 50)
    );
    assert!(shape(&Field::root(), 0, 0, 0, 0).unwrap().is_whole());
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

#[test]
fn verb_names_are_the_verbs_table() {
    // The field path of a verb's errors comes from `verb_name`; it must be VERBS' entry.
    use super::action::verb_name;
    let all = every_verb();
    let names: Vec<&str> = all.iter().map(verb_name).collect();
    assert_eq!(names, VERBS);
}

#[test]
fn field_paths_join_names_indexes_and_keys() {
    let items = Field::named("items").index(2);
    assert_eq!(
        items.at("if_none_match").index(0).as_str(),
        "items[2].if_none_match[0]"
    );
    assert_eq!(
        Field::root().at("tree").at("line_budget").as_str(),
        "tree.line_budget"
    );
    assert_eq!(Field::named("env").key("A").as_str(), "env[\"A\"]");
}

#[test]
fn a_located_target_is_named_from_target() {
    let e = locate(None, SCREEN).unwrap_err();
    assert_eq!(e.field, "target");
    let e = locate(px(-1, 0).as_ref(), SCREEN).unwrap_err();
    assert_eq!(e.field, "target.point_px");
    assert_eq!(
        locate(px(3, 4).as_ref(), SCREEN).unwrap().action,
        Action::Move {
            to: Point { x: 3, y: 4 }
        }
    );
}

#[test]
fn hashes_are_validated() {
    let h = Field::named("h");
    assert!(hash(&h, &"0".repeat(32)).is_ok());
    assert_eq!(hash(&h, &format!("{:032x}", u128::MAX)).unwrap(), u128::MAX);
    let at = Field::named("if_none_match").index(0);
    for bad in ["", "abc", &"G".repeat(32), &"A".repeat(32), &"0".repeat(33)] {
        let e = hash(&at, bad).unwrap_err();
        assert!(e.to_string().starts_with("if_none_match[0]:"), "{e}");
    }
    let list = Field::named("if_none_match");
    assert!(hashes(&list, &vec!["0".repeat(32); 3], 2).is_err());
    let e = hashes(&list, &["0".repeat(32), "x".into()], 2).unwrap_err();
    assert_eq!(e.field, "if_none_match[1]");
}

#[test]
fn tree_requests_are_checked_under_their_field() {
    let t = |line_budget, timeout_ms| pb::TreeRequest {
        enabled: true,
        line_budget,
        timeout_ms,
        ..Default::default()
    };
    let at = Field::named("items").index(1).at("tree");
    assert_eq!(
        tree(Some(&t(10_001, 0)), &at).unwrap_err().field,
        "items[1].tree.line_budget"
    );
    assert_eq!(
        tree(Some(&t(0, 30_001)), &at).unwrap_err().field,
        "items[1].tree.timeout_ms"
    );
    let ok = tree(Some(&t(0, 0)), &at).unwrap().unwrap();
    assert_eq!(
        (ok.line_budget, ok.timeout_ms),
        (DEFAULT_LINES, DEFAULT_TREE_MS)
    );
    let off = pb::TreeRequest {
        enabled: false,
        line_budget: 99_999,
        ..Default::default()
    };
    assert_eq!(tree(Some(&off), &at).unwrap(), None);
}
