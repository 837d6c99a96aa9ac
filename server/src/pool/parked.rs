//! Parked replicas: desktops the server holds at checkpoints' states, outside any env
//! the client sees (decision 197). A fork or restore of a checkpoint takes its parked
//! replicas and replays nothing; one of a later checkpoint that extends theirs replays
//! only the steps between. A Save with `park` keeps replicas parked at the newest
//! checkpoint of a chain by advancing the previous one's by the suffix.
//!
//! Accounting: a parked replica (and one being rebuilt) is a desktop of its
//! checkpoint's pool ([`crate::pool_state::Parked`]), so `max_envs`, the pixel budget
//! and the owner's quota count it like an env; a pool or fork that needs the room stops
//! parked replicas first ([`PoolManager::reserve`]), and `max_parked` bounds them all.

use std::collections::HashSet;

use super::*;
use crate::env::Start;
use crate::pool_state::{ParkAsk, Parked, ParkedReplica};

impl PoolManager {
    /// Refuses a Save's `park` over `max_parked` (INVALID_ARGUMENT).
    pub(crate) fn check_park(&self, n: u32) -> Result<(), PoolError> {
        let max = self.limits.max_parked;
        if n <= max {
            return Ok(());
        }
        let why = if max == 0 {
            "must be 0: parking is off on this server (--max-parked 0)".to_string()
        } else {
            format!("must be at most the server's max_parked={max}")
        };
        Err(Invalid::new("park", why).into())
    }

    /// Ids of the checkpoints whose state a desktop can bring to `cp`'s by replaying
    /// `cp`'s later actions: `cp` and those it extends.
    fn lineage(&self, cp: &Checkpoint) -> HashSet<String> {
        lock(&self.checkpoints)
            .iter()
            .filter(|c| cp.extends(c))
            .map(|c| c.id.clone())
            .collect()
    }

    /// Takes up to `n` parked replicas for `cp` out of its pool: its own first, then
    /// those of the nearest checkpoint it extends (the shortest replay), in that order.
    pub(crate) fn take_parked(&self, cp: &Checkpoint, n: u32) -> Vec<ParkedReplica> {
        if n == 0 {
            return Vec::new();
        }
        let lineage = self.lineage(cp);
        pick(&mut lock(&cp.pool.parked), &lineage, cp, n)
    }

    /// Puts replicas taken by a fork that then failed back where they were.
    pub(crate) fn return_parked(&self, cp: &Checkpoint, replicas: Vec<ParkedReplica>) {
        lock(&cp.pool.parked).ready.extend(replicas);
    }

    /// After a Save with `park = n`: keeps `n` replicas of `cp` parked, in the
    /// background. Replicas parked at a checkpoint it extends are advanced by the
    /// actions since, and those still being rebuilt for one go on to `cp` once there;
    /// the rest are started and rebuilt by a full replay, as far as `max_parked`,
    /// `max_envs` and `who`'s quota allow (fewer is not an error: the checkpoint's
    /// `chain.note` says why). Returns at once.
    pub(crate) fn park(self: &Arc<Self>, cp: &Arc<Checkpoint>, n: u32, who: &Principal) {
        let lineage = self.lineage(cp);
        let (advanced, coming) = {
            let mut parked = lock(&cp.pool.parked);
            parked.asked.insert(
                cp.id.clone(),
                ParkAsk {
                    n,
                    ..Default::default()
                },
            );
            let taken = pick(&mut parked, &lineage, cp, n);
            // Counted as being rebuilt in the same step they leave `ready`, so no
            // reservation sees the room they hold as free.
            let jobs: Vec<u64> = taken.iter().map(|_| parked.start(&cp.id)).collect();
            let coming = parked.redirect(&lineage, &cp.id, n - taken.len() as u32);
            (jobs.into_iter().zip(taken).collect::<Vec<_>>(), coming)
        };
        let mut note = String::new();
        let mut fresh = Vec::new();
        for _ in advanced.len() as u32 + coming..n {
            match self.reserve_parked(cp, who) {
                Ok(job) => fresh.push(job),
                Err(why) => {
                    note = why;
                    break;
                }
            }
        }
        if !note.is_empty() {
            tracing::info!(checkpoint = %cp.id, asked = n, parked = advanced.len() + coming as usize + fresh.len(), %note, "fewer replicas parked");
            if let Some(a) = lock(&cp.pool.parked).asked.get_mut(&cp.id) {
                a.note = note;
            }
        }
        for (job, r) in advanced {
            self.rebuild_parked(cp.clone(), job, Some(r));
        }
        for job in fresh {
            self.rebuild_parked(cp.clone(), job, None);
        }
    }

