//! One H.264 MP4 per episode through GStreamer, cut from one long-lived encoder per
//! env ([`VideoStream`], fed the captured RGB frames converted to I420).
//!
//! The encoder is chosen once per process by running a one-frame test pipeline for
//! each candidate in order: `nvh264enc` (NVENC through nvcodec; an element that exists
//! may still fail to open, e.g. on GPUs without an NVENC engine such as H100/H200),
//! then `x264enc`, then `openh264enc`. The choice and every rejected candidate (with
//! why) are reported, so the recorder can put them in its manifest and event log.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::OnceLock;

use bytes::Bytes;
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use gstreamer_video as gst_video;

/// Why video cannot be recorded.
#[derive(Clone, Debug, thiserror::Error)]
pub enum VideoError {
    /// GStreamer, an element or every encoder is missing; the message names the package.
    #[error("{0}")]
    Unavailable(String),
    /// A pipeline failed while running.
    #[error("video pipeline: {0}")]
    Pipeline(String),
}

mod i420;
mod live;
mod mp4;
mod probe;
mod skip;

pub use i420::rgb_to_i420;
pub use live::{AccessUnit, LiveEncoder};
use mp4::Mp4;
use probe::element_settings;
pub use probe::{ENCODERS, EncoderChoice, encoder};

/// One env's video: a long-lived encoder, cut into one MP4 per episode.
///
/// Building and tearing down an encoder for every episode costs ~20 ms of CPU
/// (x264/openh264 start-up and shutdown), which at short episodes and ~1000 steps/s
/// was a quarter of the machine. So each env keeps one encoder pipeline
/// (`appsrc ! enc ! h264parse ! appsink`, fed I420 converted here) for the whole run; an
/// episode asks for a keyframe at its first frame, and its encoded frames are written
/// into that episode's own MP4 by `mp4` (no muxer pipeline per episode), rebased so
/// every episode file starts at 0.
///
/// Constant frame rate: every slot holds a picture, so step `i` of an episode is the
/// `i`-th frame at `i / fps` seconds in its file (LeRobot and other frame-index readers
/// need exactly that). A frame identical to the previous one (same hash) is neither
/// converted nor encoded: an all-skip P picture written here (`skip`) goes to the
/// muxer in its slot. Streams that cannot take one exactly (an encoder other than
/// x264enc's settings here) get the previous picture pushed through the encoder again.
pub struct VideoStream {
    pipeline: gst::Pipeline,
    src: gst_app::AppSrc,
    sink: gst_app::AppSink,
    /// Size of the RGB frames pushed; `info` (I420) is that rounded down to even.
    width: u32,
    height: u32,
    info: gst_video::VideoInfo,
    /// I420 buffers for the encoder's input.
    pool: gst::BufferPool,
    fps: u32,
    /// First free time slot of the encoder's stream (slots never go back).
    slot: u64,
    /// Pictures pushed into the encoder, and encoded frames taken out: the encoders
    /// used here emit exactly one frame per picture, so `out == pushed` means drained.
    pushed: u64,
    out: u64,
    episode: Option<EpisodeFile>,
    /// The last picture converted (its own memory, not a pooled buffer), pushed again
    /// for a repeated frame.
    last_picture: Option<gst::Buffer>,
    /// One picture per slot (true, the default) or repeats elided (the previous
    /// picture shown longer: cheaper, but readers that map frame index to time break).
    constant_rate: bool,
    /// The stream as muxed, for repeats written without the encoder: `None` until the
    /// encoder's first frame says whether its stream can take them (then `Some`), and
    /// `Some(None)` when it cannot.
    skip: Option<Option<skip::Stream>>,
}

/// The episode being written: its muxer and what has been pushed for it.
struct EpisodeFile {
    mux: Mp4,
    path: PathBuf,
    tmp: PathBuf,
    /// Slot of the episode's first frame in the encoder's stream.
    start: u64,
    /// Slots used so far (frames pushed, elided repeats included).
    frames: u64,
    /// Hash of the last picture encoded.
    last: Option<String>,
    /// Encoded frames taken for this episode so far.
    muxed: u64,
    /// Timestamp of the episode's first encoded frame (encoders may offset their
    /// output, x264enc by 1000 h), subtracted so each file starts at 0.
    base: Option<gst::ClockTime>,
    /// The latest encoded frame, held back until its duration is known (the next
    /// frame's time, or the episode's end).
    held: Option<gst::Buffer>,
    /// Repeats waiting for the encoder's frames before them: (encoder frames out
    /// before it, slot).
    repeats: std::collections::VecDeque<(u64, u64)>,
    /// The rebased (pts, dts) of the episode's first frame: a slot's times are its
    /// offset from the episode's start plus these.
    first: (gst::ClockTime, gst::ClockTime),
}

