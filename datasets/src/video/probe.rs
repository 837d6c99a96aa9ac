//! Which H.264 encoder this machine can use: each candidate must prove itself on a
//! one-frame pipeline (an element that exists may still fail to open, as nvh264enc does
//! without an NVENC engine).

use super::*;

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
const REQUIRED: [(&str, &str); 4] = [
    ("appsrc", "gstreamer1.0-plugins-base"),
    ("appsink", "gstreamer1.0-plugins-base"),
    ("videotestsrc", "gstreamer1.0-plugins-base"),
    ("h264parse", "gstreamer1.0-plugins-bad"),
];

/// The encoder chosen by the probe, and the candidates rejected before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncoderChoice {
    /// GStreamer element name, e.g. `x264enc`.
    pub element: String,
    /// `"<element>: <why>"` for each candidate tried and rejected.
    pub rejected: Vec<String>,
}

pub(super) fn element_settings(element: &str) -> String {
    match element {
        // Seek-friendly keyframes every 3 s at 10 fps; fastest preset: this runs beside
        // the desktops. threads=1: each env has its own encoder, so they already run in
        // parallel. trellis=false: the element's default would override the preset's.
        "x264enc" => {
            "x264enc speed-preset=ultrafast tune=zerolatency key-int-max=30 threads=1 trellis=false"
                .into()
        }
        // zerolatency: no reordering delay, so an episode's last frame comes out of the
        // encoder without waiting for more input.
        "nvh264enc" => "nvh264enc gop-size=30 zerolatency=true".into(),
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
            "videotestsrc num-buffers=1 ! video/x-raw,format=I420,width=64,height=64 ! {} ! fakesink",
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
