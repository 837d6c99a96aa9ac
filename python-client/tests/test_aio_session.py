"""ACI's session over asyncio (`deskgym.aio.connect()` -> `AsyncSession`, issue 43 item 1):
the §2 flow on real sandboxed desktops (act, `run` with a namespace that persists,
checkpoints and forks, events seen live, a power unlocked for a block), reattaching by
id, bad input refused with a typed error (before any call where the client can tell),
and 32 sessions driven at once over one channel. The sync and async sessions share
their argument checks and results (`deskgym.aci`): the fast tier holds them side by
side against a client with no server behind it."""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import numpy as np
import pytest
from conftest import BACKEND, RED, Server, find
from PIL import Image

import deskgym
import deskgym.aio as aio
from deskgym import aci
from deskgym.a11y import Tree
from deskgym.aio import AsyncClient, AsyncEventStream, AsyncSession
from deskgym.calls import Pool
from deskgym.execution import ExecResult

SMALL = (320, 240)
#: An address where nothing listens: a call that got that far would be UNAVAILABLE.
NOWHERE = "127.0.0.1:1"
_T = TypeVar("_T")


def run(main: Callable[[], Awaitable[_T]]) -> _T:
    async def go() -> _T:
        return await main()

    return asyncio.run(go())


def pixels(shot: aci.Shot) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(shot["png"])).convert("RGB"))


async def wait_for(pred: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if await pred():
            return True
        await asyncio.sleep(0.2)
    return False


# -- the fast tier: one shape for both sessions ---------------------------------------------

#: Each verb called wrongly, and the field its error names.
WRONG: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("click", (), {"x": "10", "y": 2}, "x: expected an int"),
    ("click", (), {"x": True, "y": 2}, "x: expected an int"),
    ("click", (), {"x": 10}, "give both x= and y="),
    ("click", ("e1",), {"x": 1, "y": 2}, "not both"),
    ("click", (3.5,), {}, "target: expected an Element"),
    ("click", (), {"x": 1, "y": 2, "button": 1}, "button: expected a str"),
    ("click", (), {"x": 1, "y": 2, "count": "2"}, "count: expected an int"),
    ("scroll", (), {"x": 1, "y": 2, "dy": 1.5}, "dy: expected an int"),
    ("type", (5,), {}, "text: expected a str"),
    ("key", ("",), {}, "keys: empty"),
    ("key", (None,), {}, "keys: expected a str"),
    ("run", (b"print(1)",), {}, "code: expected a str"),
    ("run", ("1",), {"timeout": 0}, "not a positive number"),
    ("run", ("1",), {"timeout": "5"}, "not a positive number"),
    ("run", ("x" * (aci.MAX_CODE + 1),), {}, "put large inputs in a file"),
    ("observe", (), {"line_budget": 5}, "only with structured=True"),
    ("observe", ("yes",), {}, "structured: expected a bool"),
    ("restore", (5,), {}, "checkpoint: expected a checkpoint"),
    ("fork", (), {"n": 0}, "fork makes 1 or more"),
    ("fork", (3,), {}, "checkpoint: expected a checkpoint"),
]


def _pool() -> Pool:
    return Pool("p1", ["e1"], 320, 240, 0, profile="desktop", capabilities=("exec",))


