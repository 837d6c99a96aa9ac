//! What a sandbox may see and do, as bubblewrap's arguments: a pure function of the
//! sandbox's config and a reading of the host ([`HostView`]), so the whole policy can be
//! read in one place and pinned by a snapshot test.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{
    CHROMIUM_D, CHROMIUM_FLAGS_FILE, CTL, DATA_FD_BASE, HOSTNAME, RUN_SIZE, SYSTEM, SYSTEM_VAR,
    SandboxConfig, TEMPLATE, XAUTHORITY,
};

/// How a host path shows inside.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Shown {
    /// A symlink (recreated as one inside).
    Link(PathBuf),
    /// A directory or file (bound read-only).
    Bound,
}

/// A system directory that files of deskgym's join (`/etc/chromium.d`, the config's
/// system files' directories): a tmpfs in its place, the host's entries on it again.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Layered {
    /// The directory.
    pub(crate) dir: PathBuf,
    /// The host's entries there, by name, less those deskgym's files replace.
    pub(crate) entries: Vec<(PathBuf, Shown)>,
}

/// The host facts the policy depends on, read once per sandbox.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct HostView {
    /// The system paths that exist, and how.
    pub(crate) system: Vec<(PathBuf, Shown)>,
    /// The directories files of deskgym's join, a parent before its children.
    pub(crate) layered: Vec<Layered>,
    /// The config's hidden paths that exist inside the view: (path, is a directory).
    pub(crate) hidden: Vec<(PathBuf, bool)>,
}

impl HostView {
    /// Reads what `cfg`'s sandbox would show of this host.
    pub(crate) fn read(cfg: &SandboxConfig) -> std::io::Result<Self> {
        let mut system = Vec::new();
        for p in SYSTEM.iter().chain(SYSTEM_VAR) {
            let path = Path::new(p);
            match std::fs::read_link(path) {
                Ok(target) => system.push((path.to_path_buf(), Shown::Link(target))),
                Err(_) if path.is_dir() => system.push((path.to_path_buf(), Shown::Bound)),
                Err(_) => {}
            }
        }
        // deskgym's files in system directories: Chromium's flags where the host reads
        // them, and the config's system files.
        let mut added: Vec<&Path> = cfg.system_files.iter().map(|f| f.path.as_path()).collect();
        if Path::new(CHROMIUM_D).is_dir() {
            added.push(Path::new(CHROMIUM_FLAGS_FILE));
        }
        let dirs: BTreeSet<&Path> = added.iter().filter_map(|p| p.parent()).collect();
        let layered = dirs
            .into_iter()
            .map(|dir| Layered::read(dir, &added))
            .collect::<std::io::Result<_>>()?;
        let shown = |p: &Path| SYSTEM.iter().chain(SYSTEM_VAR).any(|s| p.starts_with(s));
        let hidden = cfg
            .hide
            .iter()
            .filter(|h| shown(h) && h.exists())
            .map(|h| (h.clone(), h.is_dir()))
            .collect();
        Ok(Self {
            system,
            layered,
            hidden,
        })
    }
}

impl Layered {
    /// Reads `dir`'s entries on the host, less the `added` files that replace them:
    /// links as links, directories and files to bind (anything else is left out).
    fn read(dir: &Path, added: &[&Path]) -> std::io::Result<Self> {
        let on =
            |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display()));
        let mut entries = Vec::new();
        for e in std::fs::read_dir(dir).map_err(on)? {
            let e = e.map_err(on)?;
            let (p, t) = (e.path(), e.file_type().map_err(on)?);
            if added.contains(&p.as_path()) {
                continue;
            }
            if t.is_symlink() {
                entries.push((p.clone(), Shown::Link(std::fs::read_link(&p).map_err(on)?)));
            } else if t.is_dir() || t.is_file() {
                entries.push((p, Shown::Bound));
            }
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Self {
            dir: dir.to_path_buf(),
            entries,
        })
    }
}

/// Where the per-sandbox pieces are.
pub(crate) struct Places<'a> {
    /// The env's X socket on the host.
    pub(crate) x_socket: &'a str,
    /// The agent binary's host path.
    pub(crate) agent: &'a Path,
    /// The control files, in order of their descriptors: (inside path, mode).
    pub(crate) data: &'a [(&'a str, &'a str)],
    /// Whether bwrap starts in the display's own IPC namespace (shared with that Xvfb
    /// and no other env), rather than making one for the sandbox.
    pub(crate) display_ipc: bool,
}

