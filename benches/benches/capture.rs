//! Capture + hash per resolution, next to the physical floor (one XTEST click, a sync,
//! ShmGetImage, BGRX→RGB and XXH3-128) measured on the same Xvfb in the same run.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use deskgym_worker::XSession;
use deskgym_worker::Xvfb;
use deskgym_worker::frame_hash;
use deskgym_worker::{Action, Button, Point};

const SIZES: [(u32, u32); 2] = [(640, 480), (1280, 720)];

fn capture(c: &mut Criterion) {
    let mut g = c.benchmark_group("capture");
    for (w, h) in SIZES {
        let xvfb = Xvfb::start(w, h).expect("Xvfb (Debian package `xvfb`)");
        let mut x = XSession::connect(xvfb.display()).expect("connect");
        assert!(x.uses_shm());
        let label = format!("{w}x{h}");
        g.bench_with_input(
            BenchmarkId::new("shm_capture_rgb_hash", &label),
            &(),
            |b, _| b.iter(|| black_box(x.capture().expect("capture").hash)),
        );
        let frame = x.capture().expect("capture");
        g.bench_with_input(BenchmarkId::new("xxh3_128_only", &label), &frame, |b, f| {
            b.iter(|| black_box(frame_hash(f.width, f.height, &f.rgb)))
        });
        let click = Action::Click {
            at: Point { x: 10, y: 10 },
            button: Button::Left,
            count: 1,
        };
        g.bench_with_input(
            BenchmarkId::new("floor_click_sync_capture_hash", &label),
            &(),
            |b, _| {
                b.iter(|| {
                    x.perform(&click).expect("click");
                    black_box(x.capture().expect("capture").hash)
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, capture);
criterion_main!(benches);
