"""Errors that travel (pickle, multiprocessing, AsyncVectorEnv) and desktops that are
freed when their client dies: leases against a real server."""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import subprocess
import sys
import time

import gymnasium as gym
import pytest

import deskgym

from conftest import Server

SMALL = (320, 240)


def test_errors_pickle_with_code_message_and_field() -> None:
    e = deskgym.DeskgymError("INVALID_ARGUMENT", "action.click.target.point_px: (999, 0) is outside the screen")
    assert e.field == "action.click.target.point_px"
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is deskgym.DeskgymError
    assert (back.code, back.message, back.field, str(back)) == (e.code, e.message, e.field, str(e))
    assert deskgym.DeskgymError("NOT_FOUND", "env x: gone").field is None


def test_bad_input_field_comes_from_the_servers_bad_request_detail(client: deskgym.Client) -> None:
    pool = client.create_pool("click-target", 1, screen=SMALL)
    try:
        env = pool.env_ids[0]
        client.reset(env, seed=0)
        with pytest.raises(deskgym.DeskgymError) as e:
            client.step(env, deskgym.to_proto({"verb": "click", "x": 9999, "y": 5}))
        assert e.value.code == "INVALID_ARGUMENT"
        assert e.value.field == "action.click.target.point_px"
        # The field travels as data too: a google.rpc.BadRequest in the status details.
        import grpc

        from deskgym.errors import details_of
        from deskgym.v1 import deskgym_pb2 as pb

        with pytest.raises(grpc.RpcError) as raw:
            client._stub.Step(pb.StepRequest(env_id=env, action=deskgym.to_proto({"verb": "click", "x": 9999, "y": 5})))
        assert details_of(raw.value) == ("action.click.target.point_px", None)
        # A message that names another field does not fool it: the field is the detail's.
        assert deskgym.DeskgymError.from_rpc(raw.value).field == "action.click.target.point_px"
        with pytest.raises(grpc.RpcError) as plain:
            client._stub.Reset(pb.ResetRequest(env_id="no-such-env"))
        assert details_of(plain.value) == (None, None)
    finally:
        client.close_pool(pool.pool_id)


def _raise_in_worker(address: str) -> None:
    with deskgym.Client(address) as c:
        c.reset("no-such-env")


def test_errors_cross_a_multiprocessing_worker(address: str) -> None:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        with pytest.raises(deskgym.DeskgymError) as e:
            pool.apply(_raise_in_worker, (address,))
    assert e.value.code == "NOT_FOUND" and "no-such-env" in e.value.message


def test_errors_cross_an_async_vector_env_worker(address: str) -> None:
    # Spawned, as docs/training.md says: this process has open gRPC channels, and a
    # worker forked while one of gRPC's threads held a lock hung in its first channel
    # (a clean-clone CI run's fast tier, 2026-12-06: the child in Channel.__init__).
    envs = gym.vector.AsyncVectorEnv(
        [lambda: deskgym.make("click-target", address=address, screen=SMALL, action_mode="click_grid")],
        shared_memory=False, context="spawn",
    )
    try:
        envs.reset(seed=0)
        # The server rejects nothing here, so provoke a client-side INVALID_ARGUMENT.
        with pytest.raises(deskgym.DeskgymError) as e:
            envs.step([10_000])
        assert e.value.code == "INVALID_ARGUMENT" and e.value.message.startswith("action")
    finally:
        envs.close(terminate=True)


HOLDER = """
import sys, time, deskgym
c = deskgym.Client(sys.argv[1], lease_ttl_s=2.0)
env = deskgym.make_vec("click-target", 8, client=c, screen=(320, 240))
env.reset(seed=0)
print("ready", flush=True)
time.sleep(600)
"""


