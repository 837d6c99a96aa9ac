//! The blocking step pool: bounded admission, orphaned jobs skipped, panics as
//! INTERNAL, and deadlines that kill a stalled desktop.

use super::*;

/// A job for a [`Workers`] thread.
type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of named threads running blocking jobs in the order they come. An idle
/// thread sleeps in the kernel: a work-stealing pool's idle workers spin and yield
/// first, and with dozens of threads (steps block on X round trips, so there are many)
/// that spinning took a fifth of a 2-core host's CPU from the desktops it serves.
pub(crate) struct Workers {
    tx: std::sync::mpsc::Sender<Job>,
}

impl Workers {
    /// Starts `n` threads named `deskgym-step-<i>`; they end when this is dropped.
    pub(crate) fn new(n: usize) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..n.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("deskgym-step-{i}"))
                .spawn(move || {
                    loop {
                        // One idle thread waits on the queue; the others on its lock.
                        let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                })?;
        }
        Ok(Self { tx })
    }

    fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        // Sending fails only once every thread is gone, which never happens while `self`
        // lives (a job's panic is caught in `run_job`).
        let _ = self.tx.send(Box::new(job));
    }
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Workers")
    }
}

/// A job on one env, started by [`PoolManager::on_env`]: it holds the env's flight
/// until it ends, and is awaited with the env's deadline.
pub(crate) struct EnvJob<T> {
    rx: oneshot::Receiver<Result<T, PoolError>>,
    env: Arc<Env>,
    deadline: tokio::time::Instant,
    bound: Duration,
}

impl<T> EnvJob<T> {
    /// Awaits the job until its deadline. Past it the env's desktop is killed if the
    /// job was running (so the thread stuck on it is freed and the env's next Reset
    /// restarts it) and the call answers DEADLINE_EXCEEDED; no other env is affected.
    pub(crate) async fn finish(self) -> Result<T, PoolError> {
        match tokio::time::timeout_at(self.deadline, self.rx).await {
            Ok(r) => r.unwrap_or_else(|_| Err(PoolError::Internal("step worker went away".into()))),
            Err(_) => {
                self.env.kill_stalled();
                Err(PoolError::Stalled {
                    env: self.env.id.clone(),
                    ms: self.bound.as_millis(),
                })
            }
        }
    }
}

impl PoolManager {
    /// The one way to run an operation on an env: takes its flight for `call` (ABORTED
    /// if another call holds it), queues `f` on the step pool, and sets the deadline
    /// `bound` from now.
    pub(crate) fn on_env<T, F>(
        self: &Arc<Self>,
        env: &Arc<Env>,
        call: Call,
        bound: Duration,
        f: F,
    ) -> Result<EnvJob<T>, PoolError>
    where
        T: Send + 'static,
        F: FnOnce(&Env, &FrameCache) -> Result<T, EnvError> + Send + 'static,
    {
        let share = lock(&self.pending)
            .shares
            .get(&env.pool.owner)
            .map(|who| who.max_threads);
        let owner = &env.pool.owner;
        let slot = crate::sync::Held::take(&self.queued_by_owner, owner, share).map_err(|n| {
            PoolError::Limit(format!(
                "principal {owner} has {n} desktop operations queued or running, its share \
                 of {} step threads; retry shortly or ask for a larger `threads=` share",
                share.unwrap_or_default()
            ))
        })?;
        let flight = env.begin(call)?;
        let (mgr, e) = (self.clone(), env.clone());
        let rx = self.spawn(move || {
            let _held = (flight, slot);
            Ok(f(&e, &mgr.cache)?)
        });
        Ok(EnvJob {
            rx,
            env: env.clone(),
            deadline: tokio::time::Instant::now() + bound,
            bound,
        })
    }

    /// Runs a client's blocking work on the step pool: admitted only while fewer than
    /// `max_queued_ops` jobs are queued or running (else RESOURCE_EXHAUSTED at once),
    /// and skipped if the caller dropped the receiver (its client went away) before
    /// a thread picked it up. A panic becomes INTERNAL, not an abort.
    pub(crate) fn spawn<T, F>(&self, f: F) -> oneshot::Receiver<Result<T, PoolError>>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, PoolError> + Send + 'static,
    {
        let max = self.limits.max_queued_ops as usize;
        if self.queued.fetch_add(1, Ordering::AcqRel) >= max {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(Err(PoolError::Limit(format!(
                "the server has max_queued_ops={max} desktop operations queued or running; \
                 retry shortly or use fewer concurrent calls"
            ))));
            return rx;
        }
        let queued = self.queued.clone();
        self.run_job(
            f,
            move || {
                queued.fetch_sub(1, Ordering::AcqRel);
            },
            true,
        )
    }

    /// Runs the server's own blocking work (stopping desktops, closing recordings,
    /// starting spares): never refused, and run even if nobody awaits it.
    pub(crate) fn spawn_internal<T, F>(&self, f: F) -> oneshot::Receiver<Result<T, PoolError>>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, PoolError> + Send + 'static,
    {
        self.run_job(f, || {}, false)
    }

    fn run_job<T, F>(
        &self,
        f: F,
        done: impl FnOnce() + Send + 'static,
        skip_if_gone: bool,
    ) -> oneshot::Receiver<Result<T, PoolError>>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, PoolError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.executor.spawn(move || {
            if skip_if_gone && tx.is_closed() {
                // Dropping `f` here still releases what it holds (an env's flight).
                drop(f);
                done();
                return;
            }
            let r = std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(%msg, "step worker panicked");
                Err(PoolError::Internal(format!("worker panicked: {msg}")))
            });
            done();
            let _ = tx.send(r);
        });
        rx
    }

    /// The server-side bound of one operation on a desktop.
    pub(crate) fn op_timeout(&self) -> Duration {
        self.limits.op_timeout
    }

    /// Awaits a [`spawn`](Self::spawn)ed job.
    pub(crate) async fn join<T>(
        rx: oneshot::Receiver<Result<T, PoolError>>,
    ) -> Result<T, PoolError> {
        rx.await
            .unwrap_or_else(|_| Err(PoolError::Internal("step worker went away".into())))
    }
}