    /// Counts one more replica being rebuilt for `cp` (its job number) if
    /// `max_parked`, `max_envs`, the pixel budget and `who`'s quota have room for it
    /// (stopping the least recently parked replica of another checkpoint for
    /// `max_parked`); else why not.
    fn reserve_parked(&self, cp: &Checkpoint, who: &Principal) -> Result<u64, String> {
        let one = Usage::of(1, cp.pool.spec.screen);
        let max = self.limits.max_parked;
        for _ in 0..2 {
            {
                let pending = lock(&self.pending);
                if self.parked_held() < max {
                    self.fits(pending.total, one, "a parked replica")
                        .and_then(|()| self.fits_owner(&pending, who, one))
                        .map_err(|e| e.to_string())?;
                    return Ok(lock(&cp.pool.parked).start(&cp.id));
                }
            }
            if !self.evict_parked(None, Some(&cp.id)) {
                break;
            }
        }
        Err(format!(
            "the server holds max_parked={max} parked replicas (parked or being rebuilt)"
        ))
    }

    /// Parked replicas held server-wide, those being rebuilt included.
    fn parked_held(&self) -> u32 {
        let pools: Vec<Arc<PoolState>> = lock(&self.pools).values().cloned().collect();
        pools.iter().map(|p| lock(&p.parked).held()).sum()
    }

    /// Stops the least recently parked replica (of `owner`'s pools only, when set; of
    /// any checkpoint but `except`); false when there is none.
    pub(crate) fn evict_parked(&self, owner: Option<&str>, except: Option<&str>) -> bool {
        let pools: Vec<Arc<PoolState>> = lock(&self.pools)
            .values()
            .filter(|p| owner.is_none_or(|o| &*p.owner == o))
            .cloned()
            .collect();
        let evictable = |r: &ParkedReplica| except != Some(r.cp_id.as_str());
        let oldest = pools
            .iter()
            .filter_map(|p| {
                let since = lock(&p.parked)
                    .ready
                    .iter()
                    .filter(|r| evictable(r))
                    .map(|r| r.since)
                    .min();
                since.map(|t| (t, p))
            })
            .min_by_key(|(t, _)| *t);
        let Some((_, pool)) = oldest else {
            return false;
        };
        let victim = {
            let mut parked = lock(&pool.parked);
            let i = parked
                .ready
                .iter()
                .enumerate()
                .filter(|(_, r)| evictable(r))
                .min_by_key(|(_, r)| r.since)
                .map(|(i, _)| i);
            i.map(|i| parked.ready.swap_remove(i))
        };
        let Some(victim) = victim else {
            // Taken meanwhile: the room is free all the same.
            return true;
        };
        tracing::info!(pool = %pool.id, checkpoint = %victim.cp_id, "parked replica evicted");
        self.stop_parked(vec![victim]);
        true
    }

    /// Stops parked replicas off the runtime.
    pub(crate) fn stop_parked(&self, replicas: Vec<ParkedReplica>) {
        if !replicas.is_empty() {
            drop(self.spawn_internal(move || {
                drop(replicas);
                Ok(())
            }));
        }
    }

    /// Brings one desktop to `cp`'s state in the background (a parked replica of an
    /// earlier checkpoint by the suffix; else a new desktop by a full replay), then on
    /// to a later checkpoint if a Save moved job `job` there meanwhile, and parks it
    /// where it ends if it shows that checkpoint's frame. A replay past the restore
    /// bound of the checkpoint it is for has its desktop killed.
    fn rebuild_parked(
        self: &Arc<Self>,
        cp: Arc<Checkpoint>,
        job: u64,
        from: Option<ParkedReplica>,
    ) {
        let mgr = self.clone();
        let pids: Arc<Mutex<Vec<u32>>> = Arc::default();
        let deadline = Arc::new(Mutex::new(
            tokio::time::Instant::now() + self.replay_timeout(&cp),
        ));
        let work = {
            let (pids, deadline) = (pids.clone(), deadline.clone());
            self.spawn_internal(move || {
                let (desktop, mut start) = match from {
                    Some(r) => (
                        Ok(r.desktop),
                        Some(Start {
                            step: r.steps,
                            out: r.out,
                        }),
                    ),
                    None => (cp.pool.spec.start_desktop(false), None),
                };
                let mut d = match desktop {
                    Ok(d) => d,
                    Err(e) => {
                        mgr.parked_done(job, &cp, None, format!("a desktop failed to start: {e}"));
                        return Ok(());
                    }
                };
                *lock(&pids) = d.pids();
                let sandboxed = cp.pool.spec.profile.sandboxed();
                let mut cp = cp;
                // The step the first replay began at (what the checkpoint reports).
                let mut first = None;
                loop {
                    let r = match cp.rebuild(&mut d, sandboxed, start.take(), |_| {}) {
                        Ok(r) if r.frame.hash == cp.frame_hash() => r,
                        Ok(r) => {
                            let left = r.replayed.last_on_path.map_or(1, |i| i + 2);
                            tracing::warn!(checkpoint = %cp.id, left_at_step = left, "a parked replica diverged; not parked");
                            let why = format!("a rebuild diverged from the checkpoint (left at step {left})");
                            mgr.parked_done(job, &cp, None, why);
                            return Ok(());
                        }
                        Err(e) => {
                            mgr.parked_done(job, &cp, None, format!("a rebuild failed: {e}"));
                            return Ok(());
                        }
                    };
                    let from_step = *first.get_or_insert(r.from_step as u32);
                    cp.hold_clock_at_save(&mut d);
                    let replica = ParkedReplica {
                        cp_id: cp.id.clone(),
                        steps: cp.actions_len(),
                        out: r.replayed.outcome,
                        desktop: d,
                        since: Instant::now(),
                    };
                    match mgr.parked_done(job, &cp, Some((replica, from_step)), String::new()) {
                        None => return Ok(()),
                        Some((next, replica)) => {
                            *lock(&deadline) = tokio::time::Instant::now() + mgr.replay_timeout(&next);
                            start = Some(Start {
                                step: replica.steps,
                                out: replica.out,
                            });
                            (cp, d) = (next, replica.desktop);
                        }
                    }
                }
            })
        };
        tokio::spawn(async move {
            let mut work = std::pin::pin!(Self::join(work));
            loop {
                let until = *lock(&deadline);
                tokio::select! {
                    _ = &mut work => return,
                    () = tokio::time::sleep_until(until) => {
                        if *lock(&deadline) > tokio::time::Instant::now() {
                            continue;
                        }
                        tracing::warn!("a parked replica's rebuild overran its bound: desktop killed");
                        for pid in lock(&pids).iter() {
                            // SAFETY: kill(2) with a pid of our own unreaped child
                            // (reaped only when its `Desktop` drops, after this fails
                            // the replay).
                            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
                        }
                        return;
                    }
                }
            }
        });
    }