@pytest.mark.spec("aci:6.env")
def test_both_sessions_refuse_wrong_arguments_alike_before_any_call() -> None:
    from deskgym.session import Session, _Share

    sync = Session(deskgym.Client(NOWHERE), "e1", _Share(_pool(), 1), own_client=True, profile="desktop",
                   capabilities=("exec",))

    async def main() -> None:
        client = AsyncClient(NOWHERE)
        s = AsyncSession(client, "e1", aio.client._PoolShare(_pool()), own_client=True, profile="desktop",
                         capabilities=("exec",))
        for verb, args, kwargs, msg in WRONG:
            with pytest.raises(deskgym.DeskgymError) as a:
                await getattr(s, verb)(*args, **kwargs)
            with pytest.raises(deskgym.DeskgymError) as b:
                getattr(sync, verb)(*args, **kwargs)
            # INVALID_ARGUMENT, not the UNAVAILABLE a call to NOWHERE would answer.
            assert a.value.code == b.value.code == "INVALID_ARGUMENT", (verb, a.value, b.value)
            assert msg in a.value.message and a.value.message == b.value.message, (verb, a.value, b.value)
        for scope in ([1], {"pypi.org": 1}):
            with pytest.raises(deskgym.DeskgymError) as e:
                async with s.unlock("net.egress", scope=scope):  # type: ignore[arg-type]
                    pass
            assert e.value.code == "INVALID_ARGUMENT" and e.value.field == "scope"
        with pytest.raises(deskgym.DeskgymError) as e:
            async with s.unlock(None):  # type: ignore[arg-type]
                pass
        assert e.value.code == "INVALID_ARGUMENT" and e.value.field == "capability"
        # A closed session refuses every verb of its own, before any call, as the sync one.
        await s.close()
        sync.close()
        for verb, args in (("act", ({"verb": "noop"},)), ("run", ("1",)), ("save", ()), ("screenshot", ()),
                           ("observe", ()), ("reset", ()), ("restore", ("c1",)), ("fork", ())):
            with pytest.raises(deskgym.DeskgymError) as a:
                await getattr(s, verb)(*args)
            with pytest.raises(deskgym.DeskgymError) as b:
                getattr(sync, verb)(*args)
            assert a.value.code == b.value.code == "FAILED_PRECONDITION" and "e1 is closed" in a.value.message
        with pytest.raises(deskgym.DeskgymError) as a:
            s.events()
        assert a.value.code == "FAILED_PRECONDITION"
        # Ids and reattach arguments are checked before any client is made.
        for bad in ("", "/e2", "p/1/e2", "127.0.0.1:50051"):
            with pytest.raises(deskgym.DeskgymError) as e:
                await aio.connect(bad, address=NOWHERE)
            assert e.value.code == "INVALID_ARGUMENT" and "Session.id" in e.value.message
        with pytest.raises(deskgym.DeskgymError, match="no pool options"):
            await aio.connect("e2", screen=SMALL, address=NOWHERE)
        with pytest.raises(deskgym.DeskgymError) as e:
            await aio.connect(5, address=NOWHERE)  # type: ignore[arg-type]
        assert e.value.code == "INVALID_ARGUMENT" and e.value.field == "session_id"

    run(main)


def test_the_async_session_has_the_sync_ones_verbs_with_the_same_arguments() -> None:
    verbs = ["screenshot", "observe", "act", "reset", "click", "double_click", "right_click", "move", "type", "key",
             "scroll", "run", "save", "restore", "fork", "unlock", "events", "close", "detach", "put_file",
             "get_file", "list_directory", "clipboard", "set_clipboard", "windows"]
    for v in verbs:
        sync, asyn = getattr(deskgym.Session, v), getattr(AsyncSession, v)
        # Coroutines (or an async context manager, a stream) where the sync ones block.
        assert inspect.iscoroutinefunction(asyn) or v in ("unlock", "events"), v
        names = [p for p in inspect.signature(asyn).parameters if p != "deadline"]
        assert names == list(inspect.signature(sync).parameters), v
    for v in ("id", "snapshot_kind"):
        assert isinstance(getattr(AsyncSession, v), property)
    assert list(inspect.signature(aio.connect).parameters) == list(inspect.signature(deskgym.connect).parameters)


