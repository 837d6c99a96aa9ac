"""A typed client over every deskgym RPC; failures raise :class:`DeskgymError`."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from deskgym import artifacts as _artifacts
from deskgym.artifacts import TreeStats

from deskgym.cancel import Cancel as Cancel  # re-exported: deskgym.client.Cancel
from deskgym.cancel import cancellable as cancellable
from deskgym.cancel import current as _current_cancel
# Moved to deskgym.calls (shared with deskgym.aio); still importable from here.
from deskgym.calls import DEFAULT_ADDRESS as DEFAULT_ADDRESS
from deskgym.calls import ENCODINGS as ENCODINGS
from deskgym.calls import Pool as Pool
from deskgym.calls import check_screen as check_screen
from deskgym.calls import encoding_of as encoding_of
from deskgym.calls import observe_spec as observe_spec
from deskgym.calls import resolve_address as resolve_address
from deskgym.calls import (
    CheckpointInfo,
    EnvEvent,
    auth_metadata,
    cached_frame,
    channel_options,
    checked,
    checkpoint_id,
    closed_client,
    create_pool_request,
    encoding_name,
    fork_request,
    hold,
    observe_request,
    put_file_calls,
    reset_request,
    restore_request,
    rpc_error,
    screenshot_request,
    step_batch_request,
    step_request,
    unlock_request,
)
from deskgym.errors import DeskgymError
from deskgym.execution import ExecResult as ExecResult  # re-exported: deskgym.client.ExecResult
from deskgym.execution import exec_request, exec_result
from deskgym.frames import FrameCache, decode
from deskgym.ring import FrameRing
from deskgym.v1 import deskgym_pb2 as pb
from deskgym.v1 import deskgym_pb2_grpc as pb_grpc

#: Default pool lease: a client that dies (even ``kill -9``) frees its desktops within
#: this many seconds; a live one renews every third of it from a background thread.
DEFAULT_LEASE_TTL_S = 6.0

_T = TypeVar("_T")


#: How many recently held hashes travel in a batch's shared ``if_none_match``.
RECENT_HASHES = 32

#: Seconds after a failed attach (``frames="auto"``) before a call tries again.
RING_RETRY_S = 1.0

#: How a client receives frames: ``auto`` (shared memory when connected to the server's
#: unix socket, else bytes), ``shm`` (shared memory or an error), ``bytes`` (always in
#: the reply, as a remote client).
FRAME_MODES = ("auto", "shm", "bytes")


@dataclass(frozen=True)
class Checkpoint(CheckpointInfo):
    """A saved env state (see :meth:`Client.save`). ``client`` is the client that made
    it, so :func:`deskgym.fork` can reach the same server."""

    client: Client

    @classmethod
    def from_proto(cls, c: pb.Checkpoint, client: Client) -> Checkpoint:
        return cls(*CheckpointInfo.fields_of(c), client)


class EventStream(Iterator[EnvEvent]):
    """A live ``WatchEvents`` stream (see :meth:`Client.watch_events`): an iterator of
    :class:`deskgym.EnvEvent`, closed by :meth:`close` or a ``with`` block."""

    def __init__(self, call: Any, address: str) -> None:
        self._call, self._address = call, address
        # The server answers its headers once it watches the env: from here on no event
        # is missed. A refused call (NOT_FOUND) ends at once and raises here.
        try:
            call.initial_metadata()
        except grpc.RpcError as e:
            raise rpc_error(e, address) from None
        if call.done() and call.code() != grpc.StatusCode.OK:
            raise rpc_error(call, address)

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> EnvEvent:
        try:
            return EnvEvent.from_proto(next(self._call))
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                raise StopIteration from None
            raise rpc_error(e, self._address) from None

    def close(self) -> None:
        """Stops watching (idempotent)."""
        self._call.cancel()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Leases:
    """The pools a client holds, renewed by a daemon thread with ``KeepAlive``.

    Kept apart from :class:`Client` so the thread and the finalizer hold no reference
    to the client itself: an unreferenced client is collected, its finalizer closes
    its pools, and the thread ends.
    """

    def __init__(self, stub: Any, metadata: tuple[tuple[str, str], ...], ttl_s: float) -> None:
        self.stub = stub
        self.metadata = metadata
        self.ttl_s = ttl_s
        self.pools: set[str] = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        # A forked child inherits this object (and the finalizer) but not the pools.
        self.pid = os.getpid()

    def add(self, pool_id: str) -> None:
        with self.lock:
            self.pools.add(pool_id)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="deskgym-keepalive", daemon=True)
                self.thread.start()

    def discard(self, pool_id: str) -> None:
        with self.lock:
            self.pools.discard(pool_id)

    def _run(self) -> None:
        period = self.ttl_s / 3
        while not self.stop.wait(period):
            with self.lock:
                ids = sorted(self.pools)
            if not ids:
                continue
            try:
                # A whole lease to answer: a slow server still gets the renewal (one
                # cancelled at a third of it never lands), and the next waits for it.
                gone = self.stub.KeepAlive(
                    pb.KeepAliveRequest(pool_ids=ids), timeout=self.ttl_s, metadata=self.metadata
                ).gone
            except grpc.RpcError:
                continue  # the server is away; the next round tries again
            with self.lock:
                self.pools.difference_update(gone)

    def close_all(self, timeout: float = 5.0) -> None:
        """Stops renewing and closes the pools still held (best effort); in a forked
        child it closes nothing: the pools are its parent's."""
        self.stop.set()
        if os.getpid() != self.pid:
            return
        with self.lock:
            ids, self.pools = sorted(self.pools), set()
        for pool_id in ids:
            try:
                self.stub.ClosePool(pb.ClosePoolRequest(pool_id=pool_id), timeout=timeout, metadata=self.metadata)
            except grpc.RpcError:
                pass


