//! Worker and env results → wire messages. Requests go the other way through
//! [`crate::checked`].

use deskgym_proto::v1 as pb;

use deskgym_worker::WindowInfo;
use deskgym_worker::{Executed, Listing};

/// A directory listing on the wire.
pub(crate) fn listing(
    Listing {
        path,
        entries,
        truncated,
    }: Listing,
) -> pb::ListDirectoryResponse {
    pb::ListDirectoryResponse {
        path,
        entries: entries
            .into_iter()
            .map(|e| pb::DirEntry {
                path: e.path,
                kind: e.kind,
                size: e.size,
                mtime_ms: e.mtime_ms,
            })
            .collect(),
        truncated,
    }
}

/// Windows on the wire.
pub(crate) fn windows_response(ws: Vec<WindowInfo>) -> pb::ListWindowsResponse {
    pb::ListWindowsResponse {
        windows: ws
            .into_iter()
            .map(|w| pb::WindowInfo {
                id: w.id,
                title: w.title,
                wm_class: w.class,
                pid: w.pid,
                x: w.x,
                y: w.y,
                width: w.width,
                height: w.height,
                focused: w.focused,
            })
            .collect(),
    }
}

/// How a command ended, on the wire.
pub(crate) fn exec_response(
    Executed {
        end,
        stdout,
        stderr,
    }: Executed,
) -> pb::ExecResponse {
    pb::ExecResponse {
        exit_code: end.exit_code,
        signal: end.signal,
        stdout,
        stderr,
        stdout_truncated: end.stdout_truncated,
        stderr_truncated: end.stderr_truncated,
        timed_out: end.timed_out,
        duration_ms: end.duration_ms,
    }
}

mod results;
pub(crate) use results::*;

#[cfg(test)]
mod tests;