def test_run_results_are_read_alike() -> None:
    def ran(stdout: str, code: int | None = 0, timed_out: bool = False) -> ExecResult:
        return ExecResult(code, None, stdout.encode(), b"boom", False, timed_out, 1.0)

    ok = {"output": "30", "error": None, "value_repr": None, "duration_ms": 2, "truncated": False, "fresh": True}
    assert aci.run_result(ran(json.dumps(ok))) == aci.RunResult("30", None, None, 2.0, False, True)
    err = {**ok, "error": {"type": "NameError", "message": "x", "traceback": "tb"}, "fresh": False}
    assert aci.run_result(ran(json.dumps(err))).error == aci.RunError("NameError", "x", "tb")
    for bad, code in ((ran("", 1), "UNAVAILABLE"), (ran("", None, True), "UNAVAILABLE"), (ran(""), "ABORTED"),
                      (ran("not json"), "INTERNAL"), (ran(json.dumps({"protocol_error": "?"})), "INTERNAL")):
        with pytest.raises(deskgym.DeskgymError) as e:
            aci.run_result(bad)
        assert e.value.code == code
    argv, stdin, bound = aci.run_exec("a = 1", 2.5)
    assert argv[:2] == ["python3", "-c"] and json.loads(stdin) == {"code": "a = 1", "timeout": 2.5}
    assert bound == 2.5 + aci.RUN_GRACE_S
    # The sync module still names what moved to deskgym.aci.
    assert deskgym.session.Acted is aci.Acted and deskgym.RunResult is aci.RunResult


# -- an event stream: started, read, cancelled, ended (fake desktops do) -------------------


def test_an_event_stream_starts_watching_reads_and_is_cancelled_cleanly(address: str) -> None:
    async def main() -> None:
        async with AsyncClient(address) as client:
            with pytest.raises(deskgym.DeskgymError) as e:
                await client.watch_events("e" + "0" * 32)
            assert e.value.code == "NOT_FOUND"
            s = await aio.connect(client=client, task="click-target", profile=None, screen=SMALL)
            # Awaited, the stream watches: the click after it is in it.
            ev = await s.events()
            assert isinstance(ev, AsyncEventStream)
            acted = await s.click(x=3, y=4)
            first = await ev.__anext__()
            ack = await ev.__anext__()
            assert (first.kind, ack.kind) == ("action", "ack") and ack.payload["frame_hash"] == acted.frame_hash
            # A reader waiting for an event that will not come is cancelled: the call goes with it.
            reader = asyncio.create_task(ev.__anext__())
            await asyncio.sleep(0.3)
            reader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reader
            assert [x async for x in ev] == [] and not client._streams
            # A stream ends when its desktop closes: the last event says so.
            async with s.events() as tail:
                rest = asyncio.create_task(_kinds(tail))
                await s.click(x=1, y=1)
                await s.close()
                assert await asyncio.wait_for(rest, 30) == ["action", "ack", "env_closed"]
            # The client's close ends the streams still open on it.
            s2 = await aio.connect(client=client, task="click-target", profile=None, screen=SMALL)
            open_one = await s2.events()
            waiting = asyncio.create_task(_kinds(open_one))
            await asyncio.sleep(0.2)
        assert await asyncio.wait_for(waiting, 10) == []

    run(main)


async def _kinds(stream: AsyncEventStream) -> list[str]:
    return [e.kind async for e in stream]


# -- 32 sessions over one channel -------------------------------------------------------------


def test_32_sessions_run_concurrently_over_one_channel() -> None:
    # In-memory desktops whatever the tier (as test_aio's 64 sessions): what is measured
    # is the client's concurrency; headroom over 32 for desktops still stopping.
    s = Server(*(["--backend", "fake"] if BACKEND == "real" else []), "--idle-timeout-s", "0", "--max-envs", "48")
    try:
        async def one(client: AsyncClient, i: int) -> tuple[float, float, str, list[str]]:
            async with await aio.connect(client=client, task="click-target", profile=None, screen=SMALL,
                                         seed=i) as sess:
                async with sess.events() as ev:
                    where = find(pixels(await sess.screenshot()), RED)
                    assert where is not None
                    miss = await sess.click(x=0, y=0)
                    cp = await sess.save()
                    hit = await sess.click(x=where[0], y=where[1])
                    back = await sess.restore(cp)
                    kinds, hashes = [], []
                    async for e in ev:
                        kinds.append(e.kind)
                        if e.kind == "ack":
                            hashes.append(e.payload["frame_hash"])
                        if e.kind == "restore":
                            break
                assert hashes == [miss.frame_hash, hit.frame_hash] and back.frame_hash == cp.frame_hash
                return miss.reward, hit.reward, back.fidelity, kinds

        async def main() -> None:
            async with AsyncClient(s.address) as client:
                channel = client._channel
                out = await asyncio.gather(*(one(client, i) for i in range(32)))
                assert [o[:3] for o in out] == [(0.0, 1.0, "exact")] * 32
                assert all(o[3][:4] == ["action", "ack", "action", "ack"] for o in out), out[0][3]
                assert client._channel is channel and client.in_flight == 0 and not client._pools
                assert not client._streams

        run(main)
    finally:
        s.stop()


