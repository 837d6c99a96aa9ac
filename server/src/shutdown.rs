//! Shutdown by broadcast, then drain (mini-redis `src/shutdown.rs`): one signal every
//! long-lived task listens to, then each task awaited in the reverse of its start order,
//! within a bound. Aborting instead could cut a task half-way through a teardown (a
//! reap closing a pool between taking it from the map and finishing its recording).

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Resolves once `closing` turns true (or its sender is gone: nobody can signal then).
pub(crate) async fn signalled(closing: &mut watch::Receiver<bool>) {
    let _ = closing.wait_for(|c| *c).await;
}

/// The server's long-lived tasks, in start order, and the one signal that stops them.
#[derive(Debug)]
pub(crate) struct Tasks {
    closing: watch::Sender<bool>,
    started: Vec<(&'static str, JoinHandle<()>)>,
}

impl Tasks {
    /// No task yet; the signal not sent.
    pub(crate) fn new() -> Self {
        Self {
            closing: watch::Sender::new(false),
            started: Vec::new(),
        }
    }

    /// What a task or a stream watches to learn that the server shuts down.
    pub(crate) fn closing(&self) -> watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// A handle that sends the signal (from the gRPC server's own shutdown future).
    pub(crate) fn signal(&self) -> impl Fn() + Send + 'static {
        let closing = self.closing.clone();
        move || {
            closing.send_replace(true);
        }
    }

    /// Starts `name`, which must end soon after the signal it is handed turns true.
    pub(crate) fn spawn<F>(
        &mut self,
        name: &'static str,
        task: impl FnOnce(watch::Receiver<bool>) -> F,
    ) where
        F: Future<Output = ()> + Send + 'static,
    {
        let handle = tokio::spawn(task(self.closing()));
        self.started.push((name, handle));
    }

    /// Sends the signal (if not sent yet), then awaits each task, last started first.
    /// A task still running when `limit` has passed is aborted, and said so in the log.
    pub(crate) async fn drain(mut self, limit: Duration) {
        self.closing.send_replace(true);
        let deadline = tokio::time::Instant::now() + limit;
        while let Some((name, mut handle)) = self.started.pop() {
            match tokio::time::timeout_at(deadline, &mut handle).await {
                Ok(_) => tracing::info!(task = name, "stopped"),
                Err(_) => {
                    tracing::warn!(task = name, ?limit, "did not stop in time; aborted");
                    handle.abort();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A task the signal reaches mid-work finishes that work; tasks stop last started
    /// first. With `abort()` in place of the drain, "closed" would never be written.
    #[tokio::test]
    async fn a_task_mid_teardown_finishes_and_tasks_stop_in_reverse_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Tasks::new();
        let (busy_tx, busy) = tokio::sync::oneshot::channel();
        let l = log.clone();
        tasks.spawn("reaper", move |mut closing| async move {
            // Like a housekeeping round: once begun, it runs to its end.
            let _ = busy_tx.send(());
            tokio::time::sleep(Duration::from_millis(200)).await;
            l.lock().unwrap().push("reaper closed its pool");
            signalled(&mut closing).await;
            l.lock().unwrap().push("reaper stopped");
        });
        let l = log.clone();
        tasks.spawn("listener", move |mut closing| async move {
            signalled(&mut closing).await;
            l.lock().unwrap().push("listener stopped");
        });
        busy.await.unwrap();
        tasks.drain(Duration::from_secs(5)).await;
        assert_eq!(
            *log.lock().unwrap(),
            [
                "listener stopped",
                "reaper closed its pool",
                "reaper stopped"
            ]
        );
    }

    /// A task that never looks at the signal is aborted at the bound, not waited on
    /// forever.
    #[tokio::test]
    async fn a_task_that_ignores_the_signal_is_aborted_at_the_bound() {
        let mut tasks = Tasks::new();
        tasks.spawn("stuck", |_closing| std::future::pending());
        let t = std::time::Instant::now();
        tasks.drain(Duration::from_millis(100)).await;
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
