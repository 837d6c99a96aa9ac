//! A desktop clock the server sets: the sandbox's programs read the host's time plus
//! offsets the worker writes, through a preload of ours (decision 201, which replaced
//! libfaketime in decision 199's design).
//!
//! Every program of a sandbox whose profile asks for it runs with
//! `libdeskgym-clock.so` preloaded (`env-worker/clock/deskgym_clock.c`, built by
//! `build.rs` and carried inside this crate). It maps a 32-byte file of ours, shown
//! read-only in the sandbox ([`INSIDE`]), that holds two offsets in nanoseconds, one
//! for the wall clocks (`CLOCK_REALTIME`, `gettimeofday`, `time`) and one for the
//! clocks counting from boot (`CLOCK_MONOTONIC`, `CLOCK_BOOTTIME`), and a hold: the
//! host's monotonic instant at which every desktop clock stops until it moves. The
//! worker maps the same file and writes it under a sequence count, so every process
//! and thread of the desktop (Chromium's many) reads the same clock the moment it
//! changes, with no lock and no file read (libfaketime's per-call file read hung
//! Chromium's start 6 times in 25). Waits with an absolute deadline get the deadline
//! back in the host's time.
//!
//! A replay uses it to show apps the original's clock at every action: the wall clock
//! is set back to the original's time when the replica's session starts, both are
//! moved forward to the time the original recorded before each action
//! ([`crate::Seen::clock_ms`]), and held at the time of the next one until it goes
//! (decision 211): between two actions the apps see at most the time the original's
//! apps saw, however long the replay waits. The clocks a program reads only ever move
//! forward (one that runs across a reset never sees the boot clocks go back); the
//! wall clock never moves back while the apps of an episode run.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::Result;

/// The preload, as `build.rs` compiled it for this host.
const SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libdeskgym-clock.so"));
/// The preload's file name in the clock's directory.
const SHIM_FILE: &str = "libdeskgym-clock.so";
/// Where the clock's directory shows inside the sandbox.
pub(crate) const INSIDE: &str = "/run/deskgym-clock";
/// The offsets file's name in that directory: four native-endian 64-bit words, as
/// `struct offsets` in the preload reads them: the sequence count, the wall and boot
/// offsets (ns), the hold (the host's `CLOCK_MONOTONIC` ns; 0: none).
const FILE: &str = "offsets";
/// Its size.
const FILE_LEN: usize = 32;
/// The words' places in it.
const SEQ: usize = 0;
const WALL: usize = 1;
const BOOT: usize = 2;
const HOLD: usize = 3;

/// The environment a sandbox's programs get for the clock (added to the profile's).
pub(crate) fn env() -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), format!("{INSIDE}/{SHIM_FILE}")),
        ("DESKGYM_CLOCK_FILE".into(), format!("{INSIDE}/{FILE}")),
    ]
}

/// The host's time, in nanoseconds since the Unix epoch.
fn host_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The host's `CLOCK_MONOTONIC`, in nanoseconds (what the preload's hold is in).
fn host_mono_ns() -> i64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

/// The offsets file, mapped shared: what the worker stores there, every program of the
/// desktop reads at its next clock read.
struct Offsets {
    ptr: *mut libc::c_void,
}

// SAFETY: the mapping is only touched through atomics.
unsafe impl Send for Offsets {}
// SAFETY: as above.
unsafe impl Sync for Offsets {}

impl Offsets {
    fn map(path: &Path) -> Result<Self> {
        let f = std::fs::File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        f.set_len(FILE_LEN as u64)?;
        // SAFETY: a new shared mapping of a file we hold open, FILE_LEN bytes long;
        // the descriptor may close after mmap.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FILE_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(Self { ptr })
    }

    /// The word at `i` ([`SEQ`], [`WALL`], [`BOOT`], [`HOLD`]).
    fn slot(&self, i: usize) -> &AtomicI64 {
        // SAFETY: the mapping is FILE_LEN bytes, page-aligned, and lives as long as
        // self; i < 4 keeps the 8-byte slot inside it and aligned.
        unsafe { &*self.ptr.cast::<AtomicI64>().add(i.min(HOLD)) }
    }