/// bubblewrap's arguments for a sandbox, up to (not including) `--` and the agent's
/// command line: the namespaces, then the mounts from the system trees up to the control
/// files, the environment, and last the remounts that make everything else read-only
/// (bwrap applies them in order, so the order is part of the policy).
pub(crate) fn bwrap_args(cfg: &SandboxConfig, host: &HostView, at: &Places<'_>) -> Vec<OsString> {
    let disk = (cfg.limits.disk_mb.max(16) << 20).to_string();
    let mut a: Vec<OsString> = Vec::new();
    namespaces(&mut a, at.display_ipc);
    system_mounts(&mut a, host, &disk);
    layered(&mut a, host);
    masks(&mut a, host);
    host_binds(&mut a, cfg);
    user_places(&mut a, at, &disk);
    environment(&mut a, cfg);
    control_mounts(&mut a, at);
    seal(&mut a, host);
    a
}

/// Appending arguments given as strings (paths, which need not be UTF-8, go through
/// [`path`]).
trait PushStrs {
    fn push_strs(&mut self, xs: &[&str]);
}

impl PushStrs for Vec<OsString> {
    fn push_strs(&mut self, xs: &[&str]) {
        self.extend(xs.iter().map(OsString::from));
    }
}

/// A host path as an argument.
fn path(p: &Path) -> OsString {
    OsString::from(p.as_os_str())
}

/// The sandbox's own namespaces: `user` (uid 1000) in a user namespace with no nested
/// ones, its own pids, host name and network, and IPC shared with its display only
/// (`display_ipc`: bwrap starts in the namespace of the env's Xvfb, decision 219) or its
/// own; its processes in a session of their own (no terminal of the worker's to push
/// input into), dying with the worker.
fn namespaces(a: &mut Vec<OsString>, display_ipc: bool) {
    a.push_strs(&["--unshare-user", "--uid", "1000", "--gid", "1000"]);
    a.push_strs(&["--unshare-pid"]);
    if !display_ipc {
        a.push_strs(&["--unshare-ipc"]);
    }
    a.push_strs(&["--unshare-uts", "--unshare-cgroup-try"]);
    // No user namespaces inside: their kernel surface is the tenant's way out.
    a.push_strs(&[
        "--disable-userns",
        "--hostname",
        HOSTNAME,
        "--die-with-parent",
        "--new-session",
    ]);
    // Always a network namespace of its own: granted the network, pasta attaches to it.
    a.push_strs(&["--unshare-net"]);
}

/// The system trees read-only (links recreated as links), the kernel's file systems,
/// and the system's writable places, each a sized tmpfs.
fn system_mounts(a: &mut Vec<OsString>, host: &HostView, disk: &str) {
    as_on_host(a, &host.system);
    // Every writable mount is a tmpfs with a size (else half the host's memory each);
    // the rest is made read-only at the end.
    a.push_strs(&[
        "--ro-bind",
        "/sys",
        "/sys",
        "--tmpfs",
        "/sys/fs/cgroup",
        "--remount-ro",
        "/sys/fs/cgroup",
    ]);
    a.push_strs(&["--dev", "/dev", "--proc", "/proc"]);
    a.push_strs(&["--perms", "1777", "--size", disk, "--tmpfs", "/dev/shm"]);
    a.push_strs(&["--size", RUN_SIZE, "--tmpfs", "/run"]);
    a.push_strs(&["--perms", "1777", "--size", disk, "--tmpfs", "/var/tmp"]);
    a.push_strs(&["--dir", "/root"]);
}

/// Host paths as they are: links recreated, the rest bound read-only.
fn as_on_host(a: &mut Vec<OsString>, paths: &[(PathBuf, Shown)]) {
    for (p, how) in paths {
        match how {
            Shown::Link(target) => a.extend(["--symlink".into(), path(target), path(p)]),
            Shown::Bound => a.extend(["--ro-bind".into(), path(p), path(p)]),
        }
    }
}

/// The directories deskgym's files join: each a tmpfs with the host's entries on it
/// again (the files themselves come with the control files; bwrap 0.8 has no overlay
/// mounts). Before the masks, so a hidden path re-bound here is masked all the same.
fn layered(a: &mut Vec<OsString>, host: &HostView) {
    for l in &host.layered {
        a.extend(["--tmpfs".into(), path(&l.dir)]);
        as_on_host(a, &l.entries);
    }
}

/// The config's hidden paths, masked where the system trees would show them: a
/// directory under an empty tmpfs, a file under `/dev/null`.
fn masks(a: &mut Vec<OsString>, host: &HostView) {
    for (h, dir) in &host.hidden {
        if *dir {
            a.extend(["--tmpfs".into(), path(h)]);
        } else {
            a.extend(["--ro-bind".into(), "/dev/null".into(), path(h)]);
        }
    }
}

