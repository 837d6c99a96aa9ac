//! Per-episode H.264 MP4 through GStreamer (`appsrc` fed with captured RGB frames).
//!
//! The encoder is chosen once per process by running a one-frame test pipeline for
//! each candidate in order: `nvh264enc` (NVENC through nvcodec; an element that exists
//! may still fail to open, e.g. on GPUs without an NVENC engine such as H100/H200),
//! then `x264enc`, then `openh264enc`. The choice and every rejected candidate (with
//! why) are reported, so the recorder can put them in its manifest and event log.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bytes::Bytes;
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use gstreamer_video as gst_video;

/// H.264 encoders in order of preference, with the Debian package that provides each.
pub const ENCODERS: [(&str, &str); 3] = [
    (
        "nvh264enc",
        "gstreamer1.0-plugins-bad and an NVIDIA driver with NVENC",
    ),
    ("x264enc", "gstreamer1.0-plugins-ugly"),
    ("openh264enc", "gstreamer1.0-plugins-bad"),
];

/// Other elements every recording pipeline needs, with their Debian packages.
const REQUIRED: [(&str, &str); 5] = [
    ("appsrc", "gstreamer1.0-plugins-base"),
    ("videoconvert", "gstreamer1.0-plugins-base"),
    ("h264parse", "gstreamer1.0-plugins-bad"),
    ("mp4mux", "gstreamer1.0-plugins-good"),
    ("filesink", "gstreamer1.0-tools (core elements)"),
];

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

/// The encoder chosen by the probe, and the candidates rejected before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncoderChoice {
    /// GStreamer element name, e.g. `x264enc`.
    pub element: String,
    /// `"<element>: <why>"` for each candidate tried and rejected.
    pub rejected: Vec<String>,
}

fn element_settings(element: &str) -> String {
    match element {
        // Seek-friendly keyframes every 3 s at 10 fps; fastest preset: this runs beside
        // the desktops.
        "x264enc" => "x264enc speed-preset=ultrafast tune=zerolatency key-int-max=30".into(),
        "nvh264enc" => "nvh264enc gop-size=30".into(),
        other => other.into(),
    }
}

fn run_to_eos(pipeline: &gst::Pipeline, seconds: u64) -> Result<(), String> {
    pipeline
        .set_state(gst::State::Playing)
        .map_err(|e| format!("cannot start: {e}"))?;
    let bus = pipeline.bus().ok_or("pipeline has no bus")?;
    let msg = bus.timed_pop_filtered(
        gst::ClockTime::from_seconds(seconds),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    );
    let result = match msg.as_ref().map(|m| m.view()) {
        Some(gst::MessageView::Eos(_)) => Ok(()),
        Some(gst::MessageView::Error(e)) => Err(format!(
            "{} ({})",
            e.error(),
            e.debug().map(|d| d.to_string()).unwrap_or_default()
        )),
        _ => Err(format!("no end of stream after {seconds} s")),
    };
    let _ = pipeline.set_state(gst::State::Null);
    result
}

fn probe() -> Result<EncoderChoice, VideoError> {
    gst::init().map_err(|e| {
        VideoError::Unavailable(format!(
            "GStreamer cannot start: {e}; install libgstreamer1.0-0"
        ))
    })?;
    for (name, package) in REQUIRED {
        if gst::ElementFactory::find(name).is_none() {
            return Err(VideoError::Unavailable(format!(
                "GStreamer element {name} is missing; install the Debian package {package}"
            )));
        }
    }
    let mut rejected = Vec::new();
    for (name, package) in ENCODERS {
        if gst::ElementFactory::find(name).is_none() {
            rejected.push(format!("{name}: not installed ({package})"));
            continue;
        }
        let desc = format!(
            "videotestsrc num-buffers=1 ! video/x-raw,width=64,height=64 ! videoconvert ! {} ! fakesink",
            element_settings(name)
        );
        let outcome = gst::parse::launch(&desc)
            .map_err(|e| e.to_string())
            .and_then(|p| {
                p.downcast::<gst::Pipeline>()
                    .map_err(|_| "not a pipeline".to_string())
            })
            .and_then(|p| run_to_eos(&p, 10));
        match outcome {
            Ok(()) => {
                return Ok(EncoderChoice {
                    element: name.into(),
                    rejected,
                });
            }
            Err(e) => rejected.push(format!("{name}: failed its one-frame test: {e}")),
        }
    }
    Err(VideoError::Unavailable(format!(
        "no working H.264 encoder ({}); install gstreamer1.0-plugins-ugly for x264enc",
        rejected.join("; ")
    )))
}

