//! Structured observation: element refs over a desktop's accessibility tree, and its
//! three renderings (elements, prompt text with diffs, OSWorld's XML).
//!
//! The worker reads raw nodes (AT-SPI identities: bus name + object path). Each env
//! keeps a [`Refs`] table that gives every identity a ref `e<N>` the first time it is
//! seen, keeps it while the element is in the tree, and forgets it (never to reuse the
//! number within the episode) when the element is gone; a reset starts again at `e1`. Element targets name refs or `{role, name}`
//! queries; the env resolves them when the action runs ([`Refs::identity`],
//! [`resolve_query`]).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;

use deskgym_proto::v1 as pb;
use deskgym_worker::Action;
use deskgym_worker::{Node, Tree};

use crate::spec::Invalid;

/// Revisions kept per env for diffs.
const HISTORY: usize = 8;
/// Characters of an element's text shown on its line.
const LINE_TEXT: usize = 80;

/// A validated `TreeRequest` ([`crate::checked::tree`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct TreeOpts {
    pub osworld_xml: bool,
    pub line_budget: u32,
    pub diff_from: u64,
    pub timeout_ms: u32,
    pub omit_elements: bool,
}

impl TreeOpts {
    /// The worker's walk bounds.
    pub(crate) fn limits(&self) -> deskgym_worker::TreeLimits {
        deskgym_worker::TreeLimits {
            timeout_ms: u64::from(self.timeout_ms),
            ..Default::default()
        }
    }
}

/// An element named by an action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Sel {
    /// A ref, `e<N>`.
    Ref(u64),
    /// The axstream form: role (or any) and a fuzzy name.
    Query { role: String, name: String },
}

impl std::fmt::Display for Sel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ref(n) => write!(f, "e{n}"),
            Self::Query { role, name } if role.is_empty() => write!(f, "{{name: {name:?}}}"),
            Self::Query { role, name } => write!(f, "{{role: {role:?}, name: {name:?}}}"),
        }
    }
}

/// Which part of an action an element fills in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The pointer position of a click, move, scroll, button press or release.
    At,
    /// A drag's start.
    From,
    /// A drag's end.
    To,
    /// The element of an `invoke_action` / `set_value`.
    Element,
}

/// A validated action whose element targets are resolved when it runs.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Planned {
    /// The action, with placeholders where elements go.
    pub action: Action,
    /// Element targets: where each goes, what it names, and the request field.
    pub elements: Vec<(Slot, Sel, String)>,
    /// Who chose it: an agent, or a person at the console (the steps table says which).
    pub actor: deskgym_datasets::Actor,
}

impl From<Action> for Planned {
    fn from(action: Action) -> Self {
        Self {
            action,
            elements: vec![],
            actor: deskgym_datasets::Actor::Agent,
        }
    }
}

/// Parses `e12`.
pub(crate) fn parse_ref(s: &str, field: &str) -> Result<u64, Invalid> {
    s.strip_prefix('e')
        .filter(|d| !d.is_empty() && d.len() <= 19 && d.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| {
            Invalid::new(
                field,
                format!(
                    "{} is not an element ref (e<N>, from an observation's tree)",
                    crate::spec::quote(s)
                ),
            )
        })
}

/// Fills a resolved element into the action.
pub(crate) fn place(action: &mut Action, slot: Slot, point: deskgym_worker::Point, id: &str) {
    match (slot, action) {
        (Slot::At, Action::Click { at, .. } | Action::Scroll { at, .. }) => *at = point,
        (Slot::At, Action::Move { to }) => *to = point,
        (Slot::At, Action::MouseDown { at, .. } | Action::MouseUp { at, .. }) => *at = Some(point),
        (Slot::From, Action::Drag { from, .. }) => *from = point,
        (Slot::To, Action::Drag { to, .. }) => *to = point,
        (
            Slot::Element,
            Action::InvokeAction { element, .. } | Action::SetValue { element, .. },
        ) => *element = id.to_string(),
        _ => {}
    }
}

/// Refs of one env, and its last few revisions for diffs.
#[derive(Debug, Default)]
pub(crate) struct Refs {
    by_id: HashMap<String, u64>,
    ids: HashMap<u64, String>,
    last: u64,
    revision: u64,
    /// (revision, ref -> line) of recent readings.
    history: VecDeque<(u64, BTreeMap<u64, String>)>,
}

/// A reading with its refs.
pub(crate) struct Reading<'a> {
    pub tree: &'a Tree,
    /// `refs[i]` is the ref of `tree.nodes[i]`.
    pub refs: Vec<u64>,
}

