//! The accessibility tree of a desktop as raw nodes: what the sandbox agent reads over
//! AT-SPI inside the sandbox (and what the task app reports about its own widgets),
//! before the server mints element refs and renders it.
//!
//! The agent walks AT-SPI with `zbus` and `atspi-proxies`: every application at once,
//! each level of an application's tree as one batch of concurrent D-Bus calls, under
//! one deadline for the whole walk and a per-call timeout, so an application that does
//! not answer costs at most the deadline and the tree comes back labelled partial.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One element of the tree.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Node {
    /// Identity while the element lives: the application's bus name and the object path
    /// (`:1.23/org/a11y/atspi/accessible/12`), or `app/<widget>` for the task app.
    pub id: String,
    /// Index of the parent in [`Tree::nodes`] (parents come first); `None` for an
    /// application (a child of the desktop).
    pub parent: Option<u32>,
    /// AT-SPI role name (`push button`, `text`, `frame`...).
    pub role: String,
    /// Accessible name.
    #[serde(default)]
    pub name: String,
    /// Accessible description.
    #[serde(default)]
    pub description: String,
    /// States, as OSWorld spells them (`showing`, `focused`, `has_popup`...).
    #[serde(default)]
    pub states: Vec<String>,
    /// Screen rectangle `[x, y, width, height]` of an element with a Component.
    #[serde(default)]
    pub bounds: Option<[i32; 4]>,
    /// Actions the element offers.
    #[serde(default)]
    pub actions: Vec<ElementAction>,
    /// A numeric value (sliders, spin buttons, progress bars).
    #[serde(default)]
    pub value: Option<ValueInfo>,
    /// The element's text (Text interface), capped by [`Limits::max_text`].
    #[serde(default)]
    pub text: Option<String>,
    /// Toolkit attributes (`toolkit`, `id`, `tag`...).
    #[serde(default)]
    pub attributes: Vec<(String, String)>,
    /// The element takes `set_value` as text (EditableText).
    #[serde(default)]
    pub editable: bool,
    /// Has the Image interface.
    #[serde(default)]
    pub image: bool,
    /// Has the Selection interface.
    #[serde(default)]
    pub selection: bool,
}

/// One action of an element.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ElementAction {
    /// Name (`click`, `press`, `activate`...).
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// Key binding.
    #[serde(default)]
    pub key_binding: String,
}

/// A numeric value and its range (`None`: the application gave no finite number;
/// JSON has no NaN).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ValueInfo {
    /// Current value.
    pub current: f64,
    /// Minimum.
    pub min: Option<f64>,
    /// Maximum.
    pub max: Option<f64>,
    /// Smallest step.
    pub step: Option<f64>,
}

/// A walk's result.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Tree {
    /// Elements in depth-first order (a parent before its children, siblings in order).
    pub nodes: Vec<Node>,
    /// Some elements are missing: the deadline passed, an application did not answer,
    /// or a limit was reached ([`Tree::notes`] says which).
    pub partial: bool,
    /// Why the tree is partial.
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Tree {
    /// Element `id` of this reading; one that is not in it is gone (the error every
    /// desktop answers for an element that no longer exists).
    pub fn take(self, id: &str) -> crate::Result<Node> {
        self.nodes.into_iter().find(|n| n.id == id).ok_or_else(|| {
            crate::DesktopError::element(
                crate::error::ElementFailure::Gone,
                "the element no longer exists",
            )
        })
    }
}

impl From<&Node> for Live {
    fn from(n: &Node) -> Self {
        Self {
            bounds: n.bounds,
            states: n.states.clone(),
        }
    }
}

/// Bounds of one walk.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Limits {
    /// Most elements.
    pub max_nodes: u32,
    /// Deepest level below an application.
    pub max_depth: u32,
    /// Most children read under one element (OSWorld's MAX_WIDTH is 1024).
    pub max_children: u32,
    /// Bytes of text kept per element.
    pub max_text: u32,
    /// The whole walk's deadline.
    pub timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_nodes: 10_000,
            max_depth: 50,
            max_children: 1024,
            max_text: 4096,
            timeout_ms: 5000,
        }
    }
}

/// What an element is now, read at the moment an action targets it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Live {
    /// Its screen rectangle, if it has one.
    pub bounds: Option<[i32; 4]>,
    /// Its states.
    pub states: Vec<String>,
}

impl Live {
    /// Shown on screen with a non-empty rectangle: where a pointer action can land.
    pub fn target(&self) -> Option<crate::Point> {
        let [x, y, w, h] = self.bounds?;
        let showing = self.states.iter().any(|s| s == "showing");
        (showing && w > 0 && h > 0).then(|| crate::Point {
            x: x.saturating_add(w / 2),
            y: y.saturating_add(h / 2),
        })
    }
}

/// OSWorld's spelling of an AT-SPI state (pyatspi's `STATE_HAS_POPUP` -> `has_popup`).
fn state_name(s: atspi_common::State) -> String {
    s.to_string().replace('-', "_")
}

/// Splits an identity into bus name and object path.
fn split_id(id: &str) -> Option<(&str, &str)> {
    let slash = id.find('/')?;
    let (bus, path) = id.split_at(slash);
    (!bus.is_empty()).then_some((bus, path))
}

/// The AT-SPI client of a sandbox session (used by the agent, inside the sandbox).
pub(crate) mod client;