/// The encoder to use, probed once per process.
pub fn encoder() -> Result<EncoderChoice, VideoError> {
    static CHOICE: OnceLock<Result<EncoderChoice, VideoError>> = OnceLock::new();
    CHOICE.get_or_init(probe).clone()
}

/// One episode's MP4, written to `<path>.tmp` and renamed on [`finish`](Self::finish).
///
/// Consecutive identical frames (same hash) are not re-encoded: the previous picture is
/// simply shown longer (MP4 sample durations follow the timestamps), which matters on a
/// desktop where most steps change nothing. The stream still has one time slot per
/// frame, so step `i` of an episode is at `i / fps` seconds.
pub struct EpisodeVideo {
    pipeline: gst::Pipeline,
    src: gst_app::AppSrc,
    info: gst_video::VideoInfo,
    path: PathBuf,
    tmp: PathBuf,
    fps: u32,
    frames: u64,
    /// Hash and pixels of the last picture pushed, and whether later slots repeat it.
    last: Option<(String, Bytes)>,
    repeated: bool,
}

/// Frames appsrc may queue before `push` blocks: the writer thread (and through its
/// bounded channel, the overflow policy) feels a slow encoder instead of memory growing.
const QUEUED_FRAMES: u64 = 4;

impl EpisodeVideo {
    /// Starts a pipeline writing `width`x`height` RGB at `fps` to `path`.
    pub fn start(
        path: &Path,
        width: u32,
        height: u32,
        fps: u32,
        encoder: &str,
    ) -> Result<Self, VideoError> {
        let err = |e: &dyn std::fmt::Display| VideoError::Pipeline(e.to_string());
        let tmp = path.with_extension("mp4.tmp");
        let desc = format!(
            "appsrc name=src format=time ! videoconvert ! {} ! h264parse ! mp4mux ! filesink name=sink",
            element_settings(encoder)
        );
        let pipeline = gst::parse::launch(&desc)
            .map_err(|e| err(&e))?
            .downcast::<gst::Pipeline>()
            .map_err(|_| VideoError::Pipeline("not a pipeline".into()))?;
        let sink = pipeline
            .by_name("sink")
            .ok_or_else(|| VideoError::Pipeline("no filesink".into()))?;
        sink.set_property("location", tmp.to_string_lossy().as_ref());
        let src = pipeline
            .by_name("src")
            .and_then(|e| e.downcast::<gst_app::AppSrc>().ok())
            .ok_or_else(|| VideoError::Pipeline("no appsrc".into()))?;
        let info = gst_video::VideoInfo::builder(gst_video::VideoFormat::Rgb, width, height)
            .fps(gst::Fraction::new(fps as i32, 1))
            .build()
            .map_err(|e| err(&e))?;
        src.set_caps(Some(&info.to_caps().map_err(|e| err(&e))?));
        src.set_property("block", true);
        src.set_property("max-bytes", QUEUED_FRAMES * info.size() as u64);
        pipeline
            .set_state(gst::State::Playing)
            .map_err(|e| err(&e))?;
        Ok(Self {
            pipeline,
            src,
            info,
            path: path.to_path_buf(),
            tmp,
            fps,
            frames: 0,
            last: None,
            repeated: false,
        })
    }

    /// Appends the next frame (packed RGB). A frame whose hash equals the previous
    /// one only extends the previous picture.
    pub fn push(&mut self, rgb: Bytes, hash: &str) -> Result<(), VideoError> {
        if self.last.as_ref().is_some_and(|(h, _)| h == hash) {
            self.frames += 1;
            self.repeated = true;
            return Ok(());
        }
        self.push_at(rgb.clone(), self.frames)?;
        self.last = Some((hash.to_string(), rgb));
        self.repeated = false;
        self.frames += 1;
        Ok(())
    }

