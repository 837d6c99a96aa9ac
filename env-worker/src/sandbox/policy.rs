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
/// command line.
pub(crate) fn bwrap_args(cfg: &SandboxConfig, host: &HostView, at: &Places<'_>) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |xs: &[&str]| a.extend(xs.iter().map(OsString::from));
    let disk = (cfg.limits.disk_mb.max(16) << 20).to_string();
    push(&["--unshare-user", "--uid", "1000", "--gid", "1000"]);
    push(&[
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]);
    // No user namespaces inside: their kernel surface is the tenant's way out.
    push(&[
        "--disable-userns",
        "--hostname",
        HOSTNAME,
        "--die-with-parent",
        "--new-session",
    ]);
    // Always a network namespace of its own: granted the network, pasta attaches to it.
    push(&["--unshare-net"]);
    let mut out = a;
    let path = |p: &Path| OsString::from(p.as_os_str());
    for (p, how) in &host.system {
        match how {
            Shown::Link(target) => out.extend(["--symlink".into(), path(target), path(p)]),
            Shown::Dir => out.extend(["--ro-bind".into(), path(p), path(p)]),
        }
    }
    let mut push = |xs: &[&str]| out.extend(xs.iter().map(OsString::from));
    // Every writable mount is a tmpfs with a size (else half the host's memory each);
    // the rest is made read-only at the end.
    push(&[
        "--ro-bind",
        "/sys",
        "/sys",
        "--tmpfs",
        "/sys/fs/cgroup",
        "--remount-ro",
        "/sys/fs/cgroup",
    ]);
    push(&["--dev", "/dev", "--proc", "/proc"]);
    push(&["--perms", "1777", "--size", &disk, "--tmpfs", "/dev/shm"]);
    push(&["--size", RUN_SIZE, "--tmpfs", "/run"]);
    push(&["--perms", "1777", "--size", &disk, "--tmpfs", "/var/tmp"]);
    push(&["--dir", "/root"]);
    for (h, dir) in &host.hidden {
        if *dir {
            out.extend(["--tmpfs".into(), path(h)]);
        } else {
            out.extend(["--ro-bind".into(), "/dev/null".into(), path(h)]);
        }
    }
    if let Some(files) = &host.chromium_d {
        // The host's files, and deskgym's beside them (a control file).
        out.extend(["--tmpfs".into(), "/etc/chromium.d".into()]);
        for f in files {
            out.extend(["--ro-bind".into(), path(f), path(f)]);
        }
    }
    for (host_dir, inside) in &cfg.shares {
        out.extend(["--ro-bind".into(), path(host_dir), inside.into()]);
    }
    if let Some(t) = &cfg.home_template {
        out.extend(["--ro-bind".into(), path(t), TEMPLATE.into()]);
    }
    let mut push = |xs: &[&str]| out.extend(xs.iter().map(OsString::from));
    push(&["--perms", "0700", "--size", &disk, "--tmpfs", "/home/user"]);
    push(&["--perms", "1777", "--size", &disk, "--tmpfs", "/tmp"]);
    push(&[
        "--dir",
        "/tmp/.X11-unix",
        "--bind",
        at.x_socket,
        "/tmp/.X11-unix/X0",
    ]);
    out.extend([
        "--ro-bind".into(),
        path(at.agent),
        "/run/deskgym-agent".into(),
    ]);
    let mut push = |xs: &[&str]| out.extend(xs.iter().map(OsString::from));
    push(&[
        "--dir",
        "/run/user/1000",
        "--chmod",
        "0700",
        "/run/user/1000",
        "--chdir",
        "/home/user",
    ]);
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
        push(&["--setenv", k, v]);
    }
    for (k, v) in &cfg.env {
        push(&["--setenv", k, v]);
    }
    // A mount of its own, so it can be made read-only once filled.
    push(&["--perms", "0755", "--tmpfs", CTL]);
    for (i, (inside, mode)) in at.data.iter().enumerate() {
        let fd = (DATA_FD_BASE + i as i32).to_string();
        push(&["--perms", mode, "--ro-bind-data", &fd, inside]);
    }
    // Nothing can be added beside the control files either, nor anywhere but the sized
    // mounts.
    push(&["--remount-ro", CTL]);
    if host.chromium_d.is_some() {
        push(&["--remount-ro", "/etc/chromium.d"]);
    }
    push(&["--remount-ro", "/dev", "--remount-ro", "/"]);
    out
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