    /// Stores the offsets and the hold as one version: the preload retries a read that
    /// overlapped (the count is odd while this writes), so a program never sees an
    /// offset of one version with the hold of another.
    fn write(&self, wall_ns: i64, boot_ns: i64, hold_ns: i64) {
        let seq = self.slot(SEQ);
        seq.fetch_add(1, Ordering::AcqRel);
        std::sync::atomic::fence(Ordering::Release);
        self.slot(WALL).store(wall_ns, Ordering::Relaxed);
        self.slot(BOOT).store(boot_ns, Ordering::Relaxed);
        self.slot(HOLD).store(hold_ns, Ordering::Relaxed);
        seq.fetch_add(1, Ordering::Release);
    }
}

impl Drop for Offsets {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.ptr, FILE_LEN) };
    }
}

/// One desktop's clock: its host directory (the server's; the sandbox reads it) and
/// the record written there.
pub(crate) struct DesktopClock {
    dir: PathBuf,
    offsets: Offsets,
    /// The wall clocks' offset, ns.
    wall_ns: i64,
    /// The boot clocks' offset, ns.
    boot_ns: i64,
    /// The host's `CLOCK_MONOTONIC` ns at which the clocks stop (0: they run).
    hold_ns: i64,
    /// What the next session start sets the clock to (ms since the epoch; `None`: the
    /// host's time).
    start_at: Option<u64>,
}

impl std::fmt::Debug for DesktopClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DesktopClock")
            .field("dir", &self.dir)
            .field("wall_ns", &self.wall_ns)
            .field("hold_ns", &self.hold_ns)
            .finish_non_exhaustive()
    }
}

impl DesktopClock {
    /// Makes the directory `dir` (mode 0755: the sandbox's user reads it) with the
    /// preload and zero offsets.
    pub(crate) fn create(dir: &Path) -> Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        let shim = dir.join(SHIM_FILE);
        std::fs::write(&shim, SHIM)?;
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o644))?;
        let file = dir.join(FILE);
        let offsets = Offsets::map(&file)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            offsets,
            wall_ns: 0,
            boot_ns: 0,
            hold_ns: 0,
            start_at: None,
        })
    }

    /// The host directory (bound read-only at [`INSIDE`]).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long the clocks have stood still at the hold so far, ns.
    fn held_ns(&self) -> i64 {
        if self.hold_ns == 0 {
            return 0;
        }
        (host_mono_ns() - self.hold_ns).max(0)
    }

    /// What the desktop's programs read now on the wall clock, ns since the epoch.
    fn now_ns(&self) -> i64 {
        host_ns() + self.wall_ns - self.held_ns()
    }

    /// What the desktop's programs read now on the wall clock, in ms since the epoch.
    pub(crate) fn now_ms(&self) -> u64 {
        (self.now_ns() / 1_000_000).max(0) as u64
    }

    /// Folds the time held so far into the offsets and lets the clocks run from where
    /// they stand (not written: the caller writes the new version whole).
    fn run_on(&mut self) {
        let held = self.held_ns();
        self.wall_ns -= held;
        self.boot_ns -= held;
        self.hold_ns = 0;
    }

    fn flush(&self) {
        self.offsets.write(self.wall_ns, self.boot_ns, self.hold_ns);
    }

    /// The next session start sets the clock to read `at_ms` (`None`: the host's time).
    pub(crate) fn start_at(&mut self, at_ms: Option<u64>) {
        self.start_at = at_ms;
    }

    /// Sets the wall clock for an episode about to start, to the pending start (taken:
    /// one start only), else the host's time, and lets the clocks run. Its apps start
    /// after this; programs already running (a fresh session's window manager and
    /// buses, which a reset keeps) see the wall clock jump, never the boot clocks.
    pub(crate) fn on_start(&mut self) -> Result<()> {
        self.run_on();
        self.wall_ns = self
            .start_at
            .take()
            .map_or(0, |at| (at as i64).saturating_mul(1_000_000) - host_ns());
        self.flush();
        Ok(())
    }

    /// Moves the clocks forward so the wall clock reads `at_ms` now, and lets them run
    /// from there (a hold ends). False, and only the hold ends, when it already reads
    /// later (a clock apps run on never goes back).
    pub(crate) fn advance_to(&mut self, at_ms: u64) -> Result<bool> {
        self.run_on();
        let later = at_ms >= self.now_ms();
        if later {
            // Both families by the same amount: a program never sees the wall clock
            // move against the boot clocks.
            let forward = ((at_ms as i64).saturating_mul(1_000_000) - self.now_ns()).max(0);
            self.wall_ns += forward;
            self.boot_ns += forward;
        }
        self.flush();
        Ok(later)
    }

    /// Holds the clocks when the wall clock reaches `until_ms` (at once where it
    /// already reads later), until the next [`Self::advance_to`] or hold; `None` lets
    /// them run on from where they stand.
    pub(crate) fn hold_at(&mut self, until_ms: Option<u64>) {
        self.run_on();
        if let Some(until) = until_ms {
            let left = ((until as i64).saturating_mul(1_000_000) - self.now_ns()).max(0);
            // Never 0: that is "no hold".
            self.hold_ns = (host_mono_ns() + left).max(1);
        }
        self.flush();
    }
}

