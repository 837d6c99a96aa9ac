"""An asyncio client over ``grpc.aio``: the verbs of :class:`deskgym.Client`,
:class:`deskgym.Desktop` and :class:`deskgym.DeskgymEnv` as coroutines, so one event loop
drives hundreds of sessions over one channel.

    async with deskgym.aio.AsyncClient(address) as client:
        async with await client.make("click-target", seed=0) as env:
            obs, info = await env.reset()
            obs, reward, terminated, truncated, info = await env.step({"verb": "click", "x": 5, "y": 5})

Every call has a deadline: ``deadline=`` seconds on the call, else the client's
``timeout`` (the wait for a slot counts in it). At most ``max_in_flight`` calls of one
client are in flight at once (:data:`DEFAULT_MAX_IN_FLIGHT`); the others wait for a slot.
Cancelling the task that awaits a call cancels its RPC: the server skips the job if no
thread has started it and stops a running ``exec`` (decisions 119, 172). Failures raise
:class:`deskgym.DeskgymError`, as the sync client's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import grpc.aio
from gymnasium import spaces

from deskgym.a11y import Tree, tree_request
from deskgym.actions import to_proto
from deskgym.aio.events import AsyncEventStream
from deskgym.calls import (
    CheckpointInfo,
    Pool,
    auth_metadata,
    cached_frame,
    channel_options,
    checked,
    checkpoint_id,
    closed_client,
    create_pool_request,
    encoding_name,
    encoding_of,
    fork_request,
    hold,
    observe_request,
    put_file_calls,
    reset_request,
    resolve_address,
    restore_request,
    rpc_error,
    screenshot_request,
    step_batch_request,
    step_request,
    unlock_request,
)
from deskgym.client import DEFAULT_LEASE_TTL_S
from deskgym.env import REPLAY_KEYS, env_observation_space, known_hashes, obs_setup, rebuilt_info, shape
from deskgym.errors import DeskgymError, code_name
from deskgym.execution import ExecResult, exec_request, exec_result
from deskgym.frames import FrameCache, decode
from deskgym.group import GroupReport, check_route, judge, osworld_task, task_state
from deskgym.options import PoolOptions
from deskgym.v1 import deskgym_pb2 as pb
from deskgym.v1 import deskgym_pb2_grpc as pb_grpc

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_TIMEOUT_S",
    "AsyncCheckpoint",
    "AsyncClient",
    "AsyncDeskgymEnv",
    "AsyncDesktop",
    "AsyncEventStream",
    "AsyncGroup",
]

#: A call's deadline when it names none, in seconds (the sync client's ``timeout``).
DEFAULT_TIMEOUT_S = 120.0

#: Calls one :class:`AsyncClient` has in flight at once, unless told otherwise. The
#: server runs one call per env at a time (decision 30), so N sessions need N slots
#: to keep every desktop busy: 256 sessions, the figure of issue 42. Past it calls wait
#: here rather than in the server's admission queue (1024 jobs for all its clients,
#: RESOURCE_EXHAUSTED beyond) or in this process's memory (a raw 1280x720 frame is
#: 2.7 MB). Lease renewals and the pool closes of ``close()`` take no slot.
DEFAULT_MAX_IN_FLIGHT = 256

#: Seconds an ``exec`` call may outlast its command's own bound by default (the
#: command's start and the reply); its deadline is the larger of this plus the
#: command's bound and the client's ``timeout``.
EXEC_MARGIN_S = 30.0

#: A CANCELLED answer this close to a call's deadline is its deadline (see ``_error``).
DEADLINE_SLACK_S = 0.05

_T = TypeVar("_T")


@dataclass(frozen=True)
class AsyncCheckpoint(CheckpointInfo):
    """A saved env state (see :meth:`AsyncClient.save`), and the client that made it."""

    client: AsyncClient

    @classmethod
    def from_proto(cls, c: pb.Checkpoint, client: AsyncClient) -> AsyncCheckpoint:
        return cls(*CheckpointInfo.fields_of(c), client)


class AsyncClient:
    """Connection to a deskgym server for asyncio code; make it inside the event loop
    that uses it (``async with AsyncClient(...) as client``).

    ``channel``: a ``grpc.aio`` channel of the caller's to use (it stays open at
    :meth:`close`); else one is opened to ``address`` (default ``$DESKGYM_ADDRESS``,
    else ``127.0.0.1:50051``). Every session this client makes shares it.
    ``timeout``: each call's deadline in seconds unless the call gives ``deadline=``.
    ``max_in_flight``: the most calls in flight at once (:data:`DEFAULT_MAX_IN_FLIGHT`).
    ``lease_ttl_s``: pools this client creates are closed by the server once it has not
    renewed them for that long (it renews from a task on its loop while open); ``None``
    leaves only the server's idle timeout. Frames arrive as bytes in the replies (the
    shared-memory ring of the sync client is not offered here).
    """

    def __init__(
        self,
        address: str | None = None,
        token: str | None = None,
        channel: grpc.aio.Channel | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        frame_cache_bytes: int = 256 << 20,
        lease_ttl_s: float | None = DEFAULT_LEASE_TTL_S,
    ) -> None:
        if not timeout > 0:
            raise DeskgymError("INVALID_ARGUMENT", f"timeout: {timeout} is not a positive number of seconds", "timeout")
        if max_in_flight < 1:
            raise DeskgymError("INVALID_ARGUMENT", f"max_in_flight: {max_in_flight} is below 1", "max_in_flight")
        if lease_ttl_s is not None and not 1.0 <= lease_ttl_s <= 3600.0:
            raise DeskgymError("INVALID_ARGUMENT", f"lease_ttl_s: {lease_ttl_s} is outside 1..3600 (None: no lease)")
        self.address = resolve_address(address) if channel is None else (address or "the caller's channel")
        self._own_channel = channel is None
        self._channel = channel or grpc.aio.insecure_channel(self.address, options=channel_options(self.address))
        # The generated stub is untyped; replies are checked in `_unary`.
        self._stub: Any = pb_grpc.DeskgymStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata = auth_metadata(token)
        self.timeout = timeout
        self.max_in_flight = max_in_flight
        self._slots = asyncio.Semaphore(max_in_flight)
        #: Calls of this client in flight now (at most ``max_in_flight``).
        self.in_flight = 0
        #: Decoded frames by (hash, encoding), shared by every session of this client.
        self.frames = FrameCache(frame_cache_bytes)
        self.lease_ttl_s = lease_ttl_s
        self._pools: set[str] = set()
        self._renewer: asyncio.Task[None] | None = None
        self._closed = False
        self._max_file_bytes: int | None = None
        # Event streams open now, ended by close(); one dropped unclosed leaves the set.
        self._streams: weakref.WeakSet[AsyncEventStream] = weakref.WeakSet()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stops renewing, closes the pools this client still holds (at once, each
        within 5 s) and its own channel (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for stream in list(self._streams):
            stream.close()
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        ids, self._pools = sorted(self._pools), set()
        await asyncio.gather(*(self._close_quietly(p) for p in ids))
        if self._own_channel:
            await self._channel.close()

    async def _close_quietly(self, pool_id: str) -> None:
        with contextlib.suppress(grpc.RpcError):
            await self._stub.ClosePool(pb.ClosePoolRequest(pool_id=pool_id), timeout=5.0, metadata=self._metadata)

    # -- one call: a slot, a deadline, the error mapping ------------------------------

    async def _slot(self, end: float, loop: asyncio.AbstractEventLoop) -> float:
        """Waits for a slot until ``end`` (loop time); returns the time left."""
        if self._closed:
            raise closed_client()
        if self._slots.locked():
            try:
                await asyncio.wait_for(self._slots.acquire(), max(end - loop.time(), 0))
            except asyncio.TimeoutError:
                raise DeskgymError(
                    "DEADLINE_EXCEEDED",
                    f"the deadline passed while the call waited for one of this client's {self.max_in_flight} "
                    "slots (max_in_flight): the calls before it are slower than the deadline allows",
                ) from None
        else:
            await self._slots.acquire()
        self.in_flight += 1
        return end - loop.time()

    def _free(self) -> None:
        self.in_flight -= 1
        self._slots.release()

    def _budget(self, deadline: float | None) -> float:
        budget = self.timeout if deadline is None else deadline
        if not budget > 0:
            raise DeskgymError("INVALID_ARGUMENT", f"deadline: {budget} is not a positive number of seconds", "deadline")
        return budget

    def _error(self, e: grpc.RpcError, end: float, loop: asyncio.AbstractEventLoop) -> DeskgymError:
        err = rpc_error(e, self.address)
        if err.code == "CANCELLED" and loop.time() >= end - DEADLINE_SLACK_S:
            # The server keeps the deadline too (tonic reads grpc-timeout) and, when its
            # timer fires first, answers CANCELLED "Timeout expired": the same deadline.
            return DeskgymError("DEADLINE_EXCEEDED", f"the call's deadline passed (the server's words: {err.message})")
        return err

    async def _unary(self, method: Any, request: Any, reply: type[_T], deadline: float | None) -> _T:
        """Calls ``method`` within a slot and the deadline; failures raise
        :class:`DeskgymError`, a cancelled caller cancels the RPC."""
        loop = asyncio.get_running_loop()
        end = loop.time() + self._budget(deadline)
        left = await self._slot(end, loop)
        try:
            if left <= 0:
                raise DeskgymError("DEADLINE_EXCEEDED", "the deadline passed before the call was sent")
            # grpc.aio: cancelling the task that awaits the call cancels the RPC.
            r = await method(request, timeout=left, metadata=self._metadata)
        except grpc.RpcError as e:
            raise self._error(e, end, loop) from None
        except grpc.aio.UsageError:
            raise closed_client() from None
        finally:
            self._free()
        return checked(r, reply)

    async def _stream(self, method: Any, request: Any, reply: type[_T], deadline: float | None) -> list[_T]:
        """A server-streaming call's messages, read whole, as :meth:`_unary` does."""
        loop = asyncio.get_running_loop()
        end = loop.time() + self._budget(deadline)
        left = await self._slot(end, loop)
        call = None
        try:
            if left <= 0:
                raise DeskgymError("DEADLINE_EXCEEDED", "the deadline passed before the call was sent")
            call = method(request, timeout=left, metadata=self._metadata)
            return [checked(m, reply) async for m in call]
        except grpc.RpcError as e:
            raise self._error(e, end, loop) from None
        except grpc.aio.UsageError:
            raise closed_client() from None
        finally:
            if call is not None:
                call.cancel()
            self._free()

    # -- leases ----------------------------------------------------------------------

    def _hold_pool(self, pool_id: str) -> None:
        self._pools.add(pool_id)
        if self._renewer is None:
            # The task holds the client weakly: a client dropped unclosed stops renewing,
            # and its pools end within a lease, as the sync client's do.
            self._renewer = asyncio.get_running_loop().create_task(_renew(weakref.ref(self)),
                                                                   name="deskgym-aio-keepalive")

    # -- the verbs, as deskgym.Client has them ----------------------------------------

    async def capabilities(self, *, deadline: float | None = None) -> pb.Capabilities:
        """Server version, verbs, encodings, tasks and limits."""
        return await self._unary(self._stub.GetCapabilities, pb.GetCapabilitiesRequest(), pb.Capabilities, deadline)

    async def create_pool(
        self,
        task: str,
        num_envs: int = 1,
        *,
        screen: tuple[int, int] = (0, 0),
        seed: int = 0,
        max_steps: int = 0,
        encoding: str = "rgb",
        settle_ms: int | None = None,
        settle_max_ms: int = 0,
        labels: dict[str, str] | None = None,
        warm_spares: int = 0,
        record: str | None = None,
        profile: str | None = None,
        capabilities: Sequence[str] = (),
        task_options: Mapping[str, Any] | None = None,
        deadline: float | None = None,
    ) -> Pool:
        """Starts ``num_envs`` desktops (see :meth:`deskgym.Client.create_pool`)."""
        req = create_pool_request(
            task, num_envs, screen=screen, seed=seed, max_steps=max_steps, encoding=encoding, settle_ms=settle_ms,
            settle_max_ms=settle_max_ms, labels=labels, warm_spares=warm_spares, record=record, profile=profile,
            capabilities=capabilities, task_options=task_options, lease_ttl_s=self.lease_ttl_s,
        )
        r = await self._unary(self._stub.CreatePool, req, pb.CreatePoolResponse, deadline)
        self._hold_pool(r.pool_id)
        return Pool.from_proto(r)

    async def close_pool(self, pool_id: str, *, deadline: float | None = None) -> int:
        """Stops every desktop of a pool; returns how many."""
        self._pools.discard(pool_id)
        r = await self._unary(self._stub.ClosePool, pb.ClosePoolRequest(pool_id=pool_id), pb.ClosePoolResponse, deadline)
        return r.envs_closed

    async def release(self, pool: Pool | str | None) -> None:
        """Closes a pool that may already be gone (reaped, the server restarted, this
        client closed): idempotent and quiet about those cases."""
        if pool is None or self._closed:
            return
        try:
            await self.close_pool(pool if isinstance(pool, str) else pool.pool_id)
        except DeskgymError as e:
            if e.code not in ("NOT_FOUND", "UNAVAILABLE"):
                raise

    async def reset(
        self, env_id: str, seed: int | None = None, encoding: str | None = None, if_none_match: Sequence[str] = (),
        tree: pb.TreeRequest | None = None, *, deadline: float | None = None,
    ) -> pb.ResetResponse:
        """Starts a new episode on one env (``tree``: also read the accessibility tree)."""
        req = reset_request(env_id, seed, encoding, if_none_match, tree)
        return await self._unary(self._stub.Reset, req, pb.ResetResponse, deadline)

    async def step(
        self, env_id: str, action: pb.Action, encoding: str | None = None, if_none_match: Sequence[str] = (),
        tree: pb.TreeRequest | None = None, observe: pb.ObserveSpec | dict[str, Any] | None = None, *,
        deadline: float | None = None,
    ) -> pb.StepResult:
        """Applies one action to one env (see :meth:`deskgym.Client.step`)."""
        req = step_request(env_id, action, encoding, if_none_match, tree, observe)
        return await self._unary(self._stub.Step, req, pb.StepResult, deadline)

    async def step_batch(
        self, items: Sequence[pb.StepRequest], resets: Iterable[pb.ResetRequest] = (),
        if_none_match: Sequence[str] = (), *, deadline: float | None = None,
    ) -> pb.StepBatchResponse:
        """Steps several envs (and resets others) in one call; per-item status inside."""
        req = step_batch_request(items, resets, if_none_match)
        return await self._unary(self._stub.StepBatch, req, pb.StepBatchResponse, deadline)

    async def observe(
        self, env_id: str, encoding: str | None = None, if_none_match: Sequence[str] = (),
        tree: pb.TreeRequest | None = None, settle_ms: int = 0, *, deadline: float | None = None,
    ) -> pb.Observation:
        """Captures the screen without acting (see :meth:`deskgym.Client.observe`)."""
        req = observe_request(env_id, encoding, if_none_match, tree, settle_ms)
        return await self._unary(self._stub.Observe, req, pb.Observation, deadline)

    async def screenshot(self, env_id: str, *, deadline: float | None = None, **options: Any) -> pb.Observation:
        """A screenshot (``scope``, ``window``, ``max_long_edge``, ``encoding``,
        ``jpeg_quality``, ``if_none_match``: see :meth:`deskgym.Client.screenshot`)."""
        return await self._unary(self._stub.Screenshot, screenshot_request(env_id, **options), pb.Observation, deadline)

    async def get_frames(
        self, hashes: Sequence[str], encoding: str | None = None, *, deadline: float | None = None
    ) -> list[pb.Observation]:
        """Frames by hash from the server's cache (NOT_FOUND when one was evicted)."""
        req = pb.GetFramesRequest(hashes=list(hashes), encoding=encoding_of(encoding))
        return list((await self._unary(self._stub.GetFrames, req, pb.GetFramesResponse, deadline)).frames)

    async def cache_stats(self, *, deadline: float | None = None) -> pb.CacheStats:
        """The server's frame-cache counters."""
        return await self._unary(self._stub.GetCacheStats, pb.GetCacheStatsRequest(), pb.CacheStats, deadline)

    async def save(self, env_id: str, park: int = 0, *, deadline: float | None = None) -> AsyncCheckpoint:
        """Saves an env's state (task, seed, actions since reset, frame hash); ``park`` as
        :meth:`deskgym.Client.save`."""
        req = pb.SaveRequest(env_id=env_id, park=park)
        c = await self._unary(self._stub.Save, req, pb.Checkpoint, deadline)
        return AsyncCheckpoint.from_proto(c, self)

    async def restore(
        self, env_id: str, checkpoint: CheckpointInfo | str, encoding: str | None = None, *,
        deadline: float | None = None,
    ) -> pb.RestoreResponse:
        """Rewinds an env to a checkpoint by replay; ``fidelity`` says whether it matches."""
        req = restore_request(env_id, checkpoint, encoding)
        return await self._unary(self._stub.Restore, req, pb.RestoreResponse, deadline)

    async def fork(
        self, checkpoint: CheckpointInfo | str, n: int, encoding: str | None = None, *,
        deadline: float | None = None,
    ) -> pb.ForkResponse:
        """A new pool of ``n`` envs rebuilt at the checkpoint's state."""
        r = await self._unary(self._stub.Fork, fork_request(checkpoint, n, encoding), pb.ForkResponse, deadline)
        # The replicas' pool inherits the source pool's lease.
        self._hold_pool(r.pool_id)
        return r

    async def list_checkpoints(self, pool_id: str = "", *, deadline: float | None = None) -> list[AsyncCheckpoint]:
        """Checkpoints of a pool (all pools for ``""``)."""
        req = pb.ListCheckpointsRequest(pool_id=pool_id)
        r = await self._unary(self._stub.ListCheckpoints, req, pb.ListCheckpointsResponse, deadline)
        return [AsyncCheckpoint.from_proto(c, self) for c in r.checkpoints]

    async def delete_checkpoint(self, checkpoint: CheckpointInfo | str, *, deadline: float | None = None) -> None:
        """Deletes a checkpoint."""
        req = pb.DeleteCheckpointRequest(checkpoint_id=checkpoint_id(checkpoint))
        await self._unary(self._stub.DeleteCheckpoint, req, pb.DeleteCheckpointResponse, deadline)

    async def exec(
        self,
        env_id: str,
        cmd: str | Sequence[str],
        *,
        shell: bool = False,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
    ) -> ExecResult:
        """Runs ``cmd`` in the env's sandbox and waits for it (see
        :meth:`deskgym.Client.exec`; ``timeout`` is the command's bound, default 60 s).
        The call's deadline defaults to that bound plus :data:`EXEC_MARGIN_S`, or the
        client's ``timeout`` if longer. Cancelling the awaiting task kills the command."""
        req = exec_request(env_id, cmd, shell=shell, cwd=cwd, env=env, stdin=stdin, timeout=timeout)
        if deadline is None:
            deadline = max(self.timeout, (60.0 if timeout is None else timeout) + EXEC_MARGIN_S)
        return exec_result(await self._unary(self._stub.Exec, req, pb.ExecResponse, deadline), b"", b"")

    async def put_file(
        self, env_id: str, path: str, data: bytes | str, *, mode: int = 0, offset: int = 0,
        deadline: float | None = None,
    ) -> int:
        """Writes ``data`` to ``path`` in the env's sandbox (see
        :meth:`deskgym.Client.put_file`); returns the file's size."""
        if self._max_file_bytes is None:
            self._max_file_bytes = (await self.capabilities(deadline=deadline)).limits.max_file_bytes
        size = offset
        for msgs in put_file_calls(env_id, path, data, mode, offset, self._max_file_bytes):
            size = (await self._unary(self._stub.PutFile, iter(msgs), pb.PutFileResponse, deadline)).size
        return size

    async def get_file(self, env_id: str, path: str, *, deadline: float | None = None) -> bytes:
        """Reads a whole file of the env's sandbox (needs the ``files`` capability)."""
        out = bytearray()
        while True:
            req = pb.GetFileRequest(env_id=env_id, path=path, offset=len(out))
            chunks = await self._stream(self._stub.GetFile, req, pb.FileChunk, deadline)
            for c in chunks:
                out += c.data
            if not chunks or chunks[-1].eof:
                return bytes(out)

    async def list_directory(
        self, env_id: str, path: str = ".", depth: int = 1, *, deadline: float | None = None
    ) -> pb.ListDirectoryResponse:
        """Entries of a directory of the env's sandbox (needs the ``files`` capability)."""
        req = pb.ListDirectoryRequest(env_id=env_id, path=path, depth=depth)
        return await self._unary(self._stub.ListDirectory, req, pb.ListDirectoryResponse, deadline)

    async def clipboard(self, env_id: str, *, deadline: float | None = None) -> str:
        """The env's CLIPBOARD text (needs the ``clipboard`` capability)."""
        return (await self._unary(self._stub.GetClipboard, pb.GetClipboardRequest(env_id=env_id), pb.Clipboard,
                                  deadline)).text

    async def set_clipboard(self, env_id: str, text: str, *, deadline: float | None = None) -> None:
        """Makes ``text`` the env's CLIPBOARD."""
        await self._unary(self._stub.SetClipboard, pb.SetClipboardRequest(env_id=env_id, text=text), pb.Clipboard,
                          deadline)

    async def windows(self, env_id: str, *, deadline: float | None = None) -> list[pb.WindowInfo]:
        """The env's top-level windows (needs the ``windows`` capability)."""
        req = pb.ListWindowsRequest(env_id=env_id)
        return list((await self._unary(self._stub.ListWindows, req, pb.ListWindowsResponse, deadline)).windows)

    async def get_env(self, env_id: str, *, deadline: float | None = None) -> pb.EnvInfo:
        """What one of this principal's envs is (see :meth:`deskgym.Client.get_env`);
        another principal's env is NOT_FOUND, as an unknown id."""
        return await self._unary(self._stub.GetEnv, pb.GetEnvRequest(env_id=env_id), pb.EnvInfo, deadline)

    def watch_events(self, env_id: str, *, deadline: float | None = None) -> AsyncEventStream:
        """The env's event log as it happens (see :meth:`deskgym.Client.watch_events`):
        an :class:`AsyncEventStream` of :class:`deskgym.EnvEvent`. Await it (or enter it
        with ``async with``) and it returns once the server watches: every event from
        then on is in it. ``deadline`` bounds that wait only; the stream lasts until it
        is closed, the env's pool closes, or this client closes. It takes no slot of
        ``max_in_flight``: a watcher is not a call in flight."""
        return AsyncEventStream(self, env_id, self._budget(deadline))

    async def unlock(
        self, env_id: str, capability: str, scope: str | Sequence[str] = (), reason: str = "", *,
        deadline: float | None = None,
    ) -> pb.UnlockResponse:
        """Asks for a boundary power on one env for a while (see
        :meth:`deskgym.Client.unlock`): the operator's policy decides; the grant lasts
        until :meth:`relock`, the env's next reset, or its end."""
        req = unlock_request(env_id, capability, scope, reason)
        return await self._unary(self._stub.Unlock, req, pb.UnlockResponse, deadline)

    async def relock(self, env_id: str, grant_id: str, *, deadline: float | None = None) -> bool:
        """Ends a grant of :meth:`unlock`; False when it had ended already."""
        req = pb.RelockRequest(env_id=env_id, grant_id=grant_id)
        return bool((await self._unary(self._stub.Relock, req, pb.RelockResponse, deadline)).released)

    async def keep_alive(self, pool_ids: Sequence[str], *, deadline: float | None = None) -> list[str]:
        """Renews pools' leases now; returns the ids among them that are gone (closed,
        reaped, another principal's, or never made)."""
        req = pb.KeepAliveRequest(pool_ids=list(pool_ids))
        return list((await self._unary(self._stub.KeepAlive, req, pb.KeepAliveResponse, deadline)).gone)

    def adopt_pool(self, pool_id: str) -> None:
        """Makes this client renew (and at its close, close) a pool another client made:
        how a process reattaches to a desktop (:func:`deskgym.aio.connect` with an id)."""
        self._hold_pool(pool_id)

    def abandon_pool(self, pool_id: str) -> None:
        """Stops renewing a pool and leaves it out of this client's close: it lives on its
        lease, for another client to adopt (:meth:`deskgym.aio.AsyncSession.detach`)."""
        self._pools.discard(pool_id)

    # -- the frame cache, as deskgym.Client has it ------------------------------------

    def hold(self, obs: pb.Observation) -> None:
        """Remembers the pixels an observation carries (no-op for ``not_modified``)."""
        hold(self.frames, obs)

    async def resolve(self, obs: pb.Observation, *, deadline: float | None = None) -> tuple[Any, bool]:
        """The decoded frame of an observation and whether it came from the cache; a
        ``not_modified`` frame the cache lost meanwhile is fetched with GetFrames."""
        found = cached_frame(self.frames, None, obs)
        if found is not None:
            return found
        fetched = (await self.get_frames([obs.frame_hash], encoding=encoding_name(obs.encoding), deadline=deadline))[0]
        self.hold(fetched)
        return decode(fetched), False

    def recent_hashes(self, encoding: str | None, k: int = 32) -> list[str]:
        """Hashes this client holds in ``encoding``, most recent first."""
        return self.frames.recent(encoding_of(encoding), k)

    # -- sessions ----------------------------------------------------------------------

    async def make(
        self, task: str = "click-target", *, seed: int | None = None, options: PoolOptions | None = None,
        deadline: float | None = None, **kwargs: Any,
    ) -> AsyncDeskgymEnv:
        """One desktop running ``task`` as an :class:`AsyncDeskgymEnv`, made with the pool
        options of :func:`deskgym.make` (``screen``, ``obs_type``, ``action_mode``,
        ``max_steps``, ``capabilities``... as keywords or ``options=``)."""
        opts = PoolOptions.of(options, kwargs, "make")
        encoding, _ = obs_setup(opts.obs_type)
        pool = await self.create_pool(task, 1, deadline=deadline, **opts.pool_args(seed=seed or 0, encoding=encoding))
        return AsyncDeskgymEnv(self, task, pool, pool.env_ids[0], opts, _PoolShare(pool), seed=seed)

    async def make_group(
        self, task: str, seed: int, n: int, *, route: str = "auto", options: PoolOptions | None = None,
        deadline: float | None = None, **kwargs: Any,
    ) -> AsyncGroup:
        """``n`` sessions of ``task`` at the identical start state of episode ``seed``, as
        :func:`deskgym.make_group` starts them (``route`` ``"auto"``, ``"seed"`` or
        ``"fork"``; each replica's frame hash and task state checked and reported in
        :attr:`AsyncGroup.report`), made with :meth:`make`'s pool options. OSWorld tasks
        run through the sync shim: ``deskgym.make_group`` (in a thread:
        ``asyncio.to_thread``)."""
        check_route(route, n)
        if not isinstance(task, str) or osworld_task(task) is not None:
            raise DeskgymError("INVALID_ARGUMENT", "an OSWorld task's group runs through the sync shim: "
                                                   "deskgym.make_group (from asyncio: asyncio.to_thread)")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        opts = PoolOptions.of(options, kwargs, "make_group")
        sessions: list[AsyncDeskgymEnv] = []
        try:
            if route == "fork":
                first = await self.make(task, seed=seed, options=opts, deadline=deadline)
                sessions.append(first)
                o, inf = await first.reset(seed=seed, deadline=deadline)
                obs, infos, routes, fid = [o], [inf], ["seed"], [""]
                for env, o, inf in await first.fork(n - 1, deadline=deadline) if n > 1 else []:
                    sessions.append(env)
                    obs.append(o)
                    infos.append(inf)
                    routes.append("fork")
                    fid.append(_fork_verdict(inf))
                taken = "fork"
            else:
                sessions, obs, infos = await self._seeded(task, seed, n, opts, deadline)
                routes, fid, taken = ["seed"] * n, [""] * n, "seed"
            report = judge([i["frame_hash"] for i in infos], [task_state(i) for i in infos], routes, fid,
                           requested=route, route=taken, seconds=loop.time() - t0)
            if route == "auto" and not report.identical:
                ref = next(r.index for r in report.replicas if r.identical)
                bad = report.diverged
                for i, (env, o, inf) in zip(bad, await sessions[ref].fork(len(bad), deadline=deadline)):
                    await sessions[i].close()
                    fid[i] = _fork_verdict(inf)
                    sessions[i], obs[i], infos[i], routes[i] = env, o, inf, "fork"
                report = judge([i["frame_hash"] for i in infos], [task_state(i) for i in infos], routes, fid,
                               requested=route, route="seed+fork", seconds=loop.time() - t0,
                               note=f"seeded replicas {bad} differed from replica {ref}: replaced by its forks")
        except BaseException:
            for env in sessions:
                await env.close()
            raise
        return AsyncGroup(sessions, obs, infos, report)

    async def _seeded(
        self, task: str, seed: int, n: int, opts: PoolOptions, deadline: float | None
    ) -> tuple[list[AsyncDeskgymEnv], list[Any], list[dict[str, Any]]]:
        """One pool of ``n`` sessions, each reset with ``seed`` (one StepBatch call; a
        tree observation by each session's own reset)."""
        encoding, tree = obs_setup(opts.obs_type)
        pool = await self.create_pool(task, n, deadline=deadline, **opts.pool_args(seed=seed, encoding=encoding))
        share = _PoolShare(pool, n)
        sessions = [AsyncDeskgymEnv(self, task, pool, e, opts, share, seed=seed) for e in pool.env_ids]
        try:
            if tree is not None:
                started = await asyncio.gather(*(s.reset(seed=seed, deadline=deadline) for s in sessions))
                return sessions, [o for o, _ in started], [i for _, i in started]
            reqs = [reset_request(e, seed, encoding, (), None) for e in pool.env_ids]
            resp = await self.step_batch([], reqs, self.recent_hashes(encoding), deadline=deadline)
            for it in resp.reset_results:
                if it.code == 0:
                    self.hold(it.result.observation)
            obs, infos = [], []
            for s, it in zip(sessions, resp.reset_results):
                if it.code != 0:
                    raise DeskgymError(code_name(it.code), f"env {it.env_id}: {it.message}")
                s._seed, s._based = None, True
                o, inf = await s._result(it.result.observation, it.result.info)
                obs.append(o)
                infos.append(inf)
            return sessions, obs, infos
        except BaseException:
            for s in sessions:
                await s.close()
            raise


