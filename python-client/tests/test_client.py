"""The typed client and every bad input of the core issue, seen from Python."""

from __future__ import annotations

import pytest

import deskgym
from deskgym.v1 import deskgym_pb2 as pb

from conftest import RED, Server, find


@pytest.mark.spec("aci:7.handshake")
def test_capabilities(client: deskgym.Client) -> None:
    caps = client.capabilities()
    assert caps.protocol == "deskgym.v1"
    ids = {t.id for t in caps.tasks}
    assert set(deskgym.TASKS) <= ids
    # (miniwob/<name> tasks too where the server finds the package: test_miniwob's.)
    assert {i for i in ids - set(deskgym.TASKS) if not i.startswith("miniwob/")} == {
        "desktop/rename-file", "desktop/create-folder", "desktop/editor-save", "desktop/terminal-copy",
        "desktop/gsettings-clock",
    }
    assert "click" in caps.verbs and "type_text" in caps.verbs
    assert caps.limits.max_envs == 24


def code_of(fn, *args, **kwargs) -> deskgym.DeskgymError:
    with pytest.raises(deskgym.DeskgymError) as e:
        fn(*args, **kwargs)
    return e.value


def test_bad_inputs_raise_deskgym_error_with_the_right_code(client: deskgym.Client) -> None:
    assert code_of(client.reset, "no-such-env").code == "NOT_FOUND"
    assert code_of(client.close_pool, "no-such-pool").code == "NOT_FOUND"
    assert code_of(client.create_pool, "no-such-task").code == "INVALID_ARGUMENT"
    assert code_of(client.create_pool, "click-target", 25).code == "RESOURCE_EXHAUSTED"

    pool = client.create_pool("click-target", 2, screen=(320, 240))
    env = pool.env_ids[0]
    try:
        e = code_of(client.step, env, deskgym.to_proto({"verb": "noop"}))
        assert e.code == "FAILED_PRECONDITION" and "Reset" in e.message
        first = client.reset(env, seed=3)
        cases = [
            ({"verb": "click", "x": 320, "y": 0}, "action.click.target.point_px"),
            ({"verb": "click", "nx": 1.5, "ny": 0.5}, "action.click.target.point_norm.x"),
            ({"verb": "type_text", "text": ""}, "action.type_text.text"),
            ({"verb": "key", "keys": "ctrl+nosuchkey"}, "action.key.keys"),
        ]
        for action, field in cases:
            e = code_of(client.step, env, deskgym.to_proto(action))
            assert e.code == "INVALID_ARGUMENT", action
            assert e.message.startswith(field + ":"), e.message
        e = code_of(client.step, env, pb.Action())
        assert (e.code, e.message.split(":")[0]) == ("INVALID_ARGUMENT", "action.verb")
        # Client-side shape errors use the same exception and code.
        for bad in [{"verb": "fly"}, {"x": 1}, {"verb": "click"}, {"verb": "drag", "x": 1, "y": 2}, "click"]:
            assert code_of(deskgym.to_proto, bad).code == "INVALID_ARGUMENT"
        too_big = [pb.StepRequest(env_id=f"e{i}", action=deskgym.to_proto({"verb": "noop"})) for i in range(17)]
        assert code_of(client.step_batch, too_big).code == "RESOURCE_EXHAUSTED"

        frame = deskgym.observation.decode(first.observation)
        x, y = find(frame, RED)
        won = client.step(env, deskgym.to_proto({"verb": "click", "x": x, "y": y}))
        assert won.reward == 1.0 and won.terminated
        e = code_of(client.step, env, deskgym.to_proto({"verb": "noop"}))
        assert e.code == "FAILED_PRECONDITION" and "ended" in e.message
    finally:
        client.close_pool(pool.pool_id)
    assert code_of(client.reset, env).code == "NOT_FOUND"


def test_token_auth(tmp_path) -> None:
    token = tmp_path / "token"
    token.write_text("py-secret\n")
    s = Server("--token-file", str(token), "--idle-timeout-s", "0")
    try:
        assert code_of(deskgym.Client(s.address).capabilities).code == "UNAUTHENTICATED"
        assert code_of(deskgym.Client(s.address, token="nope").capabilities).code == "UNAUTHENTICATED"
        assert deskgym.Client(s.address, token="py-secret").capabilities().protocol == "deskgym.v1"
    finally:
        assert s.stop() == 0


