//! Dotted paths of request fields, as error messages name them.

use std::fmt;

use crate::spec::quote;

/// Where a value sits in its request (`items[3].action.click.target`), built by
/// joining names as the checker descends, never by cutting a longer path apart: a
/// batch item, a stream message and a lone request share one checker, each starting
/// from its own root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Field(String);

impl Field {
    /// The request itself: its fields carry no prefix.
    pub(crate) fn root() -> Self {
        Self(String::new())
    }

    /// A top-level field of the request.
    pub(crate) fn named(name: &str) -> Self {
        Self(name.to_string())
    }

    /// The member `name` of this message.
    pub(crate) fn at(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Self::named(name)
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    /// Item `i` of this list.
    pub(crate) fn index(&self, i: usize) -> Self {
        Self(format!("{}[{i}]", self.0))
    }

    /// Entry `key` of this map, quoted as error messages quote user text.
    pub(crate) fn key(&self, key: &str) -> Self {
        Self(format!("{}[{}]", self.0, quote(key)))
    }

    /// The path as text.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Field> for String {
    fn from(f: Field) -> Self {
        f.0
    }
}

impl From<&Field> for String {
    fn from(f: &Field) -> Self {
        f.0.clone()
    }
}
