"""A local TCP port that reaches a port on one env's own loopback (inside its sandbox),
through the server's ``Tunnel`` RPC: how a harness on any machine talks to that env's
browser debugging port (Chrome DevTools, Playwright's ``connect_over_cdp``) without a
host port shared between envs.

    fwd = env.forward(9222)               # needs the pool's ``exec`` capability
    browser = playwright.chromium.connect_over_cdp(f"http://127.0.0.1:{fwd.port}")
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
from collections.abc import Iterator
from typing import Any

import grpc

from deskgym.errors import DeskgymError
from deskgym.v1 import deskgym_pb2 as pb

logger = logging.getLogger("deskgym.tunnel")

#: Bytes read from a local connection per message.
CHUNK = 64 * 1024


class PortForward:
    """Listens on ``host:local_port`` (0: a free port, see :attr:`port`); each connection
    accepted there becomes one tunnel to ``port`` in the env. A connection the env
    refuses (nothing listens there yet) is closed at once, with the server's reason
    logged, as a refused TCP connection would be."""

    def __init__(self, client: Any, env_id: str, port: int, host: str = "127.0.0.1", local_port: int = 0) -> None:
        if not 0 < int(port) < 65536:
            raise DeskgymError("INVALID_ARGUMENT", f"port {port} is not a TCP port (1-65535)")
        self.client, self.env_id, self.remote_port = client, env_id, int(port)
        self._listener = socket.create_server((host, local_port))
        self.port: int = self._listener.getsockname()[1]
        self._calls: set[Any] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name=f"deskgym-forward-{port}", daemon=True).start()

    def close(self) -> None:
        """Stops listening and ends every open tunnel."""
        self._closed = True
        # shutdown, not only close: a thread blocked in accept() keeps a closed
        # listening socket alive (and accepting) on Linux.
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            calls, self._calls = self._calls, set()
        for c in calls:
            c.cancel()

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._carry, args=(conn,), name="deskgym-tunnel", daemon=True).start()

    def _carry(self, conn: socket.socket) -> None:
        outgoing: queue.Queue[bytes | None] = queue.Queue(maxsize=64)

        def requests() -> Iterator[pb.TunnelData]:
            yield pb.TunnelData(env_id=self.env_id, port=self.remote_port)
            while (data := outgoing.get()) is not None:
                yield pb.TunnelData(data=data)

        call = self.client._stub.Tunnel(requests(), metadata=self.client._metadata)
        with self._lock:
            if self._closed:
                call.cancel()
            self._calls.add(call)

        def pump() -> None:
            # Local bytes into the tunnel; the local end closing ends the request stream.
            try:
                while data := conn.recv(CHUNK):
                    outgoing.put(data)
            except OSError:
                pass
            outgoing.put(None)

        threading.Thread(target=pump, name="deskgym-tunnel-in", daemon=True).start()
        try:
            for m in call:
                if m.data:
                    conn.sendall(m.data)
            conn.shutdown(socket.SHUT_WR)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                logger.warning("tunnel to port %d of env %s: %s", self.remote_port, self.env_id, e.details())
        except OSError:
            call.cancel()
        finally:
            with self._lock:
                self._calls.discard(call)
            try:
                conn.shutdown(socket.SHUT_RDWR)  # wakes `pump` from its recv
            except OSError:
                pass
            conn.close()
