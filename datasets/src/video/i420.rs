//! Packed RGB to I420 (BT.601, limited range), our own loop: compiled for AVX2 when the
//! CPU has it, 4x GStreamer's videoconvert (benches/README.md).

use super::*;

/// Converts packed RGB (`width` px per row) to I420 in `out`, laid out as `info`
/// says (its size may be one smaller than the RGB's in either direction): BT.601
/// limited range, chroma from the mean of each 2x2 block, integer maths that agree
/// with videoconvert to within a level or two. Uses AVX2 where the CPU has it.
pub fn rgb_to_i420(rgb: &[u8], width: u32, info: &gst_video::VideoInfo, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { rgb_to_i420_avx2(rgb, width, info, out) };
    }
    convert_i420(rgb, width, info, out)
}

/// [`convert_i420`] compiled for AVX2, which the compiler vectorises.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rgb_to_i420_avx2(rgb: &[u8], width: u32, info: &gst_video::VideoInfo, out: &mut [u8]) {
    convert_i420(rgb, width, info, out)
}

/// The conversion, written as plain loops the compiler can vectorise: luma in u16
/// (66 + 129 + 25 = 220 times 255 fits), chroma in i32 from 2x2 sums.
#[inline(always)]
fn convert_i420(rgb: &[u8], width: u32, info: &gst_video::VideoInfo, out: &mut [u8]) {
    let (w, h) = (info.width() as usize & !1, info.height() as usize & !1);
    let row = width as usize * 3;
    let (stride, offset) = (info.stride(), info.offset());
    let (ys, us, vs) = (stride[0] as usize, stride[1] as usize, stride[2] as usize);
    let (y_plane, chroma) = out.split_at_mut(offset[1]);
    let (u_plane, v_plane) = chroma.split_at_mut(offset[2] - offset[1]);
    for y in 0..h {
        let src = &rgb[y * row..][..w * 3];
        for (dst, p) in y_plane[y * ys..][..w].iter_mut().zip(src.chunks_exact(3)) {
            let (r, g, b) = (u16::from(p[0]), u16::from(p[1]), u16::from(p[2]));
            *dst = (((66 * r + 129 * g + 25 * b + 128) >> 8) + 16) as u8;
        }
    }
    for cy in 0..h / 2 {
        let top = &rgb[2 * cy * row..][..w * 3];
        let bottom = &rgb[(2 * cy + 1) * row..][..w * 3];
        let uv = u_plane[cy * us..][..w / 2]
            .iter_mut()
            .zip(&mut v_plane[cy * vs..][..w / 2]);
        for ((t, b), (u, v)) in top.chunks_exact(6).zip(bottom.chunks_exact(6)).zip(uv) {
            let sum = |c: usize| {
                i32::from(t[c]) + i32::from(t[c + 3]) + i32::from(b[c]) + i32::from(b[c + 3])
            };
            let (r, g, b) = (sum(0), sum(1), sum(2));
            // Sums of four pixels: the >> 10 divides by 4 * 256.
            *u = (((-38 * r - 74 * g + 112 * b + 512) >> 10) + 128) as u8;
            *v = (((112 * r - 94 * g - 18 * b + 512) >> 10) + 128) as u8;
        }
    }
}
