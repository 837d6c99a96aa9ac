//! Worker results to wire messages: the pointer's frame coordinates.

use super::*;
use crate::env::Geometry;
use deskgym_worker::Point;

/// ACI's mapping from a delivered pixel back to the screen.
fn to_screen(g: Geometry, delivered: (u32, u32), d: (u32, u32)) -> (u32, u32) {
    let [sx, sy, sw, sh] = g.source;
    (sx + d.0 * sw / delivered.0, sy + d.1 * sh / delivered.1)
}

// spec: aci:3.mapping aci:4.pointer-metadata
#[test]
fn the_pointer_in_frame_pixels_inverts_acis_mapping() {
    // A 640x480 screen's 301x211 window at (50, 40), scaled to 128x90, and the whole
    // screen scaled to 320x240: every delivered pixel maps back to itself, and every
    // screen point lands in the delivered pixel whose span holds it.
    for (source, delivered) in [
        ([50, 40, 301, 211], (128, 90)),
        ([0, 0, 640, 480], (320, 240)),
    ] {
        let g = Geometry {
            screen: (640, 480),
            source,
        };
        for dx in 0..delivered.0 {
            let (x, y) = to_screen(g, delivered, (dx, dx % delivered.1));
            let p = frame_point(
                g,
                delivered,
                Point {
                    x: x as i32,
                    y: y as i32,
                },
            )
            .unwrap();
            assert_eq!((p.x as u32, p.y as u32), (dx, dx % delivered.1));
        }
        let [sx, sy, sw, sh] = source;
        for x in sx..sx + sw {
            let p = frame_point(
                g,
                delivered,
                Point {
                    x: x as i32,
                    y: sy as i32,
                },
            )
            .unwrap();
            let (lo, _) = to_screen(g, delivered, (p.x as u32, 0));
            let (hi, _) = to_screen(g, delivered, (p.x as u32 + 1, 0));
            assert!(
                lo <= x && (x < hi || p.x as u32 == delivered.0 - 1),
                "{x} -> {}",
                p.x
            );
        }
        // Outside the source: no point in the frame.
        let outside = Point {
            x: (sx + sw) as i32,
            y: (sy + sh) as i32,
        };
        assert!(frame_point(g, delivered, outside).is_none() || sw == 640);
        assert!(frame_point(g, delivered, Point { x: -1, y: 0 }).is_none());
    }
}
