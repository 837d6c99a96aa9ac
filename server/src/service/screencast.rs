//! Screencast: one env's screen streamed to a viewer as it changes, off the env's own
//! calls (never a step, never in its record, never in the frame cache).

use std::time::Instant;

use tokio::sync::{Semaphore, mpsc};

use super::*;

/// The response stream of `Screencast`.
pub(crate) type Frames =
    tokio_stream::wrappers::ReceiverStream<Result<pb::ScreencastFrame, Status>>;

/// Frames waiting for a slow viewer: past this the newest is dropped, never queued.
const QUEUE: usize = 2;
/// A frame is sent this often even on a still screen, so a viewer knows it is live.
const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// Open screencasts, bounded by `Limits::max_screencasts`.
pub(crate) fn slots(limits: &crate::config::Limits) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(limits.max_screencasts as usize))
}

impl DeskgymService {
    pub(super) async fn do_screencast(
        &self,
        req: Request<pb::ScreencastRequest>,
    ) -> Result<Response<Frames>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self.mgr.env(&r.env_id, &who)?;
        let fps = if r.fps == 0.0 { 5.0 } else { r.fps };
        if !(0.1..=30.0).contains(&fps) {
            return Err(
                Invalid::new("fps", format!("{} is outside 0.1..=30 (0: 5)", r.fps)).into(),
            );
        }
        let shape = convert::shape("", r.scope, r.window, r.max_long_edge, r.jpeg_quality)?;
        let permit = self.screencasts.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "this server streams at most max_screencasts={} screencasts at once; close one \
                 (or start the server with a higher --max-screencasts)",
                self.mgr.limits().max_screencasts
            ))
        })?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let period = Duration::from_secs_f64(1.0 / fps);
        let mut closing = self.closing.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let (mut seq, mut dropped) = (0u64, 0u64);
            let mut last: Option<crate::env::WatchKey> = None;
            let mut sent = Instant::now();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = tx.closed() => return,
                    _ = closing.changed() => {
                        let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
                        return;
                    }
                }
                // A frame at least every KEEP_ALIVE, changed or not.
                let known = if sent.elapsed() >= KEEP_ALIVE {
                    None
                } else {
                    last
                };
                let e = env.clone();
                let shot = tokio::task::spawn_blocking(move || e.watch(&shape, known)).await;
                let (key, obs) = match shot {
                    Ok(Ok(v)) => v,
                    Ok(Err(err)) => {
                        let _ = tx.send(Err(Status::from(PoolError::from(err)))).await;
                        return;
                    }
                    Err(_) => {
                        let _ = tx
                            .send(Err(Status::internal("a screencast capture panicked")))
                            .await;
                        return;
                    }
                };
                last = Some(key);
                let Some(o) = obs else { continue };
                let frame = frame(o, seq, dropped);
                seq += 1;
                match tx.try_send(Ok(frame)) {
                    Ok(()) => sent = Instant::now(),
                    // The viewer is behind: this (newest) frame is dropped.
                    Err(mpsc::error::TrySendError::Full(_)) => dropped += 1,
                    Err(mpsc::error::TrySendError::Closed(_)) => return,
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }
}

/// A viewer's frame from a watched observation.
fn frame(o: crate::env::Obs, seq: u64, dropped: u64) -> pb::ScreencastFrame {
    let o = convert::observation(o);
    pb::ScreencastFrame {
        seq,
        jpeg: o.frame.to_vec(),
        width: o.width,
        height: o.height,
        frame_hash: o.frame_hash,
        pointer: o.pointer,
        frame_pointer: o.frame_pointer,
        display: o.display,
        captured_unix_ms: deskgym_datasets::writer::now_ms() as i64,
        dropped,
    }
}