/// What else of the host shows, read-only: the config's shares and its home template.
fn host_binds(a: &mut Vec<OsString>, cfg: &SandboxConfig) {
    for (host_dir, inside) in &cfg.shares {
        a.extend(["--ro-bind".into(), path(host_dir), inside.into()]);
    }
    if let Some(t) = &cfg.home_template {
        a.extend(["--ro-bind".into(), path(t), TEMPLATE.into()]);
    }
}

/// The user's places: a sized home and `/tmp`, the env's X socket as display `:0`, the
/// agent binary, the runtime directory, and the home as the working directory.
fn user_places(a: &mut Vec<OsString>, at: &Places<'_>, disk: &str) {
    a.push_strs(&["--perms", "0700", "--size", disk, "--tmpfs", "/home/user"]);
    a.push_strs(&["--perms", "1777", "--size", disk, "--tmpfs", "/tmp"]);
    a.push_strs(&[
        "--dir",
        "/tmp/.X11-unix",
        "--bind",
        at.x_socket,
        "/tmp/.X11-unix/X0",
    ]);
    a.extend([
        "--ro-bind".into(),
        path(at.agent),
        "/run/deskgym-agent".into(),
    ]);
    a.push_strs(&[
        "--dir",
        "/run/user/1000",
        "--chmod",
        "0700",
        "/run/user/1000",
        "--chdir",
        "/home/user",
    ]);
}

/// The environment of everything in the sandbox (bwrap starts from the worker's, which
/// the caller clears): `user`'s basics, the display and its cookie, a `PATH` that finds
/// the sandbox's `sudo` first, then the config's own variables.
fn environment(a: &mut Vec<OsString>, cfg: &SandboxConfig) {
    let bin_path = "/run/deskgym/bin:/home/user/.local/bin:/usr/local/bin:/usr/bin:/bin";
    for (k, v) in [
        ("HOME", "/home/user"),
        ("USER", "user"),
        ("LOGNAME", "user"),
        ("SHELL", "/bin/bash"),
        ("DISPLAY", ":0"),
        ("XAUTHORITY", XAUTHORITY),
        ("XDG_RUNTIME_DIR", "/run/user/1000"),
        ("PATH", bin_path),
    ] {
        a.push_strs(&["--setenv", k, v]);
    }
    for (k, v) in &cfg.env {
        a.push_strs(&["--setenv", k, v]);
    }
}

/// The control files, each from its descriptor (numbered from [`DATA_FD_BASE`] in
/// order) with its mode: those at [`CTL`] on a tmpfs of their own, the others in the
/// system tree (`/etc/passwd` over the host's) or a layered directory.
fn control_mounts(a: &mut Vec<OsString>, at: &Places<'_>) {
    // A mount of its own, so it can be made read-only once filled.
    a.push_strs(&["--perms", "0755", "--tmpfs", CTL]);
    for (i, (inside, mode)) in at.data.iter().enumerate() {
        let fd = (DATA_FD_BASE + i as i32).to_string();
        a.push_strs(&["--perms", mode, "--ro-bind-data", &fd, inside]);
    }
}

