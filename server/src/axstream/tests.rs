//! Framing, parsing and the driver's bookkeeping, without a desktop.

use super::*;

const RESPONSE: &str = "I'll click it {\"op\":\"act\"}.\n```jsonl\n{\"op\":\"act\",\"do\":\"click\",\"target\":{\"x\":1,\"y\":2}}\n\n{\"op\":\"observe\"}\n```\nnarration\n```\n{\"op\":\"done\",\"status\":\"success\"}\n```\n";

fn frame_in_chunks(text: &str, n: usize) -> Vec<Framed> {
    let mut f = Framer::default();
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(n)
        .flat_map(|c| f.push(&c.iter().collect::<String>()))
        .collect()
}

// spec: axstream:6.1 axstream:2.buffer
#[test]
fn lines_commit_at_newlines_whatever_the_chunking() {
    let whole = frame_in_chunks(RESPONSE, usize::MAX >> 1);
    assert_eq!(
        whole.iter().map(|f| (f.line, f.burst)).collect::<Vec<_>>(),
        vec![(3, 1), (5, 1), (9, 2)]
    );
    for n in [1, 2, 7, 4096] {
        assert_eq!(frame_in_chunks(RESPONSE, n), whole, "chunks of {n}");
    }
}

// spec: axstream:2.narration axstream:2.buffer
#[test]
fn a_cut_line_stays_pending_and_narration_never_frames() {
    let mut f = Framer::default();
    assert!(
        f.push("{\"op\":\"observe\"}\n```\n{\"op\":\"obs")
            .is_empty()
    );
    assert_eq!(f.pending(), Some("{\"op\":\"obs"));
    assert_eq!(f.next_line(), (3, 1));
    let mut g = Framer::default();
    assert!(g.push("narration {\"op\":\"observe\"}").is_empty());
    assert_eq!(g.pending(), None);
}

// spec: axstream:2.fence-open axstream:2.fence-close
#[test]
fn any_tag_opens_and_only_bare_backticks_close() {
    let mut f = Framer::default();
    let out = f.push("```spec\na\n```json\nb\n ``` \nc\n");
    let texts: Vec<_> = out.iter().map(|f| f.text.clone().unwrap()).collect();
    assert_eq!(texts, vec!["a", "```json", "b"]);
}

// spec: axstream:x.line-limit
#[test]
fn an_overlong_line_is_framed_without_its_bytes() {
    let mut f = Framer::default();
    f.push("```\n");
    let big = "x".repeat(MAX_LINE + 10);
    assert!(f.push(&big).is_empty());
    let out = f.push("tail\n{}\n");
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].text, None);
    assert_eq!(out[1].text.as_deref(), Some("{}"));
}

// spec: axstream:3.1.act axstream:4.open
#[test]
fn actions_map_to_wire_verbs() {
    use pb::action::Verb;
    let apps = ["terminal", "chromium"];
    let op = parse(r#"{"op":"act","do":"key","keys":["cmd","n"]}"#, &apps).unwrap();
    let Op::Act { action, risky, .. } = op else {
        panic!()
    };
    assert!(!risky);
    assert_eq!(
        action.verb,
        Some(Verb::Key(pb::Key {
            keys: "ctrl+n".into()
        }))
    );
    let Op::Act { action, .. } =
        parse(r#"{"op":"open","target":"https://example.org"}"#, &apps).unwrap()
    else {
        panic!()
    };
    let Some(Verb::LaunchApp(l)) = action.verb else {
        panic!()
    };
    assert_eq!((l.app.as_str(), l.args.len()), ("chromium", 1));
    let Op::Act { action, risky, .. } = parse(
        r#"{"op":"act","do":"click","target":{"ax":{"role":"AXButton","title":"Save"}},"risk":"risky"}"#,
        &apps,
    )
    .unwrap() else {
        panic!()
    };
    assert!(risky);
    let Some(Verb::Click(c)) = action.verb else {
        panic!()
    };
    assert_eq!(
        c.target.unwrap().kind,
        Some(pb::target::Kind::Element(pb::ElementQuery {
            role: "push button|toggle button".into(),
            name: "Save".into()
        }))
    );
}

// spec: axstream:4.role-title
#[test]
fn model_roles_name_every_atspi_role_they_may_be() {
    use crate::a11y::role_matches;
    // AXRow is a table row, a list item or a tree item, whichever the tree uses.
    for (model, atspi) in [
        ("AXRow", "table row"),
        ("axrow", "list item"),
        ("AXRow", "tree item"),
        ("AXCell", "table cell"),
        ("row", "table row"),
        ("button", "push button"),
        ("AXTab", "page tab"),
        ("AXOutline", "tree"),
        ("AXProgressIndicator", "progress bar"),
        ("push_button", "push button"),
        ("PushButton", "push button"),
        ("Push-Button", "push button"),
        ("label", "label"),
    ] {
        assert!(
            role_matches(&lines::atspi_role(model), atspi),
            "{model} -> {atspi}"
        );
    }
    assert!(!role_matches(&lines::atspi_role("AXRow"), "push button"));
    assert!(!role_matches(&lines::atspi_role("AXButton"), "label"));
}

// spec: axstream:4.open
#[test]
fn open_of_an_app_the_env_lacks_is_refused_not_dropped() {
    // A valid line that cannot run here: failed, so the burst planned on it aborts
    // (the spec's "open Notes, then type" must not type into another window).
    let op = parse(
        r#"{"op":"act","do":"open","target":"Notes"}"#,
        &["terminal"],
    )
    .unwrap();
    let Op::Refused { name, code, why } = op else {
        panic!("{op:?}")
    };
    assert_eq!(
        (name.as_str(), code),
        ("open", tonic::Code::FailedPrecondition)
    );
    assert!(
        why.contains("no app named \"Notes\"") && why.contains("terminal"),
        "{why}"
    );
}

// spec: axstream:2.json-lines axstream:6.4
#[test]
fn invalid_lines_say_why() {
    for (line, why) in [
        ("{\"op\":\"act\"", "not JSON"),
        ("[1]", "not a JSON object"),
        (r#"{"do":"click"}"#, "missing \"op\""),
        (r#"{"op":"fly"}"#, "unknown op"),
        (r#"{"op":"act","do":"click"}"#, "missing \"target\""),
        (
            r#"{"op":"act","do":"click","target":{"x":1}}"#,
            "needs both x and y",
        ),
        (r#"{"op":"act","do":"wait","ms":-1}"#, "out of range"),
        (
            r#"{"op":"act","do":"click","target":{"x":1,"y":99999999999}}"#,
            "out of range",
        ),
        (
            r#"{"op":"done","status":"maybe"}"#,
            "not success or failure",
        ),
    ] {
        let e = parse(line, &["terminal"]).unwrap_err();
        assert!(e.contains(why), "{line}: {e}");
    }
}
