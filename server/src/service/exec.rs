//! Exec and its streamed form: commands in an env's sandbox, ended when their caller
//! goes away.

use tokio::sync::mpsc;

use super::*;

/// The response stream of `ExecStream`.
pub(crate) type ExecEvents = tokio_stream::wrappers::ReceiverStream<Result<pb::ExecEvent, Status>>;

/// Output events queued towards a slow client before the command's pipes wait for it.
const QUEUE: usize = 16;

impl DeskgymService {
    /// What both forms (`action`) check first: the grant, the request, the time bound.
    async fn exec_parts(
        &self,
        req: Request<pb::ExecRequest>,
        action: &'static str,
    ) -> Result<
        (
            Arc<crate::env::Env>,
            deskgym_worker::ExecSpec,
            Vec<u8>,
            Duration,
        ),
        Status,
    > {
        let who = principal(&req)?;
        let mut r = req.into_inner();
        let env = self
            .granted(&r.env_id, &who, Capability::Exec, action)
            .await?;
        let mut spec = checked::exec_spec(&r, self.mgr.limits())?;
        // While a net.egress grant holds, commands find its proxy where HTTP clients
        // (pip, curl, requests, urllib) look, unless the caller set those itself.
        if let Some(port) = env.unlocks.proxy_port() {
            let proxy = format!("http://127.0.0.1:{port}");
            for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
                if !spec.env.iter().any(|(name, _)| name == k) {
                    spec.env.push((k.to_string(), proxy.clone()));
                }
            }
        }
        let stdin = std::mem::take(&mut r.stdin);
        // The agent ends the command at its bound; the margin covers reporting back.
        let bound = Duration::from_millis(spec.timeout_ms) + EXEC_MARGIN;
        Ok((env, spec, stdin, bound))
    }

    pub(super) async fn do_exec(
        &self,
        req: Request<pb::ExecRequest>,
    ) -> Result<Response<pb::ExecResponse>, Status> {
        let (env, spec, stdin, bound) = self.exec_parts(req, "Exec").await?;
        // A client that cancels (or goes away) drops this future: the command is killed
        // then, and the env is free again, instead of running to its bound.
        let mut cancel = CancelOnDrop(Some(spec.cancel.clone()));
        let job = self.mgr.on_env(&env, Call::Exec, bound, move |e, _| {
            e.exec(&spec, &stdin, None).map(convert::exec_response)
        })?;
        let out = job.finish().await;
        cancel.0 = None;
        Ok(Response::new(out?))
    }

    pub(super) async fn do_exec_stream(
        &self,
        req: Request<pb::ExecRequest>,
    ) -> Result<Response<ExecEvents>, Status> {
        use pb::exec_event::Kind;
        let (env, spec, stdin, bound) = self.exec_parts(req, "ExecStream").await?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let cancel = spec.cancel.clone();
        let out = tx.clone();
        let job = self.mgr.on_env(&env, Call::Exec, bound, move |e, _| {
            let mut seq = 0u64;
            let mut sink = |stdout: bool, data: &[u8]| {
                let output = pb::ExecOutput {
                    seq,
                    channel: if stdout { "stdout" } else { "stderr" }.into(),
                    data: data.to_vec(),
                };
                seq += 1;
                // Waits while the client is behind (the command's pipes then fill and
                // it waits too); a client that went away ends the command.
                let ev = pb::ExecEvent {
                    kind: Some(Kind::Output(output)),
                };
                if out.blocking_send(Ok(ev)).is_err() {
                    spec.cancel.cancel();
                }
            };
            e.exec(&spec, &stdin, Some(&mut sink))
                .map(convert::exec_response)
        })?;
        tokio::spawn(async move {
            let finished = job.finish();
            tokio::pin!(finished);
            let end = tokio::select! {
                end = &mut finished => end,
                () = tx.closed() => {
                    // Nobody listens any more: the command is stopped, and the env is
                    // free once its job ends.
                    cancel.cancel();
                    let _ = finished.await;
                    return;
                }
            };
            let ev = end.map_err(Status::from).map(|r| pb::ExecEvent {
                kind: Some(Kind::End(r)),
            });
            let _ = tx.send(ev).await;
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }
}

/// Cancels an exec when dropped while still holding it (its caller's future went away
/// before the exec ended).
struct CancelOnDrop(Option<deskgym_worker::ExecCancel>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.cancel();
        }
    }
}
