//! Checkpoints: saved within the server's and the owner's budgets, looked up by owner.

use super::*;

impl PoolManager {
    /// The bound of a restore: one op_timeout per started 64 replayed actions, plus
    /// four times the original run's own time (a replay may take twice it, and a fast
    /// replay that left the path is done again settled: decision 190).
    pub(crate) fn replay_timeout(&self, cp: &Checkpoint) -> Duration {
        let chunks = 1 + (cp.actions_len() / 64) as u32;
        self.op_timeout()
            .saturating_mul(chunks)
            .saturating_add(cp.original_time().saturating_mul(4))
    }

    /// Saves an env's state as a new checkpoint, within `max_checkpoints`, and starts
    /// parking `park` replicas of it in the background.
    pub(crate) async fn save(
        self: &Arc<Self>,
        env_id: &str,
        park: u32,
        who: &Principal,
    ) -> Result<Arc<Checkpoint>, PoolError> {
        self.check_park(park)?;
        let env = self.env(env_id, who)?;
        let id = self.new_id("c");
        let job = self.on_env(&env, Call::Save, self.op_timeout(), move |e, _| e.save(id))?;
        let cp = self.admit(job.finish().await?, who)?;
        if park > 0 {
            self.park(&cp, park, who);
        }
        Ok(cp)
    }

    /// Holds a saved checkpoint within the server's and `who`'s budgets, with its parent
    /// (the latest checkpoint of its pool it extends).
    fn admit(&self, mut cp: Checkpoint, who: &Principal) -> Result<Arc<Checkpoint>, PoolError> {
        let mut all = lock(&self.checkpoints);
        if all.len() >= self.limits.max_checkpoints as usize {
            return Err(PoolError::Limit(format!(
                "the server holds max_checkpoints={} checkpoints; delete some first",
                self.limits.max_checkpoints
            )));
        }
        let held: u64 = all.iter().map(|c| c.bytes()).sum();
        let max = self.limits.max_checkpoint_bytes;
        if held.saturating_add(cp.bytes()) > max {
            return Err(PoolError::Limit(format!(
                "this checkpoint needs {} bytes but the server's checkpoints hold {held} of \
                 max_checkpoint_bytes={max}; delete some first",
                cp.bytes()
            )));
        }
        let mine: Vec<&Arc<Checkpoint>> = all.iter().filter(|c| c.pool.owner == who.name).collect();
        let mine_bytes: u64 = mine.iter().map(|c| c.bytes()).sum();
        if mine.len() >= who.max_checkpoints as usize
            || mine_bytes.saturating_add(cp.bytes()) > who.max_checkpoint_bytes
        {
            return Err(PoolError::Limit(format!(
                "principal {} holds {} checkpoints ({mine_bytes} bytes) of its quota of {} \
                 ({} bytes); delete some first",
                who.name,
                mine.len(),
                who.max_checkpoints,
                who.max_checkpoint_bytes
            )));
        }
        cp.parent = all
            .iter()
            .rev()
            .find(|c| cp.extends(c))
            .map(|c| c.id.clone());
        let cp = Arc::new(cp);
        all.push(cp.clone());
        Ok(cp)
    }

    /// Looks up one of `who`'s checkpoints.
    pub(crate) fn checkpoint(
        &self,
        id: &str,
        who: &Principal,
    ) -> Result<Arc<Checkpoint>, PoolError> {
        lock(&self.checkpoints)
            .iter()
            .find(|c| c.id == id && c.pool.owner == who.name)
            .cloned()
            .ok_or_else(|| {
                PoolError::not_found("checkpoint", id, "deleted, its pool closed, or never saved")
            })
    }

    /// `who`'s checkpoints of one pool (or of all its pools, for an empty id), in
    /// creation order.
    pub(crate) fn list_checkpoints(&self, pool_id: &str, who: &Principal) -> Vec<Arc<Checkpoint>> {
        lock(&self.checkpoints)
            .iter()
            .filter(|c| c.pool.owner == who.name && (pool_id.is_empty() || c.pool.id == pool_id))
            .cloned()
            .collect()
    }

    /// Deletes one of `who`'s checkpoints, stopping its parked replicas.
    pub(crate) fn delete_checkpoint(&self, id: &str, who: &Principal) -> Result<(), PoolError> {
        let gone = {
            let mut all = lock(&self.checkpoints);
            let at = all
                .iter()
                .position(|c| c.id == id && c.pool.owner == who.name);
            at.map(|i| all.remove(i))
        }
        .ok_or_else(|| {
            PoolError::not_found("checkpoint", id, "deleted, its pool closed, or never saved")
        })?;
        // After it left the list: a rebuild ending now finds it gone and stops its own.
        let parked = lock(&gone.pool.parked).remove(id);
        self.stop_parked(parked);
        Ok(())
    }
}