/// Frames appsrc may queue before `push` blocks: the writer thread (and through its
/// bounded channel, the overflow policy) feels a slow encoder instead of memory growing.
const QUEUED_FRAMES: u64 = 4;

/// How long to wait for the encoder or the muxer before calling it stuck.
const STUCK: gst::ClockTime = gst::ClockTime::from_seconds(30);

fn pipeline(desc: &str) -> Result<gst::Pipeline, VideoError> {
    gst::parse::launch(desc)
        .map_err(|e| VideoError::Pipeline(e.to_string()))?
        .downcast::<gst::Pipeline>()
        .map_err(|_| VideoError::Pipeline("not a pipeline".into()))
}

/// What an appsrc of ours takes: I420 pictures with BT.601 colours (what
/// [`rgb_to_i420`] writes) at `fps`. One definition for the recording and the live
/// encoder, whose input is converted by the same loop and so must be described alike.
fn i420_info(width: u32, height: u32, fps: i32) -> Result<gst_video::VideoInfo, VideoError> {
    let err = |e: &dyn std::fmt::Display| VideoError::Pipeline(e.to_string());
    gst_video::VideoInfo::builder(gst_video::VideoFormat::I420, width, height)
        .fps(gst::Fraction::new(fps, 1))
        .colorimetry(&gst_video::VideoColorimetry::from_str("bt601").map_err(|e| err(&e))?)
        .build()
        .map_err(|e| err(&e))
}

/// Sets `pipeline` playing, its `src` blocking the pusher once `frames` pictures of
/// `info` are queued (a slow encoder is felt by whoever pushes, instead of memory
/// growing): how both encoders start.
fn play(
    pipeline: &gst::Pipeline,
    src: &gst_app::AppSrc,
    info: &gst_video::VideoInfo,
    frames: u64,
) -> Result<(), VideoError> {
    src.set_property("block", true);
    src.set_property("max-bytes", frames * info.size() as u64);
    pipeline
        .set_state(gst::State::Playing)
        .map_err(|e| VideoError::Pipeline(e.to_string()))?;
    Ok(())
}

fn by_name<T: IsA<gst::Element>>(p: &gst::Pipeline, name: &str) -> Result<T, VideoError> {
    p.by_name(name)
        .and_then(|e| e.downcast::<T>().ok())
        .ok_or_else(|| VideoError::Pipeline(format!("no element {name}")))
}

/// The first error a pipeline posted, if any (without waiting).
fn bus_error(p: &gst::Pipeline) -> Option<VideoError> {
    let msg = p.bus()?.pop_filtered(&[gst::MessageType::Error])?;
    match msg.view() {
        gst::MessageView::Error(e) => Some(VideoError::Pipeline(format!(
            "{} ({})",
            e.error(),
            e.debug().map(|d| d.to_string()).unwrap_or_default()
        ))),
        _ => None,
    }
}

impl VideoStream {
    /// Starts an encoder for `width`x`height` RGB at `fps` with `encoder` (an element
    /// name from [`ENCODERS`]).
    pub fn start(width: u32, height: u32, fps: u32, encoder: &str) -> Result<Self, VideoError> {
        let err = |e: &dyn std::fmt::Display| VideoError::Pipeline(e.to_string());
        // The encoder gets 4:2:0, which every player decodes (from RGB, x264enc would
        // pick 4:4:4, which browsers and hardware decoders cannot play), converted by
        // `rgb_to_i420` at a fraction of videoconvert's cost. 4:2:0 needs even sides:
        // an odd screen loses its last column or row in the video.
        let pipeline = pipeline(&format!(
            "appsrc name=src format=time ! {} \
             ! h264parse ! video/x-h264,stream-format=avc,alignment=au ! appsink name=sink sync=false",
            element_settings(encoder)
        ))?;
        let src: gst_app::AppSrc = by_name(&pipeline, "src")?;
        let sink: gst_app::AppSink = by_name(&pipeline, "sink")?;
        let info = i420_info(width & !1, height & !1, fps as i32)?;
        let caps = info.to_caps().map_err(|e| err(&e))?;
        src.set_caps(Some(&caps));
        let pool = gst::BufferPool::new();
        let mut config = pool.config();
        config.set_params(Some(&caps), info.size() as u32, 0, 0);
        pool.set_config(config).map_err(|e| err(&e))?;
        pool.set_active(true).map_err(|e| err(&e))?;
        play(&pipeline, &src, &info, QUEUED_FRAMES)?;
        Ok(Self {
            pipeline,
            src,
            sink,
            width,
            height,
            info,
            pool,
            fps,
            slot: 0,
            pushed: 0,
            out: 0,
            episode: None,
            last_picture: None,
            constant_rate: true,
            skip: None,
        })
    }

