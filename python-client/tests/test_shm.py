"""Shared-memory frames (`--listen unix:PATH`): the same pixels as the gRPC bytes, arrays
that never change while held, rings that are their owner's only."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import time
from collections.abc import Iterator

import numpy as np
import pytest

import deskgym
from deskgym.v1 import deskgym_pb2 as pb
from conftest import Server
from test_client import _xvfb_pid

CLICK_EMPTY = {"verb": "click", "x": 3, "y": 200}


@pytest.fixture(scope="module")
def unix_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, pathlib.Path]]:
    d = tmp_path_factory.mktemp("shm")
    tokens = d / "tokens"
    tokens.write_text("alice: alice-secret\nbob: bob-secret\n")
    sock = d / "deskgym.sock"
    s = Server("--idle-timeout-s", "0", "--data-dir", str(d / "data"), "--token-file", str(tokens),
               listen=f"unix:{sock}")
    yield s, tokens
    assert s.stop() == 0


def alice(server: Server, **kw: object) -> deskgym.Client:
    return deskgym.Client(server.address, token="alice-secret", **kw)  # type: ignore[arg-type]


def by_bytes(c: deskgym.Client, frame_hash: str) -> np.ndarray:
    """The frame with this hash as the server's cache sends it over gRPC."""
    obs = c.get_frames([frame_hash], encoding="rgb")[0]
    assert not obs.HasField("slot")
    return np.frombuffer(obs.frame, dtype=np.uint8).reshape(obs.height, obs.width, 3)


def test_the_socket_is_the_owners_only(unix_server: tuple[Server, pathlib.Path]) -> None:
    server, _ = unix_server
    path = pathlib.Path(server.address.removeprefix("unix:"))
    assert path.is_socket() and path.stat().st_mode & 0o777 == 0o600


def test_shared_memory_frames_equal_the_grpc_bytes_across_resets_steps_forks_and_a_restart(
    unix_server: tuple[Server, pathlib.Path],
) -> None:
    server, _ = unix_server
    c, b = alice(server), alice(server, frames="bytes")
    env = deskgym.make_vec("click-target", 3, client=c, seed=5, screen=(320, 240))
    try:
        obs, info = env.reset()
        assert c.ring is not None, "a unix client attaches a ring by default"
        delivered = c.ring.delivered
        for i in range(3):
            assert np.array_equal(obs[i], by_bytes(b, info["frame_hash"][i]))
        for _ in range(12):
            obs, _, _, _, info = env.step(env.action_space.sample())
            for i in range(3):
                assert not obs[i].flags.writeable or obs.base is None
                assert np.array_equal(obs[i], by_bytes(b, info["frame_hash"][i]))
        assert c.ring.delivered > delivered
        assert c.frames.bytes == 0, "every frame with pixels came through the ring, none as bytes"
        # A fork: the replicas step with their frames in the same ring.
        eid = env.env_ids[0]
        c.reset(eid, seed=7)
        cp = c.save(eid)
        forked = deskgym.fork(cp, 2)
        try:
            fobs, _, _, _, finfo = forked.step(forked.action_space.sample())
            for i in range(2):
                assert np.array_equal(fobs[i], by_bytes(b, finfo["frame_hash"][i]))
        finally:
            forked.close()
        # A desktop that dies restarts at the next reset; its frames still match.
        r = c.reset(eid, seed=9, encoding="rgb")
        display = r.info.extra["display"]
        os.kill(_xvfb_pid(int(display.lstrip(":"))), signal.SIGKILL)
        with pytest.raises(deskgym.DeskgymError) as gone:
            for _ in range(20):
                c.step(eid, deskgym.to_proto(CLICK_EMPTY), encoding="rgb")
        assert gone.value.code == "UNAVAILABLE", gone.value
        r = c.reset(eid, seed=9, encoding="rgb")
        assert r.observation.HasField("slot")
        frame, _ = c.resolve(r.observation)
        assert np.array_equal(frame, by_bytes(b, r.observation.frame_hash))
    finally:
        env.close()
        b.close()
        c.close()


def test_a_kept_observation_never_changes_and_a_full_ring_falls_back_to_bytes(
    unix_server: tuple[Server, pathlib.Path],
) -> None:
    server, _ = unix_server
    c = alice(server, frames="shm")
    pool = c.create_pool("type-word", 1, screen=(320, 240), seed=3, max_steps=1000)
    eid = pool.env_ids[0]
    try:
        r = c.reset(eid, encoding="rgb")
        first, _ = c.resolve(r.observation)
        snapshot = first.copy()
        corner = first[:40, :40]  # a view of the view: it alone must keep the slot
        corner_snapshot = corner.copy()
        del first
        with pytest.raises(ValueError):
            corner[0, 0, 0] = 1  # the server's memory is read-only to the user
        assert c.ring is not None
        kept = []
        for k in range(c.ring.slots + 5):
            s = c.step(eid, deskgym.to_proto({"verb": "type_text", "text": "abcdefgh"[k % 8]}), encoding="rgb")
            frame, _ = c.resolve(s.observation)
            kept.append((frame, s.observation.HasField("slot"), s.observation.frame_hash))
        # Every slot but the corner's is held: the last frames came as bytes, still right.
        via_ring = [k for k in kept if k[1]]
        assert len(via_ring) == c.ring.slots - 1
        assert all(not k[1] for k in kept[len(via_ring):])
        b = alice(server, frames="bytes")
        for frame, _, h in kept:
            assert np.array_equal(frame, by_bytes(b, h))
        b.close()
        assert np.array_equal(corner, corner_snapshot), "a held view changed under its user"
        del snapshot
        # Letting go of the frames frees their slots: the ring serves again.
        kept.clear()
        del via_ring, frame
        s = c.step(eid, deskgym.to_proto(CLICK_EMPTY), encoding="rgb")
        assert s.observation.HasField("slot")
    finally:
        c.close()


