//! A sandbox's own network stack, when its pool is granted `network`: pasta (Debian's
//! `passt`) attached to the sandbox's network namespace, which until then holds only
//! `lo`. The sandbox gets an interface with outbound access through pasta's sockets on
//! the host, and keeps its own loopback: no two envs share a port, and nothing the host
//! serves on its loopback (the deskgym server itself) is reachable, since pasta runs
//! with `--no-map-gw` and no port forwarded either way.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{DesktopError, Result};

/// The sandbox's address, prefix and gateway. Not the host's own (pasta's default copies
/// the host's address, which would make the host's address the sandbox's own), so a
/// connection to the host's address leaves the sandbox like any other.
const ADDRESS: [&str; 6] = ["-a", "10.0.2.15", "-n", "24", "-g", "10.0.2.2"];
/// How long pasta may take to configure the interface and route.
const READY: Duration = Duration::from_secs(5);
/// `_IO(0xb7, 0x1)`: the user namespace that owns a namespace.
const NS_GET_USERNS: libc::c_ulong = 0xb701;
/// Where pasta finds the owning user namespace (an inherited descriptor).
const USERNS_FD: i32 = 3;

/// A running pasta; dropping it stops it.
#[derive(Debug)]
pub(crate) struct Network {
    child: Child,
}

impl Network {
    /// Attaches pasta to the network namespace of `pid` (a process in the sandbox),
    /// running as `host_uid` where the server runs as root (the sandbox's own uid, which
    /// owns its namespaces), and returns once the sandbox has a default route.
    pub(crate) fn attach(pid: i32, host_uid: Option<u32>) -> Result<Self> {
        let pasta = super::which("pasta").ok_or_else(|| {
            DesktopError::App(
                "the network grant needs pasta: install the Debian package passt \
                 (scripts/setup.sh --osworld)"
                    .into(),
            )
        })?;
        let net = std::fs::File::open(format!("/proc/{pid}/ns/net"))?;
        // bwrap nests a second user namespace for `--uid`; the network namespace belongs
        // to the outer one, which pasta must join to configure it.
        // SAFETY: an ioctl on a namespace descriptor we own; it returns a new descriptor.
        let owner = unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS) };
        if owner < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: a fresh descriptor no one else owns.
        let owner = unsafe { OwnedFd::from_raw_fd(owner) };
        let owner_raw = owner.as_raw_fd();
        let mut cmd = Command::new(pasta);
        cmd.env_clear()
            .args(["-f", "--quiet", "--config-net", "--no-map-gw"])
            // No port forwarded into the sandbox or out of it to the host's namespace.
            .args(["-t", "none", "-u", "none", "-T", "none", "-U", "none"])
            .args(ADDRESS)
            .arg("--userns")
            .arg(format!("/proc/self/fd/{USERNS_FD}"))
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: only async-signal-safe calls (dup2, then those of
        // `become_sandbox_user`) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(owner_raw, USERNS_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The sandbox's own uid, and never outliving the worker.
                super::become_sandbox_user(host_uid)
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| DesktopError::App(format!("cannot start pasta: {e}")))?;
        drop(owner);
        let mut me = Self { child };
        me.wait_route(pid)?;
        // Drained for its life: a full pipe would stall pasta, and a closed one kill it.
        if let Some(mut e) = me.child.stderr.take() {
            let _ = std::thread::Builder::new()
                .name("pasta-log".into())
                .spawn(move || std::io::copy(&mut e, &mut std::io::sink()));
        }
        Ok(me)
    }

    /// Waits until the sandbox's routing table has a default route (the last thing
    /// pasta's `--config-net` sets up).
    fn wait_route(&mut self, pid: i32) -> Result<()> {
        let deadline = Instant::now() + READY;
        loop {
            let routes = std::fs::read_to_string(format!("/proc/{pid}/net/route"))?;
            if has_default_route(&routes) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return Err(DesktopError::App(format!(
                    "pasta exited ({status}) before the sandbox had a network: {}",
                    err.trim()
                )));
            }
            if Instant::now() >= deadline {
                return Err(DesktopError::App(format!(
                    "pasta did not configure the sandbox's network within {} s",
                    READY.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// True when `/proc/<pid>/net/route` (one header line, then `Iface Destination ...`,
/// hexadecimal) holds a route to 0.0.0.0/0.
fn has_default_route(table: &str) -> bool {
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 7 && f[1] == "00000000" && f[7] == "00000000"
    })
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::has_default_route;

    #[test]
    fn a_default_route_is_found_and_only_it() {
        let header =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n";
        let link = "eth0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        let default = "eth0\t00000000\t0202000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n";
        assert!(!has_default_route(header));
        assert!(!has_default_route(&format!("{header}{link}")));
        assert!(has_default_route(&format!("{header}{link}{default}")));
    }
}
