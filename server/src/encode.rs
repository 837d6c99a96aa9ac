//! Frame encodings for the wire. Runs on the blocking pool, never on the runtime.

use deskgym_proto::v1::ImageEncoding;
use deskgym_worker::Frame;

use crate::error::ServiceError;

/// JPEG quality: FACTS.md found higher settings bigger and slower than PNG on desktops.
const JPEG_QUALITY: u8 = 80;

/// Encodes `frame` as `encoding`, consuming it so raw frames move without a copy.
pub fn encode(frame: Frame, encoding: ImageEncoding) -> Result<Vec<u8>, ServiceError> {
    match encoding {
        ImageEncoding::Unspecified | ImageEncoding::RawRgb => Ok(frame.rgb),
        ImageEncoding::Png => png(&frame),
        ImageEncoding::Jpeg => {
            let mut out = Vec::new();
            jpeg_encoder::Encoder::new(&mut out, JPEG_QUALITY)
                .encode(
                    &frame.rgb,
                    frame.width as u16,
                    frame.height as u16,
                    jpeg_encoder::ColorType::Rgb,
                )
                .map_err(|e| ServiceError::Internal(format!("jpeg encode: {e}")))?;
            Ok(out)
        }
    }
}

/// PNG with the fastest compression: screens compress well even so, and this sits on
/// the step path of VLM agents.
pub fn png(frame: &Frame) -> Result<Vec<u8>, ServiceError> {
    let err = |e: png::EncodingError| ServiceError::Internal(format!("png encode: {e}"));
    let mut out = Vec::with_capacity(frame.rgb.len() / 8);
    let mut enc = png::Encoder::new(&mut out, frame.width, frame.height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fast);
    let mut w = enc.write_header().map_err(err)?;
    w.write_image_data(&frame.rgb).map_err(err)?;
    w.finish().map_err(err)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_produce_their_magic_bytes() {
        let f = Frame::from_rgb(16, 8, (0..16 * 8 * 3).map(|i| i as u8).collect());
        assert_eq!(encode(f.clone(), ImageEncoding::RawRgb).unwrap(), f.rgb);
        assert!(
            encode(f.clone(), ImageEncoding::Png)
                .unwrap()
                .starts_with(b"\x89PNG")
        );
        assert!(
            encode(f, ImageEncoding::Jpeg)
                .unwrap()
                .starts_with(&[0xff, 0xd8])
        );
    }
}