    /// Width and height of the frames this stream takes.
    pub fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    /// Starts an episode whose file will be `path` (written as `<path>.tmp` until
    /// [`end_episode`](Self::end_episode)). An episode still open is ended first.
    pub fn begin_episode(&mut self, path: &Path) -> Result<(), VideoError> {
        if self.episode.is_some() {
            self.end_episode()?;
        }
        let tmp = path.with_extension("mp4.tmp");
        let mux = Mp4::create(&tmp, self.info.width(), self.info.height(), self.fps)?;
        self.episode = Some(EpisodeFile {
            mux,
            path: path.to_path_buf(),
            tmp,
            start: self.slot,
            frames: 0,
            last: None,
            muxed: 0,
            base: None,
            held: None,
            repeats: Default::default(),
            first: Default::default(),
        });
        Ok(())
    }

    /// Elides repeated frames (variable frame rate) instead of encoding one picture per
    /// slot.
    pub fn set_constant_rate(&mut self, on: bool) {
        self.constant_rate = on;
    }

    /// Pushes repeated frames through the encoder even where the stream could take
    /// written ones (the path before them; benchmarks compare the two).
    #[doc(hidden)]
    pub fn encode_repeats(&mut self) {
        self.skip = Some(None);
    }

    /// Appends the next frame (packed RGB) to the current episode. A frame whose hash
    /// equals the previous one is a written skip picture (constant rate; the previous
    /// picture pushed again where the stream cannot take one) or only extends the
    /// previous picture (variable rate).
    pub fn push(&mut self, rgb: Bytes, hash: &str) -> Result<(), VideoError> {
        let ep = self
            .episode
            .as_mut()
            .ok_or_else(|| VideoError::Pipeline("push outside an episode".into()))?;
        let slot = ep.start + ep.frames;
        let repeat = ep.last.as_deref() == Some(hash);
        if repeat && !self.constant_rate {
            ep.frames += 1;
            return Ok(());
        }
        if repeat && self.skip.is_none() {
            // Whether the stream takes written repeats is known from its first frame:
            // wait for it once.
            self.forward(true)?;
        }
        let ep = self.episode.as_mut().expect("checked above");
        if repeat && matches!(self.skip, Some(Some(_))) {
            ep.frames += 1;
            ep.repeats.push_back((self.pushed, slot));
            return self.forward(false);
        }
        if repeat && let Some(picture) = &self.last_picture {
            ep.frames += 1;
            let mut again = picture.copy();
            {
                let b = again.make_mut();
                let (pts, next) = (self.slot_time(slot), self.slot_time(slot + 1));
                b.set_pts(pts);
                b.set_duration(next - pts);
            }
            self.push_picture(again)?;
            return self.forward(false);
        }
        if ep.frames == 0 {
            // The episode's file must start with a keyframe. appsrc queues the event
            // in order with the buffers, so "the next frame" is this one. (No running
            // time: GStreamer 1.22's encoder base class compares it against its own
            // offset timestamps, 1000 h ahead for x264enc, and ignores the request.)
            let key = gst_video::DownstreamForceKeyUnitEvent::builder()
                .all_headers(true)
                .build();
            self.src.send_event(key);
        }
        let ep = self.episode.as_mut().expect("checked above");
        ep.last = Some(hash.to_string());
        ep.frames += 1;
        self.encode(rgb, slot)?;
        self.forward(false)
    }

