"""``env.forward(port)``: a local port into one env's sandbox through the server's
Tunnel stream, against a real server and real sandboxed desktops."""

from __future__ import annotations

import concurrent.futures
import socket
import time
import urllib.request

import pytest
from conftest import Server

import deskgym
from deskgym.errors import DeskgymError


def get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as r:
        body: bytes = r.read()
        return body


def test_forward_serves_many_connections_and_refuses_like_a_closed_port(exec_server: Server) -> None:
    env = deskgym.make("blank", address=exec_server.address, profile="desktop", capabilities=["exec"], screen=(320, 240))
    try:
        env.reset(seed=0)
        payload = "x" * 300_000  # several tunnel messages each way
        env.exec(["sh", "-c", f"mkdir -p ~/www && head -c {len(payload)} /dev/zero | tr '\\0' x > ~/www/big.txt"])
        env.exec(["sh", "-c", "cd ~/www && setsid -f python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1"])
        with env.forward(8000) as fwd:
            t0 = time.monotonic()
            while True:
                try:
                    assert get(fwd.port, "/big.txt") == payload.encode()
                    break
                except OSError:
                    assert time.monotonic() - t0 < 20, "the server in the sandbox never answered"
                    time.sleep(0.2)
            # Connections at once, each its own tunnel.
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                bodies = list(pool.map(lambda _: get(fwd.port, "/big.txt"), range(8)))
            assert all(b == payload.encode() for b in bodies)
        # Closed: the local port no longer accepts.
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", fwd.port), timeout=5).recv(1)

        # Nothing listens on 8001 in the sandbox: the local connection is accepted (as a
        # port forwarder must) and then closed at once, without an answer.
        with env.forward(8001) as fwd, socket.create_connection(("127.0.0.1", fwd.port), timeout=20) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
        with pytest.raises(DeskgymError) as e:
            env.forward(0)
        assert e.value.code == "INVALID_ARGUMENT"
    finally:
        env.close()


def test_forward_needs_the_exec_grant(exec_server: Server, caplog: pytest.LogCaptureFixture) -> None:
    env = deskgym.make("blank", address=exec_server.address, profile="desktop", screen=(320, 240))
    try:
        env.reset(seed=0)
        with env.forward(8000) as fwd, socket.create_connection(("127.0.0.1", fwd.port), timeout=20) as s:
            # PERMISSION_DENIED from the server ends the local connection.
            s.settimeout(20)
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:
                pass
        assert any("exec" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    finally:
        env.close()
