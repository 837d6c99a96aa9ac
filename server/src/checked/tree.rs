//! A path inside a tree transfer (PutDir): relative, '/'-separated, no `.`, `..` or
//! empty part, so it cannot name anything outside the tree's root.

use crate::spec::{Invalid, quote};

/// Longest path below a tree's root, in bytes (Linux's PATH_MAX).
const MAX_TREE_PATH: usize = 4096;

/// `path` checked as an entry below a tree's root; its depth (1: the root's own entry).
pub(crate) fn tree_path(field: &str, path: &str) -> Result<u32, Invalid> {
    let bad = |why: &str| Invalid::new(field, format!("{}: {why}", quote(path)));
    if path.is_empty() {
        return Err(bad("empty; an entry names its path below the tree's root"));
    }
    if path.len() > MAX_TREE_PATH {
        return Err(bad("over 4096 bytes"));
    }
    if path.starts_with('/') {
        return Err(bad("absolute; entries are relative to the tree's root"));
    }
    if path.contains('\0') {
        return Err(bad("holds a NUL byte"));
    }
    let mut depth = 0u32;
    for part in path.split('/') {
        match part {
            "" => return Err(bad("has an empty part ('//' or a trailing '/')")),
            "." | ".." => return Err(bad("'.' and '..' are not allowed")),
            _ => depth += 1,
        }
    }
    Ok(depth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_pass() {
        assert_eq!(tree_path("p", "a").unwrap(), 1);
        assert_eq!(tree_path("p", "a/b c/d.txt").unwrap(), 3);
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "a/",
            "./a",
            "a/\0",
        ] {
            let e = tree_path("p", bad).unwrap_err();
            assert_eq!(e.field, "p", "{bad:?}");
        }
    }
}