/// Last, everything but the sized mounts made read-only: the control files' mount,
/// the layered directories (where deskgym's files joined the host's), `/dev` and `/`.
fn seal(a: &mut Vec<OsString>, host: &HostView) {
    // Nothing can be added beside the control files either, nor anywhere but the sized
    // mounts.
    a.push_strs(&["--remount-ro", CTL]);
    for l in &host.layered {
        a.extend(["--remount-ro".into(), path(&l.dir)]);
    }
    a.push_strs(&["--remount-ro", "/dev", "--remount-ro", "/"]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{SandboxLimits, SystemFile};

    /// The whole policy for a fixed config and host, one argument group a line: a change
    /// to what a sandbox sees shows up here, in review.
    #[test]
    fn the_policy_snapshot() {
        let cfg = SandboxConfig {
            env: vec![("LANG".into(), "C.UTF-8".into())],
            hide: vec![
                "/usr/share/secret".into(),
                "/usr/share/applications/token".into(),
            ],
            home_template: Some("/srv/homes/osworld".into()),
            shares: vec![("/srv/miniwob/html".into(), "/opt/wob".into())],
            limits: SandboxLimits {
                disk_mb: 64,
                ..SandboxLimits::default()
            },
            system_files: vec![SystemFile {
                path: "/usr/share/applications/google-chrome.desktop".into(),
                mode: 0o644,
                content: "[Desktop Entry]\n".into(),
            }],
            ..SandboxConfig::default()
        };
        // A system file's directory: its host entries bound again (a link as a link,
        // a folder and files read-only), the file from its descriptor, then read-only;
        // a hidden path there is masked after it is bound again.
        let apps = |n: &str| PathBuf::from(format!("/usr/share/applications/{n}"));
        let host = HostView {
            system: vec![
                ("/bin".into(), Shown::Link("usr/bin".into())),
                ("/usr".into(), Shown::Bound),
            ],
            layered: vec![
                Layered {
                    dir: "/etc/chromium.d".into(),
                    entries: vec![("/etc/chromium.d/default-flags".into(), Shown::Bound)],
                },
                Layered {
                    dir: "/usr/share/applications".into(),
                    entries: vec![
                        (apps("chromium.desktop"), Shown::Bound),
                        (apps("screensavers"), Shown::Bound),
                        (apps("token"), Shown::Bound),
                        (apps("www.desktop"), Shown::Link("chromium.desktop".into())),
                    ],
                },
            ],
            hidden: vec![("/usr/share/secret".into(), true), (apps("token"), false)],
        };
        let data = [
            ("/run/deskgym/session.json", "0644"),
            ("/etc/passwd", "0644"),
            ("/etc/chromium.d/zz-deskgym", "0644"),
            ("/usr/share/applications/google-chrome.desktop", "0644"),
        ];
        let at = Places {
            x_socket: "/tmp/.X11-unix/X7",
            agent: Path::new("/srv/agent"),
            data: &data,
            display_ipc: false,
        };
        let args: Vec<String> = bwrap_args(&cfg, &host, &at)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        let text = args.join(" ").replace(" --", "\n--");
        assert_eq!(
            text,
            SNAPSHOT.trim(),
            "the sandbox policy changed; if on purpose, update SNAPSHOT"
        );
        // Started in its display's IPC namespace, the sandbox makes none of its own;
        // nothing else differs.
        let shared: Vec<String> = bwrap_args(
            &cfg,
            &host,
            &Places {
                display_ipc: true,
                ..at
            },
        )
        .into_iter()
        .map(|a| a.into_string().unwrap())
        .collect();
        let own: Vec<&String> = args.iter().filter(|a| *a != "--unshare-ipc").collect();
        assert_eq!(shared.iter().collect::<Vec<_>>(), own);
        assert_eq!(args.len(), shared.len() + 1);
    }

    const SNAPSHOT: &str = "
--unshare-user
--uid 1000
--gid 1000
--unshare-pid
--unshare-ipc
--unshare-uts
--unshare-cgroup-try
--disable-userns
--hostname deskgym
--die-with-parent
--new-session
--unshare-net
--symlink usr/bin /bin
--ro-bind /usr /usr
--ro-bind /sys /sys
--tmpfs /sys/fs/cgroup
--remount-ro /sys/fs/cgroup
--dev /dev
--proc /proc
--perms 1777
--size 67108864
--tmpfs /dev/shm
--size 67108864
--tmpfs /run
--perms 1777
--size 67108864
--tmpfs /var/tmp
--dir /root
--tmpfs /etc/chromium.d
--ro-bind /etc/chromium.d/default-flags /etc/chromium.d/default-flags
--tmpfs /usr/share/applications
--ro-bind /usr/share/applications/chromium.desktop /usr/share/applications/chromium.desktop
--ro-bind /usr/share/applications/screensavers /usr/share/applications/screensavers
--ro-bind /usr/share/applications/token /usr/share/applications/token
--symlink chromium.desktop /usr/share/applications/www.desktop
--tmpfs /usr/share/secret
--ro-bind /dev/null /usr/share/applications/token
--ro-bind /srv/miniwob/html /opt/wob
--ro-bind /srv/homes/osworld /run/deskgym-template
--perms 0700
--size 67108864
--tmpfs /home/user
--perms 1777
--size 67108864
--tmpfs /tmp
--dir /tmp/.X11-unix
--bind /tmp/.X11-unix/X7 /tmp/.X11-unix/X0
--ro-bind /srv/agent /run/deskgym-agent
--dir /run/user/1000
--chmod 0700 /run/user/1000
--chdir /home/user
--setenv HOME /home/user
--setenv USER user
--setenv LOGNAME user
--setenv SHELL /bin/bash
--setenv DISPLAY :0
--setenv XAUTHORITY /run/deskgym/Xauthority
--setenv XDG_RUNTIME_DIR /run/user/1000
--setenv PATH /run/deskgym/bin:/home/user/.local/bin:/usr/local/bin:/usr/bin:/bin
--setenv LANG C.UTF-8
--perms 0755
--tmpfs /run/deskgym
--perms 0644
--ro-bind-data 10 /run/deskgym/session.json
--perms 0644
--ro-bind-data 11 /etc/passwd
--perms 0644
--ro-bind-data 12 /etc/chromium.d/zz-deskgym
--perms 0644
--ro-bind-data 13 /usr/share/applications/google-chrome.desktop
--remount-ro /run/deskgym
--remount-ro /etc/chromium.d
--remount-ro /usr/share/applications
--remount-ro /dev
--remount-ro /
";
}