def test_rings_are_their_owners_only(unix_server: tuple[Server, pathlib.Path]) -> None:
    server, _ = unix_server
    a = alice(server)
    bob = deskgym.Client(server.address, token="bob-secret")
    try:
        pool = bob.create_pool("click-target", 1, screen=(320, 240))
        a.create_pool("click-target", 1, screen=(320, 240))
        ring = a.frame_ring()
        assert ring and bob.frame_ring() != ring
        # Bob naming Alice's ring on his own env: refused, and nothing says it exists.
        req = pb.ResetRequest(env_id=pool.env_ids[0], frame_ring=ring)
        with pytest.raises(deskgym.DeskgymError) as e:
            bob._call(bob._stub.Reset, req, pb.ResetResponse)
        assert e.value.code == "INVALID_ARGUMENT" and "frame_ring" in str(e.value)
        # A ticket is good once: Bob cannot collect Alice's ring with it again.
        attached = a._call(a._stub.AttachFrames, pb.AttachFramesRequest(slots=1), pb.AttachFramesResponse)
        from deskgym.ring import FrameRing
        mine = FrameRing(server.address.removeprefix("unix:"), attached)
        with pytest.raises(deskgym.DeskgymError) as e:
            FrameRing(server.address.removeprefix("unix:"), attached)
        assert e.value.code == "FAILED_PRECONDITION"
        mine.close()
        # Garbage on the socket gets a refusal, not a ring, and the server lives on.
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(server.address.removeprefix("unix:"))
            s.sendall(b"DESKGYM-RING " + b"0" * 32 + b"\n")
            msg, fds, _, _ = socket.recv_fds(s, 1, 1)
            assert (msg, fds) == (b"-", [])
        assert bob.capabilities().protocol
        # Bad sizes name their field.
        with pytest.raises(deskgym.DeskgymError) as e:
            a._call(a._stub.AttachFrames, pb.AttachFramesRequest(slots=5000), pb.AttachFramesResponse)
        assert e.value.code == "INVALID_ARGUMENT" and e.value.field == "slots"
    finally:
        a.close()
        bob.close()


def test_a_closed_ring_is_attached_again_and_tcp_clients_get_bytes(
    unix_server: tuple[Server, pathlib.Path], address: str,
) -> None:
    server, _ = unix_server
    c = alice(server)
    try:
        pool = c.create_pool("click-target", 1, screen=(320, 240))
        eid = pool.env_ids[0]
        c.reset(eid, encoding="rgb")
        assert c.ring is not None
        old = c.ring.ring
        c.ring.close()  # the server drops a ring when its connection closes
        s = c.step(eid, deskgym.to_proto(CLICK_EMPTY), encoding="rgb")
        assert s.observation.HasField("slot") and c.frame_ring() not in (0, old)
    finally:
        c.close()
    # Over TCP: bytes, and a clear word for whoever asks for shared memory there.
    with pytest.raises(deskgym.DeskgymError) as e:
        deskgym.Client(address, frames="shm")
    assert e.value.code == "INVALID_ARGUMENT" and "unix" in str(e.value)
    t = deskgym.Client(address)
    try:
        assert t.frame_ring() == 0
        with pytest.raises(deskgym.DeskgymError) as e:
            t._call(t._stub.AttachFrames, pb.AttachFramesRequest(), pb.AttachFramesResponse)
        assert e.value.code == "FAILED_PRECONDITION" and "--listen unix:" in str(e.value)
    finally:
        t.close()


def test_a_client_past_the_ring_bound_gets_bytes_for_the_call_then_a_ring_again(
    unix_server: tuple[Server, pathlib.Path],
) -> None:
    """A failed attach that may pass later (here: the principal's 8 rings all held) costs
    one call its shared memory, not the client's lifetime."""
    server, _ = unix_server
    holders = [alice(server) for _ in range(8)]
    c = alice(server)
    try:
        for h in holders:
            assert h.frame_ring() != 0
        pool = c.create_pool("click-target", 1, screen=(320, 240))
        eid = pool.env_ids[0]
        r = c.reset(eid, encoding="rgb")
        assert not r.observation.HasField("slot") and len(r.observation.frame) == 320 * 240 * 3
        assert c.frame_mode == "auto" and c.ring is None
        holders.pop().close()
        time.sleep(deskgym.client.RING_RETRY_S + 0.1)
        s = c.step(eid, deskgym.to_proto(CLICK_EMPTY), encoding="rgb")
        assert s.observation.HasField("slot") and c.ring is not None
        assert np.array_equal(c.resolve(s.observation)[0], by_bytes(c, s.observation.frame_hash))
    finally:
        c.close()
        for h in holders:
            h.close()
