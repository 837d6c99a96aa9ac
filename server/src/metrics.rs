//! Prometheus metrics: counters kept in atomics on the hot path (no lock, no allocation
//! per step), rendered in the text exposition format when scraped (the endpoint that
//! serves them is [`crate::metrics_http`]).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// Upper bounds of the step latency buckets, in milliseconds.
const BUCKETS_MS: [f64; 12] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 5000.0,
];
/// The gRPC status codes by number (0..=16).
const CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// Process-wide counters.
pub(crate) struct Metrics {
    steps: AtomicU64,
    /// Cumulative counts per bucket (a step counts in its own bucket only; rendering
    /// sums them), then the +Inf bucket.
    buckets: [AtomicU64; BUCKETS_MS.len() + 1],
    /// Sum of step latencies in microseconds.
    latency_us: AtomicU64,
    resets: AtomicU64,
    errors: [AtomicU64; CODES.len()],
    /// Actions a rebuild's replay sent without a settle, in rebuilds that kept it.
    replay_unsettled: AtomicU64,
    /// Rebuilds replayed again, every action settled, after a fast replay differed.
    replays_settled_again: AtomicU64,
}

/// The counters of this process.
pub(crate) static METRICS: Metrics = Metrics {
    steps: AtomicU64::new(0),
    buckets: [const { AtomicU64::new(0) }; BUCKETS_MS.len() + 1],
    latency_us: AtomicU64::new(0),
    resets: AtomicU64::new(0),
    errors: [const { AtomicU64::new(0) }; CODES.len()],
    replay_unsettled: AtomicU64::new(0),
    replays_settled_again: AtomicU64::new(0),
};

