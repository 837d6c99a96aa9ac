//! Checkpoints: saved within the server's and the owner's budgets, looked up by owner.

use super::*;

impl PoolManager {
    /// The bound of a restore: one op_timeout per started 64 replayed actions.
    pub(crate) fn replay_timeout(&self, cp: &Checkpoint) -> Duration {
        let chunks = 1 + (cp.actions_len() / 64) as u32;
        self.op_timeout().saturating_mul(chunks)
    }

    /// Saves an env's state as a new checkpoint, within `max_checkpoints`.
    pub(crate) async fn save(
        self: &Arc<Self>,
        env_id: &str,
        who: &Principal,
    ) -> Result<Arc<Checkpoint>, PoolError> {
        let env = self.env(env_id, who)?;
        let id = self.new_id("c");
        let job = self.on_env(&env, Call::Save, self.op_timeout(), move |e, _| e.save(id))?;
        let cp = Arc::new(job.finish().await?);
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

    /// Deletes one of `who`'s checkpoints.
    pub(crate) fn delete_checkpoint(&self, id: &str, who: &Principal) -> Result<(), PoolError> {
        let mut all = lock(&self.checkpoints);
        let before = all.len();
        all.retain(|c| c.id != id || c.pool.owner != who.name);
        if all.len() == before {
            return Err(PoolError::not_found(
                "checkpoint",
                id,
                "deleted, its pool closed, or never saved",
            ));
        }
        Ok(())
    }
}
