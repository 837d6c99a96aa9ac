//! Step round trips through the real server over loopback gRPC, against the same work
//! done in-process without the server (the floor), in the same run.
//!
//! Groups:
//! - `step/640x480`: the raw floor (XTEST+sync+SHM+hash), the worker's full step (input,
//!   task-app sync, settle, capture, hash) without gRPC, and one `Step` RPC (RAW_RGB).
//! - `step_batch/640x480`: one `StepBatch` RPC over 1, 4 and 16 envs.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use deskgym_proto::v1 as pb;
use deskgym_proto::v1::deskgym_client::DeskgymClient;
use deskgym_server::{Limits, ServerConfig};
use deskgym_worker::XSession;
use deskgym_worker::Xvfb;
use deskgym_worker::{
    Action, Button, Desktop, DesktopConfig, LocalDesktop, Point, Settle, SettlePolicy,
};
use tonic::transport::Channel;

const W: u32 = 640;
const H: u32 = 480;
/// A click on an empty spot of the task screen: real input, same pixels every time.
const SPOT: (i32, i32) = (2, H as i32 - 3);

/// The same click as [`click`], as the worker executes it (for the no-gRPC rows).
fn spot_click() -> Action {
    Action::Click {
        at: Point {
            x: SPOT.0,
            y: SPOT.1,
        },
        button: Button::Left,
        count: 1,
    }
}

fn click() -> Option<pb::Action> {
    Some(pb::Action {
        verb: Some(pb::action::Verb::Click(pb::Click {
            target: Some(pb::Target {
                kind: Some(pb::target::Kind::PointPx(pb::PointPx {
                    x: SPOT.0,
                    y: SPOT.1,
                })),
            }),
            button: 0,
            count: 1,
        })),
        extension: None,
    })
}

struct Server {
    rt: tokio::runtime::Runtime,
    client: DeskgymClient<Channel>,
    envs: Vec<String>,
}

fn server(n: u32) -> Server {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (client, envs) = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let config = ServerConfig {
            limits: Limits {
                max_envs: 64,
                ..Limits::default()
            },
            ..ServerConfig::default()
        };
        tokio::spawn(deskgym_server::run(
            listener,
            config,
            std::future::pending(),
        ));
        let mut client = loop {
            if let Ok(c) = deskgym_server::connect(addr).await {
                break c;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        let pool = client
            .create_pool(pb::CreatePoolRequest {
                task: "click-target".into(),
                num_envs: n,
                screen: Some(pb::ScreenSize {
                    width: W,
                    height: H,
                }),
                max_steps: u32::MAX,
                ..Default::default()
            })
            .await
            .expect("pool")
            .into_inner();
        for e in &pool.env_ids {
            client
                .reset(pb::ResetRequest {
                    env_id: e.clone(),
                    seed: Some(1),
                    ..Default::default()
                })
                .await
                .expect("reset");
        }
        (client, pool.env_ids)
    });
    Server { rt, client, envs }
}

fn step(c: &mut Criterion) {
    let mut g = c.benchmark_group(format!("step/{W}x{H}"));
    {
        let xvfb = Xvfb::start(W, H).expect("Xvfb");
        let mut x = XSession::connect(xvfb.display()).expect("connect");
        let a = spot_click();
        g.bench_function("floor_raw_x11", |b| {
            b.iter(|| {
                x.perform(&a).expect("click");
                black_box(x.capture().expect("capture").hash)
            })
        });
    }
    {
        let mut d = LocalDesktop::start(DesktopConfig {
            task: "click-target".into(),
            width: W,
            height: H,
            settle: Settle {
                policy: SettlePolicy::Sync,
                settle_ms: 0,
                settle_max_ms: 1000,
            },
            family: deskgym_worker::Family::TaskApp,
        })
        .expect("desktop");
        d.reset(1).expect("reset");
        let a = spot_click();
        g.bench_function("worker_step_no_grpc", |b| {
            b.iter(|| {
                d.step(&a).expect("step");
                black_box(d.capture().expect("capture").hash)
            })
        });
    }
    let mut s = server(1);
    let env = s.envs[0].clone();
    g.bench_function("grpc_step_raw", |b| {
        b.iter(|| {
            let r = s.rt.block_on(s.client.step(pb::StepRequest {
                env_id: env.clone(),
                action: click(),
                encoding: 0,
                autoreset: false,
                ..Default::default()
            }));
            black_box(r.expect("step").into_inner().reward)
        })
    });
    g.bench_function("grpc_step_png", |b| {
        b.iter(|| {
            let r = s.rt.block_on(s.client.step(pb::StepRequest {
                env_id: env.clone(),
                action: click(),
                encoding: pb::ImageEncoding::Png as i32,
                autoreset: false,
                ..Default::default()
            }));
            black_box(r.expect("step").into_inner().reward)
        })
    });
    g.finish();
    drop(s);

    let mut g = c.benchmark_group(format!("step_batch/{W}x{H}"));
    g.sample_size(20);
    for n in [1u32, 4, 16] {
        let mut s = server(n);
        let req = pb::StepBatchRequest {
            resets: vec![],
            items: s
                .envs
                .iter()
                .map(|e| pb::StepRequest {
                    env_id: e.clone(),
                    action: click(),
                    encoding: 0,
                    autoreset: false,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        g.throughput(Throughput::Elements(u64::from(n)));
        g.bench_with_input(BenchmarkId::from_parameter(n), &req, |b, req| {
            b.iter(|| {
                let r =
                    s.rt.block_on(s.client.step_batch(req.clone()))
                        .expect("batch")
                        .into_inner();
                assert!(r.results.iter().all(|i| i.code == 0));
                black_box(r)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, step);
criterion_main!(benches);
