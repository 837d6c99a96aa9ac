"""The asyncio client (deskgym.aio): the sync client's verbs as coroutines over one
channel, with deadlines, a bound on calls in flight, and cancellation that reaches the
server."""

from __future__ import annotations

import asyncio
import gc
import pathlib
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import pytest

import deskgym
from deskgym.aio import AsyncClient, AsyncDeskgymEnv
from deskgym.v1 import deskgym_pb2 as pb

from conftest import BACKEND, RED, Server, find

SMALL = (320, 240)
_T = TypeVar("_T")


def run(main: Callable[[], Awaitable[_T]]) -> _T:
    async def go() -> _T:
        return await main()

    return asyncio.run(go())


def fake_server(*args: str) -> Server:
    """A server of in-memory desktops whatever the tier: what these tests measure is
    the client's concurrency, not the desktops."""
    return Server(*(["--backend", "fake"] if BACKEND == "real" else []), "--idle-timeout-s", "0", *args)


@pytest.fixture(scope="module")
def aio_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("aio-data")
    s = Server("--max-envs", "16", "--idle-timeout-s", "0", "--data-dir", str(data))
    yield s
    s.stop()


async def until_free(call: Callable[[], Awaitable[_T]], timeout: float = 20.0) -> _T:
    """``call()`` once the env has finished the call still in flight (ABORTED till then)."""
    end = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except deskgym.DeskgymError as e:
            if e.code != "ABORTED" or time.monotonic() > end:
                raise
            await asyncio.sleep(0.05)


def test_a_session_plays_the_episodes_a_sync_env_plays(aio_server: Server) -> None:
    sync = deskgym.make("click-target", address=aio_server.address, screen=SMALL)

    async def main() -> None:
        async with AsyncClient(aio_server.address) as client:
            async with await client.make("click-target", screen=SMALL) as env:
                assert isinstance(env, AsyncDeskgymEnv) and env.observation_space.shape == (240, 320, 3)
                obs, info = await env.reset(seed=11)
                want, want_info = sync.reset(seed=11)
                assert np.array_equal(obs, want) and info == want_info
                x, y = find(obs, RED)
                obs, reward, terminated, truncated, info = await env.step({"verb": "click", "x": x, "y": y})
                sync_step = sync.step({"verb": "click", "x": x, "y": y})
                assert (reward, terminated, truncated) == (1.0, True, False) == sync_step[1:4]
                assert info == sync_step[4] and info["step_index"] == 1 and info["pointer"] == (x, y)
                # Frames held by the client come back as not_modified, rebuilt from its cache.
                obs, info = await env.reset(seed=11)
                assert env.last_stats["frame_cached"] and np.array_equal(obs, want)
                assert np.array_equal(await env.observe(), want)
                png = await client.screenshot(env.env_id, encoding="png")
                assert png.frame.startswith(b"\x89PNG")
                assert (await client.capabilities()).protocol == "deskgym.v1"

    try:
        run(main)
    finally:
        sync.close()


def test_pools_batches_and_close(aio_server: Server) -> None:
    async def main() -> None:
        client = AsyncClient(aio_server.address)
        pool = await client.create_pool("click-target", 2, screen=SMALL, encoding="png")
        a, b = pool.env_ids
        r = await asyncio.gather(client.reset(a, seed=1), client.reset(b, seed=2))
        assert r[0].observation.frame_hash != r[1].observation.frame_hash
        click = deskgym.to_proto({"verb": "click", "x": 1, "y": 1})
        batch = await client.step_batch([pb.StepRequest(env_id=a, action=click)], [pb.ResetRequest(env_id=b, seed=3)])
        assert batch.results[0].result.info.step_index == 1 and batch.reset_results[0].result.info.seed == 3
        other = deskgym.Client(aio_server.address)
        try:
            # close() closes what the client holds: another client sees the env gone.
            await client.close()
            with pytest.raises(deskgym.DeskgymError) as e:
                other.observe(a)
            assert e.value.code == "NOT_FOUND"
            with pytest.raises(deskgym.DeskgymError) as e:
                await client.reset(a)
            assert e.value.code == "FAILED_PRECONDITION" and "closed" in e.value.message
        finally:
            other.close()

    run(main)


