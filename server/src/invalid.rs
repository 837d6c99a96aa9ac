//! The one quoting rule and the one "bad request" shape, in a leaf every layer may use.
//!
//! Every error that echoes a client string (a field, a path segment, a query value)
//! quotes it through [`quote`]: at most 64 characters, so a hostile long value cannot
//! come back whole in a status message or an HTTP error (clients' metadata limits
//! would reject a 100 KB message as RESOURCE_EXHAUSTED, and a page would show it).

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

/// Quotes client input for an error message: at most 64 characters (then the full
/// length), the same rule as the env worker's.
pub(crate) fn quote(s: &str) -> String {
    deskgym_worker::quote(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_value_is_quoted_short() {
        let q = quote(&"x".repeat(300));
        assert!(q.len() < 100 && q.ends_with("(300 chars)"), "{q}");
        assert_eq!(quote("abc"), "\"abc\"");
    }
}