    /// Pushes one picture at time slot `slot` (rows padded when GStreamer's stride
    /// differs from packed RGB).
    fn push_at(&mut self, rgb: Bytes, slot: u64) -> Result<(), VideoError> {
        let (w, h) = (self.info.width() as usize, self.info.height() as usize);
        let stride = self.info.stride()[0] as usize;
        let mut buffer = if stride == w * 3 {
            gst::Buffer::from_slice(rgb)
        } else {
            let mut padded = vec![0u8; stride * h];
            for (dst, src) in padded.chunks_exact_mut(stride).zip(rgb.chunks_exact(w * 3)) {
                dst[..w * 3].copy_from_slice(src);
            }
            gst::Buffer::from_mut_slice(padded)
        };
        let frame_time = gst::ClockTime::SECOND / u64::from(self.fps);
        if let Some(b) = buffer.get_mut() {
            b.set_pts(frame_time * slot);
            b.set_duration(frame_time);
        }
        self.src
            .push_buffer(buffer)
            .map_err(|e| VideoError::Pipeline(format!("push: {e:?}")))?;
        Ok(())
    }

    /// Frames pushed so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Ends the stream, waits for the muxer to finish the file, fsyncs and renames it
    /// into place. Returns the duration in seconds.
    pub fn finish(mut self) -> Result<f64, VideoError> {
        // Trailing repeats: show the last picture once more in the final slot, so the
        // video lasts as long as the episode.
        if self.repeated
            && let Some((_, rgb)) = self.last.clone()
        {
            self.push_at(rgb, self.frames - 1)?;
        }
        let _ = self.src.end_of_stream();
        let bus = self
            .pipeline
            .bus()
            .ok_or_else(|| VideoError::Pipeline("no bus".into()))?;
        let msg = bus.timed_pop_filtered(
            gst::ClockTime::from_seconds(30),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        );
        let outcome = match msg.as_ref().map(|m| m.view()) {
            Some(gst::MessageView::Eos(_)) => Ok(()),
            Some(gst::MessageView::Error(e)) => Err(VideoError::Pipeline(e.error().to_string())),
            _ => Err(VideoError::Pipeline("the muxer did not finish".into())),
        };
        let _ = self.pipeline.set_state(gst::State::Null);
        outcome?;
        let io = |e: std::io::Error| VideoError::Pipeline(format!("{}: {e}", self.path.display()));
        std::fs::File::open(&self.tmp)
            .and_then(|f| f.sync_all())
            .map_err(io)?;
        std::fs::rename(&self.tmp, &self.path).map_err(io)?;
        Ok(self.frames as f64 / f64::from(self.fps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_picks_a_working_encoder_and_writes_an_mp4() {
        let choice = encoder().expect("an H.264 encoder (install gstreamer1.0-plugins-ugly)");
        assert!(ENCODERS.iter().any(|(n, _)| *n == choice.element));
        let dir = std::env::temp_dir().join(format!("deskgym-video-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // 322 px wide: 966-byte rows, which GStreamer pads to 968.
        for (w, h) in [(320u32, 240u32), (322, 100)] {
            let path = dir.join(format!("ep-{w}.mp4"));
            let mut v = EpisodeVideo::start(&path, w, h, 10, &choice.element).unwrap();
            for i in 0..15u8 {
                // Pairs of identical frames: only the changes are encoded, and the
                // last picture is repeated so the video still lasts 15 slots.
                let px = i / 2 * 20;
                v.push(Bytes::from(vec![px; (w * h * 3) as usize]), &px.to_string())
                    .unwrap();
            }
            assert_eq!(v.finish().unwrap(), 1.5);
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(&bytes[4..8], b"ftyp", "an MP4 file");
            assert!(!path.with_extension("mp4.tmp").exists());
        }
    }
}
