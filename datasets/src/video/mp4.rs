//! One episode's MP4, written here: one H.264 track, samples appended to `mdat` as the
//! encoder delivers them, the index (`moov`) at the end.
//!
//! A GStreamer `appsrc ! mp4mux ! filesink` pipeline per episode did the same through
//! two threads, caps negotiation and an end-of-stream round trip for every file (55
//! episodes a second in the recording benchmark); the file's layout is fixed here, so
//! it is a few hundred bytes of boxes around the encoder's own access units (ISO/IEC
//! 14496-12 for the boxes, 14496-15 for `avc1`/`avcC`).

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

use super::VideoError;

/// Track ticks per frame period (the timescale is `fps` times this): frame *k* starts
/// at tick `k * 1000` exactly, whatever the rate; nanosecond times are rounded to the
/// nearest tick.
const TICKS_PER_FRAME: u32 = 1000;

/// An MP4 being written.
pub(super) struct Mp4 {
    out: BufWriter<File>,
    /// The track's ticks per second (`fps * 1000`).
    timescale: u32,
    width: u32,
    height: u32,
    /// The encoder's `AVCDecoderConfigurationRecord`, known from its first frame.
    avcc: Option<Vec<u8>>,
    /// Where `mdat`'s size field is, and the bytes of samples after its header.
    mdat_at: u64,
    mdat_len: u64,
    sizes: Vec<u32>,
    /// (count, ticks) runs of sample durations (`stts`).
    durations: Vec<(u32, u32)>,
    /// (count, ticks) runs of presentation minus decode time (`ctts`).
    offsets: Vec<(u32, u32)>,
    /// 1-based numbers of the keyframes (`stss`).
    keys: Vec<u32>,
}

/// One sample: the access unit (AVC, length-prefixed NAL units) and its times in ns.
pub(super) struct Sample<'a> {
    pub data: &'a [u8],
    pub pts: u64,
    pub dts: u64,
    pub duration: u64,
    pub key: bool,
}

impl Mp4 {
    /// Creates `path` for a `width` x `height` track at `fps` and writes its head.
    pub(super) fn create(
        path: &Path,
        width: u32,
        height: u32,
        fps: u32,
    ) -> Result<Self, VideoError> {
        let io = |e: std::io::Error| VideoError::Pipeline(format!("{}: {e}", path.display()));
        let mut out = BufWriter::with_capacity(256 << 10, File::create(path).map_err(io)?);
        let mut head = Vec::with_capacity(48);
        boxed(&mut head, b"ftyp", |b| {
            b.extend_from_slice(b"isom");
            b.extend_from_slice(&512u32.to_be_bytes());
            for brand in [b"isom", b"iso2", b"avc1", b"mp41"] {
                b.extend_from_slice(brand);
            }
        });
        let mdat_at = head.len() as u64;
        // `mdat`'s size is set once the samples are written.
        head.extend_from_slice(&0u32.to_be_bytes());
        head.extend_from_slice(b"mdat");
        out.write_all(&head).map_err(io)?;
        Ok(Self {
            out,
            timescale: fps.max(1).saturating_mul(TICKS_PER_FRAME),
            width,
            height,
            avcc: None,
            mdat_at,
            mdat_len: 0,
            sizes: Vec::new(),
            durations: Vec::new(),
            offsets: Vec::new(),
            keys: Vec::new(),
        })
    }

    /// The stream's decoder configuration (the encoder's caps' `codec_data`).
    pub(super) fn set_avcc(&mut self, avcc: &[u8]) {
        self.avcc = Some(avcc.to_vec());
    }

    /// Appends one sample.
    pub(super) fn push(&mut self, s: &Sample<'_>) -> Result<(), VideoError> {
        let size = u32::try_from(s.data.len())
            .map_err(|_| VideoError::Pipeline("a frame over 4 GiB".into()))?;
        if self.mdat_len + u64::from(size) > u64::from(u32::MAX) - 8 {
            return Err(VideoError::Pipeline("an episode's video over 4 GiB".into()));
        }
        self.out
            .write_all(s.data)
            .map_err(|e| VideoError::Pipeline(format!("writing a frame: {e}")))?;
        self.mdat_len += u64::from(size);
        self.sizes.push(size);
        if s.key {
            self.keys.push(self.sizes.len() as u32);
        }
        let duration = self.ticks(s.duration);
        run(&mut self.durations, duration);
        // Decode time never after presentation (no sample shown before it is decoded).
        let offset = self.ticks(s.pts.saturating_sub(s.dts));
        run(&mut self.offsets, offset);
        Ok(())
    }

    /// Nanoseconds to the track's ticks, to the nearest.
    fn ticks(&self, ns: u64) -> u32 {
        let t = (u128::from(ns) * u128::from(self.timescale) + 500_000_000) / 1_000_000_000;
        u32::try_from(t).unwrap_or(u32::MAX)
    }