    /// Ends the current episode: waits for its last frame to be encoded, finishes the
    /// file, fsyncs and renames it into place. Returns the duration in seconds.
    pub fn end_episode(&mut self) -> Result<f64, VideoError> {
        if self.episode.is_none() {
            return Err(VideoError::Pipeline("no episode to end".into()));
        }
        let drained = self.forward(true);
        let mut ep = self.episode.take().expect("checked above");
        let (frames, tmp) = (ep.frames, ep.tmp.clone());
        self.slot = ep.start + frames;
        // The last picture lasts until the episode's end, trailing repeats included.
        let end = self.slot_time(ep.start + frames) - self.slot_time(ep.start);
        let written = drained.and_then(|()| {
            if let Some(mut last) = ep.held.take() {
                let b = last.make_mut();
                b.set_duration(b.pts().map(|p| end.saturating_sub(p)));
                push_sample(&mut ep.mux, &last)?;
            }
            ep.finish()
        });
        if let Err(e) = written.and_then(|()| self.drain_bus()) {
            // Nothing half-written stays behind (readers never look at .tmp).
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(frames as f64 / f64::from(self.fps))
    }

    /// Ends the current episode (if any) and stops the encoder.
    pub fn finish(mut self) -> Result<(), VideoError> {
        let ended = if self.episode.is_some() {
            self.end_episode().map(|_| ())
        } else {
            Ok(())
        };
        let _ = self.pipeline.set_state(gst::State::Null);
        ended
    }

    /// Empties the encoder's bus, which nobody else reads: tags and latency messages
    /// would pile up for the whole run. An error found there is returned.
    fn drain_bus(&self) -> Result<(), VideoError> {
        let Some(bus) = self.pipeline.bus() else {
            return Ok(());
        };
        while let Some(msg) = bus.pop() {
            if let gst::MessageView::Error(e) = msg.view() {
                return Err(VideoError::Pipeline(e.error().to_string()));
            }
        }
        Ok(())
    }

    fn slot_time(&self, slot: u64) -> gst::ClockTime {
        slot_time(self.fps, slot)
    }

    /// Pushes one picture (packed RGB) into the encoder at time slot `slot`.
    fn encode(&mut self, rgb: Bytes, slot: u64) -> Result<(), VideoError> {
        if rgb.len() != self.width as usize * self.height as usize * 3 {
            return Err(VideoError::Pipeline(format!(
                "a frame of {} bytes is not {}x{} RGB",
                rgb.len(),
                self.width,
                self.height
            )));
        }
        // Buffers come back to the pool once encoded: no fresh pages to fault in and
        // zero for every frame.
        let mut buffer = self
            .pool
            .acquire_buffer(None)
            .map_err(|e| VideoError::Pipeline(format!("buffer pool: {e:?}")))?;
        let (pts, next) = (self.slot_time(slot), self.slot_time(slot + 1));
        {
            let b = buffer.get_mut().expect("a pooled buffer is ours alone");
            b.set_pts(pts);
            b.set_duration(next - pts);
            let mut map = b
                .map_writable()
                .map_err(|e| VideoError::Pipeline(e.to_string()))?;
            rgb_to_i420(&rgb, self.width, &self.info, &mut map);
        }
        // Kept for repeats only where they cannot be written. A deep copy (about a
        // tenth of the conversion's cost): the pooled buffer goes back to the pool
        // once encoded.
        if matches!(self.skip, Some(Some(_))) {
            self.last_picture = None;
            return self.push_picture(buffer);
        }
        self.last_picture = Some(
            buffer
                .copy_deep()
                .map_err(|e| VideoError::Pipeline(format!("copying a picture: {e}")))?,
        );
        self.push_picture(buffer)
    }

    fn push_picture(&mut self, buffer: gst::Buffer) -> Result<(), VideoError> {
        self.src.push_buffer(buffer).map_err(|e| {
            bus_error(&self.pipeline)
                .unwrap_or_else(|| VideoError::Pipeline(format!("push: {e:?}")))
        })?;
        self.pushed += 1;
        Ok(())
    }

    /// Moves encoded frames to the current episode's muxer: those ready now, or
    /// (`drain`) every picture pushed so far, waiting for the encoder; written repeats
    /// go in between, each after the frame before it.
    fn forward(&mut self, drain: bool) -> Result<(), VideoError> {
        loop {
            self.mux_repeats()?;
            if self.out >= self.pushed {
                return Ok(());
            }
            let wait = if drain { STUCK } else { gst::ClockTime::ZERO };
            let Some(sample) = self.sink.try_pull_sample(wait) else {
                if !drain {
                    return Ok(());
                }
                return Err(bus_error(&self.pipeline).unwrap_or_else(|| {
                    VideoError::Pipeline(format!("the encoder did not deliver frame {}", self.out))
                }));
            };
            self.out += 1;
            let (Some(ep), Some(mut buffer)) = (self.episode.as_mut(), sample.buffer_owned())
            else {
                continue;
            };
            if ep.muxed == 0 {
                if buffer.flags().contains(gst::BufferFlags::DELTA_UNIT) {
                    return Err(VideoError::Pipeline(
                        "the encoder ignored the keyframe request at an episode start".into(),
                    ));
                }
                ep.base = buffer.dts().or(buffer.pts());
                let avcc = sample
                    .caps()
                    .and_then(|c| c.structure(0))
                    .and_then(|s| s.get::<gst::Buffer>("codec_data").ok())
                    .ok_or_else(|| {
                        VideoError::Pipeline("the encoder's stream has no codec_data".into())
                    })?;
                let avcc = avcc
                    .map_readable()
                    .map_err(|e| VideoError::Pipeline(e.to_string()))?;
                ep.mux.set_avcc(&avcc);
                // Once per encoder: its parameters do not change, and every episode
                // starts at an IDR, where the renumbering starts over.
                if self.skip.is_none() {
                    self.skip = Some(skip::Stream::from_avcc(&avcc));
                }
            }
            if let Some(Some(stream)) = self.skip.as_mut() {
                let renumbered = {
                    let map = buffer
                        .map_readable()
                        .map_err(|e| VideoError::Pipeline(e.to_string()))?;
                    stream.pass(&map)
                };
                if let Some(au) = renumbered {
                    let mut new = gst::Buffer::from_mut_slice(au);
                    let b = new.get_mut().expect("just made");
                    b.set_pts(buffer.pts());
                    b.set_dts(buffer.dts());
                    b.set_flags(buffer.flags());
                    buffer = new;
                }
            }
            let base = ep.base.unwrap_or_default();
            let b = buffer.make_mut();
            b.set_pts(b.pts().map(|t| t.saturating_sub(base)));
            b.set_dts(b.dts().map(|t| t.saturating_sub(base)));
            if ep.muxed == 0 {
                ep.first = (b.pts().unwrap_or_default(), b.dts().unwrap_or_default());
            }
            ep.mux_frame(buffer)?;
        }
    }

    /// Muxes the written repeats whose preceding frames are muxed.
    fn mux_repeats(&mut self) -> Result<(), VideoError> {
        let (Some(ep), Some(Some(stream))) = (self.episode.as_mut(), self.skip.as_mut()) else {
            return Ok(());
        };
        while let Some(&(after, slot)) = ep.repeats.front()
            && after <= self.out
        {
            ep.repeats.pop_front();
            let au = stream.repeat().ok_or_else(|| {
                VideoError::Pipeline("a repeated frame after a non-reference picture".into())
            })?;
            let since = slot_time(self.fps, slot) - slot_time(self.fps, ep.start);
            let mut buffer = gst::Buffer::from_mut_slice(au);
            let b = buffer.get_mut().expect("just made");
            b.set_pts(since + ep.first.0);
            b.set_dts(since + ep.first.1);
            b.set_flags(gst::BufferFlags::DELTA_UNIT);
            ep.mux_frame(buffer)?;
        }
        Ok(())
    }
}

/// Start of time slot `slot` at `fps`.
fn slot_time(fps: u32, slot: u64) -> gst::ClockTime {
    gst::ClockTime::SECOND
        .mul_div_floor(slot, u64::from(fps))
        .unwrap_or_default()
}

impl EpisodeFile {
    /// Gives the muxer the frame held back, now that `buffer`'s time ends it, and
    /// holds `buffer`.
    fn mux_frame(&mut self, buffer: gst::Buffer) -> Result<(), VideoError> {
        self.muxed += 1;
        let next = buffer.pts();
        if let Some(mut prev) = self.held.replace(buffer) {
            let p = prev.make_mut();
            if let (Some(next), Some(pts)) = (next, p.pts()) {
                p.set_duration(next.saturating_sub(pts));
            }
            push_sample(&mut self.mux, &prev)?;
        }
        Ok(())
    }

