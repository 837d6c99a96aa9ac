//! What a sandbox may see and do, as bubblewrap's arguments: a pure function of the
//! sandbox's config and a reading of the host ([`HostView`]), so the whole policy can be
//! read in one place and pinned by a snapshot test.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{
    CTL, DATA_FD_BASE, HOSTNAME, RUN_SIZE, SYSTEM, SYSTEM_VAR, SandboxConfig, TEMPLATE, XAUTHORITY,
};

/// How a system path shows on the host.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Shown {
    /// A symlink (recreated as one inside).
    Link(PathBuf),
    /// A directory (bound read-only).
    Dir,
}

/// The host facts the policy depends on, read once per sandbox.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct HostView {
    /// The system paths that exist, and how.
    pub(crate) system: Vec<(PathBuf, Shown)>,
    /// `/etc/chromium.d`'s files, when the directory exists.
    pub(crate) chromium_d: Option<Vec<PathBuf>>,
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
                Err(_) if path.is_dir() => system.push((path.to_path_buf(), Shown::Dir)),
                Err(_) => {}
            }
        }
        let dir = Path::new("/etc/chromium.d");
        let chromium_d = if dir.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.path())
                .collect();
            files.sort();
            Some(files)
        } else {
            None
        };
        let shown = |p: &Path| SYSTEM.iter().chain(SYSTEM_VAR).any(|s| p.starts_with(s));
        let hidden = cfg
            .hide
            .iter()
            .filter(|h| shown(h) && h.exists())
            .map(|h| (h.clone(), h.is_dir()))
            .collect();
        Ok(Self {
            system,
            chromium_d,
            hidden,
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
}

/// bubblewrap's arguments for a sandbox, up to (not including) `--` and the agent's
/// command line: the namespaces, then the mounts from the system trees up to the control
/// files, the environment, and last the remounts that make everything else read-only
/// (bwrap applies them in order, so the order is part of the policy).
pub(crate) fn bwrap_args(cfg: &SandboxConfig, host: &HostView, at: &Places<'_>) -> Vec<OsString> {
    let disk = (cfg.limits.disk_mb.max(16) << 20).to_string();
    let mut a: Vec<OsString> = Vec::new();
    namespaces(&mut a);
    system_mounts(&mut a, host, &disk);
    masks(&mut a, host);
    host_binds(&mut a, cfg, host);
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
/// ones, its own pids, IPC, host name and network; its processes in a session of their
/// own (no terminal of the worker's to push input into), dying with the worker.
fn namespaces(a: &mut Vec<OsString>) {
    a.push_strs(&["--unshare-user", "--uid", "1000", "--gid", "1000"]);
    a.push_strs(&[
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]);
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
    for (p, how) in &host.system {
        match how {
            Shown::Link(target) => a.extend(["--symlink".into(), path(target), path(p)]),
            Shown::Dir => a.extend(["--ro-bind".into(), path(p), path(p)]),
        }
    }
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

/// What else of the host shows, read-only: `/etc/chromium.d`'s files (on a tmpfs, so
/// deskgym's own flags file can join them), the config's shares and its home template.
fn host_binds(a: &mut Vec<OsString>, cfg: &SandboxConfig, host: &HostView) {
    if let Some(files) = &host.chromium_d {
        // The host's files, and deskgym's beside them (a control file).
        a.extend(["--tmpfs".into(), "/etc/chromium.d".into()]);
        for f in files {
            a.extend(["--ro-bind".into(), path(f), path(f)]);
        }
    }
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
/// order) with its mode, on a tmpfs of their own at [`CTL`].
fn control_mounts(a: &mut Vec<OsString>, at: &Places<'_>) {
    // A mount of its own, so it can be made read-only once filled.
    a.push_strs(&["--perms", "0755", "--tmpfs", CTL]);
    for (i, (inside, mode)) in at.data.iter().enumerate() {
        let fd = (DATA_FD_BASE + i as i32).to_string();
        a.push_strs(&["--perms", mode, "--ro-bind-data", &fd, inside]);
    }
}

/// Last, everything but the sized mounts made read-only: the control files' mount,
/// `/etc/chromium.d` (where deskgym's flags file joined the host's), `/dev` and `/`.
fn seal(a: &mut Vec<OsString>, host: &HostView) {
    // Nothing can be added beside the control files either, nor anywhere but the sized
    // mounts.
    a.push_strs(&["--remount-ro", CTL]);
    if host.chromium_d.is_some() {
        a.push_strs(&["--remount-ro", "/etc/chromium.d"]);
    }
    a.push_strs(&["--remount-ro", "/dev", "--remount-ro", "/"]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::SandboxLimits;

    /// The whole policy for a fixed config and host, one argument group a line: a change
    /// to what a sandbox sees shows up here, in review.
    #[test]
    fn the_policy_snapshot() {
        let cfg = SandboxConfig {
            env: vec![("LANG".into(), "C.UTF-8".into())],
            hide: vec!["/usr/share/secret".into()],
            home_template: Some("/srv/homes/osworld".into()),
            shares: vec![("/srv/miniwob/html".into(), "/opt/wob".into())],
            limits: SandboxLimits {
                disk_mb: 64,
                ..SandboxLimits::default()
            },
            ..SandboxConfig::default()
        };
        let host = HostView {
            system: vec![
                ("/bin".into(), Shown::Link("usr/bin".into())),
                ("/usr".into(), Shown::Dir),
            ],
            chromium_d: Some(vec!["/etc/chromium.d/default-flags".into()]),
            hidden: vec![("/usr/share/secret".into(), true)],
        };
        let data = [
            ("/run/deskgym/session.json", "0644"),
            ("/etc/passwd", "0644"),
        ];
        let at = Places {
            x_socket: "/tmp/.X11-unix/X7",
            agent: Path::new("/srv/agent"),
            data: &data,
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
--tmpfs /usr/share/secret
--tmpfs /etc/chromium.d
--ro-bind /etc/chromium.d/default-flags /etc/chromium.d/default-flags
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
--remount-ro /run/deskgym
--remount-ro /etc/chromium.d
--remount-ro /dev
--remount-ro /
";
}