impl Refs {
    /// Assigns refs to a fresh reading: known identities keep theirs, new ones get the
    /// next number, identities no longer present are forgotten. A partial reading
    /// forgets nothing (a missing element may only be unread).
    pub(crate) fn assign<'a>(&mut self, tree: &'a Tree) -> Reading<'a> {
        let mut refs = Vec::with_capacity(tree.nodes.len());
        let mut seen = HashSet::with_capacity(tree.nodes.len());
        for n in &tree.nodes {
            let key = identity_key(n);
            let r = match self.by_id.get(&key) {
                Some(&r) if seen.insert(r) => r,
                _ => {
                    self.last += 1;
                    let r = self.last;
                    seen.insert(r);
                    self.by_id.insert(key.clone(), r);
                    self.ids.insert(r, n.id.clone());
                    r
                }
            };
            refs.push(r);
        }
        if !tree.partial {
            self.by_id.retain(|_, r| seen.contains(r));
            self.ids.retain(|r, _| seen.contains(r));
        }
        Reading { tree, refs }
    }

    /// The identity behind a ref, if it was in the tree at the last reading.
    pub(crate) fn identity(&self, r: u64) -> Option<&str> {
        self.ids.get(&r).map(String::as_str)
    }

    /// The ref of an identity, minting one if it is new (a query resolved an element
    /// no reading has shown yet).
    pub(crate) fn ref_of(&mut self, n: &Node) -> u64 {
        let key = identity_key(n);
        if let Some(&r) = self.by_id.get(&key) {
            return r;
        }
        self.last += 1;
        self.by_id.insert(key, self.last);
        self.ids.insert(self.last, n.id.clone());
        self.last
    }

    /// Forgets every element and starts numbering again at `e1`: a new episode's
    /// elements are new ones, and the same seed then yields the same refs (what
    /// Gymnasium's determinism checks compare). Refs are never reused within an episode.
    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    /// Renders a reading as the wire tree, recording it as the next revision.
    pub(crate) fn render(
        &mut self,
        reading: &Reading<'_>,
        opts: &TreeOpts,
        capture_ms: f64,
    ) -> pb::AccessibilityTree {
        let tree = reading.tree;
        let depths = depths(tree);
        let lines: Vec<Option<String>> = tree
            .nodes
            .iter()
            .zip(&reading.refs)
            .map(|(n, r)| shown(n).then(|| line(n, *r)))
            .collect();
        let mut text = String::new();
        let mut used = 0u32;
        let mut truncated = false;
        for (i, l) in lines.iter().enumerate() {
            let Some(l) = l else { continue };
            if used >= opts.line_budget {
                truncated = true;
                break;
            }
            used += 1;
            for _ in 0..depths[i] {
                text.push_str("  ");
            }
            text.push_str(l);
            text.push('\n');
        }
        let focus = tree
            .nodes
            .iter()
            .zip(&reading.refs)
            .rev()
            .find(|(n, _)| n.states.iter().any(|s| s == "focused"))
            .map(|(_, r)| format!("e{r}"))
            .unwrap_or_default();
        if !focus.is_empty() && !truncated {
            let _ = writeln!(text, "focus: {focus}");
        }
        let current: BTreeMap<u64, String> = reading
            .refs
            .iter()
            .zip(lines)
            .filter_map(|(r, l)| Some((*r, l?)))
            .collect();
        let diff = (opts.diff_from != 0)
            .then(|| {
                self.history
                    .iter()
                    .find(|(rev, _)| *rev == opts.diff_from)
                    .map(|(rev, old)| diff(*rev, old, &current, opts.line_budget))
            })
            .flatten();
        self.revision += 1;
        self.history.push_back((self.revision, current));
        while self.history.len() > HISTORY {
            self.history.pop_front();
        }
        let elements = if opts.omit_elements {
            vec![]
        } else {
            elements(reading, &depths)
        };
        pb::AccessibilityTree {
            revision: self.revision,
            elements,
            text,
            truncated,
            partial: tree.partial,
            partial_reasons: tree.notes.clone(),
            node_count: tree.nodes.len() as u32,
            capture_ms,
            osworld_xml: if opts.osworld_xml {
                osworld_xml(tree)
            } else {
                String::new()
            },
            diff,
            focus,
        }
    }
}

/// What keeps an element's ref: its identity and role (a toolkit that reuses an object
/// path for another kind of element gets a new ref).
fn identity_key(n: &Node) -> String {
    format!("{}\u{0}{}", n.id, n.role)
}

