//! Wire to worker conversion: every verb, its field-named errors and bounds.

use super::*;
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