def test_idle_pools_are_reaped() -> None:
    """A client that vanishes without closing its pool does not hold envs forever."""
    import time

    import subprocess
    import sys

    s = Server("--idle-timeout-s", "1", "--max-envs", "1")
    try:
        # A client without a lease that dies without closing (its keepalive dies too).
        holder = (
            "import sys, deskgym; c = deskgym.Client(sys.argv[1], lease_ttl_s=None); "
            "c.create_pool('click-target', 1, screen=(320, 240)); print('ready', flush=True); "
            "import os; os._exit(0)"
        )
        out = subprocess.run([sys.executable, "-c", holder, s.address], capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == "ready", out.stderr
        c = deskgym.Client(s.address)
        assert code_of(c.create_pool, "click-target", 1).code == "RESOURCE_EXHAUSTED"
        deadline = time.monotonic() + 15
        while True:
            try:
                c.create_pool("click-target", 1, screen=(320, 240))
                break
            except deskgym.DeskgymError as e:
                assert e.code == "RESOURCE_EXHAUSTED"
                assert time.monotonic() < deadline, "idle pool was never reaped"
                time.sleep(0.25)
    finally:
        assert s.stop() == 0


@pytest.mark.real  # kills the desktop's X server by its pid
def test_crashed_desktop_is_unavailable_then_comes_back(client: deskgym.Client) -> None:
    import os
    import signal

    pool = client.create_pool("click-target", 2, screen=(320, 240))
    try:
        infos = [client.reset(e, seed=1).info for e in pool.env_ids]
        display = infos[0].extra["display"].lstrip(":")
        victim = _xvfb_pid(int(display))
        os.kill(victim, signal.SIGKILL)
        noop = deskgym.to_proto({"verb": "noop"})
        r = client.step_batch([pb.StepRequest(env_id=e, action=noop) for e in pool.env_ids])
        assert deskgym.errors.code_name(r.results[0].code) == "UNAVAILABLE"
        assert r.results[1].code == 0
        assert code_of(client.step, pool.env_ids[0], noop).code == "UNAVAILABLE"
        again = client.reset(pool.env_ids[0], seed=1)
        assert again.observation.frame_hash == client.reset(pool.env_ids[1], seed=1).observation.frame_hash
    finally:
        client.close_pool(pool.pool_id)


def _xvfb_pid(display: int) -> int:
    """The Xvfb process holding /tmp/.X11-unix/X<display> (found through its socket inode)."""
    import os

    path = f"/tmp/.X11-unix/X{display}"
    inodes = set()
    with open("/proc/net/unix") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 8 and parts[-1] == path:
                inodes.add(f"socket:[{parts[6]}]")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() != "Xvfb":
                continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
        except OSError:
            continue
    raise AssertionError(f"no Xvfb holds {path}")


def test_undecodable_requests_are_invalid_argument(address: str) -> None:
    import grpc

    with grpc.insecure_channel(address) as ch:
        raw = ch.unary_unary("/deskgym.v1.Deskgym/Step", request_serializer=lambda b: b,
                             response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as e:
            raw(b"\xff\xff\xff\xff", timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "StepRequest" in (e.value.details() or "")


def test_a_newcomers_mistakes_get_errors_that_name_the_fix(address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A host without a port (gRPC would wait on port 443).
    e = code_of(deskgym.Client, "localhost")
    assert e.code == "INVALID_ARGUMENT" and "'localhost:50051'" in e.message, e
    # Nobody listening: how to start a server.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = f"127.0.0.1:{s.getsockname()[1]}"
    nobody = deskgym.Client(free, timeout=5)
    e = code_of(nobody.capabilities)
    assert e.code == "UNAVAILABLE" and "no deskgym server answers at " + free in e.message, e
    assert "start-server.sh" in e.message and "DESKGYM_ADDRESS" in e.message, e
    nobody.close()
    # A screen written as text.
    c = deskgym.Client(address)
    e = code_of(c.create_pool, "click-target", 1, screen="640x480")
    assert e.code == "INVALID_ARGUMENT" and "screen must be (width, height)" in e.message, e
    # A closed env.
    env = deskgym.make("click-target", address=address, screen=(320, 240))
    env.reset(seed=0)
    env.close()
    e = code_of(env.reset)
    assert e.code == "FAILED_PRECONDITION" and "closed" in e.message, e
    c.close()
    # DESKGYM_ADDRESS is the default address everywhere.
    monkeypatch.setenv("DESKGYM_ADDRESS", address)
    env = deskgym.make("click-target", screen=(320, 240))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (240, 320, 3)
    env.close()
    vec = deskgym.make_vec("click-target", 2, screen=(320, 240))
    assert vec.reset(seed=0)[0].shape == (2, 240, 320, 3)
    vec.close()
