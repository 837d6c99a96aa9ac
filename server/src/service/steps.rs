//! Steps: Reset and Step one at a time, StepBatch (all items started before any is
//! awaited, shared frames sent once) and StepStream (EnvPool-style: each env's result as
//! soon as it is done).

use super::*;

/// Runs a StepStream: starts each request as it is read (up to `max_batch` running),
/// sends each result as it completes. Ends when the client ends its stream and every
/// started request has answered, when the client goes away, or at shutdown.
pub(super) async fn step_stream(
    svc: DeskgymService,
    who: Principal,
    mut inbound: tonic::Streaming<pb::StepStreamRequest>,
    tx: tokio::sync::mpsc::Sender<Result<pb::StepStreamResult, Status>>,
    mut closing: tokio::sync::watch::Receiver<bool>,
) {
    use pb::step_stream_request::Kind as In;
    use pb::step_stream_result::Kind as Out;
    let max = svc.mgr.limits().max_batch.max(1) as usize;
    let mut running = tokio::task::JoinSet::new();
    let mut reading = true;
    loop {
        tokio::select! {
            next = inbound.message(), if reading && running.len() < max => match next {
                Ok(Some(m)) => {
                    let tag = m.tag;
                    match m.kind {
                        Some(In::Step(s)) => {
                            let env_id = s.env_id.clone();
                            let started = svc.calls.start_step(s, &Field::named("step"), &[], &who);
                            running.spawn(async move {
                                let (code, message, r) = outcome(started).await;
                                pb::StepStreamResult { env_id, tag, code, message, kind: r.map(Out::Step) }
                            });
                        }
                        Some(In::Reset(r)) => {
                            let env_id = r.env_id.clone();
                            let started = svc.calls.start_reset(r, &Field::named("reset"), &[], &who);
                            running.spawn(async move {
                                let (code, message, r) = outcome(started).await;
                                pb::StepStreamResult { env_id, tag, code, message, kind: r.map(Out::Reset) }
                            });
                        }
                        None => {
                            let s = Status::from(Invalid::new("kind", "set step or reset"));
                            let r = pb::StepStreamResult {
                                tag,
                                code: s.code() as i32,
                                message: s.message().to_string(),
                                ..Default::default()
                            };
                            if tx.send(Ok(r)).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                Ok(None) => reading = false,
                Err(_) => return, // the client went away
            },
            Some(done) = running.join_next(), if !running.is_empty() => {
                let result = done.unwrap_or_else(|e| pb::StepStreamResult {
                    code: tonic::Code::Internal as i32,
                    message: format!("a stream step failed: {e}"),
                    ..Default::default()
                });
                if tx.send(Ok(result)).await.is_err() {
                    return;
                }
            }
            _ = closing.changed() => {
                let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
                return;
            }
        }
        if !reading && running.is_empty() {
            return;
        }
    }
}

pub(super) async fn finish<T>(started: Result<EnvJob<T>, PoolError>) -> Result<T, PoolError> {
    started?.finish().await
}

/// A batch entry's status: (gRPC code, message, result), so one failing env never
/// fails the batch.
pub(super) async fn outcome<T>(started: Result<EnvJob<T>, PoolError>) -> (i32, String, Option<T>) {
    match finish(started).await {
        Ok(r) => (0, String::new(), Some(r)),
        Err(e) => {
            let s = Status::from(e);
            (s.code() as i32, s.message().to_string(), None)
        }
    }
}

/// Sends each frame's pixels once per response: an observation whose (hash, encoding)
/// an earlier one already carries becomes `not_modified`.
pub(super) struct Dedup<'a> {
    mgr: &'a PoolManager,
    who: &'a Principal,
    sent: HashSet<(String, i32)>,
}

impl Dedup<'_> {
    fn apply(&mut self, obs: Option<&mut pb::Observation>) {
        let Some(o) = obs else { return };
        if o.not_modified || o.frame.is_empty() {
            return;
        }
        if !self.sent.insert((o.frame_hash.clone(), o.encoding)) {
            self.mgr
                .cache
                .record_not_modified(o.frame.len() as u64, &self.who.name);
            o.frame = Bytes::new();
            o.not_modified = true;
        }
    }
}

impl DeskgymService {
    pub(super) async fn do_step_batch(
        &self,
        req: Request<pb::StepBatchRequest>,
    ) -> Result<Response<pb::StepBatchResponse>, Status> {
        let who = principal(&req)?;
        let pb::StepBatchRequest {
            items,
            resets,
            if_none_match,
        } = req.into_inner();
        let max = self.mgr.limits().max_batch as usize;
        let total = items.len() + resets.len();
        if total == 0 {
            return Err(Invalid::new("items", "the batch is empty: give items or resets").into());
        }
        if total > max {
            return Err(PoolError::Limit(format!(
                "batch of {total} entries exceeds max_batch={max}"
            ))
            .into());
        }
        let mut seen = HashSet::with_capacity(total);
        let ids = items
            .iter()
            .map(|i| ("items", &i.env_id))
            .chain(resets.iter().map(|r| ("resets", &r.env_id)));
        for (i, (list, id)) in ids.enumerate() {
            if !seen.insert(id.as_str()) {
                let at = if list == "items" { i } else { i - items.len() };
                return Err(Invalid::new(
                    format!("{list}[{at}].env_id"),
                    format!("env {} appears twice in one batch", quote(id)),
                )
                .into());
            }
        }
        let shared = checked::hashes(
            &Field::named("if_none_match"),
            &if_none_match,
            self.mgr.limits().max_if_none_match,
        )?;
        // Start everything first so it runs in parallel; then collect in request order.
        let steps: Vec<_> = items
            .into_iter()
            .enumerate()
            .map(|(i, it)| {
                (
                    it.env_id.clone(),
                    self.calls
                        .start_step(it, &Field::named("items").index(i), &shared, &who),
                )
            })
            .collect();
        let resets: Vec<_> = resets
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                (
                    r.env_id.clone(),
                    self.calls
                        .start_reset(r, &Field::named("resets").index(i), &shared, &who),
                )
            })
            .collect();
        let mut dedup = Dedup {
            mgr: &self.mgr,
            who: &who,
            sent: HashSet::new(),
        };
        let mut results = Vec::with_capacity(steps.len());
        for (env_id, started) in steps {
            let (code, message, mut result) = outcome(started).await;
            if let Some(r) = result.as_mut() {
                dedup.apply(r.observation.as_mut());
                dedup.apply(r.reset.as_mut().and_then(|r| r.observation.as_mut()));
            }
            results.push(pb::StepBatchItem {
                env_id,
                code,
                message,
                result,
            });
        }
        let mut reset_results = Vec::with_capacity(resets.len());
        for (env_id, started) in resets {
            let (code, message, mut result) = outcome(started).await;
            if let Some(r) = result.as_mut() {
                dedup.apply(r.observation.as_mut());
            }
            reset_results.push(pb::ResetBatchItem {
                env_id,
                code,
                message,
                result,
            });
        }
        Ok(Response::new(pb::StepBatchResponse {
            results,
            reset_results,
        }))
    }
}

impl DeskgymService {
    pub(super) async fn do_reset(
        &self,
        req: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        let who = principal(&req)?;
        Ok(Response::new(
            finish(
                self.calls
                    .start_reset(req.into_inner(), &Field::root(), &[], &who),
            )
            .await?,
        ))
    }

    pub(super) async fn do_step(
        &self,
        req: Request<pb::StepRequest>,
    ) -> Result<Response<pb::StepResult>, Status> {
        let who = principal(&req)?;
        Ok(Response::new(
            finish(
                self.calls
                    .start_step(req.into_inner(), &Field::root(), &[], &who),
            )
            .await?,
        ))
    }

    pub(super) async fn do_step_stream(
        &self,
        req: Request<tonic::Streaming<pb::StepStreamRequest>>,
    ) -> Result<Response<<Self as Deskgym>::StepStreamStream>, Status> {
        let who = principal(&req)?;
        let inbound = req.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(self.mgr.limits().max_batch.max(1) as usize);
        tokio::spawn(step_stream(
            self.clone(),
            who,
            inbound,
            tx,
            self.closing.clone(),
        ));
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }
}