    /// Job `job`'s replay reached `cp`. If a Save moved the job on to a later
    /// checkpoint meanwhile, the replica goes on there (returned with it). Else the
    /// job ends: the replica is parked at `cp` while the checkpoint and its pool live
    /// (else stopped), noting `why` when none came.
    fn parked_done(
        &self,
        job: u64,
        cp: &Arc<Checkpoint>,
        replica: Option<(ParkedReplica, u32)>,
        why: String,
    ) -> Option<(Arc<Checkpoint>, ParkedReplica)> {
        let stop = {
            let mut parked = lock(&cp.pool.parked);
            let target = parked.building.get(&job).cloned();
            // Checked under the parked lock: a delete or close after this finds the
            // replica parked and stops it.
            let open = !cp.pool.closed.load(Ordering::Acquire);
            let find = |id: &str| lock(&self.checkpoints).iter().find(|c| c.id == id).cloned();
            if let Some(target) = target.clone().filter(|t| open && *t != cp.id)
                && let Some(next) = find(&target).filter(|n| n.extends(cp))
                && let Some((r, _)) = replica
            {
                return Some((next, r));
            }
            parked.building.remove(&job);
            // A replica for a checkpoint deleted meanwhile is parked where it is.
            let live = open && find(&cp.id).is_some_and(|c| Arc::ptr_eq(&c, cp));
            match replica {
                Some((r, from_step)) if live && parked.asked.contains_key(&cp.id) => {
                    if let Some(ask) = parked.asked.get_mut(&cp.id) {
                        ask.from_step = from_step;
                    }
                    parked.ready.push(r);
                    None
                }
                r => {
                    let to = target.unwrap_or_else(|| cp.id.clone());
                    if let Some(ask) = parked.asked.get_mut(&to).filter(|_| !why.is_empty()) {
                        ask.note = why;
                    }
                    r.map(|(r, _)| r)
                }
            }
        };
        // On a step thread already: stopping a desktop here blocks nobody.
        drop(stop);
        None
    }
}

/// Takes up to `n` of `parked`'s replicas that can become `cp` (their checkpoint in
/// `lineage`): the most advanced first.
fn pick(
    parked: &mut Parked,
    lineage: &HashSet<String>,
    cp: &Checkpoint,
    n: u32,
) -> Vec<ParkedReplica> {
    let mut fits: Vec<usize> = (0..parked.ready.len())
        .filter(|&i| {
            let r = &parked.ready[i];
            lineage.contains(&r.cp_id) && r.steps <= cp.actions_len()
        })
        .collect();
    // Its own first, then by steps replayed (fewest first).
    fits.sort_by_key(|&i| {
        let r = &parked.ready[i];
        (r.cp_id != cp.id, std::cmp::Reverse(r.steps))
    });
    fits.truncate(n as usize);
    // From the back, so each swap_remove leaves the other indices in place.
    let mut by_index = fits.clone();
    by_index.sort_unstable_by(|a, b| b.cmp(a));
    let mut taken: Vec<(usize, ParkedReplica)> = by_index
        .into_iter()
        .map(|i| (i, parked.ready.swap_remove(i)))
        .collect();
    taken.sort_by_key(|(i, _)| fits.iter().position(|f| f == i));
    taken.into_iter().map(|(_, r)| r).collect()
}
