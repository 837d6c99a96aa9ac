//! The one place where errors become gRPC statuses.
//!
//! Each module owns the enum of the ways it fails, in its own words: [`Invalid`] (a
//! request field, `spec`), [`AuthError`], [`ArtifactError`], [`RecordingError`], [`EncodeError`],
//! [`EnvError`], [`PoolError`]. This module is the only one that knows gRPC codes: it
//! maps each variant to the code a client acts on (see quickwit's `ServiceErrorCode`),
//! and attaches a `google.rpc.BadRequest` field violation to every bad field. It sits
//! above the module chain; `env` calls [`EnvError::code_name`] only to store the code.

use deskgym_worker::DesktopError;
use tonic::{Code, Status};

use crate::artifacts::ArtifactError;
use crate::auth::AuthError;
use crate::env::EnvError;
use crate::pool::PoolError;
use crate::record::RecordingError;
use crate::ring::RingError;
use crate::spec::{Invalid, SpecError};

impl Invalid {
    /// Always INVALID_ARGUMENT.
    pub(crate) fn code(&self) -> Code {
        Code::InvalidArgument
    }
}

impl EnvError {
    /// The code a client acts on.
    pub(crate) fn code(&self) -> Code {
        match self {
            Self::Invalid(_) => Code::InvalidArgument,
            Self::Busy { .. } => Code::Aborted,
            Self::NoEpisode { .. } | Self::Ended { .. } | Self::Incompatible(_) => {
                Code::FailedPrecondition
            }
            // A page that never became ready: a timeout, and the desktop restarts.
            Self::Down(DesktopError::NotReady(_)) => Code::DeadlineExceeded,
            Self::NoDesktop { .. } | Self::Down(_) => Code::Unavailable,
            Self::Limit(_) => Code::ResourceExhausted,
            Self::Refused(_) | Self::Clipboard(_) | Self::Element { .. } => {
                Code::FailedPrecondition
            }
            Self::File { kind, .. } => match kind {
                deskgym_worker::FileErrorKind::NotFound => Code::NotFound,
                deskgym_worker::FileErrorKind::Outside => Code::InvalidArgument,
                deskgym_worker::FileErrorKind::Full => Code::ResourceExhausted,
                _ => Code::FailedPrecondition,
            },
            Self::Desktop(_) | Self::Encode(_) | Self::Bug(_) => Code::Internal,
        }
    }

    /// The canonical name of [`code`](Self::code), as datasets store it.
    pub(crate) fn code_name(&self) -> &'static str {
        code_name(self.code())
    }
}

impl PoolError {
    /// The code a client acts on.
    pub(crate) fn code(&self) -> Code {
        match self {
            Self::Invalid(_) => Code::InvalidArgument,
            Self::Spec(e) => e.code(),
            Self::NotGranted { .. } => Code::PermissionDenied,
            Self::Unlock(e) => e.code(),
            Self::NotFound { .. } | Self::FramesMissing(_) => Code::NotFound,
            Self::Limit(_) => Code::ResourceExhausted,
            Self::Env(e) => e.code(),
            Self::Stalled { .. } | Self::SlowUpload { .. } => Code::DeadlineExceeded,
            Self::Start(_) => Code::Unavailable,
            Self::Recording(e) => e.code(),
            Self::Encode(_) | Self::Internal(_) => Code::Internal,
            Self::HumanControl { .. } | Self::NotHeld { .. } => Code::FailedPrecondition,
        }
    }
}

impl crate::unlock::UnlockError {
    /// The code a client acts on.
    pub(crate) fn code(&self) -> Code {
        use crate::unlock::UnlockError as E;
        match self {
            // Refused by the policy, a controller, or nobody answering in time.
            E::Denied { .. } | E::Refused { .. } | E::TimedOut { .. } => Code::PermissionDenied,
            E::Unsupported { .. } | E::Decided { .. } => Code::FailedPrecondition,
            // A reset while the call waited: retry on the new episode.
            E::Reset { .. } => Code::Aborted,
            // The env is gone, as for any call on a closed env; a token it never had.
            E::Closed { .. } | E::UnknownToken { .. } => Code::NotFound,
            E::ShuttingDown { .. } => Code::Unavailable,
            E::TooMany { .. } => Code::ResourceExhausted,
        }
    }
}

impl SpecError {
    /// The code a client acts on.
    pub(crate) fn code(&self) -> Code {
        match self {
            Self::Invalid(_) => Code::InvalidArgument,
            Self::ProfileUnavailable { .. } | Self::Unsupported { .. } => Code::FailedPrecondition,
            Self::Denied(_) => Code::PermissionDenied,
        }
    }
}

