//! Watching an env: its screen streamed as it changes, off the env's own calls (never a
//! step, never in its record, never in the frame cache). One producer per distinct
//! stream (env, shape, fps) feeds every viewer of it, so eight viewers of one env cost
//! one capture and one encode a frame; the viewers of the gRPC `Screencast` RPC and of
//! the console share the server's slots (`--max-screencasts`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deskgym_proto::v1 as pb;
use tokio::sync::{Semaphore, broadcast, mpsc};
use tonic::Status;

use crate::convert;
use crate::env::{Env, Shape};
use crate::pool::PoolError;
use crate::sync::lock;
use deskgym_datasets::LiveEncoder;

/// A viewer's frames (or why its stream ended).
pub(crate) type Viewer = mpsc::Receiver<Result<pb::ScreencastFrame, Status>>;

/// Frames waiting for a slow viewer: past this the newest is dropped, never queued.
const QUEUE: usize = 2;
/// A frame is sent this often even on a still screen, so a viewer knows it is live.
const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// What makes two screencasts the same stream: env, shape, fps, H.264 (or JPEG).
type Key = (String, Shape, u64, bool);

/// A producing screencast's frames (or its end), shared by its viewers.
type Shared = broadcast::Sender<Result<Arc<pb::ScreencastFrame>, Status>>;

/// The frame a producer sent last: what a viewer that joins late sees first.
type Latest = Arc<Mutex<Option<Arc<pb::ScreencastFrame>>>>;

/// Set by an H.264 viewer that needs a keyframe (it joined late, or fell behind): the
/// producer's next frame is one, made at once even on a still screen.
type WantKey = Arc<AtomicBool>;

/// A producer's frame, if the screen changed, and the key of what it saw.
type Made = Result<(crate::env::WatchKey, Option<pb::ScreencastFrame>), Status>;

/// A producing stream as its viewers find it.
type Entry = (Shared, Latest, WantKey);

/// Screencasts: the slots (`Limits::max_screencasts` viewers) and the producers, one
/// per distinct stream.
#[derive(Debug, Clone)]
pub(crate) struct Screencasts {
    slots: Arc<Semaphore>,
    max: u32,
    /// Slots each principal holds (each holds at most its `screencasts=` share).
    held: crate::sync::Holdings,
    producers: Arc<Mutex<HashMap<Key, Entry>>>,
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
            held: Arc::default(),
            producers: Arc::default(),
            closing,
        }
    }

    /// A new viewer of `env` shaped as `shape` at `fps` (validated by the caller), in
    /// H.264 when `h264` (else JPEG), or RESOURCE_EXHAUSTED when every slot is taken
    /// or the env's owner holds `share` of them already.
    pub(crate) fn open(
        &self,
        env: Arc<Env>,
        share: u32,
        shape: Shape,
        fps: f64,
        h264: bool,
    ) -> Result<Viewer, Status> {
        let owner = &env.pool.owner;
        // The server's bound first: with one principal its share is the whole server, and
        // the server's limit is the message that names the flag to change.
        let permit = self.slots.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "this server streams at most max_screencasts={} screencasts at once (the \
                 console's live views count too); close one (or start the server with a \
                 higher --max-screencasts)",
                self.max
            ))
        })?;
        let own = crate::sync::Held::take(&self.held, owner, Some(share)).map_err(|n| {
            Status::resource_exhausted(format!(
                "principal {owner} watches {n} screencasts of its share of {share} (the \
                 console's live views count too); close one, or ask for a larger \
                 `screencasts=` share"
            ))
        })?;
        let key: Key = (env.id.clone(), shape, fps.to_bits(), h264);
        let (mut shared, latest, want_key) = {
            let mut producers = lock(&self.producers);
            match producers.get(&key) {
                Some((tx, latest, want_key)) => {
                    // An H.264 stream is joined at a keyframe, asked for now; a JPEG
                    // one at its latest frame.
                    if h264 {
                        want_key.store(true, Ordering::Release);
                    }
                    let latest = if h264 { None } else { lock(latest).clone() };
                    (tx.subscribe(), latest, want_key.clone())
                }
                None => {
                    let (tx, rx) = broadcast::channel(QUEUE);
                    let (latest, want_key) = (Latest::default(), WantKey::default());
                    producers.insert(key.clone(), (tx.clone(), latest.clone(), want_key.clone()));
                    let p = Producer {
                        env,
                        shape,
                        fps,
                        tx,
                        latest,
                        want_key: want_key.clone(),
                        registry: self.producers.clone(),
                        key,
                        encoder: None,
                    };
                    tokio::spawn(p.run(self.closing.clone()));
                    (rx, None, want_key)
                }
            }
        };
        let (out, rx) = mpsc::channel(QUEUE);
        tokio::spawn(async move {
            let _permit = (permit, own);
            let mut dropped = 0u64;
            // An H.264 viewer decodes from a keyframe: until one comes, it skips.
            let mut need_key = h264;
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
                        if h264 {
                            need_key = true;
                            want_key.store(true, Ordering::Release);
                        }
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                if frame.seq < next_seq {
                    continue; // already sent as the latest frame
                }
                if need_key && !frame.keyframe {
                    dropped += 1;
                    continue;
                }
                need_key = false;
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
    want_key: WantKey,
    registry: Arc<Mutex<HashMap<Key, Entry>>>,
    key: Key,
    /// The H.264 stream's encoder (made for the first frame's size, and again when
    /// the size changes); `None` for JPEG.
    encoder: Option<LiveEncoder>,
}

impl Producer {
    /// Removes this producer from the registry (if the entry is still its own).
    fn leave(&self, producers: &mut HashMap<Key, Entry>) {
        if producers
            .get(&self.key)
            .is_some_and(|(t, _, _)| t.same_channel(&self.tx))
        {
            producers.remove(&self.key);
        }
    }

    /// Leaves the registry (if still its entry), telling the viewers why.
    fn end(&self, why: Status) {
        self.leave(&mut lock(&self.registry));
        let _ = self.tx.send(Err(why));
    }

    async fn run(mut self, mut closing: tokio::sync::watch::Receiver<bool>) {
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
            let key_wanted = self.want_key.swap(false, Ordering::AcqRel);
            let known = if sent.elapsed() >= KEEP_ALIVE || key_wanted {
                None
            } else {
                last
            };
            let (e, shape) = (self.env.clone(), self.shape);
            let made = if self.key.3 {
                let encoder = self.encoder.take();
                let shot = tokio::task::spawn_blocking(move || {
                    h264_frame(&e, &shape, known, encoder, key_wanted)
                })
                .await;
                match shot {
                    Ok((encoder, r)) => {
                        self.encoder = encoder;
                        r
                    }
                    Err(_) => Err(Status::internal("a screencast capture panicked")),
                }
            } else {
                let shot = tokio::task::spawn_blocking(move || e.watch(&shape, known)).await;
                match shot {
                    Ok(Ok((k, obs))) => Ok((k, obs.map(jpeg_frame))),
                    Ok(Err(err)) => Err(Status::from(PoolError::from(err))),
                    Err(_) => Err(Status::internal("a screencast capture panicked")),
                }
            };
            let (k, f) = match made {
                Ok(v) => v,
                Err(status) => return self.end(status),
            };
            last = Some(k);
            let Some(mut f) = f else { continue };
            f.seq = seq;
            let f = Arc::new(f);
            *lock(&self.latest) = Some(f.clone());
            let _ = self.tx.send(Ok(f));
            seq += 1;
            sent = Instant::now();
        }
    }
}

