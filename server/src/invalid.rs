//! A request field that is malformed, and client input quoted for an error message: the
//! leaf every layer's "bad request" is built from (the families, the spec, the checked
//! requests), so none of them has to depend on another to refuse a field.

/// A request field that is malformed: which field (dotted path, e.g.
/// `action.click.target.point_px`) and how to fix it. Every layer's "bad request".
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub(crate) struct Invalid {
    /// Dotted path of the field.
    pub(crate) field: String,
    /// What is wrong and how to fix it.
    pub(crate) message: String,
}

impl Invalid {
    /// A bad `field`, and why.
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Quotes client input for an error message: at most 64 characters, so a
/// hostile 100,000-character value cannot turn into a 100 KB status message (which
/// clients' metadata limits would reject as RESOURCE_EXHAUSTED).
pub(crate) fn quote(s: &str) -> String {
    deskgym_worker::quote(s)
}
