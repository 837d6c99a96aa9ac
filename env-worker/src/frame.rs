//! Captured frames and their content hash.

use std::mem::MaybeUninit;

use xxhash_rust::xxh3::xxh3_128_with_seed;

/// One captured screen in packed 8-bit RGB, with its content hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `width * height * 3` bytes, row-major RGB.
    pub rgb: Vec<u8>,
    /// [`frame_hash`] of `rgb`.
    pub hash: u128,
}

impl Frame {
    /// Wraps RGB pixels, computing their hash.
    pub fn from_rgb(width: u32, height: u32, rgb: Vec<u8>) -> Self {
        debug_assert_eq!(rgb.len(), width as usize * height as usize * 3);
        let hash = frame_hash(width, height, &rgb);
        Self {
            width,
            height,
            rgb,
            hash,
        }
    }

    /// Centroid of the pixels of exactly `color` (0xRRGGBB), if any: the simplest
    /// pixel-based "find the target" a scripted agent or a test needs.
    pub fn find_color(&self, color: u32) -> Option<(i32, i32)> {
        let want = [(color >> 16) as u8, (color >> 8) as u8, color as u8];
        let (mut sx, mut sy, mut n) = (0u64, 0u64, 0u64);
        for (i, px) in self.rgb.chunks_exact(3).enumerate() {
            if px == want {
                sx += (i % self.width as usize) as u64;
                sy += (i / self.width as usize) as u64;
                n += 1;
            }
        }
        (n > 0).then(|| ((sx / n) as i32, (sy / n) as i32))
    }
}

/// XXH3-128 over the RGB pixels with the dimensions folded into the seed, so that the
/// same bytes at another size (a 2x1 and a 1x2 frame, say) never share a hash.
pub fn frame_hash(width: u32, height: u32, rgb: &[u8]) -> u128 {
    let seed = (u64::from(width) << 32) | u64::from(height);
    xxh3_128_with_seed(rgb, seed)
}

/// Formats a frame hash as 32 lowercase hex characters.
pub fn hash_hex(hash: u128) -> String {
    format!("{hash:032x}")
}

/// Converts X's 32-bit BGRX ZPixmap rows into packed RGB, replacing `out`'s contents.
///
/// Four pixels per iteration as whole words: `swap_bytes(p) >> 8` turns a BGRX pixel
/// into RGB in the low three bytes, and three shifted ORs pack four of them into 12
/// bytes. This sits on every step's path: a byte-wise loop measured ~0.8 ms at 1280x720
/// here (FACTS.md: ~2.2 ms naive), the word version about a third of that.
pub(crate) fn bgrx_to_rgb(src: &[u8], out: &mut Vec<u8>) {
    let pixels = src.len() / 4;
    out.clear();
    out.reserve_exact(pixels * 3);
    // Written in place, not zeroed first: zeroing cost as much as a third of the
    // conversion itself.
    let dst = &mut out.spare_capacity_mut()[..pixels * 3];
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("ssse3") {
        // SAFETY: the CPU supports SSSE3 (checked just above).
        done = unsafe { bgrx_to_rgb_ssse3(src, dst) };
    }
    bgrx_to_rgb_words(&src[done * 4..pixels * 4], &mut dst[done * 3..]);
    // SAFETY: the two calls above wrote every one of the `pixels * 3` bytes.
    unsafe { out.set_len(pixels * 3) };
}

/// One PSHUFB turns 4 BGRX pixels into 12 RGB bytes. Stores are 16 bytes wide, so the
/// loop stops while 16 bytes of room remain and returns how many pixels it converted.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
unsafe fn bgrx_to_rgb_ssse3(src: &[u8], out: &mut [MaybeUninit<u8>]) -> usize {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_set_epi8, _mm_shuffle_epi8, _mm_storeu_si128,
    };
    let mask = _mm_set_epi8(-1, -1, -1, -1, 12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2);
    let blocks = (src.len() / 16).min(out.len().saturating_sub(4) / 12);
    for i in 0..blocks {
        // SAFETY: block i reads src[16i..16i+16] and writes out[12i..12i+16], both in
        // bounds by the choice of `blocks`; unaligned loads/stores are allowed, and the
        // 4 bytes past each block's 12 are written again by the next block or the tail.
        unsafe {
            let v = _mm_loadu_si128(src.as_ptr().add(i * 16).cast::<__m128i>());
            _mm_storeu_si128(
                out.as_mut_ptr().add(i * 12).cast::<__m128i>(),
                _mm_shuffle_epi8(v, mask),
            );
        }
    }
    blocks * 4
}