/// Depth of each node (applications are 0).
fn depths(tree: &Tree) -> Vec<u32> {
    let mut d: Vec<u32> = Vec::with_capacity(tree.nodes.len());
    for n in &tree.nodes {
        let v = n
            .parent
            .and_then(|p| d.get(p as usize))
            .map_or(0, |p| p + 1);
        d.push(v);
    }
    d
}

/// An element the text rendering shows: applications, and what is on screen.
fn shown(n: &Node) -> bool {
    n.parent.is_none() || n.states.iter().any(|s| s == "showing")
}

/// States worth a prompt's attention (the rest are true of nearly every element).
const NOTABLE: &[&str] = &[
    "focused",
    "selected",
    "checked",
    "pressed",
    "expanded",
    "collapsed",
    "editable",
    "active",
    "modal",
    "indeterminate",
    "required",
    "invalid_entry",
    "read_only",
];

/// One element's line (without indentation): `e12 push button "Save" (focused) [click]`.
fn line(n: &Node, r: u64) -> String {
    let mut s = format!(
        "e{r} {}",
        if n.role.is_empty() {
            "unknown"
        } else {
            &n.role
        }
    );
    if !n.name.is_empty() {
        let _ = write!(s, " {:?}", clip(&n.name, LINE_TEXT));
    }
    let mut states: Vec<&str> = n
        .states
        .iter()
        .map(String::as_str)
        .filter(|s| NOTABLE.contains(s))
        .collect();
    if !n.actions.is_empty() && !n.states.iter().any(|s| s == "enabled") && n.parent.is_some() {
        states.push("disabled");
    }
    if !states.is_empty() {
        let _ = write!(s, " ({})", states.join(", "));
    }
    if let Some(t) = n.text.as_deref().filter(|t| !t.is_empty() && *t != n.name) {
        let _ = write!(s, " text={:?}", clip(t, LINE_TEXT));
    }
    if let Some(v) = n.value {
        let _ = write!(s, " value={}", py_float(v.current));
    }
    if !n.actions.is_empty() {
        let names: Vec<&str> = n.actions.iter().map(|a| a.name.as_str()).collect();
        let _ = write!(s, " [{}]", names.join(", "));
    }
    if let Some([x, y, w, h]) = n.bounds {
        let _ = write!(s, " @{x},{y} {w}x{h}");
    }
    s
}

fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// The change between two revisions' lines, within the line budget.
fn diff(
    from: u64,
    old: &BTreeMap<u64, String>,
    new: &BTreeMap<u64, String>,
    budget: u32,
) -> pb::TreeDiff {
    let added: Vec<u64> = new
        .keys()
        .filter(|r| !old.contains_key(r))
        .copied()
        .collect();
    let removed: Vec<u64> = old
        .keys()
        .filter(|r| !new.contains_key(r))
        .copied()
        .collect();
    let changed: Vec<u64> = new
        .iter()
        .filter(|(r, l)| old.get(r).is_some_and(|o| o != *l))
        .map(|(r, _)| *r)
        .collect();
    let mut lines: Vec<String> = Vec::new();
    lines.extend(changed.iter().map(|r| format!("~ {}", new[r])));
    lines.extend(added.iter().map(|r| format!("+ {}", new[r])));
    if !removed.is_empty() {
        lines.push(format!(
            "- {} ({} removed)",
            ranges(&removed),
            removed.len()
        ));
    }
    if lines.is_empty() {
        lines.push("no change".into());
    }
    let truncated = lines.len() > budget as usize;
    lines.truncate(budget as usize);
    let mut text = lines.join("\n");
    text.push('\n');
    let refs = |v: &[u64]| v.iter().map(|r| format!("e{r}")).collect();
    pb::TreeDiff {
        from_revision: from,
        added: refs(&added),
        removed: refs(&removed),
        changed: refs(&changed),
        text,
        truncated,
    }
}

/// `e3, e5…e9` for sorted refs.
fn ranges(refs: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < refs.len() {
        let mut j = i;
        while j + 1 < refs.len() && refs[j + 1] == refs[j] + 1 {
            j += 1;
        }
        out.push(if j > i + 1 {
            format!("e{}…e{}", refs[i], refs[j])
        } else if j == i + 1 {
            format!("e{}, e{}", refs[i], refs[j])
        } else {
            format!("e{}", refs[i])
        });
        i = j + 1;
    }
    out.join(", ")
}