    /// Writes the index and `mdat`'s size, and flushes and fsyncs the file.
    pub(super) fn finish(mut self) -> Result<(), VideoError> {
        let avcc = self
            .avcc
            .take()
            .ok_or_else(|| VideoError::Pipeline("an episode without frames".into()))?;
        let moov = self.moov(&avcc);
        let io = |e: std::io::Error| VideoError::Pipeline(format!("finishing the video: {e}"));
        self.out.write_all(&moov).map_err(io)?;
        let mut f = self.out.into_inner().map_err(|e| io(e.into_error()))?;
        f.seek(SeekFrom::Start(self.mdat_at)).map_err(io)?;
        f.write_all(&((self.mdat_len + 8) as u32).to_be_bytes())
            .map_err(io)?;
        f.sync_all().map_err(io)
    }

    fn moov(&self, avcc: &[u8]) -> Vec<u8> {
        let duration: u64 = self
            .durations
            .iter()
            .map(|&(n, d)| u64::from(n) * u64::from(d))
            .sum();
        let duration = u32::try_from(duration).unwrap_or(u32::MAX);
        // Where the samples start: after ftyp and mdat's 8-byte header.
        let chunk = self.mdat_at + 8;
        let mut m = Vec::with_capacity(1024 + 4 * self.sizes.len());
        boxed(&mut m, b"moov", |m| {
            full(m, b"mvhd", 0, 0, |b| {
                u32s(b, &[0, 0, self.timescale, duration, 0x0001_0000]);
                b.extend_from_slice(&0x0100u16.to_be_bytes());
                b.extend_from_slice(&[0; 10]);
                u32s(b, &MATRIX);
                u32s(b, &[0; 6]);
                u32s(b, &[2]); // next track id
            });
            boxed(m, b"trak", |t| {
                full(t, b"tkhd", 0, 3, |b| {
                    u32s(b, &[0, 0, 1, 0, duration, 0, 0]);
                    b.extend_from_slice(&[0; 8]); // layer, group, volume, reserved
                    u32s(b, &MATRIX);
                    u32s(b, &[self.width << 16, self.height << 16]);
                });
                boxed(t, b"mdia", |d| {
                    full(d, b"mdhd", 0, 0, |b| {
                        u32s(b, &[0, 0, self.timescale, duration]);
                        b.extend_from_slice(&0x55c4u16.to_be_bytes()); // "und"
                        b.extend_from_slice(&[0, 0]);
                    });
                    full(d, b"hdlr", 0, 0, |b| {
                        u32s(b, &[0]);
                        b.extend_from_slice(b"vide");
                        u32s(b, &[0; 3]);
                        b.extend_from_slice(b"VideoHandler\0");
                    });
                    boxed(d, b"minf", |i| {
                        full(i, b"vmhd", 0, 1, |b| b.extend_from_slice(&[0; 8]));
                        boxed(i, b"dinf", |b| {
                            full(b, b"dref", 0, 0, |b| {
                                u32s(b, &[1]);
                                full(b, b"url ", 0, 1, |_| {});
                            });
                        });
                        boxed(i, b"stbl", |s| self.stbl(s, avcc, chunk));
                    });
                });
            });
        });
        m
    }

    fn stbl(&self, s: &mut Vec<u8>, avcc: &[u8], chunk: u64) {
        full(s, b"stsd", 0, 0, |b| {
            u32s(b, &[1]);
            boxed(b, b"avc1", |v| {
                v.extend_from_slice(&[0; 6]);
                v.extend_from_slice(&1u16.to_be_bytes()); // data reference
                v.extend_from_slice(&[0; 16]);
                let (w, h) = (self.width as u16, self.height as u16);
                v.extend_from_slice(&w.to_be_bytes());
                v.extend_from_slice(&h.to_be_bytes());
                u32s(v, &[0x0048_0000, 0x0048_0000, 0]); // 72 dpi, reserved
                v.extend_from_slice(&1u16.to_be_bytes()); // frames per sample
                v.extend_from_slice(&[0; 32]); // compressor name
                v.extend_from_slice(&0x0018u16.to_be_bytes()); // depth
                v.extend_from_slice(&(-1i16).to_be_bytes());
                boxed(v, b"avcC", |c| c.extend_from_slice(avcc));
            });
        });
        runs(s, b"stts", &self.durations);
        if self.offsets.iter().any(|&(_, o)| o != 0) {
            runs(s, b"ctts", &self.offsets);
        }
        if self.keys.len() < self.sizes.len() {
            full(s, b"stss", 0, 0, |b| {
                u32s(b, &[self.keys.len() as u32]);
                u32s(b, &self.keys);
            });
        }
        // One chunk holds every sample.
        full(s, b"stsc", 0, 0, |b| {
            u32s(b, &[1, 1, self.sizes.len() as u32, 1])
        });
        full(s, b"stsz", 0, 0, |b| {
            u32s(b, &[0, self.sizes.len() as u32]);
            u32s(b, &self.sizes);
        });
        full(s, b"stco", 0, 0, |b| u32s(b, &[1, chunk as u32]));
    }
}