impl RecordingError {
    /// The code a client acts on.
    pub(crate) fn code(&self) -> Code {
        match self {
            Self::BadName(_) => Code::InvalidArgument,
            Self::Exists(_) => Code::AlreadyExists,
            Self::Unusable(_) | Self::Video(_) | Self::InUse(_) => Code::FailedPrecondition,
            Self::Missing(_) => Code::NotFound,
            Self::ShareUsed { .. } => Code::ResourceExhausted,
            Self::Finish(_) => Code::Internal,
        }
    }
}

impl AuthError {
    /// The code a client acts on.
    pub(crate) fn code(&self) -> Code {
        match self {
            Self::MissingToken | Self::WrongToken => Code::Unauthenticated,
            Self::NoPrincipal => Code::Internal,
        }
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

impl From<Invalid> for Status {
    fn from(e: Invalid) -> Self {
        use tonic_types::{ErrorDetails, StatusExt as _};
        // The field also travels as data: a `google.rpc.BadRequest` field violation
        // (the richer error model), besides leading the message.
        let message = e.to_string();
        counted(Status::with_error_details(
            e.code(),
            message,
            ErrorDetails::with_bad_request_violation(e.field, e.message),
        ))
    }
}

/// Every error status is made through here or the impls below: counted by code for
/// the metrics endpoint.
fn counted(s: Status) -> Status {
    crate::metrics::METRICS.error(s.code());
    s
}

impl From<EnvError> for Status {
    fn from(e: EnvError) -> Self {
        match e {
            EnvError::Invalid(i) => i.into(),
            EnvError::Element { reason, .. } => {
                use tonic_types::{ErrorDetails, StatusExt as _};
                // The reason travels as data (`google.rpc.ErrorInfo`) and leads the
                // message (`stale_element_ref: ...`), as the ACI spec has it.
                let code = e.code();
                let message = e.to_string();
                counted(Status::with_error_details(
                    code,
                    message,
                    ErrorDetails::with_error_info(
                        reason,
                        "deskgym",
                        std::collections::HashMap::<String, String>::new(),
                    ),
                ))
            }
            e => counted(Status::new(e.code(), e.to_string())),
        }
    }
}

impl From<RecordingError> for Status {
    fn from(e: RecordingError) -> Self {
        match e {
            RecordingError::BadName(i) => i.into(),
            e => counted(Status::new(e.code(), e.to_string())),
        }
    }
}

impl From<PoolError> for Status {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::Invalid(i) => i.into(),
            PoolError::Env(e) => e.into(),
            PoolError::Recording(e) => e.into(),
            PoolError::HumanControl { ref holder, .. } => {
                use tonic_types::{ErrorDetails, StatusExt as _};
                // As element errors: the reason as data, and leading the message.
                let meta =
                    std::collections::HashMap::from([("holder".to_string(), holder.to_string())]);
                counted(Status::with_error_details(
                    e.code(),
                    e.to_string(),
                    ErrorDetails::with_error_info("human_control", "deskgym", meta),
                ))
            }
            e => counted(Status::new(e.code(), e.to_string())),
        }
    }
}

impl RingError {
    /// The code a client acts on.
    pub(crate) fn code(&self) -> Code {
        match self {
            Self::Invalid(_) => Code::InvalidArgument,
            Self::NoSocket => Code::FailedPrecondition,
            Self::Limit { .. } => Code::ResourceExhausted,
            Self::Io(_) => Code::Internal,
        }
    }
}

impl From<RingError> for Status {
    fn from(e: RingError) -> Self {
        match e {
            RingError::Invalid(i) => i.into(),
            e => counted(Status::new(e.code(), e.to_string())),
        }
    }
}

impl ArtifactError {
    /// The code a client acts on. A bad checksum or hash is DATA_LOSS, not
    /// INVALID_ARGUMENT: the request was well formed and its bytes were damaged on the
    /// way, so the client resends them (from the offset the message names).
    pub(crate) fn code(&self) -> Code {
        match self {
            Self::Invalid(_) | Self::Gap { .. } => Code::InvalidArgument,
            Self::Checksum { .. } | Self::ShaMismatch { .. } => Code::DataLoss,
            Self::NotFound(_) | Self::NoUpload(_) => Code::NotFound,
            Self::Share { .. } => Code::ResourceExhausted,
            Self::Io(e) if e.kind() == std::io::ErrorKind::StorageFull => Code::ResourceExhausted,
            Self::Offset { .. } => Code::FailedPrecondition,
            Self::InProgress(_) => Code::Aborted,
            Self::Io(_) => Code::Internal,
        }
    }
}

impl From<ArtifactError> for Status {
    fn from(e: ArtifactError) -> Self {
        match e {
            ArtifactError::Invalid(i) => i.into(),
            e => counted(Status::new(e.code(), e.to_string())),
        }
    }
}

