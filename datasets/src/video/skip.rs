//! Repeated pictures without the encoder: an all-skip P-frame written here, and the
//! encoder's later frames renumbered around it.
//!
//! A constant-rate video needs one picture per slot, but a step that shows the same
//! frame again should not cost a conversion and an encode. An H.264 P slice whose
//! macroblocks are all `P_Skip` decodes to an exact copy of its reference: every skip
//! motion vector is predicted from neighbours that are unavailable or zero, so it is
//! zero, there is no residual, and with deblocking off nothing is filtered. That slice
//! is a few bytes: a header and one `mb_skip_run` covering the picture.
//!
//! It has to be a reference picture: with `pic_order_cnt_type` 2 (what x264 writes
//! without B-frames) two non-reference pictures in a row are not allowed, and its
//! order count comes from `frame_num`. So each inserted picture takes a `frame_num`,
//! and every later slice of the encoder's (which does not know about it) gets its
//! `frame_num` moved on by the pictures inserted since the last IDR. `frame_num` is a
//! fixed-width field, so the rewrite keeps the header's length.
//!
//! Only streams this can be exact for are handled: CAVLC, `pic_order_cnt_type` 2,
//! frames only, one reference frame (so the decoder's reference list is the picture
//! just shown, as the encoder believes), no weighted prediction, one slice group.
//! Anything else ([`Stream::from_avcc`] answers `None`) keeps pushing repeats through
//! the encoder.

/// Reads bits of an RBSP (emulation prevention already removed).
struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bits<'a> {
    fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    fn bit(&mut self) -> Option<u32> {
        let byte = *self.data.get(self.pos / 8)?;
        let b = (byte >> (7 - self.pos % 8)) & 1;
        self.pos += 1;
        Some(u32::from(b))
    }

    fn u(&mut self, n: u32) -> Option<u32> {
        (0..n).try_fold(0u32, |v, _| Some((v << 1) | self.bit()?))
    }

    fn ue(&mut self) -> Option<u32> {
        let mut zeros = 0;
        while self.bit()? == 0 {
            zeros += 1;
            if zeros > 31 {
                return None;
            }
        }
        Some((1u32 << zeros) - 1 + self.u(zeros)?)
    }

    fn se(&mut self) -> Option<i32> {
        let k = self.ue()?;
        let magnitude = k.div_ceil(2) as i32;
        Some(if k % 2 == 1 { magnitude } else { -magnitude })
    }
}

/// Writes bits of an RBSP.
#[derive(Default)]
struct BitWriter {
    out: Vec<u8>,
    used: u32,
}

impl BitWriter {
    fn u(&mut self, n: u32, value: u32) {
        for i in (0..n).rev() {
            if self.used == 0 {
                self.out.push(0);
            }
            let last = self.out.last_mut().expect("pushed above");
            *last |= (((value >> i) & 1) as u8) << (7 - self.used);
            self.used = (self.used + 1) % 8;
        }
    }

    fn ue(&mut self, value: u32) {
        let v = u64::from(value) + 1;
        let len = 64 - v.leading_zeros();
        self.u(len - 1, 0);
        for i in (0..len).rev() {
            self.u(1, ((v >> i) & 1) as u32);
        }
    }

    /// `rbsp_slice_trailing_bits`: a one, then zeros to the byte's end.
    fn finish(mut self) -> Vec<u8> {
        self.u(1, 1);
        self.out
    }
}

