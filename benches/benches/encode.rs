//! H.264 encode throughput of each available encoder at 1280x720, through the same
//! appsrc → encoder → mp4mux pipeline the recorder uses (frames/s = 1 / time per push
//! in steady state: appsrc blocks once its queue is full).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use deskgym_datasets::video::{ENCODERS, EpisodeVideo};

const W: u32 = 1280;
const H: u32 = 720;

/// A desktop-like frame: flat background with a moving box, so encoders do real work.
fn frame(i: u32) -> bytes::Bytes {
    let mut rgb = vec![0xf0u8; (W * H * 3) as usize];
    let x0 = (i * 17) % (W - 200);
    for y in 100..300 {
        for x in x0..x0 + 200 {
            let p = ((y * W + x) * 3) as usize;
            rgb[p..p + 3].copy_from_slice(&[0xd6, 0x28, (i % 255) as u8]);
        }
    }
    rgb.into()
}

fn encode(c: &mut Criterion) {
    // The probe initialises GStreamer and tells which encoders work here.
    let chosen = deskgym_datasets::video::encoder();
    println!("probe: {chosen:?}");
    let frames: Vec<_> = (0..64).map(frame).collect();
    let dir = std::env::temp_dir().join(format!("deskgym-encode-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let mut g = c.benchmark_group(format!("encode/{W}x{H}"));
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    for (name, _) in ENCODERS {
        let path = dir.join(format!("{name}.mp4"));
        let Ok(mut video) = EpisodeVideo::start(&path, W, H, 10, name) else {
            println!("{name}: not available here, skipped");
            continue;
        };
        // A start that succeeds can still fail on the first frames (no NVENC engine).
        if video.push(frames[0].clone(), "0").is_err() {
            println!("{name}: fails to encode here, skipped");
            continue;
        }
        let mut i = 0;
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                i += 1;
                // Every frame differs from the last: a worst case, nothing is elided.
                video
                    .push(frames[i % frames.len()].clone(), &i.to_string())
                    .expect("push")
            })
        });
        let _ = video.finish();
    }
    g.finish();
}

criterion_group!(benches, encode);
criterion_main!(benches);
