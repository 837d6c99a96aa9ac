//! The page as MiniWoB++'s `core.getDOMInfo()` sees it, as the env's tree.

use super::*;

/// Flattens `core.getDOMInfo()` (ref, tag, text, value, bounds), depth first; the last
/// column is the node as MiniWoB++ gave it, less its children, as JSON (what
/// MiniWoB++'s own `DOMElement` reads: exact bounds, colors, flags).
pub(super) const DOM: &str = r#"(() => {
  const out = [];
  const walk = (n, parent) => {
    const i = out.length;
    out.push([n.ref, parent, n.tag, n.text === undefined ? null : n.text,
      n.value === undefined ? null : n.value, n.left, n.top, n.width, n.height,
      !!n.focused, n.id || '', typeof n.classes === 'string' ? n.classes : '',
      JSON.stringify(Object.assign({}, n, {children: undefined}))]);
    (n.children || []).forEach(c => walk(c, i));
  };
  // Reading a finished episode's page must not number its elements: MiniWoB++ reads
  // none then, and refs handed out now would carry into the next episode.
  const done = WOB_DONE_GLOBAL;
  const kept = done ? [...document.querySelectorAll('*')]
    .map(e => [e, e.dataset.wob_ref, e.dataset.wob_eps]) : [];
  const codes = [core.nextRefCode, core.nextTextRefCode];
  walk(core.getDOMInfo(), null);
  if (done) {
    [core.nextRefCode, core.nextTextRefCode] = codes;
    for (const [e, r, p] of kept) {
      if (r === undefined) delete e.dataset.wob_ref; else e.dataset.wob_ref = r;
      if (p === undefined) delete e.dataset.wob_eps; else e.dataset.wob_eps = p;
    }
  }
  return out;
})()"#;

/// Longest `wob` attribute kept (MiniWoB++'s own observation caps texts at 256).
pub(super) const WOB_JSON_MAX: usize = 16 * 1024;

impl Page {
    /// What element `id` of the page is now (re-read: refs are per episode).
    pub(crate) fn live(&mut self, id: &str) -> Result<crate::a11y::Live> {
        let n = self.tree(&Limits::default())?.take(id)?;
        Ok(crate::a11y::Live::from(&n))
    }

    /// The page's elements as MiniWoB++'s `core.getDOMInfo()` sees them: id `wob:<ref>`,
    /// role the tag (`button`, `input_text`...), name the text, `text` an input's value;
    /// at most `limits.max_nodes` of them (a prefix: parents come first), texts cut at
    /// `limits.max_text` bytes.
    pub(crate) fn tree(&mut self, limits: &Limits) -> Result<Tree> {
        let rows = self.cdp.eval(DOM)?;
        let mut rows = match rows {
            Value::Array(rows) => rows,
            _ => Vec::new(),
        };
        let cap = limits.max_nodes as usize;
        let partial = rows.len() > cap;
        rows.truncate(cap);
        let max_text = limits.max_text as usize;
        let mut nodes = Vec::with_capacity(rows.len());
        for r in rows {
            let s = |i: usize| {
                let t = r.get(i).and_then(Value::as_str).unwrap_or("");
                let mut end = t.len().min(max_text);
                while !t.is_char_boundary(end) {
                    end -= 1;
                }
                t[..end].to_string()
            };
            let f = |i: usize| r.get(i).and_then(Value::as_f64).unwrap_or(0.0);
            let tag = s(2).to_ascii_lowercase();
            let mut states: Vec<String> = ["showing", "visible", "enabled", "sensitive"]
                .map(String::from)
                .into();
            if r.get(9).and_then(Value::as_bool) == Some(true) {
                states.push("focused".into());
            }
            // A checkbox's or radio's value is whether it is checked; a field's, its text.
            if r.get(4) == Some(&Value::Bool(true)) {
                states.push("checked".into());
            }
            let editable = matches!(
                tag.as_str(),
                "input_text"
                    | "input_password"
                    | "input_email"
                    | "input_number"
                    | "input_search"
                    | "input_tel"
                    | "input_url"
                    | "textarea"
            );
            let wob_ref = r.get(0).and_then(Value::as_i64).unwrap_or(0);
            nodes.push(Node {
                id: format!("wob:{wob_ref}"),
                parent: r.get(1).and_then(Value::as_u64).map(|p| p as u32),
                name: s(3),
                text: r.get(4).and_then(Value::as_str).map(|_| s(4)),
                states,
                bounds: Some([
                    f(5).round() as i32,
                    f(6).round() as i32,
                    f(7).round() as i32,
                    f(8).round() as i32,
                ]),
                actions: vec![ElementAction {
                    name: "click".into(),
                    ..Default::default()
                }],
                attributes: vec![
                    ("tag".into(), s(2)),
                    ("ref".into(), wob_ref.to_string()),
                    ("id".into(), s(10)),
                    ("classes".into(), s(11)),
                    // Whole or not at all: a cut JSON text would not parse.
                    (
                        "wob".into(),
                        r.get(12)
                            .and_then(Value::as_str)
                            .filter(|j| j.len() <= WOB_JSON_MAX)
                            .unwrap_or("")
                            .to_string(),
                    ),
                ],
                editable,
                role: tag,
                ..Default::default()
            });
        }
        Ok(Tree {
            nodes,
            partial,
            notes: if partial {
                vec![format!("the page has more than {cap} elements (max_nodes)")]
            } else {
                Vec::new()
            },
        })
    }
}