/// A viewer's frame from a watched observation (its pixels JPEG, or none yet).
fn jpeg_frame(o: crate::env::Obs) -> pb::ScreencastFrame {
    let o = convert::observation(o);
    pb::ScreencastFrame {
        jpeg: o.frame.to_vec(),
        width: o.width,
        height: o.height,
        frame_hash: o.frame_hash,
        pointer: o.pointer,
        frame_pointer: o.frame_pointer,
        display: o.display,
        captured_unix_ms: deskgym_datasets::unix_ms(),
        ..Default::default()
    }
}

/// Blocking: the env's pixels (if changed since `known`) as an H.264 access unit, a
/// keyframe when `key` or the stream is new; the encoder goes back to the producer.
fn h264_frame(
    e: &Env,
    shape: &Shape,
    known: Option<crate::env::WatchKey>,
    encoder: Option<LiveEncoder>,
    key: bool,
) -> (Option<LiveEncoder>, Made) {
    let (k, pixels) = match e.watch_pixels(shape, known) {
        Ok(v) => v,
        Err(err) => return (encoder, Err(Status::from(PoolError::from(err)))),
    };
    let Some((cut, geometry, pointer)) = pixels else {
        return (encoder, Ok((k, None)));
    };
    let even = (cut.width & !1, cut.height & !1);
    let (mut enc, fresh) = match encoder {
        Some(enc) if enc.size() == even => (enc, false),
        _ => {
            let started = deskgym_datasets::h264_encoder()
                .and_then(|choice| LiveEncoder::start(cut.width, cut.height, &choice.element));
            match started {
                Ok(enc) => (enc, true),
                Err(err) => {
                    return (
                        None,
                        Err(Status::failed_precondition(format!(
                            "H.264 screencasts need an encoder: {err} (or ask for JPEG)"
                        ))),
                    );
                }
            }
        }
    };
    let au = match enc.push(&cut.rgb, key || fresh) {
        Ok(au) => au,
        Err(err) => {
            return (
                None,
                Err(Status::internal(format!("the H.264 encoder failed: {err}"))),
            );
        }
    };
    let meta = crate::env::Obs::meta(
        pb::ImageEncoding::Unspecified,
        (even.0, even.1, cut.hash),
        pointer,
        deskgym_worker::SettleReport::default(),
        geometry,
    );
    let f = pb::ScreencastFrame {
        h264: au.data,
        keyframe: au.keyframe,
        codec: enc.codec().unwrap_or_default().to_string(),
        ..jpeg_frame(meta)
    };
    (Some(enc), Ok((k, Some(f))))
}
