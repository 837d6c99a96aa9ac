//! The `deskgym.v1.Deskgym` service: validation at the edge, blocking work on the
//! step pool, one error mapping (`error.rs`).

use std::sync::Arc;

use deskgym_proto::v1 as pb;
use deskgym_proto::v1::deskgym_server::Deskgym;
use tonic::{Request, Response, Status};

use crate::convert::{self, VERBS};
use crate::error::ServiceError;
use crate::pool::PoolManager;

/// The gRPC service over a [`PoolManager`].
#[derive(Debug, Clone)]
pub struct DeskgymService {
    mgr: Arc<PoolManager>,
}

impl DeskgymService {
    /// Wraps a manager.
    pub fn new(mgr: Arc<PoolManager>) -> Self {
        Self { mgr }
    }

    /// One step item: validate, run on the step pool. Returns a receiver so a batch can
    /// start every item before awaiting any.
    fn start_step(
        &self,
        item: pb::StepRequest,
    ) -> Result<tokio::sync::oneshot::Receiver<Result<pb::StepResult, ServiceError>>, ServiceError>
    {
        let env = self.mgr.env(&item.env_id)?;
        let spec = &env.pool.spec;
        let action = convert::action(item.action.as_ref(), spec.screen, self.mgr.limits())?;
        Ok(self
            .mgr
            .spawn(move || env.step(&action, item.encoding, item.autoreset)))
    }
}

#[tonic::async_trait]
impl Deskgym for DeskgymService {
    async fn get_capabilities(
        &self,
        _: Request<pb::GetCapabilitiesRequest>,
    ) -> Result<Response<pb::Capabilities>, Status> {
        let l = self.mgr.limits();
        Ok(Response::new(pb::Capabilities {
            server_version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: "deskgym.v1".into(),
            verbs: VERBS.iter().map(|v| v.to_string()).collect(),
            targets: vec!["point_px".into(), "point_norm".into()],
            encodings: vec![
                pb::ImageEncoding::RawRgb as i32,
                pb::ImageEncoding::Png as i32,
                pb::ImageEncoding::Jpeg as i32,
            ],
            tasks: deskgym_worker::TASKS
                .iter()
                .map(|t| pb::TaskInfo {
                    id: t.id.into(),
                    description: t.description.into(),
                    default_max_steps: t.default_max_steps,
                })
                .collect(),
            limits: Some(pb::Limits {
                max_envs: l.max_envs,
                max_batch: l.max_batch,
                max_screen_side: l.max_screen_side,
                min_screen_side: l.min_screen_side,
                max_settle_ms: l.max_settle_ms,
                max_text_len: l.max_text_len,
                max_wait_ms: l.max_wait_ms,
            }),
        }))
    }

    async fn create_pool(
        &self,
        req: Request<pb::CreatePoolRequest>,
    ) -> Result<Response<pb::CreatePoolResponse>, Status> {
        let req = req.into_inner();
        let spec = self.mgr.spec(&req)?;
        let pool = self.mgr.create_pool(spec, req.num_envs).await?;
        Ok(Response::new(pb::CreatePoolResponse {
            pool_id: pool.id.clone(),
            env_ids: pool.env_ids.clone(),
            screen: Some(pb::ScreenSize {
                width: pool.spec.screen.width,
                height: pool.spec.screen.height,
            }),
            max_steps: pool.spec.max_steps,
        }))
    }

    async fn close_pool(
        &self,
        req: Request<pb::ClosePoolRequest>,
    ) -> Result<Response<pb::ClosePoolResponse>, Status> {
        let n = self.mgr.close_pool(&req.into_inner().pool_id).await?;
        Ok(Response::new(pb::ClosePoolResponse { envs_closed: n }))
    }

    async fn reset(
        &self,
        req: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        let req = req.into_inner();
        let env = self.mgr.env(&req.env_id)?;
        let r =
            PoolManager::join(self.mgr.spawn(move || env.reset(req.seed, req.encoding))).await?;
        Ok(Response::new(r))
    }

    async fn step(
        &self,
        req: Request<pb::StepRequest>,
    ) -> Result<Response<pb::StepResult>, Status> {
        let rx = self.start_step(req.into_inner())?;
        Ok(Response::new(PoolManager::join(rx).await?))
    }

    async fn step_batch(
        &self,
        req: Request<pb::StepBatchRequest>,
    ) -> Result<Response<pb::StepBatchResponse>, Status> {
        let pb::StepBatchRequest { items, resets } = req.into_inner();
        let max = self.mgr.limits().max_batch as usize;
        let total = items.len() + resets.len();
        if total == 0 {
            return Err(
                ServiceError::invalid("items", "the batch is empty: give items or resets").into(),
            );
        }
        if total > max {
            return Err(ServiceError::ResourceExhausted(format!(
                "batch of {total} entries exceeds max_batch={max}"
            ))
            .into());
        }
        let mut seen = std::collections::HashSet::with_capacity(total);
        let ids = items
            .iter()
            .map(|i| ("items", &i.env_id))
            .chain(resets.iter().map(|r| ("resets", &r.env_id)));
        for (i, (list, id)) in ids.enumerate() {
            if !seen.insert(id.as_str()) {
                let at = if list == "items" { i } else { i - items.len() };
                return Err(ServiceError::invalid(
                    format!("{list}[{at}].env_id"),
                    format!("env {id:?} appears twice in one batch"),
                )
                .into());
            }
        }
        // Start everything first so it runs in parallel; then collect in request order.
        let steps: Vec<_> = items
            .into_iter()
            .map(|it| (it.env_id.clone(), self.start_step(it)))
            .collect();
        let resets: Vec<_> = resets
            .into_iter()
            .map(|r| {
                let started = self
                    .mgr
                    .env(&r.env_id)
                    .map(|env| self.mgr.spawn(move || env.reset(r.seed, r.encoding)));
                (r.env_id, started)
            })
            .collect();
        let mut results = Vec::with_capacity(steps.len());
        for (env_id, started) in steps {
            let outcome = match started {
                Ok(rx) => PoolManager::join(rx).await,
                Err(e) => Err(e),
            };
            results.push(match outcome {
                Ok(r) => pb::StepBatchItem {
                    env_id,
                    code: 0,
                    message: String::new(),
                    result: Some(r),
                },
                Err(e) => pb::StepBatchItem {
                    env_id,
                    code: e.code() as i32,
                    message: e.to_string(),
                    result: None,
                },
            });
        }
        let mut reset_results = Vec::with_capacity(resets.len());
        for (env_id, started) in resets {
            let outcome = match started {
                Ok(rx) => PoolManager::join(rx).await,
                Err(e) => Err(e),
            };
            reset_results.push(match outcome {
                Ok(r) => pb::ResetBatchItem {
                    env_id,
                    code: 0,
                    message: String::new(),
                    result: Some(r),
                },
                Err(e) => pb::ResetBatchItem {
                    env_id,
                    code: e.code() as i32,
                    message: e.to_string(),
                    result: None,
                },
            });
        }
        Ok(Response::new(pb::StepBatchResponse {
            results,
            reset_results,
        }))
    }

    async fn observe(
        &self,
        req: Request<pb::ObserveRequest>,
    ) -> Result<Response<pb::Observation>, Status> {
        let req = req.into_inner();
        let env = self.mgr.env(&req.env_id)?;
        let r = PoolManager::join(self.mgr.spawn(move || env.observe(req.encoding))).await?;
        Ok(Response::new(r))
    }
}
