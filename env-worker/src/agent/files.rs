//! File requests inside the sandbox: read, write (from an offset) and list. The
//! sandbox's own view is the security boundary (the agent cannot reach anything the
//! sandbox cannot); these checks keep the documented contract: paths stay inside the
//! home and /tmp, `..` is refused, symlinks are followed only inside, and only regular
//! files are opened (a FIFO or device never holds a request).

use std::io::{Read, Write};

use super::{Entry, HOME};
use crate::error::FileErrorKind;
use crate::error::quote;

/// Where file requests may reach.
const FILE_ROOTS: [&str; 2] = [HOME, "/tmp"];

type FileResult<T> = Result<T, (FileErrorKind, String)>;

fn io_err(path: &std::path::Path, e: std::io::Error) -> (FileErrorKind, String) {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound => FileErrorKind::NotFound,
        std::io::ErrorKind::IsADirectory => FileErrorKind::IsDir,
        std::io::ErrorKind::NotADirectory => FileErrorKind::NotDir,
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
            return (
                FileErrorKind::Full,
                format!(
                    "{}: the desktop's disk limit is reached (its home and /tmp are each \
                     size-limited); delete files in it or ask for a larger limit",
                    shown(path)
                ),
            );
        }
        _ => FileErrorKind::Io,
    };
    (kind, format!("{}: {e}", shown(path)))
}

/// A path as messages show it (at most 64 characters of it).
fn shown(p: &std::path::Path) -> String {
    crate::error::quote(&p.to_string_lossy())
}

/// Opens a regular file without blocking (a FIFO or device planted in the home would
/// hold the request until its time bound), then refuses anything else.
fn open_regular(p: &std::path::Path, opts: &mut std::fs::OpenOptions) -> FileResult<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = opts
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(p)
        .map_err(|e| match e.raw_os_error() {
            // A FIFO with no reader, opened to write.
            Some(libc::ENXIO) => not_regular(p),
            _ => io_err(p, e),
        })?;
    let meta = f.metadata().map_err(|e| io_err(p, e))?;
    if meta.is_dir() {
        return Err((
            FileErrorKind::IsDir,
            format!("{} is a directory; ListDirectory lists it", shown(p)),
        ));
    }
    if !meta.is_file() {
        return Err(not_regular(p));
    }
    // Back to blocking reads and writes on the regular file.
    // SAFETY: fcntl on a descriptor this function owns.
    unsafe {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    Ok(f)
}

fn not_regular(p: &std::path::Path) -> (FileErrorKind, String) {
    (
        FileErrorKind::NotRegular,
        format!(
            "{} is not a regular file (a FIFO, socket or device); file verbs read and write \
             regular files only",
            shown(p)
        ),
    )
}

fn inside(p: &std::path::Path) -> bool {
    FILE_ROOTS.iter().any(|r| p.starts_with(r))
}

/// A request path made absolute (relative ones are under the home), before any
/// resolving: empty and `..` are refused.
fn joined(path: &str) -> FileResult<std::path::PathBuf> {
    use std::path::{Component, Path};
    let outside = |m: String| (FileErrorKind::Outside, m);
    if path.is_empty() {
        return Err(outside("the path is empty".into()));
    }
    let p = Path::new(HOME).join(path);
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(outside(format!("{}: '..' is not allowed", quote(path))));
    }
    Ok(p)
}

/// Resolves a request path: absolute or relative to the home, no `..`, and (symlinks
/// followed) inside the roots. `exists`: the path itself must exist; else its parent.
fn resolve(path: &str, exists: bool) -> FileResult<std::path::PathBuf> {
    let outside = |m: String| (FileErrorKind::Outside, m);
    let p = joined(path)?;
    let resolved = if exists {
        p.canonicalize().map_err(|e| io_err(&p, e))?
    } else {
        let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
            return Err(outside(format!("{} names no file", quote(path))));
        };
        let dir = parent.canonicalize().map_err(|e| io_err(parent, e))?;
        let full = dir.join(name);
        // An existing symlink is followed, and must stay inside too.
        match std::fs::symlink_metadata(&full) {
            Ok(m) if m.file_type().is_symlink() => full.canonicalize().unwrap_or(full),
            _ => full,
        }
    };
    if !inside(&resolved) {
        return Err(outside(format!(
            "{} resolves to {}, outside {} and /tmp",
            quote(path),
            shown(&resolved),
            HOME
        )));
    }
    Ok(resolved)
}