/// The identity transform of `mvhd` and `tkhd`.
const MATRIX: [u32; 9] = [0x0001_0000, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000];

/// Adds `v` to the run-length list `r`.
fn run(r: &mut Vec<(u32, u32)>, v: u32) {
    match r.last_mut() {
        Some((n, last)) if *last == v => *n += 1,
        _ => r.push((1, v)),
    }
}

fn u32s(b: &mut Vec<u8>, vs: &[u32]) {
    for v in vs {
        b.extend_from_slice(&v.to_be_bytes());
    }
}

/// A box of type `kind` whose payload `f` writes.
fn boxed(b: &mut Vec<u8>, kind: &[u8; 4], f: impl FnOnce(&mut Vec<u8>)) {
    let at = b.len();
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(kind);
    f(b);
    let size = (b.len() - at) as u32;
    b[at..at + 4].copy_from_slice(&size.to_be_bytes());
}

/// A full box: version and flags, then the payload.
fn full(b: &mut Vec<u8>, kind: &[u8; 4], version: u8, flags: u32, f: impl FnOnce(&mut Vec<u8>)) {
    boxed(b, kind, |b| {
        b.extend_from_slice(&((u32::from(version) << 24) | flags).to_be_bytes());
        f(b);
    });
}

/// `stts` or `ctts`: (count, value) runs.
fn runs(b: &mut Vec<u8>, kind: &[u8; 4], r: &[(u32, u32)]) {
    full(b, kind, 0, 0, |b| {
        u32s(b, &[r.len() as u32]);
        for &(n, v) in r {
            u32s(b, &[n, v]);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The top-level boxes as (type, size), and the whole file.
    fn boxes(path: &Path) -> (Vec<([u8; 4], usize)>, Vec<u8>) {
        let bytes = std::fs::read(path).unwrap();
        let (mut at, mut out) = (0, Vec::new());
        while at < bytes.len() {
            let size = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            out.push((bytes[at + 4..at + 8].try_into().unwrap(), size));
            assert!(size >= 8, "a box of {size} bytes at {at}");
            at += size;
        }
        assert_eq!(at, bytes.len(), "the boxes cover the file exactly");
        (out, bytes)
    }

    fn has(hay: &[u8], kind: &[u8; 4]) -> bool {
        hay.windows(4).any(|w| w == kind)
    }

    #[test]
    fn boxes_cover_the_file_and_the_index_says_only_what_differs() {
        let dir = std::env::temp_dir().join(format!("deskgym-mp4-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, key_every: usize, offset: u64| {
            let path = dir.join(name);
            let mut m = Mp4::create(&path, 64, 48, 30).unwrap();
            m.set_avcc(&[1, 0x42, 0, 0x1e, 0xff, 0xe0, 0]);
            for i in 0..5u64 {
                let data = vec![i as u8; 10 + i as usize];
                let t = i * 33_333_333;
                m.push(&Sample {
                    data: &data,
                    pts: t + offset,
                    dts: t,
                    duration: 33_333_333,
                    key: (i as usize).is_multiple_of(key_every),
                })
                .unwrap();
            }
            m.finish().unwrap();
            boxes(&path)
        };
        let (top, bytes) = write("all-key.mp4", 1, 0);
        let kinds: Vec<_> = top.iter().map(|(k, _)| k).collect();
        assert_eq!(kinds, [b"ftyp", b"mdat", b"moov"]);
        // The samples' 60 bytes and mdat's header; one 1000-tick duration run.
        assert_eq!(top[1].1, 8 + 10 + 11 + 12 + 13 + 14);
        assert!(has(&bytes, b"avcC") && !has(&bytes, b"stss") && !has(&bytes, b"ctts"));
        let stts = bytes.windows(4).position(|w| w == b"stts").unwrap();
        let run = &bytes[stts + 8..stts + 16];
        assert_eq!(
            run,
            [0, 0, 0, 1, 0, 0, 0, 5].as_slice(),
            "count of runs, then 5 samples"
        );
        assert_eq!(
            &bytes[stts + 16..stts + 20],
            1000u32.to_be_bytes().as_slice()
        );
        let (_, bytes) = write("some-key.mp4", 2, 66_666_666);
        assert!(has(&bytes, b"stss") && has(&bytes, b"ctts"));
        // Without frames there is no decoder configuration: no file is claimed done.
        let m = Mp4::create(&dir.join("empty.mp4"), 64, 48, 30).unwrap();
        assert!(m.finish().is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
