//! The manager against the fake backend: quotas, spares, checkpoints, fork, deadlines.

use std::sync::atomic::Ordering;

use super::*;
use deskgym_worker::Action;
use deskgym_worker::fake::FakeBackend;

fn manager(max_envs: u32) -> (Arc<PoolManager>, Arc<FakeBackend>) {
    let backend = Arc::new(FakeBackend::new());
    let record = RecordSettings::for_tests();
    let limits = Limits {
        max_envs,
        ..Limits::default()
    };
    let mgr = PoolManager::with_backend(limits, 4, record, backend.clone()).unwrap();
    (Arc::new(mgr), backend)
}

fn req(n: u32, spares: u32) -> pb::CreatePoolRequest {
    pb::CreatePoolRequest {
        task: "click-target".into(),
        num_envs: n,
        warm_spares: spares,
        screen: Some(pb::ScreenSize {
            width: 320,
            height: 240,
        }),
        ..Default::default()
    }
}

async fn create(
    mgr: &Arc<PoolManager>,
    n: u32,
    spares: u32,
    who: &Principal,
) -> Result<Arc<PoolState>, PoolError> {
    let spec = mgr.spec(&req(n, spares))?;
    mgr.create_pool(spec, n, None, who).await
}

fn raw() -> ObsOptions {
    ObsOptions {
        encoding: pb::ImageEncoding::RawRgb as i32,
        known: Vec::new(),
        ..Default::default()
    }
}

#[tokio::test]
async fn capacity_is_all_or_nothing_and_given_back() {
    let (mgr, backend) = manager(4);
    let who = Principal::local(mgr.limits());
    let p = create(&mgr, 3, 0, &who).await.unwrap();
    assert_eq!(mgr.env_count(), 3);
    let e = create(&mgr, 2, 0, &who).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert_eq!(
        backend.started.load(Ordering::Acquire),
        3,
        "nothing started"
    );
    // Overflowing counts are refused, not wrapped.
    let e = create(&mgr, 2, u32::MAX, &who).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    mgr.close_pool(&p.id, Some(&who)).await.unwrap();
    assert_eq!(mgr.env_count(), 0);
    create(&mgr, 4, 0, &who).await.unwrap();
}

#[tokio::test]
async fn a_failed_start_leaves_nothing_behind() {
    let (mgr, backend) = manager(8);
    let who = Principal::local(mgr.limits());
    backend.fail_after.store(2, Ordering::Release);
    let e = create(&mgr, 4, 0, &who).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e}");
    assert_eq!(mgr.env_count(), 0, "pending slots were given back");
    assert!(lock(&mgr.pools).is_empty());
}