pub(super) fn read(path: &str, offset: u64, max: u64) -> FileResult<(u64, Vec<u8>, bool)> {
    use std::io::{Seek, SeekFrom};
    let p = resolve(path, true)?;
    let mut f = open_regular(&p, std::fs::OpenOptions::new().read(true))?;
    let size = f.metadata().map_err(|e| io_err(&p, e))?.len();
    f.seek(SeekFrom::Start(offset)).map_err(|e| io_err(&p, e))?;
    let mut data = Vec::new();
    f.take(max)
        .read_to_end(&mut data)
        .map_err(|e| io_err(&p, e))?;
    let eof = offset.saturating_add(data.len() as u64) >= size;
    Ok((size, data, eof))
}

pub(super) fn write(path: &str, offset: u64, mode: u32, data: &[u8]) -> FileResult<u64> {
    use std::io::{Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let p = resolve(path, false)?;
    let mut f = open_regular(
        &p,
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .mode(if mode == 0 { 0o644 } else { mode & 0o7777 }),
    )?;
    let have = f.metadata().map_err(|e| io_err(&p, e))?.len();
    if have < offset {
        return Err((
            FileErrorKind::Short,
            format!(
                "{} has {have} bytes; an upload resumed at {offset} needs them all",
                shown(&p)
            ),
        ));
    }
    // Truncated only now that it is known to be a regular file; a resumed upload ends
    // where its data ends.
    f.set_len(offset).map_err(|e| io_err(&p, e))?;
    // The mode asked for, exactly: the open's mode is masked by the umask and ignored
    // for a file already there, and a tree copied in keeps its modes (PutDir).
    if mode != 0 {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
            .map_err(|e| io_err(&p, e))?;
    }
    f.seek(SeekFrom::Start(offset)).map_err(|e| io_err(&p, e))?;
    f.write_all(data).map_err(|e| io_err(&p, e))?;
    Ok(offset + data.len() as u64)
}

/// Makes `path` and its missing parents, every one inside the roots (no `..`; each
/// existing ancestor resolved, symlinks followed only inside), and sets its mode (0:
/// new directories get the default, an existing one keeps its own).
pub(super) fn make_dir(path: &str, mode: u32) -> FileResult<()> {
    use std::os::unix::fs::PermissionsExt;
    let outside = |m: String| (FileErrorKind::Outside, m);
    let p = joined(path)?;
    // The deepest ancestor that exists, resolved; what is below it is made here.
    let mut base = p.as_path();
    let mut rest = Vec::new();
    while std::fs::symlink_metadata(base).is_err() {
        let (Some(parent), Some(name)) = (base.parent(), base.file_name()) else {
            return Err(outside(format!("{} names no directory", quote(path))));
        };
        rest.push(name.to_owned());
        base = parent;
    }
    let mut at = base.canonicalize().map_err(|e| io_err(base, e))?;
    if !inside(&at) {
        return Err(outside(format!(
            "{} resolves to {}, outside {} and /tmp",
            quote(path),
            shown(&at),
            HOME
        )));
    }
    for name in rest.iter().rev() {
        at.push(name);
        match std::fs::create_dir(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(&at, e)),
        }
    }
    let meta = std::fs::symlink_metadata(&at).map_err(|e| io_err(&at, e))?;
    if !meta.is_dir() {
        return Err((
            FileErrorKind::NotDir,
            format!("{} is not a directory", shown(&at)),
        ));
    }
    if mode == 0 {
        return Ok(());
    }
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| io_err(&at, e))
}

pub(super) fn list(path: &str, depth: u32, max: usize) -> FileResult<(String, Vec<Entry>, bool)> {
    let root = resolve(path, true)?;
    if !root.is_dir() {
        return Err((
            FileErrorKind::NotDir,
            format!("{} is not a directory", shown(&root)),
        ));
    }
    let mut entries = Vec::new();
    let mut truncated = false;
    let mut stack = vec![(root.clone(), 1u32)];
    while let Some((dir, level)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<_> = rd.flatten().collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            if entries.len() >= max {
                truncated = true;
                break;
            }
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            let ft = m.file_type();
            let kind = if ft.is_symlink() {
                "symlink"
            } else if ft.is_dir() {
                "dir"
            } else if ft.is_file() {
                "file"
            } else {
                "other"
            };
            let mtime_ms = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as i64);
            let rel = e.path();
            let rel = rel.strip_prefix(&root).unwrap_or(&rel);
            entries.push(Entry {
                path: rel.display().to_string(),
                kind: kind.into(),
                size: m.len(),
                mtime_ms,
                mode: std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777,
            });
            if ft.is_dir() && level < depth {
                stack.push((e.path(), level + 1));
            }
        }
    }
    Ok((root.display().to_string(), entries, truncated))
}
