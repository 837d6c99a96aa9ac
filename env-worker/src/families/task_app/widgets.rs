//! The task app's widgets as an accessibility tree, the shape the server reads from
//! AT-SPI on a sandboxed session (the app itself and the fake desktop both answer
//! with it).

use std::collections::HashMap;

use super::tasks::Widget;
use crate::a11y::{ElementAction, Node, Tree};

/// The task app's widgets as a tree: an application, its full-screen frame, and one
/// element per widget. Identities are `app/<role>/<name>/<n>` (n numbers repeats), so a
/// widget keeps its ref while the scene keeps it.
pub(crate) fn widget_tree(app: &str, widgets: &[Widget], width: i32, height: i32) -> Tree {
    let mut nodes = vec![
        Node {
            id: "app".into(),
            role: "application".into(),
            name: app.into(),
            ..Default::default()
        },
        Node {
            id: "app/frame".into(),
            parent: Some(0),
            role: "frame".into(),
            name: app.into(),
            states: shown(false),
            bounds: Some([0, 0, width, height]),
            ..Default::default()
        },
    ];
    let mut seen: HashMap<String, u32> = HashMap::new();
    for w in widgets {
        let k = seen.entry(format!("{}/{}", w.role, w.name)).or_default();
        *k += 1;
        let clickable = matches!(w.role, "push button" | "panel" | "text");
        let editable = w.role == "text";
        nodes.push(Node {
            id: format!("app/{}/{}/{k}", w.role, w.name),
            parent: Some(1),
            role: w.role.into(),
            name: w.name.clone(),
            states: shown(editable),
            bounds: Some([w.rect.x, w.rect.y, w.rect.w, w.rect.h]),
            actions: if clickable {
                vec![ElementAction {
                    name: "click".into(),
                    ..Default::default()
                }]
            } else {
                vec![]
            },
            text: w.text.clone(),
            editable,
            ..Default::default()
        });
    }
    Tree {
        nodes,
        partial: false,
        notes: vec![],
    }
}

fn shown(editable: bool) -> Vec<String> {
    let mut s: Vec<String> = ["enabled", "sensitive", "showing", "visible"]
        .map(String::from)
        .to_vec();
    if editable {
        s.extend(["editable", "focusable"].map(String::from));
    }
    s
}
