//! H.264 recording costs, through the recorder's own [`VideoStream`]:
//! - encode throughput of each available encoder at 1280x720 (frames/s = 1 / time per
//!   push in steady state: appsrc blocks once its queue is full);
//! - the cost of one short episode's video (20 steps, 4 distinct frames, 640x480) when
//!   the env keeps its encoder, against building an encoder for every episode (what
//!   the recorder did before, and the baseline here).

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use deskgym_datasets::{ENCODERS, VideoStream};
use gstreamer::prelude::*;

/// A desktop-like frame: flat background with a moving box, so encoders do real work.
fn frame(w: u32, h: u32, i: u32) -> bytes::Bytes {
    let mut rgb = vec![0xf0u8; (w * h * 3) as usize];
    let x0 = (i * 17) % (w - 200);
    for y in 100..300.min(h) {
        for x in x0..x0 + 200 {
            let p = ((y * w + x) * 3) as usize;
            rgb[p..p + 3].copy_from_slice(&[0xd6, 0x28, (i % 255) as u8]);
        }
    }
    rgb.into()
}

fn tmp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("deskgym-encode-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir
}

fn encode(c: &mut Criterion) {
    const W: u32 = 1280;
    const H: u32 = 720;
    // The probe initialises GStreamer and tells which encoders work here.
    let chosen = deskgym_datasets::h264_encoder();
    println!("probe: {chosen:?}");
    let frames: Vec<_> = (0..64).map(|i| frame(W, H, i)).collect();
    let dir = tmp_dir();
    let mut g = c.benchmark_group(format!("encode/{W}x{H}"));
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    for (name, _) in ENCODERS {
        let Ok(mut video) = VideoStream::start(W, H, 10, name) else {
            println!("{name}: not available here, skipped");
            continue;
        };
        // A start that succeeds can still fail on the first frames (no NVENC engine).
        let started = video.begin_episode(&dir.join(format!("{name}.mp4")));
        if started
            .and_then(|()| video.push(frames[0].clone(), "0"))
            .is_err()
        {
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

fn episode(c: &mut Criterion) {
    const W: u32 = 640;
    const H: u32 = 480;
    let Ok(chosen) = deskgym_datasets::h264_encoder() else {
        return;
    };
    let enc = chosen.element;
    let frames: Vec<_> = (0..4).map(|i| frame(W, H, i)).collect();
    let path = tmp_dir().join("episode.mp4");
    // 20 steps showing 4 distinct pictures, as a short episode on a desktop does.
    let record = |v: &mut VideoStream| {
        v.begin_episode(&path).expect("begin");
        for i in 0..20 {
            v.push(frames[i / 5].clone(), &(i / 5).to_string())
                .expect("push");
        }
        v.end_episode().expect("end")
    };
    let mut g = c.benchmark_group(format!("episode-video/{W}x{H}/20-steps/{enc}"));
    g.sample_size(30);
    g.bench_function("encoder per episode (baseline)", |b| {
        b.iter(|| {
            let mut v = VideoStream::start(W, H, 10, &enc).expect("start");
            record(&mut v);
            v.finish().expect("finish")
        })
    });
    let mut v = VideoStream::start(W, H, 10, &enc).expect("start");
    v.encode_repeats();
    g.bench_function("one encoder per env, constant rate, repeats encoded", |b| {
        b.iter(|| record(&mut v))
    });
    let mut v = VideoStream::start(W, H, 10, &enc).expect("start");
    g.bench_function("one encoder per env, constant rate, repeats written", |b| {
        b.iter(|| record(&mut v))
    });
    let mut v = VideoStream::start(W, H, 10, &enc).expect("start");
    v.set_constant_rate(false);
    g.bench_function("one encoder per env, repeats elided", |b| {
        b.iter(|| record(&mut v))
    });
    g.finish();
}

/// The RGB → I420 conversion the recorder does before encoding, against GStreamer's
/// videoconvert doing the same in a pipeline (the baseline it replaced).
fn convert(c: &mut Criterion) {
    const W: u32 = 1280;
    const H: u32 = 720;
    gstreamer::init().expect("GStreamer");
    let rgb = frame(W, H, 7);
    let info = gstreamer_video::VideoInfo::builder(gstreamer_video::VideoFormat::I420, W, H)
        .build()
        .expect("I420 info");
    let mut out = vec![0u8; info.size()];
    let mut g = c.benchmark_group(format!("rgb-to-i420/{W}x{H}"));
    g.bench_function("videoconvert (baseline)", |b| {
        let p = gstreamer::parse::launch(&format!(
            "appsrc name=src caps=video/x-raw,format=RGB,width={W},height={H},framerate=0/1 \
             ! videoconvert ! video/x-raw,format=I420 ! appsink name=sink sync=false"
        ))
        .expect("pipeline")
        .downcast::<gstreamer::Pipeline>()
        .expect("a pipeline");
        let by = |n: &str| p.by_name(n).expect(n);
        let src = by("src")
            .downcast::<gstreamer_app::AppSrc>()
            .expect("appsrc");
        let sink = by("sink")
            .downcast::<gstreamer_app::AppSink>()
            .expect("appsink");
        p.set_state(gstreamer::State::Playing).expect("play");
        b.iter(|| {
            src.push_buffer(gstreamer::Buffer::from_slice(rgb.clone()))
                .expect("push");
            sink.pull_sample().expect("converted")
        });
        let _ = p.set_state(gstreamer::State::Null);
    });
    g.bench_function("deskgym rgb_to_i420", |b| {
        b.iter(|| deskgym_datasets::rgb_to_i420(&rgb, W, &info, &mut out))
    });
    g.finish();
}

/// How many distinct 1280x720 frames per second one recording's writer thread absorbs
/// (each is stored once as PNG and, with video, converted and encoded), tables only
/// against tables + video. Steps that show no new frame cost the writer next to nothing.
fn recorder(c: &mut Criterion) {
    use deskgym_datasets::{FrameRecord, Overflow, Record, Recorder, RecorderConfig};
    const W: u32 = 1280;
    const H: u32 = 720;
    let frames: Vec<_> = (0..64).map(|i| frame(W, H, i)).collect();
    let dir = tmp_dir();
    let mut g = c.benchmark_group(format!("recorder/distinct-frames/{W}x{H}"));
    g.throughput(Throughput::Elements(1));
    g.sample_size(10);
    for (name, fps) in [("tables only", None), ("tables + video", Some(10))] {
        let mut run = 0;
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                run += 1;
                let r = Recorder::start(RecorderConfig {
                    dir: dir.join(format!("{}-{run}.skn", fps.is_some())),
                    run_id: "bench".into(),
                    task: "bench".into(),
                    width: W,
                    height: H,
                    server_version: "bench".into(),
                    roll_bytes: 64 << 20,
                    roll_every: std::time::Duration::from_secs(30),
                    channel_capacity: 64,
                    overflow: Overflow::Block,
                    video_fps: fps,
                    video_variable_rate: false,
                    disk_share: None,
                })
                .expect("recorder");
                let t = std::time::Instant::now();
                for i in 0..n {
                    r.send(Record::Frame(FrameRecord {
                        hash: format!("{run}-{i}"),
                        width: W,
                        height: H,
                        rgb: frames[i as usize % frames.len()].clone(),
                        env_id: "e".into(),
                        episode_id: Some(format!("e/{}", i / 20)),
                    }));
                }
                r.close().expect("close");
                t.elapsed()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, encode, episode, convert, recorder);
criterion_main!(benches);
