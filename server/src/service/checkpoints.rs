//! Checkpoints: Save, Restore, Fork, ListCheckpoints and DeleteCheckpoint.

use super::*;

impl DeskgymService {
    pub(super) async fn do_save(
        &self,
        req: Request<pb::SaveRequest>,
    ) -> Result<Response<pb::Checkpoint>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let cp = self.mgr.save(&req.env_id, req.park, &who).await?;
        Ok(Response::new(convert::checkpoint(&cp)))
    }

    pub(super) async fn do_restore(
        &self,
        req: Request<pb::RestoreRequest>,
    ) -> Result<Response<pb::RestoreResponse>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let env = self.mgr.env(&req.env_id, &who)?;
        let cp = self.mgr.checkpoint(&req.checkpoint_id, &who)?;
        let opts = ObsOptions {
            encoding: req.encoding,
            ..Default::default()
        };
        let bound = self.mgr.replay_timeout(&cp);
        let mgr = self.mgr.clone();
        let job = self
            .mgr
            .on_env(&env, Call::Restore, bound, move |e, cache| {
                // A parked replica of the checkpoint's own pool (same spec) stands in
                // for the env's desktop: taken here, on the step thread, so a call
                // refused or skipped takes none.
                let parked = if e.pool.id == cp.pool.id {
                    mgr.take_parked(&cp, 1).pop()
                } else {
                    None
                };
                match parked {
                    Some(r) => e.restore_parked(cache, &cp, &opts, r),
                    None => e.restore(cache, &cp, &opts),
                }
                .map(convert::restore_response)
            })?;
        Ok(Response::new(job.finish().await?))
    }

    pub(super) async fn do_fork(
        &self,
        req: Request<pb::ForkRequest>,
    ) -> Result<Response<pb::ForkResponse>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let f = self
            .mgr
            .fork(&req.checkpoint_id, req.n, req.encoding, &who)
            .await?;
        Ok(Response::new(pb::ForkResponse {
            pool_id: f.pool_id,
            replicas: f
                .replicas
                .into_iter()
                .map(|(id, r)| crate::convert::replica(id, r))
                .collect(),
            expected_hash: f.expected_hash,
            from_spares: f.from_spares,
            from_parked: f.from_parked,
        }))
    }

    pub(super) async fn do_list_checkpoints(
        &self,
        req: Request<pb::ListCheckpointsRequest>,
    ) -> Result<Response<pb::ListCheckpointsResponse>, Status> {
        let who = principal(&req)?;
        let checkpoints = self
            .mgr
            .list_checkpoints(&req.into_inner().pool_id, &who)
            .iter()
            .map(|c| convert::checkpoint(c))
            .collect();
        Ok(Response::new(pb::ListCheckpointsResponse { checkpoints }))
    }

    pub(super) async fn do_delete_checkpoint(
        &self,
        req: Request<pb::DeleteCheckpointRequest>,
    ) -> Result<Response<pb::DeleteCheckpointResponse>, Status> {
        let who = principal(&req)?;
        self.mgr
            .delete_checkpoint(&req.into_inner().checkpoint_id, &who)?;
        Ok(Response::new(pb::DeleteCheckpointResponse {}))
    }
}
