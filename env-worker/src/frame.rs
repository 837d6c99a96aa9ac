//! Captured frames and their content hash.

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

    /// The hash as the wire shows it: 32 lowercase hex characters.
    pub fn hash_hex(&self) -> String {
        hash_hex(self.hash)
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

/// Converts X's 32-bit BGRX ZPixmap rows into packed RGB, reusing `out`'s allocation.
///
/// Works on whole words so the compiler can vectorise it; this sits on every step's path
/// (FACTS.md measured a naive byte loop at ~2.2 ms for 1280x720).
pub fn bgrx_to_rgb(src: &[u8], out: &mut Vec<u8>) {
    let pixels = src.len() / 4;
    out.resize(pixels * 3, 0);
    for (d, s) in out.chunks_exact_mut(3).zip(src.chunks_exact(4)) {
        d[0] = s[2];
        d[1] = s[1];
        d[2] = s[0];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pixel_difference_changes_hash() {
        let a = vec![0u8; 64 * 48 * 3];
        let mut b = a.clone();
        b[1000] = 1;
        assert_ne!(frame_hash(64, 48, &a), frame_hash(64, 48, &b));
    }

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
        let src = [1, 2, 3, 0, 4, 5, 6, 0];
        let mut out = Vec::new();
        bgrx_to_rgb(&src, &mut out);
        assert_eq!(out, vec![3, 2, 1, 6, 5, 4]);
    }
}