    /// Finishes the file (index, fsync) and renames it into place.
    fn finish(self) -> Result<(), VideoError> {
        self.mux.finish()?;
        std::fs::rename(&self.tmp, &self.path)
            .map_err(|e| VideoError::Pipeline(format!("{}: {e}", self.path.display())))
    }
}

/// Gives `mux` an encoded frame (its times already rebased to the episode's start).
fn push_sample(mux: &mut Mp4, buffer: &gst::Buffer) -> Result<(), VideoError> {
    let map = buffer
        .map_readable()
        .map_err(|e| VideoError::Pipeline(e.to_string()))?;
    let pts = buffer.pts().unwrap_or_default();
    mux.push(&mp4::Sample {
        data: &map,
        pts: pts.nseconds(),
        dts: buffer.dts().unwrap_or(pts).nseconds(),
        duration: buffer.duration().unwrap_or_default().nseconds(),
        key: !buffer.flags().contains(gst::BufferFlags::DELTA_UNIT),
    })
}

impl Drop for VideoStream {
    fn drop(&mut self) {
        // An episode dropped unfinished (its stream failed) leaves no .tmp behind.
        if let Some(ep) = self.episode.take() {
            drop(ep.mux);
            let _ = std::fs::remove_file(&ep.tmp);
        }
        let _ = self.pipeline.set_state(gst::State::Null);
        let _ = self.pool.set_active(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `desc` (ending in `appsink name=sink`) to its end, mapping every sample.
    pub(super) fn pull_all<T>(desc: &str, mut f: impl FnMut(&gst::Sample) -> T) -> Vec<T> {
        let p = pipeline(desc).unwrap();
        let sink: gst_app::AppSink = by_name(&p, "sink").unwrap();
        p.set_state(gst::State::Playing).unwrap();
        let mut out = Vec::new();
        while let Ok(s) = sink.pull_sample() {
            out.push(f(&s));
        }
        p.set_state(gst::State::Null).unwrap();
        out
    }

    /// (pts, duration, keyframe) of every sample in an MP4, read back by qtdemux.
    fn samples(path: &Path) -> Vec<(gst::ClockTime, gst::ClockTime, bool)> {
        let desc = format!(
            "filesrc location={} ! qtdemux ! appsink name=sink sync=false",
            path.display()
        );
        pull_all(&desc, |s| {
            let b = s.buffer().unwrap();
            let key = !b.flags().contains(gst::BufferFlags::DELTA_UNIT);
            (b.pts().unwrap(), b.duration().unwrap(), key)
        })
    }

    /// The first decoded picture's middle pixel (openh264dec decodes the baseline
    /// profile openh264enc writes).
    fn first_pixel(path: &Path, w: u32, h: u32) -> [u8; 3] {
        let p = pipeline(&format!(
            "filesrc location={} ! qtdemux ! h264parse ! openh264dec ! videoconvert \
             ! video/x-raw,format=RGB ! appsink name=sink sync=false",
            path.display()
        ))
        .unwrap();
        let sink: gst_app::AppSink = by_name(&p, "sink").unwrap();
        p.set_state(gst::State::Playing).unwrap();
        let s = sink.pull_sample().expect("a decoded frame");
        let map = s.buffer().unwrap().map_readable().unwrap();
        let stride = gst_video::VideoInfo::from_caps(s.caps().unwrap())
            .unwrap()
            .stride()[0] as usize;
        let at = (h as usize / 2) * stride + (w as usize / 2) * 3;
        let px = [map[at], map[at + 1], map[at + 2]];
        drop(map);
        p.set_state(gst::State::Null).unwrap();
        px
    }

    #[test]
    fn rgb_to_i420_matches_videoconvert() {
        gst::init().unwrap();
        let (w, h) = (64u32, 48u32);
        let rgb: Vec<u8> = (0..w * h)
            .flat_map(|i| {
                let (x, y) = (i % w, i / w);
                [(x * 4) as u8, (y * 5) as u8, ((x + y) * 2) as u8]
            })
            .collect();
        let info = gst_video::VideoInfo::builder(gst_video::VideoFormat::I420, w, h)
            .colorimetry(&gst_video::VideoColorimetry::from_str("bt601").unwrap())
            .build()
            .unwrap();
        let mut ours = vec![0; info.size()];
        rgb_to_i420(&rgb, w, &info, &mut ours);
        let p = pipeline(&format!(
            "appsrc name=src caps=video/x-raw,format=RGB,width={w},height={h},framerate=0/1 \
             ! videoconvert ! video/x-raw,format=I420,colorimetry=bt601 ! appsink name=sink"
        ))
        .unwrap();
        let src: gst_app::AppSrc = by_name(&p, "src").unwrap();
        let sink: gst_app::AppSink = by_name(&p, "sink").unwrap();
        p.set_state(gst::State::Playing).unwrap();
        src.push_buffer(gst::Buffer::from_mut_slice(rgb)).unwrap();
        let sample = sink.pull_sample().unwrap();
        let theirs = sample.buffer().unwrap().map_readable().unwrap().to_vec();
        p.set_state(gst::State::Null).unwrap();
        assert_eq!(ours.len(), theirs.len());
        let worst = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| a.abs_diff(*b))
            .max()
            .unwrap();
        assert!(
            worst <= 3,
            "differs from videoconvert by up to {worst} levels"
        );
    }

    #[test]
    fn a_failed_stream_leaves_no_partial_file() {
        let choice = encoder().expect("an H.264 encoder");
        let dir = std::env::temp_dir().join(format!("deskgym-video-fault-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ep.mp4");
        let mut v = VideoStream::start(64, 48, 10, &choice.element).unwrap();
        v.begin_episode(&path).unwrap();
        v.push(Bytes::from(vec![9; 64 * 48 * 3]), "a").unwrap();
        let e = v
            .push(Bytes::from(vec![9; 64 * 48 * 3 - 1]), "b")
            .unwrap_err();
        assert!(e.to_string().contains("not 64x48 RGB"), "{e}");
        // The recorder drops a failed stream; the episode's partial file goes with it.
        drop(v);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "no .mp4 nor .tmp"
        );
    }

    #[test]
    fn one_encoder_cuts_one_playable_mp4_per_episode() {
        let choice = encoder().expect("an H.264 encoder (install gstreamer1.0-plugins-ugly)");
        assert!(ENCODERS.iter().any(|(n, _)| *n == choice.element));
        let dir = std::env::temp_dir().join(format!("deskgym-video-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let installed = ["x264enc", "openh264enc"]
            .into_iter()
            .filter(|e| gst::ElementFactory::find(e).is_some());
        // 321x101: odd sides, which 4:2:0 cannot hold; the video drops the last
        // column and row.
        for (enc, (w, h)) in installed.flat_map(|e| [(e, (320u32, 240u32)), (e, (321, 101))]) {
            let mut v = VideoStream::start(w, h, 10, enc).unwrap();
            // Episodes of 15, 4 and 1 slots with their own colours, in pairs of
            // identical frames: one picture per slot (constant frame rate), repeats
            // included, each at its slot's time.
            for (n, (len, base)) in [(15u8, 0u8), (4, 100), (1, 200)].into_iter().enumerate() {
                let path = dir.join(format!("{enc}-{w}-{n}.mp4"));
                v.begin_episode(&path).unwrap();
                for i in 0..len {
                    let px = base + i / 2 * 10;
                    let hash = format!("{n}-{px}");
                    v.push(Bytes::from(vec![px; (w * h * 3) as usize]), &hash)
                        .unwrap();
                }
                assert_eq!(v.end_episode().unwrap(), f64::from(len) / 10.0);
                assert!(!path.with_extension("mp4.tmp").exists());
                let s = samples(&path);
                assert_eq!(
                    s.len(),
                    usize::from(len),
                    "{enc} {w}x{h} episode {n}: {s:?}"
                );
                for (i, (pts, duration, _)) in s.iter().enumerate() {
                    assert_eq!(*pts, gst::ClockTime::from_mseconds(i as u64 * 100), "{s:?}");
                    assert_eq!(*duration, gst::ClockTime::from_mseconds(100), "{s:?}");
                }
                assert_eq!(
                    (s[0].0, s[0].2),
                    (gst::ClockTime::ZERO, true),
                    "starts at 0 with a keyframe"
                );
                let (last_pts, last_duration, _) = s[s.len() - 1];
                let lasts = last_pts + last_duration;
                assert_eq!(
                    lasts,
                    gst::ClockTime::from_mseconds(u64::from(len) * 100),
                    "{s:?}"
                );
                if enc == "openh264enc" {
                    let got = first_pixel(&path, w, h);
                    assert!(
                        got.iter().all(|c| c.abs_diff(base) <= 8),
                        "{got:?} vs {base}"
                    );
                }
            }
            let bus = v.pipeline.bus().unwrap();
            assert!(
                !bus.have_pending(),
                "the encoder's bus does not grow with episodes"
            );
            v.finish().unwrap();
        }
    }
}