def test_a_killed_client_frees_its_desktops_within_its_lease() -> None:
    # Idle reaping off: only the lease can free the desktops.
    s = Server("--max-envs", "8", "--idle-timeout-s", "0")
    try:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, s.address], stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with deskgym.Client(s.address) as c:
            with pytest.raises(deskgym.DeskgymError) as e:
                c.create_pool("click-target", 8, screen=SMALL)
            assert e.value.code == "RESOURCE_EXHAUSTED"
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            t0 = time.monotonic()
            while True:
                try:
                    c.create_pool("click-target", 8, screen=SMALL)
                    break
                except deskgym.DeskgymError as err:
                    assert err.code == "RESOURCE_EXHAUSTED"
                    # A bound, not a speed claim: without leases they are never freed here.
                    assert time.monotonic() - t0 < 30, "the dead client's desktops were not freed"
                    time.sleep(0.2)
    finally:
        assert s.stop() == 0


def test_a_live_but_busy_client_keeps_its_desktops() -> None:
    s = Server("--max-envs", "2", "--idle-timeout-s", "0")
    try:
        with deskgym.Client(s.address, lease_ttl_s=1.0) as c:
            env = deskgym.make("click-target", client=c, screen=SMALL)
            env.reset(seed=0)
            # Three leases of pure-Python work (holding the GIL between switches).
            t0 = time.monotonic()
            n = 0
            while time.monotonic() - t0 < 3.0:
                n += 1
            env.step({"verb": "noop"})
            env.close()
    finally:
        assert s.stop() == 0


def test_a_call_longer_than_the_lease_keeps_its_pool_without_renewals() -> None:
    # Raw gRPC, so nothing renews: only the call in flight keeps the pool.
    import grpc

    from deskgym.v1 import deskgym_pb2 as pb
    from deskgym.v1 import deskgym_pb2_grpc as pb_grpc

    s = Server("--max-envs", "2", "--idle-timeout-s", "0")
    try:
        with grpc.insecure_channel(s.address) as ch:
            stub = pb_grpc.DeskgymStub(ch)  # type: ignore[no-untyped-call]
            pool = stub.CreatePool(
                pb.CreatePoolRequest(task="click-target", num_envs=1, lease_ttl_ms=1000,
                                     screen=pb.ScreenSize(width=SMALL[0], height=SMALL[1])),
                timeout=60,
            )
            env = pool.env_ids[0]
            stub.Reset(pb.ResetRequest(env_id=env, seed=0), timeout=60)
            # Two and a half leases inside one call.
            stub.Step(pb.StepRequest(env_id=env, action=deskgym.to_proto({"verb": "wait", "ms": 2500})), timeout=60)
            # The lease runs from the call's end: the next call still finds the pool.
            stub.Step(pb.StepRequest(env_id=env, action=deskgym.to_proto({"verb": "noop"})), timeout=60)
            # Silent for longer than a lease, it is reaped (the reaper's bound is generous).
            t0 = time.monotonic()
            while True:
                try:
                    stub.Step(pb.StepRequest(env_id=env, action=deskgym.to_proto({"verb": "noop"})), timeout=60)
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.NOT_FOUND, e
                    break
                assert time.monotonic() - t0 < 30, "the silent pool was never reaped"
                time.sleep(1.5)
    finally:
        assert s.stop() == 0


def test_a_server_that_stalled_does_not_reap_the_pools_of_clients_that_kept_renewing() -> None:
    # The whole server stopped for over two leases (an overloaded host, a debugger):
    # its clients' renewals could not land, so the server, not they, was away.
    s = Server("--max-envs", "2", "--idle-timeout-s", "0")
    try:
        with deskgym.Client(s.address, lease_ttl_s=1.0) as c:
            env = deskgym.make("click-target", client=c, screen=SMALL)
            env.reset(seed=0)
            s.proc.send_signal(signal.SIGSTOP)
            time.sleep(2.5)
            s.proc.send_signal(signal.SIGCONT)
            env.step({"verb": "noop"})
            env.close()
    finally:
        s.proc.send_signal(signal.SIGCONT)
        assert s.stop() == 0
