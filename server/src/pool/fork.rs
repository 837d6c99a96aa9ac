//! Fork: n replicas of a checkpoint, from its parked replicas first, then the source
//! pool's spares, all or nothing, each verified against the checkpoint's frame hash.

use super::*;
use crate::env::{Restored, Start};

/// A fork's outcome: the new pool and each replica as rebuilt.
#[derive(Debug)]
pub(crate) struct Forked {
    /// The replicas' pool.
    pub pool_id: String,
    /// Each replica's env id and state after replay, in env order.
    pub replicas: Vec<(String, Restored)>,
    /// The checkpoint's frame hash, which an exact replica shows.
    pub expected_hash: String,
    /// How many replicas came from the source pool's warm spares.
    pub from_spares: u32,
    /// How many came from parked replicas (of the checkpoint or one it extends).
    pub from_parked: u32,
}

impl PoolManager {
    /// Creates a pool of `n` replicas of a checkpoint: desktops come from its parked
    /// replicas first (replaying nothing, or the steps since the earlier checkpoint
    /// they were parked at), then the source pool's warm spares, then fresh starts;
    /// each is rebuilt by replay and its frame hash compared with the checkpoint's. All
    /// or nothing.
    pub(crate) async fn fork(
        self: &Arc<Self>,
        cp_id: &str,
        n: u32,
        encoding: i32,
        who: &Principal,
    ) -> Result<Forked, PoolError> {
        let t0 = Instant::now();
        let cp = self.checkpoint(cp_id, who)?;
        if n == 0 {
            return Err(Invalid::new("n", "must be at least 1").into());
        }
        if n > self.limits.max_envs {
            return Err(PoolError::Limit(format!(
                "a fork of {n} replicas exceeds the server's max_envs={}",
                self.limits.max_envs
            )));
        }
        let mut spec = cp.pool.spec.clone();
        spec.warm_spares = 0;
        self.await_parking(&cp, n).await;
        // Parked replicas, then spares: they already hold a slot, so only the rest is
        // reserved.
        let parked = self.take_parked(&cp, n);
        let from_parked = parked.len() as u32;
        let mut desktops: Vec<Box<dyn Desktop>> = {
            let mut spares = lock(&cp.pool.spares);
            let keep = spares.len().saturating_sub((n - from_parked) as usize);
            spares.split_off(keep)
        };
        let from_spares = desktops.len() as u32;
        let held = from_parked + from_spares;
        let pending = match self.reserve(n - held, spec.screen, who, "this fork") {
            Ok(p) => p,
            Err(e) => {
                lock(&cp.pool.spares).append(&mut desktops);
                self.return_parked(&cp, parked);
                return Err(e);
            }
        };
        // Where each env's replay begins: parked replicas first, in env order.
        let mut starts: Vec<Option<Start>> = parked
            .iter()
            .map(|r| {
                Some(Start {
                    step: r.steps,
                    out: r.out.clone(),
                })
            })
            .collect();
        starts.resize(n as usize, None);
        let spares = std::mem::take(&mut desktops);
        desktops = parked
            .into_iter()
            .map(|r| r.desktop)
            .chain(spares)
            .collect();
        // Until registered, the moved desktops are counted as pending too.
        let moved_usage = Usage::of(held, spec.screen);
        {
            let mut p = lock(&self.pending);
            p.total = p.total.plus(moved_usage).unwrap_or(p.total);
            let own = p.by_owner.entry(who.name.clone()).or_default();
            *own = own.plus(moved_usage).unwrap_or(*own);
        }
        let moved = Pending {
            mgr: self,
            n: moved_usage,
            owner: who.name.clone(),
        };
        match self.start_desktops(&spec, n - held, 0).await {
            Ok(more) => desktops.extend(more),
            Err(e) => {
                drop(self.spawn_internal(move || {
                    drop(desktops);
                    Ok(())
                }));
                return Err(e);
            }
        }
        let pool = self.register(spec, desktops, n, None, who);
        drop((pending, moved));
        let t_desktops = t0.elapsed();

        let opts = ObsOptions {
            encoding,
            known: Vec::new(),
            ..Default::default()
        };
        let bound = self.replay_timeout(&cp);
        let mut jobs = Vec::with_capacity(pool.env_ids.len());
        for (id, start) in pool.env_ids.iter().zip(starts) {
            let env = self.env(id, who)?;
            let (cp, opts) = (cp.clone(), opts.clone());
            jobs.push(self.on_env(&env, Call::Restore, bound, move |e, cache| {
                e.restore_from(cache, &cp, &opts, start)
            })?);
        }
        // The client learns the new pool's id (and renews its lease) only from the
        // reply: until then the fork keeps it in use, however long the replays take.
        let in_use = {
            let pool = pool.clone();
            tokio::spawn(async move {
                loop {
                    pool.touch();
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
        };
        let _stop = AbortOnDrop(in_use);
        let mut replicas = Vec::with_capacity(jobs.len());
        for (job, env_id) in jobs.into_iter().zip(&pool.env_ids) {
            match job.finish().await {
                Ok(r) => replicas.push((env_id.clone(), r)),
                Err(e) => {
                    let _ = self.close_pool(&pool.id, None).await;
                    return Err(e);
                }
            }
        }
        tracing::info!(checkpoint = %cp.id, pool = %pool.id, n, from_spares, from_parked,
            desktops_ms = t_desktops.as_millis() as u64, total_ms = t0.elapsed().as_millis() as u64, "forked");
        pool.touch();
        // The source pool's spares are refilled by housekeeping shortly after: starting
        // servers here would compete with this reply and the replicas' first steps.
        Ok(Forked {
            pool_id: pool.id.clone(),
            replicas,
            expected_hash: deskgym_worker::hash_hex(cp.frame_hash()),
            from_spares,
            from_parked,
        })
    }
}

impl PoolManager {
    /// Waits (within the restore bound) while fewer than `n` replicas are parked at `cp`
    /// and some are still being built for it: one a chained Save is advancing costs
    /// the rest of its suffix, a fresh desktop the whole history.
    async fn await_parking(&self, cp: &Checkpoint, n: u32) {
        let deadline = tokio::time::Instant::now() + self.replay_timeout(cp);
        loop {
            let (ready, building) = lock(&cp.pool.parked).of(&cp.id);
            if building == 0 || ready >= n || tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Stops a background task when dropped (the fork returns, or fails).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