impl Metrics {
    /// A step of `owner`'s env that completed, and how long the server spent on it.
    pub(crate) fn step(&self, owner: &Arc<str>, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let own = tally_of(owner);
        own.steps.fetch_add(1, Ordering::Relaxed);
        own.latency_us.fetch_add(us, Ordering::Relaxed);
        self.steps.fetch_add(1, Ordering::Relaxed);
        let ms = latency.as_secs_f64() * 1e3;
        let i = BUCKETS_MS
            .iter()
            .position(|b| ms <= *b)
            .unwrap_or(BUCKETS_MS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.latency_us.fetch_add(us, Ordering::Relaxed);
    }

    /// A reset of `owner`'s env that completed.
    pub(crate) fn reset(&self, owner: &Arc<str>) {
        tally_of(owner).resets.fetch_add(1, Ordering::Relaxed);
        self.resets.fetch_add(1, Ordering::Relaxed);
    }

    /// A rebuild's replay: actions sent without a settle (kept), or a fast replay
    /// that differed and was done again, settled (`again`).
    pub(crate) fn replay(&self, unsettled: usize, again: bool) {
        if again {
            self.replays_settled_again.fetch_add(1, Ordering::Relaxed);
        } else {
            self.replay_unsettled
                .fetch_add(unsettled as u64, Ordering::Relaxed);
        }
    }

    /// Steps, resets and error replies so far, and the steps' mean latency (ms).
    pub(crate) fn totals(&self) -> (u64, u64, u64, f64) {
        let steps = self.steps.load(Ordering::Relaxed);
        let us = self.latency_us.load(Ordering::Relaxed);
        let errors = self.errors.iter().map(|e| e.load(Ordering::Relaxed)).sum();
        let mean = if steps == 0 {
            0.0
        } else {
            us as f64 / steps as f64 / 1e3
        };
        (steps, self.resets.load(Ordering::Relaxed), errors, mean)
    }

    /// `owner`'s steps and resets so far, and its steps' mean latency (ms): what the
    /// console shows a principal of a server with tokens instead of the fleet's.
    pub(crate) fn totals_of(&self, owner: &Arc<str>) -> (u64, u64, f64) {
        let t = tally_of(owner);
        let steps = t.steps.load(Ordering::Relaxed);
        let us = t.latency_us.load(Ordering::Relaxed);
        let mean = if steps == 0 {
            0.0
        } else {
            us as f64 / steps as f64 / 1e3
        };
        (steps, t.resets.load(Ordering::Relaxed), mean)
    }

    /// A call answered with `code` (counted where errors become statuses).
    pub(crate) fn error(&self, code: tonic::Code) {
        if let Some(c) = self.errors.get(code as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One principal's counters (a handful of principals per server: a map under a
/// lock, read once per step, is cheap next to the step itself).
#[derive(Debug, Default)]
struct Tally {
    steps: AtomicU64,
    resets: AtomicU64,
    latency_us: AtomicU64,
}

/// Each principal's [`Tally`], made on its first step or reset.
static TALLIES: LazyLock<Mutex<HashMap<Arc<str>, Arc<Tally>>>> = LazyLock::new(Default::default);

fn tally_of(owner: &Arc<str>) -> Arc<Tally> {
    let mut t = TALLIES.lock().unwrap_or_else(|p| p.into_inner());
    t.entry(owner.clone()).or_default().clone()
}

/// What a scrape shows besides the counters, read when it happens.
pub(crate) struct Gauges {
    pub envs: u32,
    pub max_envs: u32,
    pub pools: usize,
    pub recordings: usize,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_bytes: u64,
    pub encoder: Option<String>,
}

/// One metric family: its HELP and TYPE lines, then its samples.
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{samples}");
}

/// The text exposition of the counters and `g`.
pub(crate) fn render(m: &Metrics, g: &Gauges) -> String {
    let mut out = String::with_capacity(4096);
    let n = |v: &AtomicU64| v.load(Ordering::Relaxed);
    for (name, kind, help, value) in [
        (
            "deskgym_envs",
            "gauge",
            "Desktops alive or being started.",
            u64::from(g.envs),
        ),
        (
            "deskgym_envs_max",
            "gauge",
            "The server's max_envs.",
            u64::from(g.max_envs),
        ),
        ("deskgym_pools", "gauge", "Pools open.", g.pools as u64),
        (
            "deskgym_recordings",
            "gauge",
            "Recordings being written.",
            g.recordings as u64,
        ),
        (
            "deskgym_steps_total",
            "counter",
            "Steps completed.",
            n(&m.steps),
        ),
        (
            "deskgym_resets_total",
            "counter",
            "Resets completed.",
            n(&m.resets),
        ),
        (
            "deskgym_replay_unsettled_actions_total",
            "counter",
            "Keys a rebuild (Restore, Fork) replayed without waiting for the screen.",
            n(&m.replay_unsettled),
        ),
        (
            "deskgym_replays_settled_again_total",
            "counter",
            "Rebuilds replayed again, every action settled, after the fast replay differed.",
            n(&m.replays_settled_again),
        ),
        (
            "deskgym_frame_cache_hits_total",
            "counter",
            "Frames found in the fleet frame cache.",
            g.cache_hits,
        ),
        (
            "deskgym_frame_cache_misses_total",
            "counter",
            "Frames not in the fleet frame cache.",
            g.cache_misses,
        ),
        (
            "deskgym_frame_cache_bytes",
            "gauge",
            "Bytes held by the frame cache.",
            g.cache_bytes,
        ),
    ] {
        family(&mut out, name, kind, help, &format!("{name} {value}"));
    }
    let mut hist = String::new();
    let mut cumulative = 0u64;
    for (i, le) in BUCKETS_MS
        .iter()
        .map(|b| (b / 1e3).to_string())
        .chain(["+Inf".to_string()])
        .enumerate()
    {
        cumulative += n(&m.buckets[i]);
        let _ = writeln!(
            hist,
            "deskgym_step_latency_seconds_bucket{{le=\"{le}\"}} {cumulative}"
        );
    }
    let _ = write!(
        hist,
        "deskgym_step_latency_seconds_sum {}\ndeskgym_step_latency_seconds_count {cumulative}",
        n(&m.latency_us) as f64 / 1e6
    );
    family(
        &mut out,
        "deskgym_step_latency_seconds",
        "histogram",
        "Server time of a step (action, settle, capture, encode).",
        &hist,
    );
    let errors: Vec<String> = CODES
        .iter()
        .zip(&m.errors)
        .skip(1)
        .map(|(code, c)| format!("deskgym_errors_total{{code=\"{code}\"}} {}", n(c)))
        .collect();
    family(
        &mut out,
        "deskgym_errors_total",
        "counter",
        "Calls answered with an error, by gRPC code.",
        &errors.join("\n"),
    );
    if let Some(e) = &g.encoder {
        family(
            &mut out,
            "deskgym_encoder_info",
            "gauge",
            "The H.264 encoder recordings use.",
            &format!("deskgym_encoder_info{{encoder=\"{e}\"}} 1"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_has_every_metric_with_cumulative_buckets() {
        let m = Metrics {
            steps: AtomicU64::new(0),
            buckets: [const { AtomicU64::new(0) }; BUCKETS_MS.len() + 1],
            latency_us: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            replay_unsettled: AtomicU64::new(0),
            replays_settled_again: AtomicU64::new(0),
            errors: [const { AtomicU64::new(0) }; CODES.len()],
        };
        m.step(&std::sync::Arc::from("t"), Duration::from_micros(700));
        m.step(&std::sync::Arc::from("t"), Duration::from_millis(3));
        m.step(&std::sync::Arc::from("t"), Duration::from_secs(9));
        m.error(tonic::Code::Unavailable);
        m.replay(12, false);
        m.replay(30, true);
        let g = Gauges {
            envs: 3,
            max_envs: 64,
            pools: 1,
            recordings: 0,
            cache_hits: 5,
            cache_misses: 2,
            cache_bytes: 100,
            encoder: Some("x264enc".into()),
        };
        let text = render(&m, &g);
        for line in [
            "deskgym_envs 3",
            "deskgym_steps_total 3",
            "deskgym_step_latency_seconds_bucket{le=\"0.0005\"} 0",
            "deskgym_step_latency_seconds_bucket{le=\"0.001\"} 1",
            "deskgym_step_latency_seconds_bucket{le=\"0.005\"} 2",
            "deskgym_step_latency_seconds_bucket{le=\"5\"} 2",
            "deskgym_step_latency_seconds_bucket{le=\"+Inf\"} 3",
            "deskgym_step_latency_seconds_count 3",
            "deskgym_errors_total{code=\"UNAVAILABLE\"} 1",
            "deskgym_errors_total{code=\"NOT_FOUND\"} 0",
            "deskgym_encoder_info{encoder=\"x264enc\"} 1",
            "deskgym_replay_unsettled_actions_total 12",
            "deskgym_replays_settled_again_total 1",
            "# TYPE deskgym_step_latency_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