impl Drop for DesktopClock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the preload reads: the wall and boot offsets, in nanoseconds.
    fn read(dir: &Path) -> (i64, i64) {
        let b = std::fs::read(dir.join(FILE)).unwrap();
        assert_eq!(b.len(), FILE_LEN);
        let at = |i: usize| i64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!(at(SEQ) % 2, 0, "a write left half done");
        (at(WALL), at(BOOT))
    }

    /// A program under the preload (Python: `time.time` reads `clock_gettime`, and
    /// `Event.wait` a semaphore or condition variable with an absolute deadline on
    /// `CLOCK_MONOTONIC`) sees both offsets, and its timed wait lasts what it asked for.
    #[test]
    fn a_program_reads_the_offsets_and_its_timed_waits_last_what_they_asked() {
        let dir = std::env::temp_dir().join(format!("deskgym-clock-run-{}", std::process::id()));
        let mut c = DesktopClock::create(&dir).unwrap();
        let day_back = c.now_ms() - 86_400_000;
        c.start_at(Some(day_back));
        c.on_start().unwrap();
        // The boot clocks 100 s on: a deadline left on them would wait 100 s more.
        assert!(c.advance_to(day_back + 100_000).unwrap());
        let script = "import threading, time\n\
                      w, m = time.time(), time.monotonic()\n\
                      threading.Event().wait(0.3)\n\
                      print(w, time.monotonic() - m)";
        let started = std::time::Instant::now();
        let out = std::process::Command::new("python3")
            .args(["-c", script])
            .env("LD_PRELOAD", dir.join(SHIM_FILE))
            .env("DESKGYM_CLOCK_FILE", dir.join(FILE))
            .output()
            .expect("python3 runs");
        let took = started.elapsed();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let mut it = text.split_whitespace().map(|v| v.parse::<f64>().unwrap());
        let (wall_s, waited_s) = (it.next().unwrap(), it.next().unwrap());
        let want_s = (day_back + 100_000) as f64 / 1000.0;
        assert!(
            (wall_s - want_s).abs() < 30.0,
            "wall {wall_s}, want about {want_s}"
        );
        assert!(
            waited_s >= 0.3,
            "the wait ended early on its own clock: {waited_s}"
        );
        assert!(
            took < std::time::Duration::from_secs(60),
            "the wait's deadline was not given back in the host's time: {took:?}"
        );
        drop(c);
    }

    #[test]
    fn the_wall_clock_starts_where_asked_and_the_boot_clocks_only_move_forward() {
        let dir = std::env::temp_dir().join(format!("deskgym-clock-test-{}", std::process::id()));
        let mut c = DesktopClock::create(&dir).unwrap();
        assert_eq!(read(&dir), (0, 0));
        assert_eq!(std::fs::read(dir.join(SHIM_FILE)).unwrap(), SHIM);
        // A start an hour back: a negative wall offset; the boot clocks stay.
        let at = c.now_ms() - 3_600_000;
        c.start_at(Some(at));
        c.on_start().unwrap();
        let (wall, boot) = read(&dir);
        assert!(
            (-3_601_000_000_000..=-3_599_000_000_000).contains(&wall),
            "{wall}"
        );
        assert_eq!(boot, 0);
        assert!(c.now_ms().abs_diff(at) < 1000);
        // Forward: both move by the same amount; back: refused, nothing changes.
        assert!(c.advance_to(at + 10_000).unwrap());
        let (wall2, boot2) = read(&dir);
        assert_eq!(wall2 - wall, boot2 - boot);
        assert!(boot2 >= 9_000_000_000, "{boot2}");
        assert!(!c.advance_to(at).unwrap());
        assert_eq!(read(&dir), (wall2, boot2));
        assert!(c.now_ms() >= at + 10_000);
        // A new episode at the host's time: the wall offset back to 0, the boot
        // clocks where they were.
        c.on_start().unwrap();
        assert_eq!(read(&dir), (0, boot2));
        drop(c);
        assert!(!dir.exists());
    }

    /// A held clock stops where asked for a program under the preload (its sleeps and
    /// timed waits still end), and runs on from there, without a jump, once let go.
    #[test]
    fn a_held_clock_stops_at_the_hold_and_runs_on_from_it_without_a_jump() {
        use std::io::{BufRead, Write};
        let dir = std::env::temp_dir().join(format!("deskgym-clock-hold-{}", std::process::id()));
        let mut c = DesktopClock::create(&dir).unwrap();
        c.hold_at(Some(c.now_ms() + 200));
        // Readings of the boot and wall clocks: at once, after 0.6 s asleep and a
        // 0.3 s timed wait (an absolute deadline past the hold), then once told the
        // hold moved, and 0.3 s after that.
        let script = "import sys, threading, time\n\
                      r = lambda: print(time.monotonic(), time.time(), flush=True)\n\
                      r(); time.sleep(0.6); threading.Event().wait(0.3); r()\n\
                      sys.stdin.readline(); r(); time.sleep(0.3); r()";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .env("LD_PRELOAD", dir.join(SHIM_FILE))
            .env("DESKGYM_CLOCK_FILE", dir.join(FILE))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut reading = || -> (f64, f64) {
            let line = lines.next().unwrap().unwrap();
            let mut it = line.split_whitespace().map(|v| v.parse::<f64>().unwrap());
            (it.next().unwrap(), it.next().unwrap())
        };
        let started = std::time::Instant::now();
        let (m0, w0) = reading();
        let (m1, w1) = reading();
        assert!(started.elapsed() >= std::time::Duration::from_millis(850));
        assert!(
            m1 - m0 <= 0.21,
            "the boot clock ran past the hold: {}",
            m1 - m0
        );
        assert!(
            w1 - w0 <= 0.21,
            "the wall clock ran past the hold: {}",
            w1 - w0
        );
        // Let go, the clocks run on from the hold: by at most the host's time from
        // here to the reading (however loaded the host), never by the time held.
        let released = std::time::Instant::now();
        c.hold_at(None);
        writeln!(child.stdin.as_mut().unwrap()).unwrap();
        let (m2, w2) = reading();
        let ran = released.elapsed().as_secs_f64() + 0.001;
        let (m3, _) = reading();
        assert!(
            (0.0..ran).contains(&(m2 - m1)),
            "let go, the boot clock jumped by the time held: {} (host: {ran})",
            m2 - m1
        );
        assert!((0.0..ran).contains(&(w2 - w1)), "{} (host: {ran})", w2 - w1);
        assert!(m3 - m2 >= 0.29, "the clock runs again: {}", m3 - m2);
        assert!(child.wait().unwrap().success());
        // And forward: a hold ends where the clock is moved on.
        let now = c.now_ms();
        c.hold_at(Some(now));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(c.now_ms() - now < 10, "held");
        assert!(c.advance_to(now + 1_000).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(c.now_ms() >= now + 1_040, "runs from the new time");
        drop(c);
    }
}
