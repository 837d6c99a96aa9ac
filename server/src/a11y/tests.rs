//! Element refs, targets and the tree's renderings (text, diffs, OSWorld's XML).

use super::*;
use deskgym_worker::{ElementAction, Node, Tree};

fn node(id: &str, parent: Option<u32>, role: &str, name: &str) -> Node {
    Node {
        id: id.into(),
        parent,
        role: role.into(),
        name: name.into(),
        states: vec!["showing".into(), "visible".into(), "enabled".into()],
        bounds: Some([10, 20, 30, 40]),
        ..Default::default()
    }
}

fn tree(nodes: Vec<Node>) -> Tree {
    Tree {
        nodes,
        ..Default::default()
    }
}

fn opts() -> TreeOpts {
    TreeOpts {
        line_budget: 100,
        ..Default::default()
    }
}

#[test]
fn refs_stay_while_elements_live_and_are_never_reused() {
    let mut refs = Refs::default();
    let t1 = tree(vec![
        node(":1.2/root", None, "application", "app"),
        node(":1.2/a", Some(0), "push button", "OK"),
        node(":1.2/b", Some(0), "push button", "Cancel"),
    ]);
    let r1 = refs.assign(&t1).refs;
    assert_eq!(r1, [1, 2, 3]);
    // b goes away, c appears: a keeps its ref, c gets a new number.
    let t2 = tree(vec![
        node(":1.2/root", None, "application", "app"),
        node(":1.2/c", Some(0), "push button", "Help"),
        node(":1.2/a", Some(0), "push button", "OK (renamed)"),
    ]);
    assert_eq!(refs.assign(&t2).refs, [1, 4, 2]);
    assert_eq!(refs.identity(3), None);
    // b comes back: a new ref, not 3.
    let t3 = tree(vec![node(":1.2/b", None, "push button", "Cancel")]);
    assert_eq!(refs.assign(&t3).refs, [5]);
    // Same path, other role: another element.
    let t4 = tree(vec![node(":1.2/b", None, "label", "Cancel")]);
    assert_eq!(refs.assign(&t4).refs, [6]);
}

#[test]
fn a_partial_reading_forgets_nothing() {
    let mut refs = Refs::default();
    refs.assign(&tree(vec![node("x/a", None, "frame", "")]));
    let mut t = tree(vec![]);
    t.partial = true;
    refs.assign(&t);
    assert_eq!(refs.identity(1), Some("x/a"));
}

#[test]
fn text_has_one_indented_line_per_shown_element_within_the_budget() {
    let mut refs = Refs::default();
    let mut hidden = node("x/h", Some(0), "label", "hidden");
    hidden.states.clear();
    let mut ok = node("x/ok", Some(0), "push button", "OK");
    ok.states.push("focused".into());
    ok.actions.push(ElementAction {
        name: "click".into(),
        ..Default::default()
    });
    let t = tree(vec![node("x/root", None, "application", "app"), hidden, ok]);
    let reading = refs.assign(&t);
    let out = refs.render(&reading, &opts(), 1.0);
    assert_eq!(
        out.text,
        "e1 application \"app\" @10,20 30x40\n  e3 push button \"OK\" (focused) [click] @10,20 30x40\nfocus: e3\n"
    );
    assert!(!out.truncated);
    assert_eq!(out.node_count, 3);
    assert_eq!(out.elements[2].parent, "e1");
    let reading = refs.assign(&t);
    let cut = refs.render(
        &reading,
        &TreeOpts {
            line_budget: 1,
            ..opts()
        },
        1.0,
    );
    assert_eq!(cut.text.lines().count(), 1);
    assert!(cut.truncated);
}

#[test]
fn a_diff_names_added_removed_and_changed_elements() {
    let mut refs = Refs::default();
    let t1 = tree(vec![
        node("x/r", None, "application", "app"),
        node("x/a", Some(0), "text", "a"),
        node("x/b", Some(0), "label", "b"),
        node("x/c", Some(0), "label", "c"),
    ]);
    let reading = refs.assign(&t1);
    let first = refs.render(&reading, &opts(), 1.0).revision;
    let t2 = tree(vec![
        node("x/r", None, "application", "app"),
        node("x/a", Some(0), "text", "a changed"),
        node("x/d", Some(0), "label", "d"),
    ]);
    let reading = refs.assign(&t2);
    let out = refs.render(
        &reading,
        &TreeOpts {
            diff_from: first,
            ..opts()
        },
        1.0,
    );
    let d = out.diff.expect("diff against a kept revision");
    assert_eq!(d.changed, ["e2"]);
    assert_eq!(d.added, ["e5"]);
    assert_eq!(d.removed, ["e3", "e4"]);
    assert!(d.text.contains("- e3, e4 (2 removed)"), "{}", d.text);
    // Against itself: no change.
    let reading = refs.assign(&t2);
    let same = refs.render(
        &reading,
        &TreeOpts {
            diff_from: out.revision,
            ..opts()
        },
        1.0,
    );
    assert_eq!(same.diff.unwrap().text, "no change\n");
}

#[test]
fn queries_prefer_exact_names_and_report_ambiguity() {
    let t = tree(vec![
        node("x/r", None, "application", "app"),
        node("x/1", Some(0), "push button", "Save"),
        node("x/2", Some(0), "push button", "Save As…"),
        node("x/3", Some(0), "push button", "save copy"),
    ]);
    assert_eq!(resolve_query(&t, "push button", "Save").unwrap().id, "x/1");
    assert_eq!(resolve_query(&t, "", "save as").unwrap().id, "x/2");
    match resolve_query(&t, "push button", "sav") {
        Err(QueryMiss::Many(c)) => assert_eq!(c.len(), 3),
        other => panic!("{other:?}"),
    }
    assert_eq!(resolve_query(&t, "label", "Save"), Err(QueryMiss::None));
}

#[test]
fn refs_parse_strictly() {
    assert_eq!(parse_ref("e12", "f").unwrap(), 12);
    for bad in ["", "e", "12", "e-1", "e1x", "E1", "e99999999999999999999"] {
        assert!(parse_ref(bad, "f").is_err(), "{bad}");
    }
}

#[test]
fn osworld_xml_escapes_and_names_what_toolkits_send() {
    let mut n = node("x/1", None, "push button", "a \"b\" & <c>");
    n.attributes = vec![
        ("xml-roles".into(), "x".into()),
        ("bad name!".into(), "y".into()),
    ];
    n.actions = vec![ElementAction {
        name: "press me".into(),
        description: "d".into(),
        key_binding: "<ctrl>p".into(),
    }];
    n.text = Some("line1\nline2 \u{1}".into());
    let xml = osworld_xml(&tree(vec![n]));
    assert!(xml.starts_with("<desktop-frame xmlns:st="), "{xml}");
    assert!(xml.contains("<push-button name=\"a &quot;b&quot; &amp; &lt;c&gt;\""));
    assert!(xml.contains("attr:bad_name_=\"y\""));
    assert!(xml.contains("cp:screencoord=\"(10, 20)\" cp:size=\"(30, 40)\""));
    assert!(xml.contains("act:press-me_kb=\"&lt;ctrl&gt;p\""));
    assert!(xml.contains(">line1&#10;line2 </push-button></desktop-frame>"));
}

#[test]
fn python_floats() {
    assert_eq!(py_float(1.0), "1.0");
    assert_eq!(py_float(0.25), "0.25");
    assert_eq!(py_float(f64::INFINITY), "inf");
}