/// Removes emulation prevention bytes (`00 00 03` → `00 00`).
fn unescape(nal: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(nal.len());
    let mut zeros = 0;
    for &b in nal {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

/// Adds emulation prevention bytes where two zeros precede a byte ≤ 3.
fn escape(rbsp: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rbsp.len() + 4);
    let mut zeros = 0;
    for &b in rbsp {
        if zeros >= 2 && b <= 3 {
            out.push(3);
            zeros = 0;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

/// What a skip slice and the renumbering need from the stream's SPS and PPS.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Params {
    /// Bytes of each NAL unit's length prefix in the stream (avcC).
    length_size: usize,
    log2_max_frame_num: u32,
    /// Macroblocks in a picture.
    mbs: u32,
    pps_id: u32,
    deblocking_control: bool,
}

/// Parses an SPS RBSP (after the NAL header) as far as the picture size; `None` when
/// the stream is one [`Stream`] cannot be exact for.
fn sps(rbsp: &[u8]) -> Option<(u32, u32)> {
    let mut r = Bits::new(rbsp);
    let profile = r.u(8)?;
    r.u(16)?; // constraint flags, level
    r.ue()?; // seq_parameter_set_id
    if matches!(
        profile,
        100 | 110 | 122 | 244 | 44 | 83 | 86 | 118 | 128 | 138 | 139 | 134 | 135
    ) {
        let chroma = r.ue()?;
        if chroma == 3 && r.u(1)? == 1 {
            return None; // separate colour planes: a slice per plane
        }
        r.ue()?;
        r.ue()?; // bit depths
        r.u(1)?; // qpprime_y_zero_transform_bypass
        if r.u(1)? == 1 {
            return None; // scaling matrices (not worth parsing past)
        }
    }
    // The standard's bound (0..=12): anything else is not a stream to write into.
    let log2_max_frame_num = r.ue().filter(|v| *v <= 12)? + 4;
    if r.ue()? != 2 {
        return None; // the order count must follow frame_num
    }
    if r.ue()? != 1 {
        return None; // more than one reference frame
    }
    r.u(1)?; // gaps_in_frame_num_value_allowed_flag
    let width = r.ue()? + 1;
    let height = r.ue()? + 1;
    if r.u(1)? != 1 {
        return None; // fields
    }
    Some((log2_max_frame_num, width.checked_mul(height)?))
}

/// Parses a PPS RBSP: `(pps_id, deblocking_filter_control_present)`, or `None` for
/// CABAC, slice groups, weighted prediction or redundant pictures.
fn pps(rbsp: &[u8]) -> Option<(u32, bool)> {
    let mut r = Bits::new(rbsp);
    let id = r.ue()?;
    r.ue()?; // seq_parameter_set_id
    if r.u(1)? != 0 {
        return None; // CABAC
    }
    r.u(1)?; // bottom_field_pic_order_in_frame_present_flag
    if r.ue()? != 0 {
        return None; // slice groups
    }
    r.ue()?;
    r.ue()?; // default reference counts
    if r.u(1)? != 0 {
        return None; // weighted prediction
    }
    r.u(2)?; // weighted_bipred_idc
    r.se()?;
    r.se()?;
    r.se()?; // initial QPs, chroma offset
    let deblocking_control = r.u(1)? == 1;
    r.u(1)?; // constrained_intra_pred_flag
    if r.u(1)? != 0 {
        return None; // redundant_pic_cnt
    }
    Some((id, deblocking_control))
}

/// One encoder's stream as it is muxed: the pictures inserted since the last IDR and
/// the `frame_num` of the last picture.
#[derive(Debug)]
pub(super) struct Stream {
    params: Params,
    /// Pictures inserted since the last IDR (added to the encoder's `frame_num`).
    inserted: u32,
    /// `frame_num` (as muxed) of the last picture, and whether it was a reference.
    last: Option<(u32, bool)>,
}

impl Stream {
    /// Reads the SPS and PPS from an `avcC` record (the caps' `codec_data`); `None`
    /// when skip pictures would not be exact for this stream.
    pub(super) fn from_avcc(avcc: &[u8]) -> Option<Self> {
        let length_size = usize::from(*avcc.get(4)? & 3) + 1;
        let mut at = 5;
        let next = |at: &mut usize| -> Option<Vec<u8>> {
            let len = usize::from(u16::from_be_bytes([*avcc.get(*at)?, *avcc.get(*at + 1)?]));
            let nal = avcc.get(*at + 2..*at + 2 + len)?;
            *at += 2 + len;
            Some(unescape(nal.get(1..)?))
        };
        if *avcc.get(at)? & 0x1f != 1 {
            return None; // one SPS
        }
        at += 1;
        let (log2_max_frame_num, mbs) = sps(&next(&mut at)?)?;
        if *avcc.get(at)? != 1 {
            return None; // one PPS
        }
        at += 1;
        let (pps_id, deblocking_control) = pps(&next(&mut at)?)?;
        Some(Self {
            params: Params {
                length_size,
                log2_max_frame_num,
                mbs,
                pps_id,
                deblocking_control,
            },
            inserted: 0,
            last: None,
        })
    }

    fn max_frame_num(&self) -> u32 {
        1 << self.params.log2_max_frame_num
    }

    /// Takes one of the encoder's access units (length-prefixed NAL units) on its way
    /// to the muxer: its slices' `frame_num` moved on by the pictures inserted since
    /// the last IDR. `None`: unchanged (nothing inserted, or an IDR, which starts over).
    pub(super) fn pass(&mut self, au: &[u8]) -> Option<Vec<u8>> {
        let n = self.params.length_size;
        let mut out: Option<Vec<u8>> = None;
        let mut at = 0;
        while at + n <= au.len() {
            let len = au[at..at + n]
                .iter()
                .fold(0usize, |v, &b| (v << 8) | usize::from(b));
            let Some(nal) = au.get(at + n..at + n + len) else {
                break;
            };
            let (kind, reference) = nal
                .first()
                .map(|h| (h & 0x1f, h & 0x60 != 0))
                .unwrap_or((0, false));
            let rewritten = match kind {
                5 => {
                    self.inserted = 0;
                    self.last = Some((0, true));
                    None
                }
                1 => self.renumber(nal, reference),
                _ => None,
            };
            if let Some(new) = rewritten {
                let buf = out.get_or_insert_with(|| au[..at].to_vec());
                let len = new.len() as u64;
                buf.extend((0..n).rev().map(|i| (len >> (8 * i)) as u8));
                buf.extend_from_slice(&new);
            } else if let Some(buf) = out.as_mut() {
                buf.extend_from_slice(&au[at..at + n + len]);
            }
            at += n + len;
        }
        out
    }

    /// One non-IDR slice NAL with its `frame_num` moved on by `inserted`; `None` when
    /// nothing moves (or the header cannot be read, which leaves it as it was).
    fn renumber(&mut self, nal: &[u8], reference: bool) -> Option<Vec<u8>> {
        // The header up to frame_num is a few bytes: only they are read unless the
        // field changes.
        let head = unescape(&nal[..nal.len().min(32)]);
        let mut r = Bits::new(head.get(1..)?);
        r.ue()?;
        r.ue()?;
        r.ue()?; // first_mb_in_slice, slice_type, pic_parameter_set_id
        let at = 8 + r.pos;
        let width = self.params.log2_max_frame_num;
        let old = r.u(width)?;
        let new = (old + self.inserted) % self.max_frame_num();
        self.last = Some((new, reference));
        if new == old {
            return None;
        }
        let mut rbsp = unescape(nal);
        for i in 0..width as usize {
            let bit = (new >> (width as usize - 1 - i)) & 1;
            let (byte, shift) = ((at + i) / 8, 7 - (at + i) % 8);
            rbsp[byte] = (rbsp[byte] & !(1 << shift)) | ((bit as u8) << shift);
        }
        Some(escape(&rbsp))
    }

    /// An access unit (length-prefixed) holding one all-skip P picture that repeats the
    /// last picture exactly; `None` when there is none yet or it was not a reference
    /// (then it is not what a P slice predicts from).
    pub(super) fn repeat(&mut self) -> Option<Vec<u8>> {
        let (last, true) = self.last? else {
            return None;
        };
        let frame_num = (last + 1) % self.max_frame_num();
        let p = &self.params;
        let mut w = BitWriter::default();
        w.u(8, 0x41); // nal_ref_idc 2, a non-IDR slice
        w.ue(0); // first_mb_in_slice
        w.ue(5); // slice_type: P, every slice of the picture
        w.ue(p.pps_id);
        w.u(p.log2_max_frame_num, frame_num);
        w.u(1, 0); // num_ref_idx_active_override_flag
        w.u(1, 0); // ref_pic_list_modification_flag_l0
        w.u(1, 0); // adaptive_ref_pic_marking_mode_flag: sliding window
        w.ue(0); // slice_qp_delta (se 0)
        if p.deblocking_control {
            w.ue(1); // disable_deblocking_filter_idc
        }
        w.ue(p.mbs); // mb_skip_run: the whole picture
        let nal = escape(&w.finish());
        self.inserted += 1;
        self.last = Some((frame_num, true));
        let len = nal.len() as u64;
        let mut au: Vec<u8> = (0..p.length_size)
            .rev()
            .map(|i| (len >> (8 * i)) as u8)
            .collect();
        au.extend_from_slice(&nal);
        Some(au)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video::VideoStream;
    use crate::video::tests::pull_all;
    use bytes::Bytes;
    use gstreamer as gst;

    /// Every picture of an MP4 as packed RGB, decoded by `decoder`.
    fn decode(path: &std::path::Path, decoder: &str) -> Vec<Vec<u8>> {
        assert!(
            gst::ElementFactory::find(decoder).is_some(),
            "{decoder} missing: install gstreamer1.0-libav and gstreamer1.0-plugins-bad"
        );
        let desc = format!(
            "filesrc location={} ! qtdemux ! h264parse ! {decoder} ! videoconvert \
             ! video/x-raw,format=RGB ! appsink name=sink sync=false",
            path.display()
        );
        pull_all(&desc, |s| {
            s.buffer().unwrap().map_readable().unwrap().to_vec()
        })
    }

    /// A textured picture with a square that moves with `k` (so the encoder's
    /// P-frames carry motion, not only skips).
    fn picture(w: u32, h: u32, k: u32) -> Vec<u8> {
        let mut rgb = Vec::with_capacity((w * h * 3) as usize);
        for y in 0..h {
            for x in 0..w {
                let inside = (x + 300 - 7 * k) % 300 < 40 && (y + 5 * k) % h < 40;
                let v = if inside {
                    250
                } else {
                    ((x ^ y) * 3 % 200) as u8 as u32
                };
                rgb.extend([v as u8, (v as u8).wrapping_add(20), (x / 2) as u8]);
            }
        }
        rgb
    }

    #[test]
    fn written_repeats_decode_to_exact_copies_and_renumber_what_follows() {
        gst::init().unwrap();
        let (w, h) = (160u32, 96u32);
        let dir = std::env::temp_dir().join(format!("deskgym-skip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut v = VideoStream::start(w, h, 10, "x264enc").unwrap();
        // Two episodes: 100 slots with a new picture every third (frame_num wraps and
        // the encoder's own keyframe every 30 pictures falls inside), then 7 slots.
        for (n, (len, every)) in [(100u32, 3u32), (7, 2)].into_iter().enumerate() {
            let path = dir.join(format!("ep{n}.mp4"));
            let pushed = v.pushed;
            v.begin_episode(&path).unwrap();
            let sources: Vec<Vec<u8>> = (0..len).map(|i| picture(w, h, i / every)).collect();
            for (i, rgb) in sources.iter().enumerate() {
                let hash = format!("{n}-{}", i as u32 / every);
                v.push(Bytes::from(rgb.clone()), &hash).unwrap();
            }
            v.end_episode().unwrap();
            assert!(
                matches!(v.skip, Some(Some(_))),
                "x264enc's stream takes written repeats"
            );
            assert_eq!(
                v.pushed - pushed,
                u64::from(len.div_ceil(every)),
                "only new pictures reach the encoder"
            );
            // libavcodec (FFmpeg's decoder: LeRobot's and most Python readers') conceals
            // what it cannot decode; Cisco's openh264 refuses it (a skip run one
            // macroblock short passes the first and fails the second).
            for decoder in ["avdec_h264", "openh264dec"] {
                let frames = decode(&path, decoder);
                assert_eq!(
                    frames.len(),
                    len as usize,
                    "{decoder}: one picture per slot"
                );
                exact_repeats_close_to_sources(&frames, &sources, every, decoder);
            }
        }
        v.finish().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn exact_repeats_close_to_sources(
        frames: &[Vec<u8>],
        sources: &[Vec<u8>],
        every: u32,
        decoder: &str,
    ) {
        for (i, (got, want)) in frames.iter().zip(sources).enumerate() {
            if !(i as u32).is_multiple_of(every) {
                assert!(
                    got == &frames[i - 1],
                    "{decoder}: slot {i} repeats slot {} exactly",
                    i - 1
                );
            }
            let err = got
                .iter()
                .zip(want)
                .map(|(a, b)| u64::from(a.abs_diff(*b)))
                .sum::<u64>() as f64
                / got.len() as f64;
            assert!(err < 4.0, "{decoder}: slot {i}: mean error {err:.2}");
        }
    }

    #[test]
    fn exp_golomb_round_trips() {
        let mut w = BitWriter::default();
        for v in [0u32, 1, 2, 3, 7, 8, 254, 3600, 65_535] {
            w.ue(v);
        }
        w.u(5, 0b10110);
        let out = w.finish();
        let mut r = Bits::new(&out);
        for v in [0u32, 1, 2, 3, 7, 8, 254, 3600, 65_535] {
            assert_eq!(r.ue(), Some(v));
        }
        assert_eq!(r.u(5), Some(0b10110));
        assert_eq!(r.u(1), Some(1), "the stop bit");
        let mut r = Bits::new(&[0b0010_1010]);
        assert_eq!((r.se(), r.se()), (Some(-2), Some(1)));
    }

    #[test]
    fn emulation_prevention_round_trips() {
        let rbsp = [0u8, 0, 1, 0, 0, 0, 0, 3, 5, 0, 0];
        let nal = escape(&rbsp);
        assert_eq!(nal, [0, 0, 3, 1, 0, 0, 3, 0, 0, 3, 3, 5, 0, 0]);
        assert_eq!(unescape(&nal), rbsp);
    }
}
