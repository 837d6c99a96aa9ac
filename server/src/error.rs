//! The one place where typed errors become gRPC statuses.
//!
//! Kept deliberately small (see quickwit's `ServiceErrorCode`): add a variant only when a
//! client must act differently on it.

use deskgym_worker::DesktopError;
use tonic::{Code, Status};

/// Every way a deskgym request can fail, as the client should act on it.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ServiceError {
    /// Unknown pool, env or id. Fix the id.
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed; `field` names the offending field.
    #[error("{field}: {message}")]
    InvalidArgument {
        /// Dotted path of the field, e.g. `action.click.target.point_px`.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The thing to create exists already (a recording of that name).
    #[error("{0}")]
    AlreadyExists(String),
    /// The env is not in a state that allows this (step before reset, after the end).
    #[error("{0}")]
    FailedPrecondition(String),
    /// Another call is in flight on the same env (one call at a time per env). Retry
    /// after it returns.
    #[error("{0}")]
    Aborted(String),
    /// The desktop did not finish within the server's time bound; it is being restarted.
    #[error("{0}")]
    DeadlineExceeded(String),
    /// A server limit would be exceeded. Ask for less.
    #[error("{0}")]
    ResourceExhausted(String),
    /// The desktop is down (Xvfb or app died); Reset brings it back.
    #[error("{0}")]
    Unavailable(String),
    /// Missing or wrong bearer token.
    #[error("{0}")]
    Unauthenticated(String),
    /// A bug or an unexpected system failure.
    #[error("{0}")]
    Internal(String),
}

impl ServiceError {
    /// Shorthand for [`ServiceError::InvalidArgument`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The gRPC code of this error.
    pub fn code(&self) -> Code {
        match self {
            Self::NotFound(_) => Code::NotFound,
            Self::InvalidArgument { .. } => Code::InvalidArgument,
            Self::AlreadyExists(_) => Code::AlreadyExists,
            Self::FailedPrecondition(_) => Code::FailedPrecondition,
            Self::Aborted(_) => Code::Aborted,
            Self::DeadlineExceeded(_) => Code::DeadlineExceeded,
            Self::ResourceExhausted(_) => Code::ResourceExhausted,
            Self::Unavailable(_) => Code::Unavailable,
            Self::Unauthenticated(_) => Code::Unauthenticated,
            Self::Internal(_) => Code::Internal,
        }
    }

    /// The canonical gRPC name of this error's code (`"UNAVAILABLE"`), as clients
    /// spell it; what datasets store.
    pub fn code_name(&self) -> &'static str {
        code_name(self.code())
    }
}

/// Canonical gRPC code names (the spelling of `grpc.StatusCode` and the gRPC docs),
/// never `Debug` output.
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Longest piece of client input an error message quotes.
const QUOTE_CHARS: usize = 64;

/// Quotes client input for an error message: at most [`QUOTE_CHARS`] characters, so a
/// hostile 100,000-character value cannot turn into a 100 KB status message (which
/// clients' metadata limits would reject as RESOURCE_EXHAUSTED).
pub(crate) fn quote(s: &str) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(QUOTE_CHARS).collect();
    if chars.next().is_none() {
        format!("{head:?}")
    } else {
        format!("{head:?}... ({} chars)", s.chars().count())
    }
}

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Self {
        use tonic_types::{ErrorDetails, StatusExt as _};
        let (code, message) = (e.code(), e.to_string());
        match e {
            // The field also travels as data: a `google.rpc.BadRequest` field violation
            // (the richer error model), besides leading the message.
            ServiceError::InvalidArgument {
                field,
                message: why,
            } => Status::with_error_details(
                code,
                message,
                ErrorDetails::with_bad_request_violation(field, why),
            ),
            _ => Status::new(code, message),
        }
    }
}

impl From<DesktopError> for ServiceError {
    fn from(e: DesktopError) -> Self {
        match e {
            DesktopError::InvalidAction { field, message } => {
                let field = if field.starts_with("action") {
                    field
                } else {
                    format!("action.{field}")
                };
                Self::InvalidArgument { field, message }
            }
            DesktopError::DisplayGone { .. }
            | DesktopError::App(_)
            | DesktopError::XvfbStart(_) => {
                Self::Unavailable(format!("{e}; call Reset to restart this env"))
            }
            DesktopError::X11(_) | DesktopError::Io(_) => Self::Internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_maps_to_its_code() {
        let cases = [
            (ServiceError::NotFound("env x".into()), Code::NotFound),
            (
                ServiceError::invalid("action.key.keys", "unknown"),
                Code::InvalidArgument,
            ),
            (
                ServiceError::FailedPrecondition("reset first".into()),
                Code::FailedPrecondition,
            ),
            (
                ServiceError::ResourceExhausted("max".into()),
                Code::ResourceExhausted,
            ),
            (ServiceError::Unavailable("gone".into()), Code::Unavailable),
            (
                ServiceError::Unauthenticated("token".into()),
                Code::Unauthenticated,
            ),
            (ServiceError::Internal("bug".into()), Code::Internal),
            (ServiceError::Aborted("busy".into()), Code::Aborted),
            (
                ServiceError::DeadlineExceeded("slow".into()),
                Code::DeadlineExceeded,
            ),
        ];
        for (e, code) in cases {
            let msg = e.to_string();
            let s = Status::from(e);
            assert_eq!(s.code(), code);
            assert_eq!(s.message(), msg);
        }
    }

    #[test]
    fn bad_input_carries_a_field_violation() {
        use tonic_types::StatusExt as _;
        let s = Status::from(ServiceError::invalid("action.key.keys", "unknown key"));
        let details = s.get_error_details();
        let v = &details
            .bad_request()
            .expect("a BadRequest")
            .field_violations[0];
        assert_eq!(
            (v.field.as_str(), v.description.as_str()),
            ("action.key.keys", "unknown key")
        );
    }

    #[test]
    fn code_names_are_canonical() {
        assert_eq!(
            ServiceError::Unavailable(String::new()).code_name(),
            "UNAVAILABLE"
        );
        assert_eq!(code_name(Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(Code::DeadlineExceeded), "DEADLINE_EXCEEDED");
    }

    #[test]
    fn quotes_are_bounded() {
        assert_eq!(quote("ctrl+s"), "\"ctrl+s\"");
        let q = quote(&"a".repeat(100_000));
        assert!(q.len() < 100, "{q}");
        assert!(q.ends_with("(100000 chars)"), "{q}");
    }

    #[test]
    fn desktop_errors_keep_their_meaning() {
        let e: ServiceError = DesktopError::invalid("key.keys", "unknown key name \"x\"").into();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.to_string().starts_with("action.key.keys"));
        let e: ServiceError = DesktopError::DisplayGone {
            display: 3,
            reason: "killed".into(),
        }
        .into();
        assert_eq!(e.code(), Code::Unavailable);
    }
}
