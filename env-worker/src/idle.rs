//! Whether a sandbox's programs are still working: the CPU time of a process tree,
//! read from `/proc`, and a wait until it stops growing. A replay gives the apps the
//! idle time the original's agent gave them (decision 203): an app still starting (a
//! presentation laying out its first slide) takes the same click differently from one
//! that is idle, and its pixels may already be final.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often the tree's CPU time is read while waiting.
const POLL: Duration = Duration::from_millis(20);

/// How long the tree must stay under [`BUSY_TICKS`] to count as idle.
pub(crate) const QUIET: Duration = Duration::from_millis(100);

/// CPU ticks (usually 10 ms each) a tree may use in [`QUIET`] and still be idle: a
/// caret's blink or a clock's redraw is not work an action waits for.
const BUSY_TICKS: u64 = 1;

/// Every `RESCAN`th poll reads the whole process table again (new processes join the
/// tree then); the others read only the tree's own `stat` files.
const RESCAN: u32 = 10;

/// The processes at or below `root` and the CPU ticks they have used, their reaped
/// children's included (so a child's exit does not make the sum go back), from one
/// pass over `/proc`. `None` when `root` is gone or `/proc` cannot be read.
fn tree(root: u32) -> Option<(Vec<u32>, u64)> {
    // pid -> (parent, ticks): one pass over /proc, then the tree below `root`.
    let mut procs: HashMap<u32, (u32, u64)> = HashMap::new();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(p) = read_stat(pid) {
            procs.insert(pid, p);
        }
    }
    procs.get(&root)?;
    let (mut pids, mut total) = (Vec::new(), 0);
    for (&pid, &(_, ticks)) in &procs {
        let mut at = pid;
        // Bounded: a parent chain is at most as long as the table.
        for _ in 0..procs.len() {
            if at == root {
                pids.push(pid);
                total += ticks;
                break;
            }
            match procs.get(&at) {
                Some(&(parent, _)) if parent != 0 && parent != at => at = parent,
                _ => break,
            }
        }
    }
    Some((pids, total))
}

/// The ticks of `pids` that are still there (a reaped one's are in its parent's).
fn ticks_of(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|&p| read_stat(p))
        .map(|(_, t)| t)
        .sum()
}

/// A process's parent and its CPU ticks with its reaped children's (`/proc/<pid>/stat`
/// fields 4, 14-17; the name in field 2 may hold spaces and parentheses, so the fields
/// are counted after its last `)`).
fn read_stat(pid: u32) -> Option<(u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&s)
}

fn parse_stat(s: &str) -> Option<(u32, u64)> {
    let rest = &s[s.rfind(')')? + 1..];
    // After the name: state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ppid = f.get(1)?.parse().ok()?;
    let ticks = f.get(11..15)?.iter().try_fold(0u64, |sum, v| {
        v.parse::<i64>().ok().map(|t| sum + t.max(0) as u64)
    })?;
    Some((ppid, ticks))
}

/// Waits until the tree at `root` has used at most [`BUSY_TICKS`] in [`QUIET`], for at
/// most `bound`. True when it went idle; false at the bound or when it cannot be read.
pub(crate) fn wait_idle(root: u32, bound: Duration) -> bool {
    let start = Instant::now();
    let Some((mut pids, mut base)) = tree(root) else {
        return false;
    };
    let (mut since, mut poll) = (Instant::now(), 0u32);
    loop {
        std::thread::sleep(POLL);
        poll = poll.wrapping_add(1);
        let now = if poll % RESCAN == 0 {
            let Some((all, ticks)) = tree(root) else {
                return false;
            };
            pids = all;
            ticks
        } else {
            ticks_of(&pids)
        };
        // A sum that went back (a process gone between two full reads) starts a new
        // window from it; one that grew by more than a tick or so is work.
        if now < base || now - base > BUSY_TICKS {
            (base, since) = (now, Instant::now());
        } else if since.elapsed() >= QUIET {
            return true;
        }
        if start.elapsed() >= bound {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 30 7 3 20 0 1 0";
        assert_eq!(parse_stat(line), Some((17, 290)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn a_busy_child_keeps_the_tree_busy_and_a_sleeping_one_does_not() {
        let ticks = |pid| tree(pid).map(|(_, t)| t);
        let own = std::process::id();
        assert!(tree(own).is_some_and(|(pids, _)| pids.contains(&own)));
        assert_eq!(ticks(u32::MAX), None, "no such process");
        let mut busy = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let pid = busy.id();
        let t0 = ticks(pid).unwrap();
        assert!(
            !wait_idle(pid, Duration::from_millis(400)),
            "a spinning shell is not idle"
        );
        assert!(ticks(pid).unwrap() > t0, "its ticks grew");
        busy.kill().unwrap();
        busy.wait().unwrap();
        let mut idle = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        assert!(
            wait_idle(idle.id(), Duration::from_secs(30)),
            "a sleeping process is idle"
        );
        idle.kill().unwrap();
        idle.wait().unwrap();
    }
}