def test_save_restore_and_fork_into_sessions(aio_server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(aio_server.address) as client, await client.make("type-word", screen=SMALL) as env:
            await env.reset(seed=0)
            await env.step({"verb": "type_text", "text": "ab"})
            cp = await env.save()
            assert cp.step_index == 1 and cp.client is client
            at_cp = await env.observe()
            await env.step({"verb": "type_text", "text": "cd"})
            obs, info = await env.restore(cp)
            assert info["fidelity"] == "exact" and info["frame_hash"] == cp.frame_hash
            assert np.array_equal(obs, at_cp)
            replicas = await env.fork(3, cp)
            assert [i["fidelity"] for _, _, i in replicas] == ["exact"] * 3
            assert all(i["frame_hash"] == cp.frame_hash and np.array_equal(o, at_cp) for _, o, i in replicas)
            # The replicas are sessions of their own: stepped at once, each its own episode.
            steps = await asyncio.gather(*(r.step({"verb": "type_text", "text": "x"}) for r, _, _ in replicas))
            assert [s[4]["step_index"] for s in steps] == [2, 2, 2]
            assert (await replicas[0][0].step({"verb": "wait", "ms": 0}))[4]["step_index"] == 3
            assert any(c.checkpoint_id == cp.checkpoint_id for c in await client.list_checkpoints(env.pool_id))
            await client.delete_checkpoint(cp)
            # Their pool closes with the last of them.
            for r, _, _ in replicas[:2]:
                await r.close()
            assert (await replicas[2][0].step({"verb": "wait", "ms": 0}))[4]["step_index"] == 3
            await replicas[2][0].close()
            await replicas[2][0].close()  # idempotent
            with pytest.raises(deskgym.DeskgymError) as e:
                await client.observe(replicas[0][0].env_id)
            assert e.value.code == "NOT_FOUND"

    run(main)


def test_a_frame_the_cache_lost_is_fetched_again(aio_server: Server) -> None:
    # A cache of one frame: env A's frame is evicted by env B's, then A's next reset is
    # answered not_modified (A sent its last hash) and the client fetches it by hash.
    want = {}
    sync = deskgym.Client(aio_server.address, frame_cache_bytes=1)
    try:
        a, b = (deskgym.make("click-target", client=sync, screen=SMALL) for _ in range(2))
        want["a"], _ = a.reset(seed=0)
        b.reset(seed=1)
        fetched = []
        get_frames = sync.get_frames
        sync.get_frames = lambda hashes, *args, **kw: fetched.extend(hashes) or get_frames(hashes, *args, **kw)  # type: ignore[method-assign]
        obs, _ = a.reset(seed=0)
        assert len(fetched) == 1
        assert np.array_equal(obs, want["a"]) and not a.last_stats["frame_cached"]
        a.close()
        b.close()
    finally:
        sync.close()

    async def main() -> None:
        async with AsyncClient(aio_server.address, frame_cache_bytes=1) as client:
            a, b = [await client.make("click-target", screen=SMALL) for _ in range(2)]
            first, _ = await a.reset(seed=0)
            await b.reset(seed=1)
            assert (first_hash := a._last_hash) not in {h for h in client.recent_hashes("rgb", 8)}
            fetched = []
            get_frames = client.get_frames

            async def counted(hashes: list[str], *args: Any, **kwargs: Any) -> list[pb.Observation]:
                fetched.extend(hashes)
                return await get_frames(hashes, *args, **kwargs)

            client.get_frames = counted  # type: ignore[method-assign]
            obs, info = await a.reset(seed=0)
            assert fetched == [first_hash]
            assert info["frame_hash"] == first_hash and np.array_equal(obs, first)
            assert np.array_equal(obs, want["a"]) and not a.last_stats["frame_cached"]

    run(main)


def test_errors_carry_the_grpc_code_and_field(aio_server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(aio_server.address) as client, await client.make("click-target", screen=SMALL) as env:
            await env.reset(seed=0)
            with pytest.raises(deskgym.DeskgymError) as e:
                await env.step({"verb": "click", "x": 9999, "y": 5})
            assert e.value.code == "INVALID_ARGUMENT" and e.value.field == "action.click.target.point_px"
            assert "outside the 320x240 screen" in e.value.message
            with pytest.raises(deskgym.DeskgymError) as e:
                await client.observe("e-no-such-env")
            assert e.value.code == "NOT_FOUND"
            # The refused action did not count: the env goes on.
            assert (await env.step({"verb": "click", "x": 1, "y": 1}))[4]["step_index"] == 1

    run(main)
    with pytest.raises(deskgym.DeskgymError) as e:
        AsyncClient("localhost")
    assert e.value.code == "INVALID_ARGUMENT" and e.value.field == "address"

    async def nobody() -> None:
        async with AsyncClient("127.0.0.1:1", timeout=5) as c:
            await c.capabilities()

    with pytest.raises(deskgym.DeskgymError) as e:
        run(nobody)
    assert e.value.code == "UNAVAILABLE" and "no deskgym server answers at 127.0.0.1:1" in e.value.message


def test_every_call_has_a_deadline(aio_server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(aio_server.address, timeout=0.5) as client:
            envs = [await client.make("click-target", screen=SMALL, deadline=60) for _ in range(4)]
            await asyncio.gather(*(e.reset(seed=0, deadline=60) for e in envs))

            async def late(env: AsyncDeskgymEnv, deadline: float | None) -> tuple[str, float]:
                t = time.monotonic()
                with pytest.raises(deskgym.DeskgymError) as e:
                    await env.step({"verb": "wait", "ms": 2000}, deadline=deadline)
                return e.value.code, time.monotonic() - t

            # The client's default deadline, and calls' own. Whichever side's timer fires
            # first (the server keeps grpc-timeout too), the code is DEADLINE_EXCEEDED.
            ended = await asyncio.gather(late(envs[0], None), *(late(e, 0.2) for e in envs[1:]))
            assert [c for c, _ in ended] == ["DEADLINE_EXCEEDED"] * 4, ended
            assert ended[0][1] < 1.5 and all(t < 1.2 for _, t in ended[1:]), ended
            # Each env takes calls again once the server has finished the one it was running.
            for env in envs:
                _, _, _, _, info = await until_free(lambda: env.step({"verb": "wait", "ms": 0}, deadline=60))
                assert info["step_index"] == 2
                await env.close()

    run(main)


def test_calls_in_flight_are_bounded_and_the_wait_counts_in_the_deadline() -> None:
    s = fake_server()
    try:
        async def main() -> None:
            async with AsyncClient(s.address, max_in_flight=2) as client:
                envs = [await client.make("click-target", screen=SMALL) for _ in range(6)]
                await asyncio.gather(*(e.reset(seed=0) for e in envs))
                peak = 0

                async def watch() -> None:
                    nonlocal peak
                    while True:
                        peak = max(peak, client.in_flight)
                        await asyncio.sleep(0.01)

                watcher = asyncio.create_task(watch())
                t = time.monotonic()
                await asyncio.gather(*(e.step({"verb": "wait", "ms": 300}) for e in envs))
                took = time.monotonic() - t
                watcher.cancel()
                # Six 300 ms calls, two at a time: three rounds, not one.
                assert peak == 2 and took >= 0.85, (peak, took)
                # A call that cannot get a slot before its deadline fails with it.
                slow = [asyncio.create_task(e.step({"verb": "wait", "ms": 1000})) for e in envs[:2]]
                await asyncio.sleep(0.1)
                with pytest.raises(deskgym.DeskgymError) as e:
                    await envs[2].step({"verb": "wait", "ms": 0}, deadline=0.3)
                assert e.value.code == "DEADLINE_EXCEEDED" and "max_in_flight" in e.value.message
                await asyncio.gather(*slow)
                assert client.in_flight == 0
                # The refused call never reached the server.
                assert (await envs[2].step({"verb": "wait", "ms": 0}))[4]["step_index"] == 2

        run(main)
    finally:
        s.stop()


def test_cancelling_the_caller_cancels_its_rpc_and_the_server_skips_it() -> None:
    # One step thread: env A's long wait holds it, so env B's step waits in the
    # server's queue when its caller is cancelled; the server then skips it.
    s = fake_server("--step-threads", "1")
    try:
        async def main() -> None:
            async with AsyncClient(s.address) as client:
                a = await client.make("click-target", screen=SMALL)
                b = await client.make("click-target", screen=SMALL)
                await a.reset(seed=0)
                await b.reset(seed=0)
                busy = asyncio.create_task(a.step({"verb": "wait", "ms": 1200}))
                await asyncio.sleep(0.3)
                queued = asyncio.create_task(b.step({"verb": "click", "x": 1, "y": 1}))
                await asyncio.sleep(0.3)
                t = time.monotonic()
                queued.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await queued
                assert time.monotonic() - t < 0.2 and client.in_flight == 1
                assert (await busy)[4]["step_index"] == 1
                # B takes the next call, and the cancelled click never ran: this is
                # B's first step.
                _, _, _, _, info = await until_free(lambda: b.step({"verb": "click", "x": 2, "y": 2}))
                assert info["step_index"] == 1 and info["pointer"] == (2, 2)

        run(main)
    finally:
        s.stop()


def test_64_concurrent_sessions_over_one_channel() -> None:
    # Headroom over 64: a finished session's desktop counts until the server has stopped
    # it (in the background), so under load a late session could find all 64 held.
    s = fake_server("--max-envs", "80")
    try:
        async def session(client: AsyncClient, i: int) -> list[float]:
            async with await client.make("click-target", screen=SMALL) as env:
                obs, _ = await env.reset(seed=i)
                x, y = find(obs, RED)
                rewards = [(await env.step({"verb": "click", "x": 0, "y": 0}))[1] for _ in range(3)]
                rewards.append((await env.step({"verb": "click", "x": x, "y": y}))[1])
                return [float(r) for r in rewards]

        async def main() -> None:
            async with AsyncClient(s.address) as client:
                channel = client._channel
                results = await asyncio.gather(*(session(client, i) for i in range(64)))
                assert results == [[0.0, 0.0, 0.0, 1.0]] * 64
                assert client._channel is channel and client.in_flight == 0

        run(main)
    finally:
        s.stop()


def test_an_open_client_keeps_its_pools_and_a_dropped_one_lets_them_go(aio_server: Server) -> None:
    async def main() -> None:
        # The keeper's lease is 3 s, renewed every second: a loaded machine (CI's, with
        # builds beside it) that delays a renewal by a second or two still keeps its
        # pool. The dropped client's is 1 s, so three of its leases pass in the sleep.
        async with AsyncClient(aio_server.address, lease_ttl_s=3.0) as keeper:
            env = await keeper.make("click-target", screen=SMALL)
            await env.reset(seed=0)
            dropped = AsyncClient(aio_server.address, lease_ttl_s=1.0)
            gone = (await dropped.create_pool("click-target", 1, screen=SMALL)).env_ids[0]
            ref = weakref.ref(dropped)
            del dropped  # never closed: its renewals stop with it
            gc.collect()
            assert ref() is None
            # Three leases untouched (a call on a pool renews it too, decision 142).
            await asyncio.sleep(3.0)
            with pytest.raises(deskgym.DeskgymError) as e:
                await keeper.observe(gone)
            assert e.value.code == "NOT_FOUND"
            # Meanwhile the open client's idle pool was renewed.
            assert (await env.step({"verb": "noop"}))[4]["step_index"] == 1

    run(main)


@pytest.mark.real  # exec and files run in a sandbox, which fake desktops do not have
def test_exec_files_and_a_cancelled_exec(exec_server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(exec_server.address) as client:
            env = await client.make("blank", screen=(640, 480), profile="desktop", capabilities=("exec", "files"))
            try:
                await env.reset(seed=0)
                assert (await env.exec(["echo", "hi"])).stdout == "hi\n"
                assert await env.put_file("a.txt", "alpha") == 5
                assert await env.get_file("a.txt") == b"alpha"
                assert [e.size for e in (await env.list_directory(".")).entries if e.path == "a.txt"] == [5]
                # Cancelling the awaiting task kills the command and frees the env at once.
                long = asyncio.create_task(env.exec("sleep 40; touch ~/late", shell=True, timeout=60))
                await asyncio.sleep(1.5)
                long.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await long
                left = await until_free(lambda: env.exec("pgrep -x sleep || echo none", shell=True), timeout=25)
                assert left.stdout.strip() == "none"
                assert (await env.exec("test -e ~/late", shell=True)).exit_code == 1
            finally:
                await env.close()

    run(main)


def test_the_exec_grant_is_the_pools(aio_server: Server) -> None:
    async def main() -> None:
        async with AsyncClient(aio_server.address) as client, await client.make("click-target", screen=SMALL) as env:
            await env.reset(seed=0)
            with pytest.raises(deskgym.DeskgymError) as e:
                await env.exec(["true"])
            assert e.value.code == "PERMISSION_DENIED"

    run(main)


def test_the_module_is_reachable_from_the_package() -> None:
    # Loaded on first use, as deskgym.datasets is: `import deskgym` stays light.
    assert deskgym.aio.AsyncClient is AsyncClient
    assert pathlib.Path(deskgym.aio.__file__).parent.name == "aio"


@pytest.mark.parametrize("route", ["auto", "fork"])
def test_a_group_of_eight_sessions_starts_identical(aio_server: Server, route: str) -> None:
    """Issue 42 item 7 over asyncio: the sync group's routes and report, as sessions."""
    with deskgym.make("click-target", address=aio_server.address, screen=SMALL) as sync:
        _, want = sync.reset(seed=5)

    async def main() -> None:
        async with AsyncClient(aio_server.address) as client:
            with pytest.raises(deskgym.DeskgymError) as e:
                await client.make_group("click-target", 5, 8, route="clone")
            assert e.value.code == "INVALID_ARGUMENT"
            with pytest.raises(deskgym.DeskgymError) as e:
                await client.make_group({"config": [], "evaluator": {}}, 5, 8)  # type: ignore[arg-type]
            assert e.value.code == "INVALID_ARGUMENT" and "asyncio.to_thread" in e.value.message
            async with await client.make_group("click-target", 5, 8, route=route, screen=SMALL) as group:
                rep = group.report
                assert rep.identical and rep.reference_hash == want["frame_hash"], rep
                assert rep.route == ("seed" if route == "auto" else "fork")
                assert len({s.env_id for s in group}) == 8 and all(i == group.infos[0] for i in group.infos)
                if route == "fork":
                    assert [r.fidelity for r in rep.replicas] == [""] + ["exact"] * 7
                # Each session steps on its own; the others stay at the start.
                await group[0].step({"verb": "drag", "x": 5, "y": 5, "to_x": 160, "to_y": 120})
                hashes = {(await client.observe(s.env_id)).frame_hash for s in list(group)[1:]}
                assert hashes == {rep.reference_hash}
            assert not client._pools, "closing the group closed its pools"

    run(main)
