//! Watching an env: its screen streamed as it changes, off the env's own calls (never a
//! step, never in its record, never in the frame cache). One producer per distinct
//! stream (env, shape, fps) feeds every viewer of it, so eight viewers of one env cost
//! one capture and one encode a frame; the viewers of the gRPC `Screencast` RPC and of
//! the console share the server's slots (`--max-screencasts`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deskgym_proto::v1 as pb;
use tokio::sync::{Semaphore, broadcast, mpsc};
use tonic::Status;

use crate::convert;
use crate::env::{Env, Shape};
use crate::pool::PoolError;
use crate::sync::lock;

/// A viewer's frames (or why its stream ended).
pub(crate) type Viewer = mpsc::Receiver<Result<pb::ScreencastFrame, Status>>;

/// Frames waiting for a slow viewer: past this the newest is dropped, never queued.
const QUEUE: usize = 2;
/// A frame is sent this often even on a still screen, so a viewer knows it is live.
const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// What makes two screencasts the same stream: env, shape, fps.
type Key = (String, Shape, u64);

/// A producing screencast's frames (or its end), shared by its viewers.
type Shared = broadcast::Sender<Result<Arc<pb::ScreencastFrame>, Status>>;

/// The frame a producer sent last: what a viewer that joins late sees first.
type Latest = Arc<Mutex<Option<Arc<pb::ScreencastFrame>>>>;

/// Screencasts: the slots (`Limits::max_screencasts` viewers) and the producers, one
/// per distinct stream.
#[derive(Debug, Clone)]
pub(crate) struct Screencasts {
    slots: Arc<Semaphore>,
    max: u32,
    producers: Arc<Mutex<HashMap<Key, (Shared, Latest)>>>,
    closing: tokio::sync::watch::Receiver<bool>,
}

impl Screencasts {
    /// Room for `Limits::max_screencasts` viewers; every stream ends when `closing`
    /// turns true.
    pub(crate) fn new(
        limits: &crate::config::Limits,
        closing: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(limits.max_screencasts as usize)),
            max: limits.max_screencasts,
            producers: Arc::default(),
            closing,
        }
    }

    /// A new viewer of `env` shaped as `shape` at `fps` (validated by the caller), or
    /// RESOURCE_EXHAUSTED when every slot is taken.
    pub(crate) fn open(&self, env: Arc<Env>, shape: Shape, fps: f64) -> Result<Viewer, Status> {
        let permit = self.slots.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "this server streams at most max_screencasts={} screencasts at once (the \
                 console's live views count too); close one (or start the server with a \
                 higher --max-screencasts)",
                self.max
            ))
        })?;
        let key: Key = (env.id.clone(), shape, fps.to_bits());
        let (mut shared, latest) = {
            let mut producers = lock(&self.producers);
            match producers.get(&key) {
                Some((tx, latest)) => (tx.subscribe(), lock(latest).clone()),
                None => {
                    let (tx, rx) = broadcast::channel(QUEUE);
                    let latest = Latest::default();
                    producers.insert(key.clone(), (tx.clone(), latest.clone()));
                    let p = Producer {
                        env,
                        shape,
                        fps,
                        tx,
                        latest,
                        registry: self.producers.clone(),
                        key,
                    };
                    tokio::spawn(p.run(self.closing.clone()));
                    (rx, None)
                }
            }
        };
        let (out, rx) = mpsc::channel(QUEUE);
        tokio::spawn(async move {
            let _permit = permit;
            let mut dropped = 0u64;
            // A viewer that joins a running stream starts from its latest frame.
            let mut next_seq = 0u64;
            if let Some(f) = latest {
                next_seq = f.seq + 1;
                if out.send(Ok((*f).clone())).await.is_err() {
                    return;
                }
            }
            loop {
                // A viewer that left frees its slot at once, still screen or not.
                let next = tokio::select! {
                    next = shared.recv() => next,
                    () = out.closed() => return,
                };
                let frame = match next {
                    Ok(Ok(f)) => f,
                    Ok(Err(status)) => {
                        let _ = out.send(Err(status)).await;
                        return;
                    }
                    // This viewer was behind: the frames it missed are dropped.
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        dropped += n;
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if frame.seq < next_seq {
                    continue; // already sent as the latest frame
                }
                next_seq = frame.seq + 1;
                let mine = pb::ScreencastFrame {
                    dropped,
                    ..(*frame).clone()
                };
                tokio::select! {
                    sent = out.send(Ok(mine)) => if sent.is_err() { return },
                    () = out.closed() => return,
                }
            }
        });
        Ok(rx)
    }
}

/// One stream's producer: a frame when the pixels changed (or a keep-alive), at most
/// `fps` a second, until its last viewer leaves, the env fails or the server stops.
struct Producer {
    env: Arc<crate::env::Env>,
    shape: crate::env::Shape,
    fps: f64,
    tx: Shared,
    latest: Latest,
    registry: Arc<Mutex<HashMap<Key, (Shared, Latest)>>>,
    key: Key,
}

impl Producer {
    /// Removes this producer from the registry (if the entry is still its own).
    fn leave(&self, producers: &mut HashMap<Key, (Shared, Latest)>) {
        if producers
            .get(&self.key)
            .is_some_and(|(t, _)| t.same_channel(&self.tx))
        {
            producers.remove(&self.key);
        }
    }

    /// Leaves the registry (if still its entry), telling the viewers why.
    fn end(&self, why: Status) {
        self.leave(&mut lock(&self.registry));
        let _ = self.tx.send(Err(why));
    }

    async fn run(self, mut closing: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / self.fps));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut seq = 0u64;
        let mut last: Option<crate::env::WatchKey> = None;
        let mut sent = Instant::now();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = closing.changed() => {
                    return self.end(Status::unavailable("the server is shutting down"));
                }
            }
            // No viewer left: stop (checked under the registry's lock, so no viewer
            // joins a producer that is ending).
            {
                let mut producers = lock(&self.registry);
                if self.tx.receiver_count() == 0 {
                    return self.leave(&mut producers);
                }
            }
            let known = if sent.elapsed() >= KEEP_ALIVE {
                None
            } else {
                last
            };
            let (e, shape) = (self.env.clone(), self.shape);
            let shot = tokio::task::spawn_blocking(move || e.watch(&shape, known)).await;
            let (k, obs) = match shot {
                Ok(Ok(v)) => v,
                Ok(Err(err)) => return self.end(Status::from(PoolError::from(err))),
                Err(_) => return self.end(Status::internal("a screencast capture panicked")),
            };
            last = Some(k);
            let Some(o) = obs else { continue };
            let f = Arc::new(frame(o, seq));
            *lock(&self.latest) = Some(f.clone());
            let _ = self.tx.send(Ok(f));
            seq += 1;
            sent = Instant::now();
        }
    }
}

/// A viewer's frame from a watched observation.
fn frame(o: crate::env::Obs, seq: u64) -> pb::ScreencastFrame {
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
        dropped: 0,
    }
}
