//! Files a profile shows at system paths inside its sandboxes (a desktop entry in
//! `/usr/share/applications` that an OSWorld task copies, decision 218).
//!
//! The system trees are the host's, bound read-only, and bwrap 0.8 has no overlay
//! mounts: a file joins its directory the way deskgym's Chromium flags join
//! `/etc/chromium.d`. The directory gets a tmpfs of its own, the host's entries are
//! bound there again (links recreated as links), the file comes from a memfd like the
//! control files, and the directory is made read-only last ([`super::policy`]). Each
//! re-bound entry is one more mount per sandbox start, and bwrap reads the whole mount
//! table for every bind, so its cost grows with the square of the entries: a directory
//! holds at most [`MAX_DIR_ENTRIES`] of them (measured on the dev box: +4 ms for 35,
//! +150 ms for 256, +2.2 s for `/usr/bin`'s 1427).

use std::path::{Path, PathBuf};

use super::SYSTEM;

/// A file shown at a system path inside a sandbox, read-only, over the host's view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SystemFile {
    /// Its absolute path inside (checked by [`refuse_system_path`]).
    pub path: PathBuf,
    /// Its permission bits.
    pub mode: u32,
    /// Its bytes.
    pub content: String,
}

/// Most system files a sandbox gets: each takes one of the descriptors bwrap reads
/// data from, and the sandbox's start passes at most 15 (its own control files take 7).
pub const MAX_SYSTEM_FILES: usize = 8;

/// Most entries a directory that gets a system file may have on the host (each is
/// bound again at every sandbox start; see the module's docs).
const MAX_DIR_ENTRIES: usize = 256;

/// System paths deskgym's own control files take (`/etc/passwd`, `/etc/group`, the
/// Chromium flags file): no profile file replaces them.
const RESERVED: &[&str] = &["/etc/passwd", "/etc/group", super::CHROMIUM_FLAGS_FILE];

/// Why `path` cannot be a system file, whatever the host: it must be absolute and
/// plain (no `.`, `..`, empty parts or trailing `/`), lie inside one of the system
/// trees a sandbox shows (`/usr`, `/etc`...; not `/var`'s caches, not the tree
/// itself), with permission bits only, and not be one of deskgym's own files.
pub fn refuse_system_path(path: &str, mode: u32) -> Option<String> {
    let Some(rest) = path.strip_prefix('/') else {
        return Some("must be an absolute path".into());
    };
    let parts: Vec<&str> = rest.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return Some("must be a plain absolute path (no `.`, `..`, `//` or trailing `/`)".into());
    }
    let tree = format!("/{}", parts[0]);
    if !SYSTEM.contains(&tree.as_str()) || parts.len() < 2 {
        return Some(format!(
            "must be a file inside one of the system trees a sandbox shows ({})",
            SYSTEM.join(", ")
        ));
    }
    if RESERVED.contains(&path) {
        return Some("is one of deskgym's own files in every sandbox".into());
    }
    if mode & !0o777 != 0 {
        return Some(format!(
            "mode {mode:#o} must be permission bits (at most 0o777)"
        ));
    }
    None
}

/// Whether this host can show a file at `path` (a plain system path): `Ok(true)` when
/// its directory is there, `Ok(false)` when it is not (the profile runs without the
/// file, as without a program it does not need), and why not when the directory is
/// reached through a link (name the real one), is too big to bind again entry by
/// entry, or `path` is a directory on the host.
pub fn system_dir_on_host(path: &Path) -> Result<bool, String> {
    let Some(dir) = path.parent() else {
        return Err("has no directory".into());
    };
    let real = match std::fs::canonicalize(dir) {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    if real != dir {
        return Err(format!(
            "its directory {} is a link on this host (to {}): name the real directory",
            dir.display(),
            real.display()
        ));
    }
    if !real.is_dir() {
        return Err(format!("{} is not a directory on this host", dir.display()));
    }
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        return Err("is a directory on this host".into());
    }
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .count();
    if entries > MAX_DIR_ENTRIES {
        return Err(format!(
            "its directory {} has {entries} entries on this host; a system file binds each \
             again at every sandbox start, so at most {MAX_DIR_ENTRIES}",
            dir.display()
        ));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_paths_inside_the_system_trees_are_taken() {
        for ok in [
            "/usr/share/applications/google-chrome.desktop",
            "/etc/chromium.d/extra",
            "/usr/local/bin/tool",
        ] {
            assert_eq!(refuse_system_path(ok, 0o644), None, "{ok}");
        }
        for (bad, why) in [
            ("usr/share/x", "absolute"),
            ("/usr/share/../../home/x", "plain"),
            ("/usr/./share/x", "plain"),
            ("/usr//share/x", "plain"),
            ("/usr/share/x/", "plain"),
            ("/opt/app/x", "system trees"),
            ("/var/lib/dpkg/status", "system trees"),
            ("/home/user/x", "system trees"),
            ("/usr", "system trees"),
            ("/etc/passwd", "deskgym's own"),
            ("/etc/chromium.d/zz-deskgym", "deskgym's own"),
        ] {
            let e = refuse_system_path(bad, 0o644).unwrap_or_default();
            assert!(e.contains(why), "{bad}: {e:?}");
        }
        let e = refuse_system_path("/usr/bin/x", 0o4755).unwrap_or_default();
        assert!(e.contains("permission bits"), "{e}");
    }

    #[test]
    fn a_big_directory_a_link_a_missing_one_and_a_directory_are_told_apart() {
        // The real temp dir: a link on the way would be one more link to report.
        let tmp = std::fs::canonicalize(std::env::temp_dir())
            .unwrap()
            .join(format!("deskgym-sysfiles-{}", std::process::id()));
        let (real, big) = (tmp.join("real"), tmp.join("big"));
        std::fs::create_dir_all(real.join("sub")).unwrap();
        std::fs::create_dir_all(&big).unwrap();
        for i in 0..=MAX_DIR_ENTRIES {
            std::fs::write(big.join(i.to_string()), "").unwrap();
        }
        std::os::unix::fs::symlink(&real, tmp.join("link")).unwrap();
        assert_eq!(system_dir_on_host(&real.join("new.desktop")), Ok(true));
        assert_eq!(system_dir_on_host(&tmp.join("nowhere/x")), Ok(false));
        let e = system_dir_on_host(&big.join("x")).unwrap_err();
        assert!(
            e.contains("257 entries") && e.contains("at most 256"),
            "{e}"
        );
        let e = system_dir_on_host(&tmp.join("link/x")).unwrap_err();
        assert!(e.contains("is a link"), "{e}");
        let e = system_dir_on_host(&real.join("sub")).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
