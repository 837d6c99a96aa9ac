//! Typed errors of one desktop. The server maps them to gRPC codes in one place.

use std::io;

use serde::{Deserialize, Serialize};

/// Why a desktop operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    /// Xvfb could not be started (missing binary, bad size, no display number).
    #[error("could not start Xvfb: {0}")]
    XvfbStart(String),
    /// The X server went away (killed, crashed) or the connection broke.
    #[error("X display {display} is gone: {reason}")]
    DisplayGone {
        /// The display number, e.g. 5 for `:5`.
        display: u32,
        /// What was observed.
        reason: String,
    },
    /// The task app could not be started or stopped answering.
    #[error("task app failed: {0}")]
    App(String),
    /// The action cannot be performed as given (out-of-screen point, unknown key...).
    #[error("invalid action: {field}: {message}")]
    InvalidAction {
        /// The offending field, e.g. `action.click.target.point_px.x`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A command or application could not be started in the sandbox (missing program,
    /// bad working directory).
    #[error("{0}")]
    Exec(String),
    /// The clipboard cannot give or take this text (no text target, over the limit, an
    /// owner that does not answer).
    #[error("{0}")]
    Clipboard(String),
    /// A file request in the sandbox failed.
    #[error("{message}")]
    File {
        /// Why.
        kind: FileErrorKind,
        /// What, for the user.
        message: String,
    },
    /// An element of the accessibility tree cannot be used as asked (gone, not showing,
    /// no such action), or the tree cannot be read.
    #[error("{message}")]
    Element {
        /// Why.
        failure: ElementFailure,
        /// What, for the user.
        message: String,
    },
    /// A page did not become ready in time (a web task); the desktop is restarted.
    #[error("{0}")]
    NotReady(String),
    /// An X protocol request failed in a way that does not mean the display is gone.
    #[error("X request failed: {0}")]
    X11(String),
    /// A limit of the desktop was reached (its memory, the agent's concurrent
    /// requests): this env's call fails, never a neighbour's.
    #[error("{0}")]
    Limit(String),
    /// An operating system call failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

impl DesktopError {
    /// Shorthand for [`DesktopError::Element`].
    pub fn element(failure: ElementFailure, message: impl Into<String>) -> Self {
        Self::Element {
            failure,
            message: message.into(),
        }
    }

    /// Shorthand for [`DesktopError::InvalidAction`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidAction {
            field: field.into(),
            message: message.into(),
        }
    }

    /// True when the desktop must be restarted before it can be used again.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Self::DisplayGone { .. } | Self::App(_) | Self::XvfbStart(_) | Self::NotReady(_)
        )
    }
}

/// Longest part of a caller's string quoted in an error message.
pub(crate) const QUOTE_CHARS: usize = 64;

/// A caller's string as error messages quote it: at most `QUOTE_CHARS` characters
/// (a long path or key name would otherwise travel back whole, in status metadata).
pub fn quote(s: &str) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(QUOTE_CHARS).collect();
    if chars.next().is_none() {
        format!("{head:?}")
    } else {
        format!("{head:?}... ({} chars)", s.chars().count())
    }
}

/// Result alias of this crate.
pub type Result<T, E = DesktopError> = std::result::Result<T, E>;

/// Why an element request failed.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ElementFailure {
    /// The element no longer exists (or its application is gone).
    Gone,
    /// The element does not offer what was asked (action name, a settable value).
    Unsupported,
    /// The accessibility bus cannot be reached.
    Unavailable,
}

/// Why a file request failed.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FileErrorKind {
    /// The path (or its directory) does not exist.
    NotFound,
    /// The path resolves outside `/home/user` and `/tmp`, or uses `..`.
    Outside,
    /// A directory where a file is needed.
    IsDir,
    /// A file where a directory is needed.
    NotDir,
    /// A resumed write past the end of the file.
    Short,
    /// A FIFO, socket or device where a regular file is needed.
    NotRegular,
    /// The desktop's disk limit is reached.
    Full,
    /// Anything else (permissions).
    Io,
}
