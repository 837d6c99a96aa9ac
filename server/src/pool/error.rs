//! Why a pool-level operation failed: the one error enum of the pool manager (mapped
//! to `tonic::Status` in `crate::error`).

use std::sync::Arc;

use deskgym_worker::DesktopError;

use crate::encode::EncodeError;
use crate::env::EnvError;
use crate::record::RecordingError;
use crate::spec::{Invalid, SpecError, quote};

/// Why a pool-level operation failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PoolError {
    /// A malformed request field.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// A CreatePool request that cannot be served as asked (profile, capabilities).
    #[error(transparent)]
    Spec(SpecError),
    /// A verb outside the pool's granted capabilities and the env's unlocked powers.
    #[error(
        "env {env} may not use {capability}: its pool was not granted capability \
         {capability:?} and it holds no unlock of it (ask for it in \
         CreatePool.capabilities, or Unlock it for this env: \
         Unlock{{env_id, capability: {capability:?}, reason}})"
    )]
    NotGranted {
        /// The env.
        env: String,
        /// The capability.
        capability: &'static str,
    },
    /// An Unlock that was not granted.
    #[error(transparent)]
    Unlock(#[from] crate::unlock::UnlockError),
    /// No such object of the caller's (another principal's is reported the same way).
    #[error("{kind} {} not found ({why})", quote(id))]
    NotFound {
        /// `pool`, `env` or `checkpoint`.
        kind: &'static str,
        /// The id asked for.
        id: String,
        /// The ways it could be gone.
        why: &'static str,
    },
    /// Frames GetFrames asked for that the cache does not hold.
    #[error("frames not in the cache (evicted or never seen): {0}; fall back to Observe")]
    FramesMissing(String),
    /// A server limit or a principal's quota would be exceeded.
    #[error("{0}")]
    Limit(String),
    /// The operation on the env failed.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The env did not answer within its bound; its desktop was killed.
    #[error(
        "env {env} did not answer within the server's op_timeout ({ms} ms): its desktop \
         stalled and was killed; call Reset to restart it"
    )]
    Stalled {
        /// The env.
        env: String,
        /// The bound, in milliseconds.
        ms: u128,
    },
    /// A PutFile's messages did not all arrive within the server's op_timeout.
    #[error(
        "the upload did not finish within the server's op_timeout ({ms} ms); send less per call"
    )]
    SlowUpload {
        /// The bound, in milliseconds.
        ms: u128,
    },
    /// A new desktop did not start.
    #[error("a desktop could not start: {0}")]
    Start(DesktopError),
    /// The pool's recording.
    #[error(transparent)]
    Recording(#[from] RecordingError),
    /// A frame could not be encoded.
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The step pool failed the job (a panic, a dropped worker): a bug.
    #[error("{0}")]
    Internal(String),
    /// A console action on an env the person does not hold.
    #[error("take env {env} over first: only the person holding an env acts on it at the console")]
    NotHeld {
        /// The env.
        env: String,
    },
    /// A person took the env over at the console: its agent waits until they release it.
    #[error(
        "human_control: env {env} is being driven by a person at the console ({holder}); \
         calls on it resume when they release it (or {lease_s} s after their last action)"
    )]
    HumanControl {
        /// The env.
        env: String,
        /// The principal holding it.
        holder: Arc<str>,
        /// The hold's lease, in seconds.
        lease_s: u64,
    },
}

impl From<SpecError> for PoolError {
    fn from(e: SpecError) -> Self {
        match e {
            SpecError::Invalid(i) => Self::Invalid(i),
            e => Self::Spec(e),
        }
    }
}

impl PoolError {
    pub(super) fn not_found(kind: &'static str, id: &str, why: &'static str) -> Self {
        Self::NotFound {
            kind,
            id: id.to_string(),
            why,
        }
    }
}