impl From<AuthError> for Status {
    fn from(e: AuthError) -> Self {
        counted(Status::new(e.code(), e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use deskgym_worker::DesktopError;

    fn status(e: impl Into<Status>) -> Status {
        e.into()
    }

    #[test]
    fn each_domain_error_keeps_its_code_and_message() {
        let env = |s: &str| s.to_string();
        let cases: Vec<(Status, Code)> = vec![
            (
                status(PoolError::NotFound {
                    kind: "env",
                    id: env("e1"),
                    why: "closed",
                }),
                Code::NotFound,
            ),
            (
                status(Invalid::new("action.key.keys", "unknown")),
                Code::InvalidArgument,
            ),
            (
                status(EnvError::NoEpisode { env: env("e1") }),
                Code::FailedPrecondition,
            ),
            (
                status(PoolError::Limit("max".into())),
                Code::ResourceExhausted,
            ),
            (
                status(EnvError::NoDesktop { env: env("e1") }),
                Code::Unavailable,
            ),
            (status(AuthError::WrongToken), Code::Unauthenticated),
            (status(AuthError::NoPrincipal), Code::Internal),
            (
                status(EnvError::Busy {
                    env: env("e1"),
                    call: "step",
                }),
                Code::Aborted,
            ),
            (
                status(PoolError::Stalled {
                    env: env("e1"),
                    ms: 5,
                }),
                Code::DeadlineExceeded,
            ),
            (
                status(PoolError::Env(EnvError::Ended {
                    env: env("e1"),
                    why: "success",
                })),
                Code::FailedPrecondition,
            ),
            (
                status(PoolError::Recording(RecordingError::Exists("r".into()))),
                Code::AlreadyExists,
            ),
            (
                status(RecordingError::Video("no x264".into())),
                Code::FailedPrecondition,
            ),
            (
                status(PoolError::Recording(RecordingError::ShareUsed {
                    principal: "ann".into(),
                    used_mib: 2.0,
                    share_mib: 1,
                })),
                Code::ResourceExhausted,
            ),
            (
                status(PoolError::HumanControl {
                    env: env("e1"),
                    holder: "ann".into(),
                    lease_s: 30,
                }),
                Code::FailedPrecondition,
            ),
            (
                status(PoolError::NotHeld { env: env("e1") }),
                Code::FailedPrecondition,
            ),
        ];
        for (s, code) in cases {
            assert_eq!(s.code(), code, "{s:?}");
            assert!(!s.message().is_empty());
        }
    }

    #[test]
    fn bad_input_carries_a_field_violation_through_every_layer() {
        use tonic_types::StatusExt as _;
        let bad = Invalid::new("action.key.keys", "unknown key");
        for s in [
            status(bad.clone()),
            status(PoolError::Env(EnvError::Invalid(bad.clone()))),
            status(PoolError::Invalid(bad)),
        ] {
            assert_eq!(s.code(), Code::InvalidArgument);
            assert!(
                s.message().starts_with("action.key.keys: "),
                "{}",
                s.message()
            );
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
    }

    #[test]
    fn code_names_are_canonical() {
        assert_eq!(
            EnvError::NoDesktop { env: "e".into() }.code_name(),
            "UNAVAILABLE"
        );
        assert_eq!(code_name(Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(Code::DeadlineExceeded), "DEADLINE_EXCEEDED");
    }

    #[test]
    fn desktop_errors_keep_their_meaning() {
        let e: EnvError = DesktopError::invalid("key.keys", "unknown key name \"x\"").into();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.to_string().starts_with("action.key.keys"), "{e}");
        let e: EnvError = DesktopError::DisplayGone {
            display: 3,
            reason: "killed".into(),
        }
        .into();
        assert_eq!(e.code(), Code::Unavailable);
        assert!(e.is_down());
        assert!(e.to_string().contains("call Reset"), "{e}");
        let e: EnvError = DesktopError::X11("BadMatch".into()).into();
        assert_eq!(e.code(), Code::Internal);
        assert!(!e.is_down());
    }

    #[test]
    fn human_control_leads_its_message_and_travels_as_error_info() {
        use tonic_types::StatusExt as _;
        let s = Status::from(PoolError::HumanControl {
            env: "e1".into(),
            holder: "ann".into(),
            lease_s: 30,
        });
        assert!(
            s.message().starts_with("human_control: "),
            "{}",
            s.message()
        );
        let info = s.get_error_details().error_info().cloned().unwrap();
        assert_eq!(info.reason, "human_control");
        assert_eq!(info.metadata.get("holder").map(String::as_str), Some("ann"));
    }
}