fn elements(reading: &Reading<'_>, depths: &[u32]) -> Vec<pb::Element> {
    let tree = reading.tree;
    tree.nodes
        .iter()
        .enumerate()
        .map(|(i, n)| pb::Element {
            r#ref: format!("e{}", reading.refs[i]),
            role: n.role.clone(),
            name: n.name.clone(),
            description: n.description.clone(),
            text: n.text.clone().unwrap_or_default(),
            states: n.states.clone(),
            bounds: n.bounds.map(|[x, y, w, h]| pb::Rect {
                x,
                y,
                width: w,
                height: h,
            }),
            actions: n
                .actions
                .iter()
                .map(|a| pb::ElementActionInfo {
                    name: a.name.clone(),
                    description: a.description.clone(),
                    key_binding: a.key_binding.clone(),
                })
                .collect(),
            value: n.value.map(|v| pb::ValueRange {
                current: v.current,
                min: v.min.unwrap_or(f64::NAN),
                max: v.max.unwrap_or(f64::NAN),
                step: v.step.unwrap_or(f64::NAN),
            }),
            parent: n
                .parent
                .map(|p| format!("e{}", reading.refs[p as usize]))
                .unwrap_or_default(),
            depth: depths[i],
            editable: n.editable,
            attributes: n.attributes.iter().cloned().collect(),
        })
        .collect()
}

/// Why an element query did not pick one element.
#[derive(Debug, PartialEq)]
pub(crate) enum QueryMiss {
    /// No element matches.
    None,
    /// Several match equally well: their lines.
    Many(Vec<String>),
}

/// True when `query` (one role, or `|`-separated alternatives) names `role`, ignoring
/// case, spaces, `_` and `-` (`push_button`, `PushButton` and `push button` are one).
pub(crate) fn role_matches(query: &str, role: &str) -> bool {
    let key = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, ' ' | '_' | '-'))
            .flat_map(char::to_lowercase)
            .collect()
    };
    let role = key(role);
    query.split('|').any(|q| key(q) == role)
}

/// Resolves `{role, name}` against a reading: exact name, then case-insensitive, then a
/// case-insensitive substring (an empty name: any element of the role); the first level
/// with matches must have exactly one (preferring elements on screen when some are and
/// some are not).
pub(crate) fn resolve_query<'a>(
    tree: &'a Tree,
    role: &str,
    name: &str,
) -> Result<&'a Node, QueryMiss> {
    let lname = name.to_lowercase();
    let tests: [&dyn Fn(&Node) -> bool; 3] = [
        &|n| n.name == name,
        &|n| n.name.to_lowercase() == lname,
        &|n| n.name.to_lowercase().contains(&lname),
    ];
    // No name: every element of the role matches (one level).
    let any: [&dyn Fn(&Node) -> bool; 1] = [&|_| true];
    let tests: &[&dyn Fn(&Node) -> bool] = if name.is_empty() { &any } else { &tests };
    for test in tests {
        let mut hits: Vec<&Node> = tree
            .nodes
            .iter()
            .filter(|n| role.is_empty() || role_matches(role, &n.role))
            .filter(|n| test(n))
            .collect();
        if hits.len() > 1 {
            let on_screen: Vec<&Node> = hits.iter().copied().filter(|n| shown(n)).collect();
            if !on_screen.is_empty() {
                hits = on_screen;
            }
        }
        match hits.len() {
            0 => continue,
            1 => return Ok(hits[0]),
            _ => {
                return Err(QueryMiss::Many(
                    hits.iter()
                        .take(10)
                        .map(|n| format!("{} {:?}", n.role, clip(&n.name, LINE_TEXT)))
                        .collect(),
                ));
            }
        }
    }
    Err(QueryMiss::None)
}

// ---------------------------------------------------------------------------
// OSWorld's XML.
// ---------------------------------------------------------------------------

/// OSWorld's namespace map for Ubuntu (`desktop_env/server/main.py`).
pub(crate) const OSWORLD_NS: &[(&str, &str)] = &[
    ("st", "https://accessibility.ubuntu.example.org/ns/state"),
    (
        "attr",
        "https://accessibility.ubuntu.example.org/ns/attributes",
    ),
    (
        "cp",
        "https://accessibility.ubuntu.example.org/ns/component",
    ),
    (
        "doc",
        "https://accessibility.ubuntu.example.org/ns/document",
    ),
    (
        "docattr",
        "https://accessibility.ubuntu.example.org/ns/document/attributes",
    ),
    ("txt", "https://accessibility.ubuntu.example.org/ns/text"),
    ("val", "https://accessibility.ubuntu.example.org/ns/value"),
    ("act", "https://accessibility.ubuntu.example.org/ns/action"),
];

