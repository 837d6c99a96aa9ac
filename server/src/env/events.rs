//! An env's event log as it happens: each event goes, in one order, to the pool's
//! recording (the `events` table) and to the env's live watchers (`WatchEvents`), so
//! what a watcher sees is what the recording holds. Built only when one of them wants it.
//!
//! Watchers share one bounded ring ([`WATCH_QUEUE`] events, tokio's `broadcast`): the
//! env never waits for a watcher; one that falls behind loses the oldest events and is
//! told how many.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::*;

/// Events a watcher may be behind before it loses some.
pub(crate) const WATCH_QUEUE: usize = 1024;

/// One event as the env produced it (the wire's `EnvEvent` less `lost`).
#[derive(Debug)]
pub(crate) struct EnvEvent {
    /// The env's event number (from 1, counting every event, watched or not).
    pub(crate) seq: u64,
    /// Unix ms when it was produced.
    pub(crate) time_ms: i64,
    /// What happened.
    pub(crate) kind: String,
    /// The env.
    pub(crate) env_id: String,
    /// The details as JSON text: the recording's `events.payload`.
    pub(crate) payload: String,
}

/// The env's side of the log: the event counter, and the watchers' ring once one came.
#[derive(Debug, Default)]
pub(crate) struct Events {
    /// Held while an event is numbered and sent both ways, so the recording and every
    /// watcher see one env's events in one order.
    bus: Mutex<Bus>,
}

#[derive(Debug, Default)]
struct Bus {
    /// Events produced so far.
    seq: u64,
    /// The watchers' ring: made by the first watcher, dropped when the env closes
    /// (which ends every watcher's stream).
    tx: Option<broadcast::Sender<Arc<EnvEvent>>>,
    /// The env closed: no watcher may join.
    closed: bool,
}

impl Events {
    /// A receiver of the events from now on; `None` once the env closed.
    pub(crate) fn subscribe(&self) -> Option<broadcast::Receiver<Arc<EnvEvent>>> {
        let mut bus = lock(&self.bus);
        if bus.closed {
            return None;
        }
        Some(
            bus.tx
                .get_or_insert_with(|| broadcast::channel(WATCH_QUEUE).0)
                .subscribe(),
        )
    }
}

impl Env {
    /// Produces an event of this env: numbered, recorded when the pool records, sent to
    /// its watchers. `payload` is built only when one of them takes it.
    pub(crate) fn event(&self, kind: &str, payload: impl FnOnce() -> serde_json::Value) {
        let mut bus = lock(&self.events.bus);
        bus.seq += 1;
        let watched = bus.tx.as_ref().is_some_and(|t| t.receiver_count() > 0);
        let recording = self.pool.recording_path.is_some();
        if !watched && !recording {
            return;
        }
        let payload = payload();
        if watched && let Some(tx) = &bus.tx {
            // A send fails only when every watcher left meanwhile: nothing to do.
            let _ = tx.send(Arc::new(EnvEvent {
                seq: bus.seq,
                time_ms: deskgym_datasets::unix_ms(),
                kind: kind.to_string(),
                env_id: self.id.clone(),
                payload: payload.to_string(),
            }));
        }
        self.pool.record(|| record::event(kind, &self.id, payload));
    }

    /// The env is closing: says so (`env_closed`) and ends its watchers' streams.
    pub(crate) fn close_events(&self) {
        self.event(
            "env_closed",
            || serde_json::json!({"pool_id": self.pool.id}),
        );
        let mut bus = lock(&self.events.bus);
        bus.closed = true;
        bus.tx = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_watcher_is_told_what_it_lost_and_the_env_never_waits() {
        let e = Events::default();
        let mut rx = e.subscribe().unwrap();
        let tx = lock(&e.bus).tx.clone().unwrap();
        for seq in 1..=(WATCH_QUEUE as u64 + 5) {
            tx.send(Arc::new(EnvEvent {
                seq,
                time_ms: 0,
                kind: "ack".into(),
                env_id: "e".into(),
                payload: "{}".into(),
            }))
            .unwrap();
        }
        assert!(matches!(
            rx.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(5))
        ));
        assert_eq!(rx.try_recv().unwrap().seq, 6);
        drop(tx);
        lock(&e.bus).tx = None;
        lock(&e.bus).closed = true;
        assert!(e.subscribe().is_none(), "a closed env takes no watcher");
    }
}