# -- real desktops ------------------------------------------------------------------------------


@pytest.mark.real
@pytest.mark.spec("aci:2.connect", "aci:2.verbs", "aci:2.run", "aci:2.checkpoints", "aci:2.events", "aci:6.env")
def test_the_section_2_flow_over_asyncio(exec_server: Server) -> None:
    async def main() -> None:
        async with aio.ephemeral(address=exec_server.address, screen=(640, 480)) as s:
            caps = set(s.capabilities or ())
            assert s.profile == "desktop" and {"exec", "files"} <= caps and "network" not in caps
            shot = await s.screenshot()
            assert isinstance(shot, aci.Shot) and (shot["w"], shot["h"]) == (640, 480)
            assert shot["png"].startswith(b"\x89PNG")
            assert isinstance(await s.observe(structured=True), Tree)
            # The verbs reach the desktop: typed text lands in a terminal's file.
            await s.act({"verb": "launch_app", "app": "terminal"})
            await s.click(x=320, y=240)
            await s.type("echo typed > /home/user/typed.txt")
            acted = await s.key("Return")
            assert isinstance(acted, aci.Acted) and len(acted.frame_hash) == 32 and acted.step_index == 4

            async def typed() -> bool:
                return (await s.exec(["cat", "/home/user/typed.txt"])).stdout == "typed\n"

            assert await wait_for(typed)
            await s.scroll(x=320, y=240, dy=-300)
            with pytest.raises(deskgym.DeskgymError) as e:
                await s.click("e999999")
            assert e.value.reason == "stale_element_ref"

            # run(): one namespace per session, inside the sandbox.
            r = await s.run("a = 10\nb = 20\nprint(a + b)")
            assert r.output == "30" and r.ok and r.fresh
            again = await s.run("import os\nprint(os.getcwd(), os.getuid())\na")
            assert again.value_repr == "10" and not again.fresh and again.output == "/home/user 1000"
            bad = await s.run("undefined_name")
            assert bad.error is not None and bad.error.type == "NameError"

            # Events, seen live while the desktop runs: an action, its ack, the run's exec.
            async with s.events() as events:
                clicked = await s.click(x=10, y=10)
                await s.run("c = 1")
                seen = []
                async for ev in events:
                    seen.append(ev)
                    if ev.kind == "exec":
                        break
            assert [e.kind for e in seen] == ["action", "ack", "exec"]
            assert seen[1].payload["frame_hash"] == clicked.frame_hash and seen[2].payload["exit_code"] == 0

            # save / restore / fork(cp, 2): the desktop comes back, the namespace does not.
            cp = await s.save()
            assert cp.snapshot_kind == s.snapshot_kind == "replay" and cp.step_index == clicked.step_index
            await s.key("ctrl+u")
            back = await s.restore(cp)
            assert isinstance(back, aci.Restored) and back.fidelity == "exact"
            assert back.frame_hash == cp.frame_hash == back.expected_hash
            after = await s.run("a")
            assert after.fresh and after.error is not None and after.error.type == "NameError"
            kids = await s.fork(cp, n=2)
            try:
                assert [k.fidelity for k in kids] == ["exact", "exact"]
                assert len({k.id for k in kids} | {s.id}) == 3 and all(k.snapshot_kind == "replay" for k in kids)
                shots = await asyncio.gather(*(k.screenshot() for k in kids))
                assert [x["w"] for x in shots] == [640, 640]
                # Each replica has an interpreter of its own; two run at once.
                mine, theirs = await asyncio.gather(kids[0].run("mine = 0"), kids[1].run("mine"))
                assert mine.ok and theirs.fresh and theirs.error is not None
            finally:
                for k in kids:
                    await k.close()
            # The last replica closed their pool; the source lives on.
            with pytest.raises(deskgym.DeskgymError) as e:
                await s.client.screenshot(kids[0].env_id)
            assert e.value.code == "NOT_FOUND"
            assert (await s.screenshot())["w"] == 640

    run(main)


