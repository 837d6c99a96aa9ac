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
            Self::ResourceExhausted(_) => Code::ResourceExhausted,
            Self::Unavailable(_) => Code::Unavailable,
            Self::Unauthenticated(_) => Code::Unauthenticated,
            Self::Internal(_) => Code::Internal,
        }
    }
}

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Self {
        Status::new(e.code(), e.to_string())
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
        ];
        for (e, code) in cases {
            let msg = e.to_string();
            let s = Status::from(e);
            assert_eq!(s.code(), code);
            assert_eq!(s.message(), msg);
        }
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
