"""deskgym as coroutines (``grpc.aio``): one event loop drives hundreds of desktops over
one channel.

- :class:`AsyncClient` (:mod:`deskgym.aio.client`): the verbs of :class:`deskgym.Client`
  as coroutines, with deadlines, a bound on calls in flight and cancellation that
  reaches the server; :class:`AsyncDesktop` and :class:`AsyncDeskgymEnv` (the Gymnasium
  shape) over it, and :class:`AsyncEventStream` (an env's events as they happen).
- :func:`connect` / :func:`ephemeral` / :class:`AsyncSession` (:mod:`deskgym.aio.session`):
  ACI's session, :class:`deskgym.Session`'s verbs and results as coroutines.

A package rather than one file so that the session's module imports the client's one
way (``scripts/check_layers.py``), and this face names them both.
"""

from deskgym.aio.client import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_TIMEOUT_S,
    EXEC_MARGIN_S,
    AsyncCheckpoint,
    AsyncClient,
    AsyncDeskgymEnv,
    AsyncDesktop,
    AsyncGroup,
)
from deskgym.aio.events import AsyncEventStream
from deskgym.aio.session import AsyncSession, connect, ephemeral

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_TIMEOUT_S",
    "EXEC_MARGIN_S",
    "AsyncCheckpoint",
    "AsyncClient",
    "AsyncDeskgymEnv",
    "AsyncDesktop",
    "AsyncEventStream",
    "AsyncGroup",
    "AsyncSession",
    "connect",
    "ephemeral",
]