/// Portable fallback (and the tail of the SIMD path): writes `src.len() / 4 * 3` bytes.
fn bgrx_to_rgb_words(src: &[u8], out: &mut [MaybeUninit<u8>]) {
    fn put(d: &mut [MaybeUninit<u8>], s: &[u8]) {
        for (d, s) in d.iter_mut().zip(s) {
            d.write(*s);
        }
    }
    let mut dst = out.chunks_exact_mut(12);
    let mut quads = src.chunks_exact(16);
    for (d, s) in (&mut dst).zip(&mut quads) {
        let s: &[u8; 16] = s.try_into().expect("16-byte chunk");
        let px =
            |i: usize| u32::from_le_bytes([s[i], s[i + 1], s[i + 2], s[i + 3]]).swap_bytes() >> 8;
        let (c0, c1, c2, c3) = (px(0), px(4), px(8), px(12));
        put(&mut d[0..4], &(c0 | c1 << 24).to_le_bytes());
        put(&mut d[4..8], &(c1 >> 8 | c2 << 16).to_le_bytes());
        put(&mut d[8..12], &(c2 >> 16 | c3 << 8).to_le_bytes());
    }
    let rest = dst.into_remainder();
    for (d, s) in rest
        .chunks_exact_mut(3)
        .zip(quads.remainder().chunks_exact(4))
    {
        put(d, &[s[2], s[1], s[0]]);
    }
}

impl Frame {
    /// The part of the rectangle (x, y, w, h) on this frame, as [x, y, w, h]; `None`
    /// when none of it is.
    pub fn visible(&self, x: i32, y: i32, w: u32, h: u32) -> Option<[u32; 4]> {
        let x0 = x.clamp(0, self.width as i32) as u32;
        let y0 = y.clamp(0, self.height as i32) as u32;
        let x1 = (i64::from(x) + i64::from(w)).clamp(0, i64::from(self.width)) as u32;
        let y1 = (i64::from(y) + i64::from(h)).clamp(0, i64::from(self.height)) as u32;
        (x1 > x0 && y1 > y0).then_some([x0, y0, x1 - x0, y1 - y0])
    }

    /// The part of the frame inside `(x, y, w, h)`, clipped to the frame; `None` when
    /// nothing of it is on screen.
    pub fn crop(&self, x: i32, y: i32, w: u32, h: u32) -> Option<Frame> {
        let [x0, y0, w, h] = self.visible(x, y, w, h)?;
        let (row_bytes, stride) = (w as usize * 3, self.width as usize * 3);
        let mut rgb = Vec::with_capacity(row_bytes * h as usize);
        for row in y0..y0 + h {
            let start = row as usize * stride + x0 as usize * 3;
            rgb.extend_from_slice(&self.rgb[start..start + row_bytes]);
        }
        Some(Frame::from_rgb(w, h, rgb))
    }

