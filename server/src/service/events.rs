//! One env as a whole: GetEnv (what it is) and WatchEvents (its live event log).

use tokio::sync::broadcast::error::RecvError;

use super::*;

/// The response stream of `WatchEvents`.
pub(crate) type EnvEvents = tokio_stream::wrappers::ReceiverStream<Result<pb::EnvEvent, Status>>;

/// Events queued between a watcher's reader and its connection: small, since the
/// env's ring (`env::events::WATCH_QUEUE`) is where a slow watcher's backlog waits.
const WATCH_SEND_QUEUE: usize = 16;

impl DeskgymService {
    pub(super) async fn do_get_env(
        &self,
        req: Request<pb::GetEnvRequest>,
    ) -> Result<Response<pb::EnvInfo>, Status> {
        let who = principal(&req)?;
        // Whoever drives it (a person at the console too): this only reads.
        let env = self.mgr.env_of(&req.into_inner().env_id, &who)?;
        Ok(Response::new(convert::env_info(&env)))
    }

    pub(super) async fn do_watch_events(
        &self,
        req: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<EnvEvents>, Status> {
        let who = principal(&req)?;
        let env_id = req.into_inner().env_id;
        let env = self.mgr.env_of(&env_id, &who)?;
        let Some(mut events) = env.events.subscribe() else {
            // Its pool closed since the lookup (the pool's envs leave the map first).
            return Err(self.mgr.env_of(&env_id, &who).err().map_or_else(
                || Status::not_found(format!("env {env_id:?} closed")),
                Status::from,
            ));
        };
        // The task holds the receiver, never the env: the env's close ends the stream.
        drop(env);
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_SEND_QUEUE);
        let mut closing = self.closing.clone();
        tokio::spawn(async move {
            let mut lost = 0u64;
            loop {
                let e = tokio::select! {
                    e = events.recv() => e,
                    // The server shuts down, or the watcher hung up while nothing happened.
                    _ = closing.wait_for(|c| *c) => break,
                    () = tx.closed() => break,
                };
                let e = match e {
                    Ok(e) => e,
                    Err(RecvError::Lagged(n)) => {
                        lost += n;
                        continue;
                    }
                    Err(RecvError::Closed) => break,
                };
                let msg = pb::EnvEvent {
                    seq: e.seq,
                    time_ms: e.time_ms,
                    kind: e.kind.clone(),
                    env_id: e.env_id.clone(),
                    payload: e.payload.clone(),
                    lost: std::mem::take(&mut lost),
                };
                // The watcher hung up.
                if tx.send(Ok(msg)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }
}
