//! Frame encodings for the wire. Runs on the blocking pool, never on the runtime.

use deskgym_proto::v1::ImageEncoding;
use deskgym_worker::Frame;

/// An image encoder failed (a bug or an impossible frame: the server's fault).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{format} encode: {message}")]
pub(crate) struct EncodeError {
    /// `png` or `jpeg`.
    format: &'static str,
    /// The encoder's complaint.
    message: String,
}

/// JPEG quality: FACTS.md found higher settings bigger and slower than PNG on desktops.
pub(crate) const JPEG_QUALITY: u8 = 80;

/// Encodes `frame` as `encoding`, consuming it so raw frames move without a copy.
pub(crate) fn encode(frame: Frame, encoding: ImageEncoding) -> Result<Vec<u8>, EncodeError> {
    encode_with(frame, encoding, JPEG_QUALITY)
}

/// [`encode`] with a chosen JPEG quality (1..=100).
pub(crate) fn encode_with(
    frame: Frame,
    encoding: ImageEncoding,
    jpeg_quality: u8,
) -> Result<Vec<u8>, EncodeError> {
    match encoding {
        ImageEncoding::Unspecified | ImageEncoding::RawRgb => Ok(frame.rgb),
        ImageEncoding::Png => png(&frame),
        ImageEncoding::Jpeg => {
            let mut out = Vec::new();
            jpeg_encoder::Encoder::new(&mut out, jpeg_quality.clamp(1, 100))
                .encode(
                    &frame.rgb,
                    frame.width as u16,
                    frame.height as u16,
                    jpeg_encoder::ColorType::Rgb,
                )
                .map_err(|e| EncodeError {
                    format: "jpeg",
                    message: e.to_string(),
                })?;
            Ok(out)
        }
    }
}

/// PNG with the fastest compression (the recorder's encoding, shared).
pub(crate) fn png(frame: &Frame) -> Result<Vec<u8>, EncodeError> {
    deskgym_datasets::png_rgb(frame.width, frame.height, &frame.rgb).map_err(|e| EncodeError {
        format: "png",
        message: e.to_string(),
    })
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
