"""Cancelling deskgym calls from another thread (an MCP client's cancellation, a
timeout of the caller's own)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from deskgym.errors import DeskgymError

_cancel_scope = threading.local()


class Cancel:
    """Cancels the deskgym calls made under :func:`cancellable` from another thread: the
    RPC in flight ends with CANCELLED (the server skips it if it had not started; an
    input already sent to the desktop stays sent), and later ones fail at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flight: set[Any] = set()
        self.cancelled = False

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            flight = list(self._flight)
        for f in flight:
            f.cancel()

    def run(self, future: Any) -> Any:
        """Waits for a gRPC call future, unless cancelled."""
        with self._lock:
            if self.cancelled:
                future.cancel()
            self._flight.add(future)
        try:
            return future.result()
        except grpc.FutureCancelledError:
            raise DeskgymError("CANCELLED", "the call was cancelled") from None
        finally:
            with self._lock:
                self._flight.discard(future)


@contextmanager
def cancellable(token: Cancel) -> Iterator[None]:
    """Makes this thread's deskgym calls cancellable through ``token``."""
    previous = getattr(_cancel_scope, "token", None)
    _cancel_scope.token = token
    try:
        yield
    finally:
        _cancel_scope.token = previous


def current() -> Cancel | None:
    """The token this thread's calls run under (:func:`cancellable`), if any."""
    token: Cancel | None = getattr(_cancel_scope, "token", None)
    return token