def _finalize(leases: _Leases, channel: grpc.Channel, ring: FrameRing | None = None) -> None:
    leases.close_all()
    channel.close()
    if ring is not None:
        ring.close()



class Client:
    """Connection to a deskgym server.

    >>> import deskgym
    >>> c = deskgym.Client("127.0.0.1:50051")  # doctest: +SKIP
    >>> c.capabilities().protocol  # doctest: +SKIP
    'deskgym.v1'
    """

    def __init__(
        self,
        address: str | None = None,
        token: str | None = None,
        timeout: float = 120.0,
        frame_cache_bytes: int = 256 << 20,
        lease_ttl_s: float | None = DEFAULT_LEASE_TTL_S,
        frames: str = "auto",
    ) -> None:
        """``lease_ttl_s``: pools this client creates are closed by the server once this
        client has not renewed them for that long (it renews from a background thread
        while alive); ``None`` leaves only the server's idle timeout. ``address``:
        ``host:port`` or ``unix:PATH``; default ``$DESKGYM_ADDRESS``, else
        :data:`DEFAULT_ADDRESS`. ``frames`` (see :data:`FRAME_MODES`): on a ``unix:``
        address frames arrive through shared memory by default, as read-only arrays that
        never change while held."""
        address = resolve_address(address)
        if frames not in FRAME_MODES:
            raise DeskgymError("INVALID_ARGUMENT", f"frames {frames!r} is not one of {', '.join(FRAME_MODES)}", "frames")
        if frames == "shm" and not address.startswith("unix:"):
            raise DeskgymError(
                "INVALID_ARGUMENT",
                f"frames='shm' needs the server's unix socket (address 'unix:PATH'), not {address!r}",
                "frames",
            )
        self.address = address
        self.frame_mode = "bytes" if not address.startswith("unix:") else frames
        #: The shared-memory ring frames arrive in (made at the first call that returns one).
        self.ring: FrameRing | None = None
        self._ring_lock = threading.Lock()
        #: With ``frames="auto"``, when a failed attach may be tried again.
        self._ring_retry_at = 0.0
        #: Decoded frames by (hash, encoding), shared by every env of this client.
        self.frames = FrameCache(frame_cache_bytes)
        self.timeout = timeout
        self._channel = grpc.insecure_channel(address, options=channel_options(address))
        # The generated stub is untyped; replies are checked in `_call`.
        self._stub: Any = pb_grpc.DeskgymStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata = auth_metadata(token)
        if lease_ttl_s is not None and not 1.0 <= lease_ttl_s <= 3600.0:
            raise DeskgymError("INVALID_ARGUMENT", f"lease_ttl_s: {lease_ttl_s} is outside 1..3600 (None: no lease)")
        self.lease_ttl_s = lease_ttl_s
        # Pools are renewed even without a lease of their own (a fork inherits its source
        # pool's lease; renewing also keeps the server's idle timeout off a live client).
        self._leases = _Leases(self._stub, self._metadata, lease_ttl_s or DEFAULT_LEASE_TTL_S)
        # The server's max_file_bytes, asked once (a server's limits do not change).
        self._max_file_bytes: int | None = None
        # At interpreter exit or when collected: close what is still held.
        self._finalizer = weakref.finalize(self, _finalize, self._leases, self._channel)

    def frame_ring(self) -> int:
        """The id of the ring this client's frames go into (0: bytes in the reply). The
        first call attaches one. With ``frames="auto"``, a server without rings (an older
        one) leaves this client on bytes; any other failure (the server busy or
        restarting, its ring bound reached) sends this call's frames as bytes and the
        attach is tried again a second later."""
        ring = self.ring
        if ring is not None and ring.pid == os.getpid() and ring.alive():
            return ring.ring
        if self.frame_mode == "bytes" or time.monotonic() < self._ring_retry_at:
            return 0
        with self._ring_lock:
            if self.ring is not None and self.ring.pid == os.getpid() and self.ring.alive():
                return self.ring.ring
            # A forked child must not share its parent's slots, and a restarted server
            # holds no ring: attach (again).
            try:
                attached = self._call(self._stub.AttachFrames, pb.AttachFramesRequest(), pb.AttachFramesResponse)
                self.ring = FrameRing(self.address.removeprefix("unix:"), attached)
            except DeskgymError as e:
                if self.frame_mode == "shm":
                    raise
                if e.code == "UNIMPLEMENTED":
                    self.frame_mode = "bytes"
                else:
                    self._ring_retry_at = time.monotonic() + RING_RETRY_S
                return 0
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _finalize, self._leases, self._channel, self.ring)
            return self.ring.ring

    def _call(self, method: Callable[..., Any], request: Any, reply: type[_T]) -> _T:
        """Calls ``method``; the reply is checked to be a ``reply`` (the generated gRPC
        stubs are untyped), failures raise :class:`DeskgymError`. Inside
        :func:`cancellable`, the call ends when its token is cancelled."""
        token = _current_cancel()
        try:
            if token is None:
                r = method(request, timeout=self.timeout, metadata=self._metadata)
            else:
                # A gRPC unary callable's future form can be cancelled from another thread.
                call = method.future(request, timeout=self.timeout, metadata=self._metadata)  # type: ignore[attr-defined]
                r = token.run(call)
        except grpc.RpcError as e:
            raise rpc_error(e, self.address) from None
        except ValueError as e:
            if "closed channel" not in str(e):
                raise
            raise closed_client() from None
        return checked(r, reply)

    def close(self) -> None:
        """Closes the pools this client still holds and the channel (idempotent)."""
        self._finalizer()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def capabilities(self) -> pb.Capabilities:
        """Server version, verbs, encodings, tasks and limits."""
        return self._call(self._stub.GetCapabilities, pb.GetCapabilitiesRequest(), pb.Capabilities)

    def create_pool(
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
    ) -> Pool:
        """Starts ``num_envs`` desktops running ``task`` on ``profile`` (default: the
        task's own), granted ``capabilities`` (e.g. ``["exec"]``; the server's policy
        must allow each). ``task_options`` are the task family's (``miniwob/...``:
        ``reward``, ``clock``, ``step_ms``, ``ready_ms``, ``data_mode``, ``reload``); a screen of
        ``(0, 0)`` is the task's own size."""
        req = create_pool_request(
            task, num_envs, screen=screen, seed=seed, max_steps=max_steps, encoding=encoding, settle_ms=settle_ms,
            settle_max_ms=settle_max_ms, labels=labels, warm_spares=warm_spares, record=record, profile=profile,
            capabilities=capabilities, task_options=task_options, lease_ttl_s=self.lease_ttl_s,
        )
        r = self._call(self._stub.CreatePool, req, pb.CreatePoolResponse)
        self._leases.add(r.pool_id)
        return Pool.from_proto(r)

    def put_file(self, env_id: str, path: str, data: bytes | str, *, mode: int = 0, offset: int = 0) -> int:
        """Writes ``data`` to ``path`` in the env's sandbox (relative paths are under
        ``/home/user``), in 1 MiB messages; files above the server's ``max_file_bytes``
        go in several calls, each continuing at ``offset``. Returns the file's size.
        Needs the pool's ``files`` capability."""
        if self._max_file_bytes is None:
            self._max_file_bytes = self.capabilities().limits.max_file_bytes
        size = offset
        for msgs in put_file_calls(env_id, path, data, mode, offset, self._max_file_bytes):
            size = self._call(self._stub.PutFile, iter(msgs), pb.PutFileResponse).size
        return size

    def get_file(self, env_id: str, path: str) -> bytes:
        """Reads a whole file of the env's sandbox (calling again from each next offset
        when it is larger than one reply). Needs the pool's ``files`` capability."""
        out = bytearray()
        while True:
            try:
                chunks = list(self._stub.GetFile(
                    pb.GetFileRequest(env_id=env_id, path=path, offset=len(out)),
                    timeout=self.timeout, metadata=self._metadata,
                ))
            except grpc.RpcError as e:
                raise DeskgymError.from_rpc(e) from None
            for c in chunks:
                out += c.data
            if not chunks or chunks[-1].eof:
                return bytes(out)

    def put_dir(self, env_id: str, local: str | os.PathLike[str], dest: str) -> TreeStats:
        """Sends the local directory ``local`` to ``dest`` in the env's sandbox, modes
        kept, symlinks left out (see :mod:`deskgym.artifacts`). Needs ``files``."""
        return _artifacts.put_dir(self, env_id, local, dest)

    def get_dir(self, env_id: str, src: str, local: str | os.PathLike[str]) -> TreeStats:
        """Fetches the directory ``src`` of the env's sandbox into ``local``, modes kept,
        symlinks left out and named in ``skipped``. Needs ``files``."""
        return _artifacts.get_dir(self, env_id, src, local)

    @property
    def artifacts(self) -> _artifacts.Artifacts:
        """The server's artifact store as this client's principal sees it:
        ``upload(path) -> {"sha256", "size"}``, ``download(sha256, path)``, ``delete``."""
        return _artifacts.Artifacts(self)

    def list_recordings(self) -> list[pb.Recording]:
        """This client's recordings on the server (its principal's), each with its status
        (``open`` while its pool records, ``closed`` when finished) and complete files."""
        r = self._call(self._stub.ListRecordings, pb.ListRecordingsRequest(), pb.ListRecordingsResponse)
        return list(r.recordings)

    def download_recording(self, run: str, dest: str | os.PathLike[str]) -> str:
        """Fetches recording ``run`` into ``dest/<run>.skn`` and returns that path, which
        :func:`deskgym.datasets.open` reads. Resumable: a file already there at its full
        size is kept, a shorter one is continued from its end. Only complete files are
        listed by the server, so an ``open`` run fetches what is readable so far."""
        found = [r for r in self.list_recordings() if r.run == run]
        if not found:
            raise DeskgymError("NOT_FOUND", f"no recording {run!r} of yours (list_recordings() lists them)")
        root = os.path.join(os.fspath(dest), run + ".skn")
        for f in found[0].files:
            local = os.path.join(root, *f.path.split("/"))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            have = os.path.getsize(local) if os.path.exists(local) else 0
            if have > f.size:
                have = 0
            with open(local, "r+b" if have else "wb") as out:
                out.seek(have)
                out.truncate()
                while have < f.size:
                    try:
                        chunks = list(self._stub.GetRecordingFile(
                            pb.GetRecordingFileRequest(run=run, path=f.path, offset=have),
                            timeout=self.timeout, metadata=self._metadata,
                        ))
                    except grpc.RpcError as e:
                        raise DeskgymError.from_rpc(e) from None
                    for c in chunks:
                        out.write(c.data)
                        have += len(c.data)
                    if not chunks or chunks[-1].eof:
                        break
        return root

    def delete_recording(self, run: str) -> None:
        """Deletes one of this client's finished recordings on the server."""
        self._call(self._stub.DeleteRecording, pb.DeleteRecordingRequest(run=run), pb.DeleteRecordingResponse)

    def list_directory(self, env_id: str, path: str = ".", depth: int = 1) -> pb.ListDirectoryResponse:
        """Entries (path, kind, size, mtime) of a directory of the env's sandbox, to
        ``depth`` levels. Needs the pool's ``files`` capability."""
        return self._call(
            self._stub.ListDirectory, pb.ListDirectoryRequest(env_id=env_id, path=path, depth=depth),
            pb.ListDirectoryResponse,
        )

    def screenshot(
        self,
        env_id: str,
        *,
        scope: str = "screen",
        window: int | None = None,
        max_long_edge: int = 0,
        encoding: str = "png",
        jpeg_quality: int = 0,
        if_none_match: Sequence[str] = (),
    ) -> pb.Observation:
        """A screenshot of the ``screen``, the ``active_window`` or a ``window`` (id from
        :meth:`windows`), scaled down so its long edge is at most ``max_long_edge``
        (0: full size), in ``encoding`` with ``jpeg_quality`` (0: the server's 80). The
        same pixels as a hash in ``if_none_match`` come back ``not_modified``, without
        bytes. :class:`deskgym.geometry.Display` maps its pixels to the screen."""
        req = screenshot_request(env_id, scope=scope, window=window, max_long_edge=max_long_edge, encoding=encoding,
                                 jpeg_quality=jpeg_quality, if_none_match=if_none_match)
        return self._call(self._stub.Screenshot, req, pb.Observation)

    def watch(
        self,
        env_id: str,
        *,
        fps: float = 5.0,
        max_long_edge: int = 0,
        scope: str = "screen",
        window: int | None = None,
        jpeg_quality: int = 0,
        codec: str = "jpeg",
    ) -> Iterator[pb.ScreencastFrame]:
        """The env's screen as it changes (ACI's screencast): JPEG frames (``.jpeg``,
        ``.pointer``, ``.display``, ``.seq``, ``.dropped``) at most ``fps`` a second,
        without stepping or recording the env. ``codec="h264"``: H.264 access units
        instead (``.h264``, ``.keyframe``, ``.codec``; the first is a keyframe). Stops
        when the iterator is closed (or garbage-collected); a viewer that falls behind
        loses frames (H.264: up to the next keyframe), never the env's pace."""
        codecs = {"jpeg": pb.SCREENCAST_CODEC_JPEG, "h264": pb.SCREENCAST_CODEC_H264}
        if codec not in codecs:
            raise DeskgymError("INVALID_ARGUMENT", f"codec {codec!r} is not one of {sorted(codecs)}")
        o = observe_spec(scope, window, max_long_edge, jpeg_quality)
        req = pb.ScreencastRequest(env_id=env_id, scope=o.scope, window=o.window, fps=fps,
                                   max_long_edge=o.max_long_edge, jpeg_quality=o.jpeg_quality,
                                   codec=codecs[codec])
        call = self._stub.Screencast(req, metadata=self._metadata)
        try:
            yield from call
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                raise DeskgymError.from_rpc(e) from None
        finally:
            call.cancel()

    def get_env(self, env_id: str) -> pb.EnvInfo:
        """What one of this principal's envs is: its pool, task, profile, granted
        capabilities, screen, recording run, ``snapshot_kind``, and whether its desktop
        is up (``alive``). Another principal's env is NOT_FOUND, as an unknown id."""
        return self._call(self._stub.GetEnv, pb.GetEnvRequest(env_id=env_id), pb.EnvInfo)

    def watch_events(self, env_id: str) -> EventStream:
        """The env's event log as it happens (ACI's ``events()``): every
        :class:`deskgym.EnvEvent` the env produces from the return of this call on
        (actions and their acks, resets, restores, exec and file results, permission
        refusals, errors), the same records its recording's ``events`` table gets, in
        the same order, whether the pool records or not. The stream ends when the
        env's pool closes; a reader that falls behind loses the oldest events, counted
        in the next one's ``lost``. Close it (or use it as a context manager) to stop."""
        return EventStream(self._stub.WatchEvents(pb.WatchEventsRequest(env_id=env_id), metadata=self._metadata),
                           self.address)

    def clipboard(self, env_id: str) -> str:
        """The env's CLIPBOARD text ("" when empty); needs the ``clipboard`` capability."""
        return self._call(self._stub.GetClipboard, pb.GetClipboardRequest(env_id=env_id), pb.Clipboard).text

    def set_clipboard(self, env_id: str, text: str) -> None:
        """Makes ``text`` (at most 1 MiB) the env's CLIPBOARD; applications paste it."""
        self._call(self._stub.SetClipboard, pb.SetClipboardRequest(env_id=env_id, text=text), pb.Clipboard)

    def unlock(
        self, env_id: str, capability: str, scope: str | Sequence[str] = (), reason: str = ""
    ) -> pb.UnlockResponse:
        """Asks for a boundary power on one env for a while (ACI's ``unlock``):
        ``"exec"``, ``"files"``, ``"clipboard"``, ``"windows"``, or ``"net.egress"``
        with a ``scope`` of host names (``"pypi.org"``) and suffixes
        (``".pythonhosted.org"``). The operator's policy for the caller decides
        (PERMISSION_DENIED names what the operator would list); the request and the
        decision are recorded. The grant (``grant_id``; for ``net.egress`` also the
        ``proxy`` the env's execs are given) lasts until :meth:`relock`, the env's next
        reset, or its end."""
        return self._call(self._stub.Unlock, unlock_request(env_id, capability, scope, reason), pb.UnlockResponse)

    def relock(self, env_id: str, grant_id: str) -> bool:
        """Ends a grant of :meth:`unlock`; False when it had ended already."""
        r = self._call(self._stub.Relock, pb.RelockRequest(env_id=env_id, grant_id=grant_id), pb.RelockResponse)
        return bool(r.released)

    def answer_capability(
        self, env_id: str, token: str, allow: bool, scope: str | Sequence[str] = (), reason: str = ""
    ) -> pb.AnswerCapabilityResponse:
        """Answers a capability request (a ``capability_required`` event's ``token``) on
        one of this principal's envs: ``allow`` grants the power as :meth:`unlock` would
        (a ``net.egress`` ``scope`` may narrow the request's, never widen it) and the
        waiting call goes on; refused, it is PERMISSION_DENIED with ``reason``. An
        unknown token is NOT_FOUND; one answered already, or timed out,
        FAILED_PRECONDITION."""
        hosts = [scope] if isinstance(scope, str) else list(scope)
        req = pb.AnswerCapabilityRequest(env_id=env_id, token=token, allow=allow, scope=hosts, reason=reason)
        return self._call(self._stub.AnswerCapability, req, pb.AnswerCapabilityResponse)

    def windows(self, env_id: str) -> list[pb.WindowInfo]:
        """The env's top-level windows (id, title, class, pid, geometry, focused); needs
        the pool's ``windows`` capability."""
        r = self._call(self._stub.ListWindows, pb.ListWindowsRequest(env_id=env_id), pb.ListWindowsResponse)
        return list(r.windows)

    def exec(
        self,
        env_id: str,
        cmd: str | Sequence[str],
        *,
        shell: bool = False,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Runs ``cmd`` in the env's sandbox as ``user`` and waits for it, like
        :func:`subprocess.run`: a sequence is a program and its arguments (a string alone
        is a program name), ``shell=True`` runs a string with ``sh -c``. ``timeout`` in
        seconds (default 60; past it the command's process group is killed and
        ``timed_out`` is set). Needs the pool's ``exec`` capability."""
        req = exec_request(env_id, cmd, shell=shell, cwd=cwd, env=env, stdin=stdin, timeout=timeout)
        return exec_result(self._call(self._stub.Exec, req, pb.ExecResponse), b"", b"")

    def exec_stream(self, env_id: str, cmd: str | Sequence[str], **kwargs: Any) -> Iterator[tuple[str, bytes] | ExecResult]:
        """:meth:`exec` (the same keywords) with the output as it comes: yields
        ``("stdout" | "stderr", bytes)`` pieces in the order they came, then the
        :class:`ExecResult` (its output is all the pieces). Closing the iterator early
        ends the command."""
        req = exec_request(env_id, cmd, **kwargs)
        call = self._stub.ExecStream(req, timeout=self.timeout, metadata=self._metadata)
        out: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        try:
            for ev in call:
                if ev.WhichOneof("kind") == "output":
                    out[ev.output.channel] += ev.output.data
                    yield ev.output.channel, bytes(ev.output.data)
                else:
                    yield exec_result(ev.end, bytes(out["stdout"]), bytes(out["stderr"]))
                    return
        except grpc.RpcError as e:
            raise DeskgymError.from_rpc(e) from None
        finally:
            call.cancel()
        raise DeskgymError("UNAVAILABLE", "the exec stream ended without the command's end")

    def keep_alive(self, pool_ids: Sequence[str]) -> list[str]:
        """Renews pools' leases now; returns the ids among them that are gone (closed,
        reaped, another principal's, or never made)."""
        r = self._call(self._stub.KeepAlive, pb.KeepAliveRequest(pool_ids=list(pool_ids)), pb.KeepAliveResponse)
        return list(r.gone)

    def adopt_pool(self, pool_id: str) -> None:
        """Makes this client renew (and at its close, close) a pool another client made:
        how a process reattaches to a desktop (:func:`deskgym.connect` with an id)."""
        self._leases.add(pool_id)

    def abandon_pool(self, pool_id: str) -> None:
        """Stops renewing a pool and leaves it out of this client's close: it lives on its
        lease, for another client to adopt (:meth:`deskgym.Session.detach`)."""
        self._leases.discard(pool_id)

    def close_pool(self, pool_id: str) -> int:
        """Stops every desktop of a pool (and finishes its recording); returns how many."""
        self._leases.discard(pool_id)
        return self._call(self._stub.ClosePool, pb.ClosePoolRequest(pool_id=pool_id), pb.ClosePoolResponse).envs_closed

    def release(self, pool: Pool | None) -> None:
        """Closes a pool that may already be gone (reaped, or the server restarted): what
        an env's ``close()`` needs, idempotent and quiet about those two cases."""
        if pool is None or not self._finalizer.alive:
            # A closed client closed every pool it held (a fork's replicas share the
            # source env's client, which may close first).
            return
        try:
            self.close_pool(pool.pool_id)
        except DeskgymError as e:
            if e.code not in ("NOT_FOUND", "UNAVAILABLE"):
                raise

    def reset(
        self,
        env_id: str,
        seed: int | None = None,
        encoding: str | None = None,
        if_none_match: Sequence[str] = (),
        tree: pb.TreeRequest | None = None,
    ) -> pb.ResetResponse:
        """Starts a new episode on one env (``tree``: also read the accessibility tree)."""
        req = reset_request(env_id, seed, encoding, if_none_match, tree, self.frame_ring())
        return self._call(self._stub.Reset, req, pb.ResetResponse)

    def step(
        self,
        env_id: str,
        action: pb.Action,
        encoding: str | None = None,
        if_none_match: Sequence[str] = (),
        tree: pb.TreeRequest | None = None,
        observe: pb.ObserveSpec | dict[str, Any] | None = None,
    ) -> pb.StepResult:
        """Applies one action to one env (``tree``: also read the accessibility tree after
        it). ``observe`` (ACI's observe-after-act: ``scope``, ``window``,
        ``max_long_edge``, ``jpeg_quality``, see :func:`observe_spec`) shapes the returned
        observation; the episode's record stays the whole screen."""
        req = step_request(env_id, action, encoding, if_none_match, tree, observe, self.frame_ring())
        return self._call(self._stub.Step, req, pb.StepResult)

    def step_batch(
        self, items: Sequence[pb.StepRequest], resets: Iterable[pb.ResetRequest] = (), if_none_match: Sequence[str] = ()
    ) -> pb.StepBatchResponse:
        """Steps several envs (and resets others) in one call; per-item status inside."""
        req = step_batch_request(items, resets, if_none_match, self.frame_ring())
        return self._call(self._stub.StepBatch, req, pb.StepBatchResponse)

    def observe(
        self,
        env_id: str,
        encoding: str | None = None,
        if_none_match: Sequence[str] = (),
        tree: pb.TreeRequest | None = None,
        settle_ms: int = 0,
    ) -> pb.Observation:
        """Captures the screen without acting (``tree``: and reads the accessibility tree);
        ``settle_ms`` (at most 1000) first waits for the screen to be quiet that long."""
        req = observe_request(env_id, encoding, if_none_match, tree, settle_ms, self.frame_ring())
        return self._call(self._stub.Observe, req, pb.Observation)

    def get_frames(self, hashes: Sequence[str], encoding: str | None = None) -> list[pb.Observation]:
        """Frames by hash from the server's cache (NOT_FOUND when one was evicted)."""
        req = pb.GetFramesRequest(hashes=list(hashes), encoding=encoding_of(encoding))
        return list(self._call(self._stub.GetFrames, req, pb.GetFramesResponse).frames)

    def cache_stats(self) -> pb.CacheStats:
        """The server's frame-cache counters (hits, misses, encodes saved, ...)."""
        return self._call(self._stub.GetCacheStats, pb.GetCacheStatsRequest(), pb.CacheStats)

    def save(self, env_id: str, park: int = 0) -> Checkpoint:
        """Saves an env's state (task, seed, actions since reset, frame hash).

        ``park``: replicas the server keeps parked at this state (at most the server's
        ``limits.max_parked``), so a later fork or restore of it replays nothing; parked
        replicas of the previous checkpoint this one continues are advanced by the steps
        since. Returns at once; the checkpoint's ``chain`` in ``list_checkpoints`` says how
        parking went."""
        req = pb.SaveRequest(env_id=env_id, park=park)
        return Checkpoint.from_proto(self._call(self._stub.Save, req, pb.Checkpoint), self)

    def restore(self, env_id: str, checkpoint: Checkpoint | str, encoding: str | None = None) -> pb.RestoreResponse:
        """Rewinds an env to a checkpoint by replay; ``fidelity`` says whether it matches."""
        return self._call(self._stub.Restore, restore_request(env_id, checkpoint, encoding), pb.RestoreResponse)

    def fork(self, checkpoint: Checkpoint | str, n: int, encoding: str | None = None) -> pb.ForkResponse:
        """A new pool of ``n`` envs rebuilt at the checkpoint's state."""
        r = self._call(self._stub.Fork, fork_request(checkpoint, n, encoding), pb.ForkResponse)
        # The replicas' pool inherits the source pool's lease.
        self._leases.add(r.pool_id)
        return r

    def list_checkpoints(self, pool_id: str = "") -> list[Checkpoint]:
        """Checkpoints of a pool (all pools for ``""``)."""
        r = self._call(self._stub.ListCheckpoints, pb.ListCheckpointsRequest(pool_id=pool_id), pb.ListCheckpointsResponse)
        return [Checkpoint.from_proto(c, self) for c in r.checkpoints]

    def delete_checkpoint(self, checkpoint: Checkpoint | str) -> None:
        """Deletes a checkpoint."""
        req = pb.DeleteCheckpointRequest(checkpoint_id=checkpoint_id(checkpoint))
        self._call(self._stub.DeleteCheckpoint, req, pb.DeleteCheckpointResponse)

    # -- the client-side frame cache -------------------------------------------------

    def hold(self, obs: pb.Observation) -> None:
        """Remembers the pixels an observation carries (no-op for ``not_modified``, and
        for frames in the ring: the ring remembers those while they are alive)."""
        hold(self.frames, obs)

    def resolve(self, obs: pb.Observation) -> tuple[Any, bool]:
        """The decoded frame of an observation and whether it came from the cache.

        ``not_modified`` observations are rebuilt from the cache; if the cache lost the
        frame meanwhile, it is fetched with GetFrames.
        """
        found = cached_frame(self.frames, self.ring, obs)
        if found is not None:
            return found
        fetched = self.get_frames([obs.frame_hash], encoding=encoding_name(obs.encoding))[0]
        self.hold(fetched)
        return decode(fetched), False

    def recent_hashes(self, encoding: str | None, k: int = RECENT_HASHES) -> list[str]:
        """Hashes this client holds in ``encoding``, most recent first."""
        return self.frames.recent(encoding_of(encoding), k)