def _fork_verdict(info: dict[str, Any]) -> str:
    """A forked replica's fidelity, taken out of its info with the rest of how its replay
    went (:func:`deskgym.env.rebuilt_info`'s keys): the group's report holds the verdict,
    and what is left is the task's state, comparable with a seeded replica's."""
    for key in REPLAY_KEYS:
        info.pop(key, None)
    return str(info.pop("fidelity"))


@dataclass
class AsyncGroup:
    """``n`` sessions started at one state (:meth:`AsyncClient.make_group`): iterate or
    index it for the sessions (already reset), with the :attr:`observations` and
    :attr:`infos` of their start and the :attr:`report`
    (:class:`deskgym.group.GroupReport`). ``await group.close()`` (or ``async with``)
    closes every session still open."""

    sessions: list[AsyncDeskgymEnv]
    observations: list[Any]
    infos: list[dict[str, Any]]
    report: GroupReport

    def __len__(self) -> int:
        return len(self.sessions)

    def __getitem__(self, i: int) -> AsyncDeskgymEnv:
        return self.sessions[i]

    def __iter__(self) -> Any:
        return iter(self.sessions)

    async def __aenter__(self) -> AsyncGroup:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes every session (idempotent)."""
        for s in self.sessions:
            await s.close()


async def _renew(ref: weakref.ReferenceType[AsyncClient]) -> None:
    """Renews a client's pools every third of its lease (KeepAlive, without a slot: a
    client busy with long calls must not lose its idle pools) while the client lives."""
    while True:
        client = ref()
        if client is None or client._closed:
            return
        ttl = client.lease_ttl_s or DEFAULT_LEASE_TTL_S
        del client
        await asyncio.sleep(ttl / 3)
        client = ref()
        if client is None or client._closed:
            return
        ids = sorted(client._pools)
        if ids:
            try:
                # A whole lease to answer: a slow server still gets the renewal.
                r = await client._stub.KeepAlive(pb.KeepAliveRequest(pool_ids=ids), timeout=ttl,
                                                 metadata=client._metadata)
                client._pools.difference_update(r.gone)
            except grpc.RpcError:
                pass  # the server is away; the next round tries again
            except grpc.aio.UsageError:
                return  # the caller's channel was closed under the client
        del client


class _PoolShare:
    """A pool the sessions over it close together: the last one to close releases it
    (a fork's replicas share one pool)."""

    def __init__(self, pool: Pool, sessions: int = 1) -> None:
        #: ``None`` once handed over (a detached session's): nothing here closes it.
        self.pool: Pool | None = pool
        self.sessions = sessions

    async def leave(self, client: AsyncClient) -> None:
        self.sessions -= 1
        if self.sessions == 0:
            pool, self.pool = self.pool, None
            await client.release(pool)


class AsyncDesktop:
    """One env's boundary verbs (exec, files, clipboard, windows, screenshots) as
    coroutines, over ``client`` for ``env_id``: :class:`deskgym.Desktop`'s, each needing
    the capability it names. Each takes ``deadline=`` as every call does."""

    client: AsyncClient
    env_id: str

    def __init__(self, client: AsyncClient, env_id: str) -> None:
        self.client, self.env_id = client, env_id

    async def exec(self, cmd: str | Sequence[str], **kwargs: Any) -> ExecResult:
        """Runs a command in this env's sandbox (see :meth:`AsyncClient.exec`)."""
        return await self.client.exec(self.env_id, cmd, **kwargs)

    async def put_file(self, path: str, data: bytes | str, *, mode: int = 0, deadline: float | None = None) -> int:
        """Writes a file in this env's sandbox (needs the ``files`` capability)."""
        return await self.client.put_file(self.env_id, path, data, mode=mode, deadline=deadline)

    async def get_file(self, path: str, *, deadline: float | None = None) -> bytes:
        """Reads a file of this env's sandbox (needs the ``files`` capability)."""
        return await self.client.get_file(self.env_id, path, deadline=deadline)

    async def list_directory(
        self, path: str = ".", depth: int = 1, *, deadline: float | None = None
    ) -> pb.ListDirectoryResponse:
        """Lists a directory of this env's sandbox (needs the ``files`` capability)."""
        return await self.client.list_directory(self.env_id, path, depth, deadline=deadline)

    async def screenshot(self, **options: Any) -> pb.Observation:
        """A screenshot of this env (see :meth:`AsyncClient.screenshot`)."""
        return await self.client.screenshot(self.env_id, **options)

    async def clipboard(self, *, deadline: float | None = None) -> str:
        """This env's CLIPBOARD text (needs the ``clipboard`` capability)."""
        return await self.client.clipboard(self.env_id, deadline=deadline)

    async def set_clipboard(self, text: str, *, deadline: float | None = None) -> None:
        """Makes ``text`` this env's CLIPBOARD (needs the ``clipboard`` capability)."""
        await self.client.set_clipboard(self.env_id, text, deadline=deadline)

    async def windows(self, *, deadline: float | None = None) -> list[pb.WindowInfo]:
        """This env's top-level windows (needs the ``windows`` capability)."""
        return await self.client.windows(self.env_id, deadline=deadline)


class AsyncDeskgymEnv(AsyncDesktop):
    """One desktop as an asyncio session: :class:`deskgym.DeskgymEnv`'s ``reset``,
    ``step``, ``observe``, ``save``, ``restore`` (the same observations, infos, spaces
    and seeding) as coroutines, and ``fork`` into sessions. Made by
    :meth:`AsyncClient.make`; close it with ``await env.close()`` or ``async with``.
    One call at a time per session, as the server has it (a second one concurrent with
    the first answers ABORTED)."""

    def __init__(
        self, client: AsyncClient, task: str, pool: Pool, env_id: str, options: PoolOptions, share: _PoolShare,
        *, seed: int | None = None, based: bool = False,
    ) -> None:
        super().__init__(client, env_id)
        self.task = task
        #: What this session's pool was made with.
        self.pool_options = options
        self.obs_type = options.obs_type
        self.obs_format = options.obs_format
        self.info_timing = options.info_timing
        self._encoding, self._tree = obs_setup(options.obs_type)
        self._share = share
        self.pool_id = pool.pool_id
        self.max_steps = pool.max_steps
        self.profile = pool.profile
        self.capabilities = pool.capabilities
        self.width, self.height = pool.width, pool.height
        self.observation_space: spaces.Space[Any] = env_observation_space(options, self._encoding, pool.width,
                                                                          pool.height)
        self._mode = options.action_mode_for(pool.width, pool.height)
        self.action_space = self._mode.space
        self._seed = seed
        self._based = based
        self._last_hash: str | None = None
        self._closed = False
        #: The tree read with the last reset/step (obs types with ``a11y``) or observe.
        self.last_tree: Tree | None = None
        #: Measured facts of the last reset/step (settle_ms, latency_ms, frame_cached).
        self.last_stats: dict[str, Any] = {}

    async def __aenter__(self) -> AsyncDeskgymEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _known(self) -> list[str]:
        return known_hashes(self._last_hash, self.client.recent_hashes(self._encoding, 8))

    async def _result(self, obs: pb.Observation, step_info: pb.StepInfo) -> tuple[Any, dict[str, Any]]:
        frame, cached = await self.client.resolve(obs)
        s = shape(frame, cached, obs, step_info, obs_type=self.obs_type, obs_format=self.obs_format,
                  timing=self.info_timing, with_tree=self._tree is not None)
        self._last_hash = obs.frame_hash
        self.last_stats = s.stats
        if s.tree is not None:
            self.last_tree = s.tree
        return s.value, s.info

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None, deadline: float | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Starts an episode: ``(observation, info)``, seeded as :meth:`deskgym.DeskgymEnv.reset`."""
        if seed is None and self._seed is not None:
            seed, self._seed = self._seed, None
        if seed is None and not self._based:
            # The first episode of an unseeded env: a random base, not the pool's 0.
            seed = secrets.randbits(63)
        r = await self.client.reset(self.env_id, seed, self._encoding, self._known(), self._tree, deadline=deadline)
        self._based = True
        return await self._result(r.observation, r.info)

    async def step(
        self, action: Any, *, deadline: float | None = None
    ) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Applies one action (in the session's ``action_mode``): ``(observation, reward,
        terminated, truncated, info)``."""
        act = to_proto(self._mode.to_action(action))
        r = await self.client.step(self.env_id, act, self._encoding, self._known(), self._tree, deadline=deadline)
        obs, inf = await self._result(r.observation, r.info)
        return obs, r.reward, r.terminated, r.truncated, inf

    async def observe(
        self, structured: bool = False, *, osworld_xml: bool = False, line_budget: int = 0,
        diff_from: Tree | int | None = None, timeout_ms: int = 0, deadline: float | None = None,
    ) -> Any:
        """The screen now, without acting; ``structured=True``: the accessibility tree
        (see :meth:`deskgym.DeskgymEnv.observe`)."""
        if not structured:
            o = await self.client.observe(self.env_id, self._encoding, deadline=deadline)
            return (await self.client.resolve(o, deadline=deadline))[0]
        req = tree_request(osworld_xml=osworld_xml, line_budget=line_budget, diff_from=diff_from, timeout_ms=timeout_ms)
        o = await self.client.observe(self.env_id, "jpeg", tree=req, deadline=deadline)
        self.last_tree = Tree.from_proto(o.tree)
        return self.last_tree

    async def save(self, park: int = 0, *, deadline: float | None = None) -> AsyncCheckpoint:
        """Saves this session's state; :meth:`restore` or :meth:`fork` it (``park`` as
        :meth:`deskgym.Client.save`)."""
        return await self.client.save(self.env_id, park, deadline=deadline)

    async def restore(
        self, checkpoint: CheckpointInfo | str, *, deadline: float | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Rewinds to ``checkpoint`` by replay; ``info["fidelity"]`` is ``"exact"`` or
        ``"diverged"`` (with ``info["expected_hash"]``, ``left_at_step``, ``replayed_from_step``)."""
        r = await self.client.restore(self.env_id, checkpoint, self._encoding, deadline=deadline)
        if self._tree is not None:
            o = await self.client.observe(self.env_id, "jpeg", tree=self._tree, deadline=deadline)
            r.observation.tree.CopyFrom(o.tree)
        obs, inf = await self._result(r.observation, r.info)
        return obs, rebuilt_info(inf, r.fidelity, r.expected_hash, r.path)

    async def fork(
        self, n: int, checkpoint: CheckpointInfo | None = None, *, deadline: float | None = None
    ) -> list[tuple[AsyncDeskgymEnv, Any, dict[str, Any]]]:
        """``n`` new sessions rebuilt at ``checkpoint`` (default: this session's state
        now), one pool for all: ``(session, observation, info)`` each, ``info`` with the
        replica's ``fidelity``, the ``expected_hash``, ``left_at_step`` and ``replayed_from_step``
        (:func:`deskgym.env.rebuilt_info`). The pool closes when the last of them does."""
        cp = checkpoint if checkpoint is not None else await self.save(deadline=deadline)
        r = await self.client.fork(cp, n, self._encoding, deadline=deadline)
        pool = Pool(r.pool_id, [x.env_id for x in r.replicas], self.width, self.height, self.max_steps, "",
                    self.profile, self.capabilities)
        share = _PoolShare(pool, len(r.replicas))
        out = []
        for x in r.replicas:
            env = AsyncDeskgymEnv(self.client, self.task, pool, x.env_id, self.pool_options, share, based=True)
            obs, inf = await env._result(x.observation, x.info)
            out.append((env, obs, rebuilt_info(inf, x.fidelity, r.expected_hash, x.path)))
        return out

    async def close(self) -> None:
        """Releases this session's desktop (its pool, once every session over it has
        closed; idempotent)."""
        if self._closed:
            return
        self._closed = True
        await self._share.leave(self.client)