#[tokio::test]
async fn warm_spares_count_and_refill() {
    let (mgr, backend) = manager(4);
    let who = Principal::local(mgr.limits());
    let p = create(&mgr, 1, 2, &who).await.unwrap();
    assert_eq!(mgr.env_count(), 3);
    assert_eq!(lock(&p.spares).len(), 2);
    assert!(p.take_spare().is_some());
    mgr.top_up_spares();
    // The refill runs on the step pool; wait for it (bounded).
    for _ in 0..200 {
        if lock(&p.spares).len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(lock(&p.spares).len(), 2);
    assert_eq!(backend.started.load(Ordering::Acquire), 4);
}

#[tokio::test]
async fn a_dead_desktop_is_unavailable_then_restarted_from_a_spare() {
    let (mgr, backend) = manager(4);
    let who = Principal::local(mgr.limits());
    let p = create(&mgr, 1, 1, &who).await.unwrap();
    let env = mgr.env(&p.env_ids[0], &who).unwrap();
    env.reset(&mgr.cache, Some(1), &raw()).unwrap();
    backend.dead.store(true, Ordering::Release);
    let action = deskgym_worker::Action::Click {
        at: deskgym_worker::Point { x: 1, y: 1 },
        button: deskgym_worker::Button::Left,
        count: 1,
    };
    let e = env
        .step(&mgr.cache, &action.into(), &raw(), false)
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    backend.dead.store(false, Ordering::Release);
    // The next reset takes the spare instead of starting a desktop.
    let before = backend.started.load(Ordering::Acquire);
    env.reset(&mgr.cache, Some(1), &raw()).unwrap();
    assert_eq!(backend.started.load(Ordering::Acquire), before);
    assert!(lock(&p.spares).is_empty());
}

#[tokio::test]
async fn fork_is_all_or_nothing() {
    let (mgr, backend) = manager(6);
    let who = Principal::local(mgr.limits());
    let p = create(&mgr, 1, 0, &who).await.unwrap();
    let env = mgr.env(&p.env_ids[0], &who).unwrap();
    env.reset(&mgr.cache, Some(5), &raw()).unwrap();
    let cp = mgr.save(&env.id, 0, &who).await.unwrap();
    let ok = mgr.fork(&cp.id, 3, 0, &who).await.unwrap();
    assert!(ok.replicas.iter().all(|(_, r)| r.exact));
    assert_eq!(mgr.env_count(), 4);
    // The second start of the next fork fails: no pool, no desktop stays.
    backend.fail_after.store(1, Ordering::Release);
    let e = mgr.fork(&cp.id, 2, 0, &who).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert_eq!(mgr.env_count(), 4);
    assert_eq!(lock(&mgr.pools).len(), 2);
}

/// A rebuild first replays keys typed in a run without settles; when that frame
/// differs from the checkpoint's, it is replayed again, every action settled.
#[tokio::test]
async fn a_fast_replay_that_differs_is_done_again_settled() {
    let (mgr, backend) = manager(4);
    let who = Principal::local(mgr.limits());
    let spec = mgr
        .spec(&pb::CreatePoolRequest {
            task: "type-word".into(),
            ..req(1, 0)
        })
        .unwrap();
    let p = mgr.create_pool(spec, 1, None, &who).await.unwrap();
    let env = mgr.env(&p.env_ids[0], &who).unwrap();
    env.reset(&mgr.cache, Some(5), &raw()).unwrap();
    let (x, y) = deskgym_worker::Episode::new("type-word", 5, 320, 240)
        .unwrap()
        .hint()[0];
    let focus = Action::Click {
        at: deskgym_worker::Point { x, y },
        button: deskgym_worker::Button::Left,
        count: 1,
    };
    env.step(&mgr.cache, &focus.into(), &raw(), false).unwrap();
    for key in ["a", "b", "c"] {
        let typed = Action::TypeText(key.into());
        env.step(&mgr.cache, &typed.into(), &raw(), false).unwrap();
    }
    let cp = mgr.save(&env.id, 0, &who).await.unwrap();
    let fork = mgr.fork(&cp.id, 1, 0, &who).await.unwrap();
    assert!(fork.replicas[0].1.exact);
    assert_eq!(
        backend.settled_replays.load(Ordering::Acquire),
        0,
        "the fast replay stood"
    );
    backend
        .fast_replay_loses_a_key
        .store(true, Ordering::Release);
    let fork = mgr.fork(&cp.id, 2, 0, &who).await.unwrap();
    assert!(fork.replicas.iter().all(|(_, r)| r.exact));
    assert_eq!(
        backend.settled_replays.load(Ordering::Acquire),
        2,
        "each replica's lossy fast replay was done again, settled"
    );
}

#[tokio::test(start_paused = true)]
async fn leases_expire_with_time_and_renewals_keep_them() {
    let (mgr, _) = manager(4);
    let who = Principal::local(mgr.limits());
    let mut r = req(1, 0);
    r.lease_ttl_ms = 1_000;
    let spec = mgr.spec(&r).unwrap();
    let kept = mgr.create_pool(spec.clone(), 1, None, &who).await.unwrap();
    let lapsed = mgr.create_pool(spec, 1, None, &who).await.unwrap();
    for _ in 0..6 {
        tokio::time::advance(Duration::from_millis(400)).await;
        assert!(
            mgr.keep_alive(std::slice::from_ref(&kept.id), &who)
                .is_empty()
        );
        mgr.reap_idle(None).await;
    }
    let pools = lock(&mgr.pools);
    assert!(pools.contains_key(&kept.id));
    assert!(
        !pools.contains_key(&lapsed.id),
        "the silent pool was reaped"
    );
}

/// A one-env pool on a 1 s lease.
async fn leased(mgr: &Arc<PoolManager>, who: &Principal) -> Arc<PoolState> {
    let mut r = req(1, 0);
    r.lease_ttl_ms = 1_000;
    let spec = mgr.spec(&r).unwrap();
    mgr.create_pool(spec, 1, None, who).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_call_in_flight_keeps_its_pool_and_its_end_restarts_the_lease() {
    let (mgr, _) = manager(4);
    let who = Principal::local(mgr.limits());
    let pool = leased(&mgr, &who).await;
    let env = mgr.env(&pool.env_ids[0], &who).unwrap();
    // A step that outlasts the lease on a loaded host: no renewal meanwhile.
    let flight = env.begin(crate::env::Call::Step).unwrap();
    tokio::time::advance(Duration::from_millis(3_000)).await;
    assert!(mgr.reap_idle(None).await.is_empty(), "reaped mid-call");
    drop(flight);
    tokio::time::advance(Duration::from_millis(900)).await;
    assert!(
        mgr.reap_idle(None).await.is_empty(),
        "the lease runs from the call's end"
    );
    tokio::time::advance(Duration::from_millis(200)).await;
    assert_eq!(mgr.reap_idle(None).await, vec![pool.id.clone()]);
}

#[tokio::test(start_paused = true)]
async fn a_stalled_server_reaps_nothing_and_restarts_the_leases() {
    let (mgr, _) = manager(4);
    let who = Principal::local(mgr.limits());
    let pool = leased(&mgr, &who).await;
    assert!(mgr.reap_idle(None).await.is_empty());
    // No reaper round (so no renewal could land either) for 2.5 leases.
    tokio::time::advance(Duration::from_millis(2_500)).await;
    assert!(mgr.reap_idle(None).await.is_empty(), "reaped after a stall");
    tokio::time::advance(Duration::from_millis(900)).await;
    assert!(mgr.reap_idle(None).await.is_empty());
    tokio::time::advance(Duration::from_millis(200)).await;
    assert_eq!(mgr.reap_idle(None).await, vec![pool.id.clone()]);
}

/// Waits (yielding to the step threads) until no replica of `cp` is being rebuilt.
async fn parked_settle(cp: &Checkpoint) -> (u32, u32) {
    for _ in 0..500 {
        let (ready, building) = lock(&cp.pool.parked).of(&cp.id);
        if building == 0 {
            return (ready, building);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("parking never finished");
}

fn click(x: i32, y: i32) -> crate::a11y::Planned {
    Action::Click {
        at: deskgym_worker::Point { x, y },
        button: deskgym_worker::Button::Left,
        count: 1,
    }
    .into()
}

/// A chain of saves keeps its parked replicas at the newest checkpoint by replaying
/// only the suffix (no desktop started for it); a fork takes them first, replaying
/// nothing, and rebuilds the rest from a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_replicas_follow_a_chain_and_forks_take_them() {
    let (mgr, backend) = manager(8);
    let who = Principal::local(mgr.limits());
    let p = create(&mgr, 1, 0, &who).await.unwrap();
    let env = mgr.env(&p.env_ids[0], &who).unwrap();
    env.reset(&mgr.cache, Some(5), &raw()).unwrap();
    for i in 0..3 {
        env.step(&mgr.cache, &click(10 + i, 50), &raw(), false)
            .unwrap();
    }
    let first = mgr.save(&env.id, 2, &who).await.unwrap();
    assert_eq!(parked_settle(&first).await, (2, 0));
    assert_eq!(
        mgr.env_count(),
        3,
        "parked replicas are desktops of the pool"
    );
    let started = backend.started.load(Ordering::Acquire);
    for i in 0..3 {
        env.step(&mgr.cache, &click(60 + i, 80), &raw(), false)
            .unwrap();
    }
    let second = mgr.save(&env.id, 2, &who).await.unwrap();
    assert_eq!(second.parent.as_deref(), Some(first.id.as_str()));
    assert_eq!(parked_settle(&second).await, (2, 0));
    assert_eq!(
        lock(&p.parked).of(&first.id),
        (0, 0),
        "advanced, not copied"
    );
    assert_eq!(
        backend.started.load(Ordering::Acquire),
        started,
        "no desktop started"
    );
    assert_eq!(lock(&p.parked).asked[&second.id].from_step, 3);

    let f = mgr.fork(&second.id, 3, 0, &who).await.unwrap();
    assert_eq!(f.from_parked, 2);
    let from: Vec<u32> = f.replicas.iter().map(|(_, r)| r.path.from_step).collect();
    assert_eq!(from, [6, 6, 0]);
    assert!(f.replicas.iter().all(|(_, r)| r.exact));
    assert_eq!(lock(&p.parked).of(&second.id), (0, 0));
    assert_eq!(mgr.env_count(), 4);

    // A restore takes a parked replica for the env's desktop (the env's own stops).
    env.step(&mgr.cache, &click(90, 90), &raw(), false).unwrap();
    let third = mgr.save(&env.id, 1, &who).await.unwrap();
    assert_eq!(parked_settle(&third).await, (1, 0));
    assert_eq!(mgr.env_count(), 5);
    env.step(&mgr.cache, &click(99, 99), &raw(), false).unwrap();
    let replica = mgr.take_parked(&third, 1).pop().unwrap();
    let back = env
        .restore_parked(&mgr.cache, &third, &raw(), replica)
        .unwrap();
    assert!(back.exact);
    assert_eq!((back.path.from_step, back.info.step_index), (7, 7));
    assert_eq!(mgr.env_count(), 4);

    // Deleting a checkpoint stops its parked replicas.
    let fourth = mgr.save(&env.id, 1, &who).await.unwrap();
    assert_eq!(parked_settle(&fourth).await, (1, 0));
    assert_eq!(mgr.env_count(), 5);
    mgr.delete_checkpoint(&fourth.id, &who).unwrap();
    assert_eq!(mgr.env_count(), 4);
}

/// Parking fits in what is free (fewer is not an error, and the checkpoint says why),
/// and a pool that needs the room takes it from parked replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parking_yields_to_pools_and_stays_within_max_envs() {
    let (mgr, _) = manager(3);
    let who = Principal::local(mgr.limits());
    let p = create(&mgr, 1, 0, &who).await.unwrap();
    let env = mgr.env(&p.env_ids[0], &who).unwrap();
    env.reset(&mgr.cache, Some(5), &raw()).unwrap();
    env.step(&mgr.cache, &click(10, 50), &raw(), false).unwrap();
    let cp = mgr.save(&env.id, 4, &who).await.unwrap();
    assert_eq!(parked_settle(&cp).await, (2, 0));
    let note = lock(&p.parked).asked[&cp.id].note.clone();
    assert!(note.contains("max_envs=3"), "{note}");
    assert_eq!(mgr.env_count(), 3);
    // A pool of two needs both parked desktops' room.
    create(&mgr, 2, 0, &who).await.unwrap();
    assert_eq!(lock(&p.parked).of(&cp.id), (0, 0));
    assert_eq!(mgr.env_count(), 3);
    let e = mgr.save(&env.id, 9, &who).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

/// Parking never takes a principal past its desktop quota: fewer are parked, and the
/// checkpoint's note names the quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parking_stays_within_the_owners_quota() {
    let (mgr, _) = manager(8);
    let who = Principal {
        max_desktops: 2,
        ..Principal::local(mgr.limits())
    };
    let p = create(&mgr, 1, 0, &who).await.unwrap();
    let env = mgr.env(&p.env_ids[0], &who).unwrap();
    env.reset(&mgr.cache, Some(5), &raw()).unwrap();
    let cp = mgr.save(&env.id, 3, &who).await.unwrap();
    assert_eq!(parked_settle(&cp).await, (1, 0));
    let note = lock(&p.parked).asked[&cp.id].note.clone();
    assert!(note.contains("quota of 2"), "{note}");
    assert_eq!(mgr.usage_of(&who.name).desktops, 2);
}

/// Saves faster than the replicas are built: a rebuild still running for an earlier
/// checkpoint goes on to the newest one, so no further desktop is started and the
/// replicas end at the newest checkpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuilds_in_flight_move_on_to_the_newest_checkpoint() {
    let (mgr, backend) = manager(8);
    let who = Principal::local(mgr.limits());
    let p = create(&mgr, 1, 0, &who).await.unwrap();
    let env = mgr.env(&p.env_ids[0], &who).unwrap();
    env.reset(&mgr.cache, Some(5), &raw()).unwrap();
    let started = backend.started.load(Ordering::Acquire);
    let mut last = None;
    for i in 0..5 {
        env.step(&mgr.cache, &click(10 + i, 50), &raw(), false)
            .unwrap();
        last = Some(mgr.save(&env.id, 2, &who).await.unwrap());
    }
    let last = last.unwrap();
    assert_eq!(parked_settle(&last).await, (2, 0));
    assert_eq!(lock(&p.parked).held(), 2, "two desktops followed the chain");
    let more = backend.started.load(Ordering::Acquire) - started;
    assert_eq!(more, 2, "desktops started for a chain of 2 replicas");
    let f = mgr.fork(&last.id, 2, 0, &who).await.unwrap();
    assert_eq!(f.from_parked, 2);
    assert!(
        f.replicas
            .iter()
            .all(|(_, r)| r.exact && r.path.from_step == 5)
    );
}
