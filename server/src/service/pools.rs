//! Pools: CreatePool, ClosePool and KeepAlive (a pool's life and its lease).

use super::*;

impl DeskgymService {
    pub(super) async fn do_create_pool(
        &self,
        req: Request<pb::CreatePoolRequest>,
    ) -> Result<Response<pb::CreatePoolResponse>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let spec = self.mgr.spec(&req)?;
        let record = (!req.record.is_empty()).then_some(req.record.as_str());
        let pool = self
            .mgr
            .create_pool(spec, req.num_envs, record, &who)
            .await?;
        Ok(Response::new(pb::CreatePoolResponse {
            pool_id: pool.id.clone(),
            env_ids: pool.env_ids.clone(),
            screen: Some(pb::ScreenSize {
                width: pool.spec.screen.width,
                height: pool.spec.screen.height,
            }),
            max_steps: pool.spec.max_steps,
            recording_path: pool
                .recording_path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            profile: pool.spec.profile.name.clone(),
            capabilities: pool
                .spec
                .capabilities
                .iter()
                .map(|c| c.to_string())
                .collect(),
        }))
    }

    pub(super) async fn do_close_pool(
        &self,
        req: Request<pb::ClosePoolRequest>,
    ) -> Result<Response<pb::ClosePoolResponse>, Status> {
        // Its own task: a client that hangs up mid-close must not leave the close half
        // done (desktops stopped but the recording never finished).
        let who = principal(&req)?;
        let (mgr, id) = (self.mgr.clone(), req.into_inner().pool_id);
        let (n, path) = tokio::spawn(async move { mgr.close_pool(&id, Some(&who)).await })
            .await
            .map_err(|e| PoolError::Internal(format!("closing the pool failed: {e}")))??;
        Ok(Response::new(pb::ClosePoolResponse {
            envs_closed: n,
            recording_path: path.map(|p| p.display().to_string()).unwrap_or_default(),
        }))
    }

    pub(super) async fn do_keep_alive(
        &self,
        req: Request<pb::KeepAliveRequest>,
    ) -> Result<Response<pb::KeepAliveResponse>, Status> {
        let who = principal(&req)?;
        let ids = req.into_inner().pool_ids;
        checked::pool_ids(&ids, self.mgr.limits())?;
        Ok(Response::new(pb::KeepAliveResponse {
            gone: self.mgr.keep_alive(&ids, &who),
        }))
    }
}