@pytest.mark.real
@pytest.mark.spec("aci:2.reattach", "aci:6.lifecycles")
def test_a_session_reattaches_by_id_and_unknown_ids_are_not_found(exec_server: Server) -> None:
    async def main() -> None:
        s = await aio.connect(address=exec_server.address, screen=SMALL, capabilities=["exec"])
        await s.run("shared = 42")
        sid = await s.detach()  # the first client goes; the desktop stays for its lease
        assert sid == s.id and not s.client_open()
        again = await aio.connect(sid, address=exec_server.address)
        try:
            assert (again.id, again.profile, again.capabilities, again.snapshot_kind) == (
                sid, "desktop", ("exec",), "replay")
            r = await again.run("shared")
            assert r.value_repr == "42" and not r.fresh
            # Past the first client's lease, the reattached one keeps it alive.
            await asyncio.sleep(deskgym.client.DEFAULT_LEASE_TTL_S * 1.5)
            assert (await again.run("shared")).value_repr == "42"
        finally:
            await again.close()
        for gone in (sid, "e" + "0" * 32, "p" + "0" * 32 + "/" + sid):
            with pytest.raises(deskgym.DeskgymError) as e:
                await aio.connect(gone, address=exec_server.address)
            assert e.value.code == "NOT_FOUND"
        # The closed session refuses its verbs before any call.
        with pytest.raises(deskgym.DeskgymError) as e:
            await again.click(x=1, y=1)
        assert e.value.code == "FAILED_PRECONDITION"

    run(main)


@pytest.mark.real
@pytest.mark.spec("aci:2.unlock")
def test_unlock_holds_a_power_for_an_async_block(unlock_server: Server) -> None:
    async def main() -> None:
        async with aio.ephemeral(address=unlock_server.address, screen=SMALL, capabilities=[]) as s:
            with pytest.raises(deskgym.DeskgymError) as e:
                await s.list_directory("/home/user")
            assert e.value.code == "PERMISSION_DENIED"
            with pytest.raises(RuntimeError, match="inside"):
                async with s.unlock("files", reason="read the home") as grant:
                    assert grant.capability == "files" and grant.grant_id
                    await s.list_directory("/home/user")
                    raise RuntimeError("inside the block")
            # Released on the way out, even by an exception.
            with pytest.raises(deskgym.DeskgymError) as e:
                await s.list_directory("/home/user")
            assert e.value.code == "PERMISSION_DENIED"
            with pytest.raises(deskgym.DeskgymError) as e:
                async with s.unlock("exec", reason="not allowed"):
                    pass
            assert e.value.code == "PERMISSION_DENIED" and "--allow-unlock exec" in str(e.value)
            # A task cancelled inside the block releases the power too.
            inside = asyncio.Event()

            async def holder() -> None:
                async with s.unlock("files"):
                    inside.set()
                    await asyncio.sleep(60)

            t = asyncio.create_task(holder())
            await inside.wait()
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            with pytest.raises(deskgym.DeskgymError) as e:
                await s.list_directory("/home/user")
            assert e.value.code == "PERMISSION_DENIED"

    run(main)
