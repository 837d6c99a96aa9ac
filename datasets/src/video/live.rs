//! H.264 for a live view: a picture in, its access unit out at once (Annex B, SPS and
//! PPS before every keyframe, no reordering), with the encoder the probe chose. A
//! browser decodes it with WebCodecs from the codec string of its SPS; a viewer that
//! joins late asks for a keyframe instead of decoding from the stream's start.

use super::*;

/// A live H.264 stream of one size (see the module docs).
pub struct LiveEncoder {
    pipeline: gst::Pipeline,
    src: gst_app::AppSrc,
    sink: gst_app::AppSink,
    info: gst_video::VideoInfo,
    width: u32,
    pushed: u64,
    codec: Option<String>,
}

/// One encoded picture.
#[derive(Clone, Debug)]
pub struct AccessUnit {
    /// The access unit, Annex B (start codes; SPS and PPS before a keyframe).
    pub data: Vec<u8>,
    /// A keyframe: a decoder can start here.
    pub keyframe: bool,
}

/// Time between pictures as the encoder sees them (it never waits on it: pictures go
/// in when the screen changes; a regular clock keeps rate control simple).
const SLOT: gst::ClockTime = gst::ClockTime::from_mseconds(33);

impl LiveEncoder {
    /// An encoder for `width`x`height` RGB pictures (an odd side loses its last
    /// column or row, as 4:2:0 needs even sides) with `element` (from [`encoder`]).
    pub fn start(width: u32, height: u32, element: &str) -> Result<Self, VideoError> {
        let err = |e: &dyn std::fmt::Display| VideoError::Pipeline(e.to_string());
        let settings = match element {
            // A keyframe every 2 s bounds what a lost frame costs; one picture per
            // access unit out at once (zerolatency: no lookahead, no B-frames).
            "x264enc" => "x264enc speed-preset=ultrafast tune=zerolatency key-int-max=60 \
                          threads=1 trellis=false"
                .to_string(),
            // Its default has no B-frames (the recording settings, with a 2 s GOP).
            "nvh264enc" => "nvh264enc gop-size=60 zerolatency=true".to_string(),
            other => other.to_string(),
        };
        let pipeline = pipeline(&format!(
            "appsrc name=src format=time ! {settings} ! h264parse config-interval=-1 \
             ! video/x-h264,stream-format=byte-stream,alignment=au ! appsink name=sink sync=false"
        ))?;
        let src: gst_app::AppSrc = by_name(&pipeline, "src")?;
        let sink: gst_app::AppSink = by_name(&pipeline, "sink")?;
        let (w, h) = (width & !1, height & !1);
        if w == 0 || h == 0 {
            return Err(VideoError::Pipeline(format!(
                "a {width}x{height} picture is too small to encode"
            )));
        }
        let info = i420_info(w, h, 30)?;
        src.set_caps(Some(&info.to_caps().map_err(|e| err(&e))?));
        play(&pipeline, &src, &info, 2)?;
        Ok(Self {
            pipeline,
            src,
            sink,
            info,
            width,
            pushed: 0,
            codec: None,
        })
    }

    /// The size of the pictures it encodes.
    pub fn size(&self) -> (u32, u32) {
        (self.info.width(), self.info.height())
    }

    /// The WebCodecs codec string (`avc1.PPCCLL`) from the stream's SPS, once the
    /// first keyframe is out.
    pub fn codec(&self) -> Option<&str> {
        self.codec.as_deref()
    }

    /// Encodes one picture (packed RGB of the width given at start), a keyframe when
    /// `keyframe` (the first always is), and returns its access unit.
    pub fn push(&mut self, rgb: &[u8], keyframe: bool) -> Result<AccessUnit, VideoError> {
        let mut buf = gst::Buffer::with_size(self.info.size())
            .map_err(|e| VideoError::Pipeline(e.to_string()))?;
        {
            let b = buf.get_mut().expect("a new buffer is writable");
            let mut map = b
                .map_writable()
                .map_err(|e| VideoError::Pipeline(e.to_string()))?;
            rgb_to_i420(rgb, self.width, &self.info, map.as_mut_slice());
            drop(map);
            b.set_pts(SLOT * self.pushed);
            b.set_duration(SLOT);
        }
        if keyframe && self.pushed > 0 {
            // In order with the buffers: "the next picture" is this one.
            self.src.send_event(
                gst_video::DownstreamForceKeyUnitEvent::builder()
                    .all_headers(true)
                    .build(),
            );
        }
        self.src.push_buffer(buf).map_err(|e| {
            bus_error(&self.pipeline).unwrap_or(VideoError::Pipeline(e.to_string()))
        })?;
        self.pushed += 1;
        let sample = self.sink.try_pull_sample(STUCK).ok_or_else(|| {
            bus_error(&self.pipeline).unwrap_or_else(|| {
                VideoError::Pipeline("the live encoder gave no picture back".into())
            })
        })?;
        let out = sample
            .buffer()
            .ok_or_else(|| VideoError::Pipeline("an empty sample".into()))?;
        let data = out
            .map_readable()
            .map_err(|e| VideoError::Pipeline(e.to_string()))?
            .to_vec();
        let keyframe = !out.flags().contains(gst::BufferFlags::DELTA_UNIT);
        if self.codec.is_none() {
            self.codec = codec_string(&data);
        }
        Ok(AccessUnit { data, keyframe })
    }
}

impl Drop for LiveEncoder {
    fn drop(&mut self) {
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

/// `avc1.PPCCLL` from the first SPS (NAL type 7) in Annex B `data`.
fn codec_string(data: &[u8]) -> Option<String> {
    let mut i = 0;
    while i + 3 < data.len() {
        let start = if data[i..].starts_with(&[0, 0, 1]) {
            Some(i + 3)
        } else if data[i..].starts_with(&[0, 0, 0, 1]) {
            Some(i + 4)
        } else {
            None
        };
        if let Some(s) = start {
            if data.get(s).is_some_and(|h| h & 0x1f == 7) && s + 3 < data.len() {
                return Some(format!(
                    "avc1.{:02X}{:02X}{:02X}",
                    data[s + 1],
                    data[s + 2],
                    data[s + 3]
                ));
            }
            i = s;
        } else {
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codec_string_comes_from_the_sps() {
        let au = [
            0, 0, 0, 1, 0x09, 0xf0, 0, 0, 1, 0x67, 0x42, 0xc0, 0x1f, 0xda,
        ];
        assert_eq!(codec_string(&au).as_deref(), Some("avc1.42C01F"));
        assert_eq!(codec_string(&[0, 0, 1, 0x65, 1, 2, 3]), None);
    }

    #[test]
    fn each_picture_comes_out_at_once_and_keyframes_on_demand() {
        let Ok(choice) = encoder() else {
            panic!("no H.264 encoder: install gstreamer1.0-plugins-ugly");
        };
        let mut e = LiveEncoder::start(64, 48, &choice.element).unwrap();
        let picture = |v: u8| vec![v; 64 * 48 * 3];
        let first = e.push(&picture(10), false).unwrap();
        assert!(first.keyframe, "a stream starts with a keyframe");
        assert!(
            e.codec().is_some_and(|c| c.starts_with("avc1.")),
            "{:?}",
            e.codec()
        );
        let delta = e.push(&picture(200), false).unwrap();
        assert!(!delta.keyframe && !delta.data.is_empty());
        let key = e.push(&picture(90), true).unwrap();
        assert!(key.keyframe, "a keyframe when asked");
    }
}