    /// The frame scaled down (box filter) so its long edge is at most `max_long_edge`;
    /// itself when it is already that small.
    pub fn downscale(self, max_long_edge: u32) -> Frame {
        let long = self.width.max(self.height);
        if max_long_edge == 0 || long <= max_long_edge {
            return self;
        }
        let scale = f64::from(max_long_edge) / f64::from(long);
        let w = ((f64::from(self.width) * scale).round() as u32).max(1);
        let h = ((f64::from(self.height) * scale).round() as u32).max(1);
        let mut rgb = Vec::with_capacity(w as usize * h as usize * 3);
        let (sw, sh) = (self.width as usize, self.height as usize);
        for dy in 0..h as usize {
            let (y0, y1) = (
                dy * sh / h as usize,
                ((dy + 1) * sh / h as usize).max(dy * sh / h as usize + 1),
            );
            for dx in 0..w as usize {
                let (x0, x1) = (
                    dx * sw / w as usize,
                    ((dx + 1) * sw / w as usize).max(dx * sw / w as usize + 1),
                );
                let mut sum = [0u32; 3];
                for y in y0..y1.min(sh) {
                    for x in x0..x1.min(sw) {
                        let p = (y * sw + x) * 3;
                        for (acc, &v) in sum.iter_mut().zip(&self.rgb[p..p + 3]) {
                            *acc += u32::from(v);
                        }
                    }
                }
                let n = ((y1.min(sh) - y0) * (x1.min(sw) - x0)).max(1) as u32;
                rgb.extend(sum.iter().map(|s| (s / n) as u8));
            }
        }
        Frame::from_rgb(w, h, rgb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // spec: aci:4.frame-hash
    #[test]
    fn one_pixel_difference_changes_hash() {
        let a = vec![0u8; 64 * 48 * 3];
        let mut b = a.clone();
        b[1000] = 1;
        assert_ne!(frame_hash(64, 48, &a), frame_hash(64, 48, &b));
    }

    // spec: aci:4.frame-hash
    #[test]
    fn same_bytes_other_dimensions_differ() {
        let px = vec![7u8; 6 * 4 * 3];
        assert_ne!(frame_hash(6, 4, &px), frame_hash(4, 6, &px));
        assert_ne!(frame_hash(24, 1, &px), frame_hash(1, 24, &px));
    }

    #[test]
    fn hex_is_32_lowercase_chars() {
        let h = hash_hex(frame_hash(2, 2, &[255; 12]));
        assert_eq!(h.len(), 32);
        assert!(
            h.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        );
        assert_eq!(hash_hex(1), format!("{}1", "0".repeat(31)));
    }

    #[test]
    fn bgrx_conversion_swaps_channels() {
        // Sizes around the SIMD block and tail boundaries, against a byte-wise reference.
        for n in [0usize, 1, 4, 5, 8, 9, 13, 64, 67] {
            let src: Vec<u8> = (0..n * 4).map(|i| (i * 7 % 251) as u8).collect();
            let mut out = vec![7; 3];
            bgrx_to_rgb(&src, &mut out);
            let want: Vec<u8> = src
                .chunks_exact(4)
                .flat_map(|p| [p[2], p[1], p[0]])
                .collect();
            assert_eq!(out, want, "{n} pixels");
            let mut words = vec![MaybeUninit::new(0u8); n * 3];
            bgrx_to_rgb_words(&src, &mut words);
            // SAFETY: initialised above (and overwritten by the conversion).
            let words: Vec<u8> = words.iter().map(|b| unsafe { b.assume_init() }).collect();
            assert_eq!(words, want, "{n} pixels, portable path");
        }
    }

    #[test]
    fn crop_and_downscale_keep_what_is_on_screen() {
        let rgb: Vec<u8> = (0..4 * 2).flat_map(|i| [i as u8, 0, 0]).collect();
        let f = Frame::from_rgb(4, 2, rgb);
        let c = f.crop(1, 0, 2, 5).unwrap();
        assert_eq!((c.width, c.height), (2, 2));
        assert_eq!(c.rgb[0], 1);
        assert!(f.crop(10, 10, 5, 5).is_none());
        assert!(f.crop(-3, 0, 2, 2).is_none());
        let d = f.clone().downscale(2);
        assert_eq!((d.width, d.height), (2, 1));
        // Box filter: the first output pixel averages columns 0..2 of both rows.
        assert_eq!(d.rgb[0], (1 + 4 + 5) / 4); // pixels 0, 1, 4, 5
        assert_eq!(f.clone().downscale(0), f);
        assert_eq!(f.clone().downscale(4), f);
    }
}