/// The tree as OSWorld's in-VM server renders it for `/accessibility`: a
/// `desktop-frame` root, one element per node named by its role (spaces as `-`), the
/// name, states, attributes, position and size of visible showing nodes, values,
/// actions, and the node's text as element text.
pub(crate) fn osworld_xml(tree: &Tree) -> String {
    let mut out = String::with_capacity(tree.nodes.len() * 160);
    out.push_str("<desktop-frame");
    for (p, uri) in OSWORLD_NS {
        let _ = write!(out, " xmlns:{p}=\"{uri}\"");
    }
    out.push('>');
    // Children lists, then a depth-first write with explicit closing tags.
    let mut kids: Vec<Vec<usize>> = vec![Vec::new(); tree.nodes.len()];
    let mut roots = Vec::new();
    for (i, n) in tree.nodes.iter().enumerate() {
        match n.parent {
            Some(p) if (p as usize) < i => kids[p as usize].push(i),
            _ => roots.push(i),
        }
    }
    enum Step {
        Open(usize),
        Close(usize),
    }
    let mut stack: Vec<Step> = roots.iter().rev().map(|&i| Step::Open(i)).collect();
    while let Some(step) = stack.pop() {
        match step {
            Step::Open(i) => {
                let n = &tree.nodes[i];
                let tag = xml_name(&n.role.replace(' ', "-"), "unknown");
                open_tag(&mut out, &tag, n);
                stack.push(Step::Close(i));
                stack.extend(kids[i].iter().rev().map(|&c| Step::Open(c)));
            }
            Step::Close(i) => {
                let n = &tree.nodes[i];
                let _ = write!(out, "</{}>", xml_name(&n.role.replace(' ', "-"), "unknown"));
            }
        }
    }
    out.push_str("</desktop-frame>");
    out
}

fn open_tag(out: &mut String, tag: &str, n: &Node) {
    let _ = write!(out, "<{tag} name=\"{}\"", escape(&n.name));
    let has = |s: &str| n.states.iter().any(|x| x == s);
    for s in &n.states {
        let _ = write!(out, " st:{}=\"true\"", xml_name(s, "state"));
    }
    let mut seen = HashSet::new();
    for (k, v) in &n.attributes {
        let k = xml_name(k, "attribute");
        if !k.is_empty() && seen.insert(k.clone()) {
            let _ = write!(out, " attr:{k}=\"{}\"", escape(v));
        }
    }
    if has("visible")
        && has("showing")
        && let Some([x, y, w, h]) = n.bounds
    {
        let _ = write!(out, " cp:screencoord=\"({x}, {y})\" cp:size=\"({w}, {h})\"");
    }
    if n.image {
        out.push_str(" image=\"true\"");
    }
    if n.selection {
        out.push_str(" selection=\"true\"");
    }
    if let Some(v) = n.value {
        for (k, x) in [
            ("value", Some(v.current)),
            ("min", v.min),
            ("max", v.max),
            ("step", v.step),
        ] {
            if let Some(x) = x {
                let _ = write!(out, " val:{k}=\"{}\"", py_float(x));
            }
        }
    }
    let mut seen = HashSet::new();
    for a in &n.actions {
        let name = xml_name(&a.name.replace(' ', "-"), "action");
        if seen.insert(name.clone()) {
            let _ = write!(
                out,
                " act:{name}_desc=\"{}\" act:{name}_kb=\"{}\"",
                escape(&a.description),
                escape(&a.key_binding)
            );
        }
    }
    out.push('>');
    if let Some(t) = n.text.as_deref().filter(|t| !t.is_empty()) {
        out.push_str(&escape(t));
    }
}

/// Python's `str(float)` for the values OSWorld writes (`1.0`, `0.5`, `inf`).
fn py_float(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e16 {
        format!("{x:.1}")
    } else if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{x}")
    }
}

/// A valid XML name from a toolkit's string: characters outside `[A-Za-z0-9_.-]`
/// become `_`, and a name that cannot start an element gets a `_` in front.
fn xml_name(s: &str, fallback: &str) -> String {
    let s = s.trim();
    if s.is_empty() {
        return fallback.to_string();
    }
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        out.insert(0, '_');
    }
    out
}

/// Escapes text and attribute values; drops characters XML 1.0 cannot carry.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests;
