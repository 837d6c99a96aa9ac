"""Each RPC's request built from a verb's arguments, and its reply and failure read back:
written once for the sync client (:class:`deskgym.Client`) and the asyncio one
(:class:`deskgym.aio.AsyncClient`), which differ only in how they wait."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from deskgym.errors import DeskgymError
from deskgym.frames import FrameCache, decode
from deskgym.ring import FrameRing
from deskgym.v1 import deskgym_pb2 as pb

DEFAULT_ADDRESS = "127.0.0.1:50051"

ENCODINGS: dict[str, pb.ImageEncoding] = {
    "rgb": pb.IMAGE_ENCODING_RAW_RGB,
    "raw": pb.IMAGE_ENCODING_RAW_RGB,
    "png": pb.IMAGE_ENCODING_PNG,
    "jpeg": pb.IMAGE_ENCODING_JPEG,
}

_SCOPES = {
    "screen": pb.SCREENSHOT_SCOPE_SCREEN,
    "active_window": pb.SCREENSHOT_SCOPE_ACTIVE_WINDOW,
    "window": pb.SCREENSHOT_SCOPE_WINDOW,
}

_T = TypeVar("_T")


def resolve_address(address: str | None) -> str:
    """``address``, else ``$DESKGYM_ADDRESS``, else :data:`DEFAULT_ADDRESS`; checked to
    name a port (gRPC would take ``"localhost"`` as port 443 and wait there)."""
    a = address or os.environ.get("DESKGYM_ADDRESS") or DEFAULT_ADDRESS
    if a.startswith("unix:"):
        return a
    host, sep, port = a.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise DeskgymError(
            "INVALID_ARGUMENT",
            f"address {a!r} names no port: give host:port, e.g. {(host or a) + ':50051'!r} "
            "(the server prints its address when it starts)",
            "address",
        )
    return a


def channel_options(address: str) -> list[tuple[str, Any]]:
    """The gRPC channel options of every deskgym client, sync or asyncio."""
    return [
        # Raw 1280x720 frames are 2.7 MB each; a batch carries many.
        ("grpc.max_receive_message_length", -1),
        ("grpc.max_send_message_length", 64 << 20),
        # A server that restarts (a fleet's, under its Ray actor) is reached
        # again within a second, not after gRPC's default backoff of up to 2 min.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        # gRPC names a unix peer by its path, which is no valid HTTP/2 :authority
        # (the server answers PROTOCOL_ERROR).
        *([("grpc.default_authority", "localhost")] if address.startswith("unix:") else []),
    ]


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """The metadata every call carries: the bearer token, when there is one."""
    return (("authorization", f"Bearer {token}"),) if token else ()


def rpc_error(e: grpc.RpcError, address: str) -> DeskgymError:
    """A failed call as :class:`DeskgymError`; where nothing listens at ``address``, the
    message says how to get a server, not only gRPC's words."""
    err = DeskgymError.from_rpc(e)
    if err.code == "UNAVAILABLE" and ("connect" in err.message.lower() or "refused" in err.message):
        return DeskgymError(
            "UNAVAILABLE",
            f"no deskgym server answers at {address}: start one (scripts/start-server.sh, "
            f"or deskgym-server --listen {address}) or point DESKGYM_ADDRESS at it "
            f"({err.message})",
        )
    return err


def closed_client() -> DeskgymError:
    """The error of a call on a client whose channel is closed."""
    return DeskgymError("FAILED_PRECONDITION", "this client (or the env that owned it) is closed; make a new one")


def checked(r: Any, reply: type[_T]) -> _T:
    """``r``, checked to be a ``reply`` (the generated gRPC stubs are untyped)."""
    if not isinstance(r, reply):
        raise DeskgymError("INTERNAL", f"expected a {reply.__name__} reply, got {type(r).__name__}")
    return r


def encoding_of(name: str | None) -> pb.ImageEncoding:
    """"rgb" | "png" | "jpeg" | None -> wire enum (None: the pool's default)."""
    if name is None:
        return pb.IMAGE_ENCODING_UNSPECIFIED
    try:
        return ENCODINGS[name]
    except KeyError:
        raise DeskgymError("INVALID_ARGUMENT", f"obs_type/encoding {name!r} is not one of rgb, png, jpeg") from None


def encoding_name(encoding: pb.ImageEncoding) -> str:
    """Wire enum -> "rgb" | "png" | "jpeg"."""
    return {v: k for k, v in ENCODINGS.items() if k != "raw"}[encoding]


def check_screen(screen: Any) -> tuple[int, int]:
    """``screen`` as (width, height), or an error that says how to write it."""
    if (
        isinstance(screen, (tuple, list))
        and len(screen) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in screen)
    ):
        return int(screen[0]), int(screen[1])
    raise DeskgymError(
        "INVALID_ARGUMENT", f"screen must be (width, height), e.g. (640, 480); got {screen!r}", "screen"
    )


def observe_spec(
    scope: str = "screen", window: int | None = None, max_long_edge: int = 0, jpeg_quality: int = 0
) -> pb.ObserveSpec:
    """ACI's screenshot levers: the ``screen``, the ``active_window`` or a ``window`` (a
    ``window`` id alone means that window), scaled so the long edge is at most
    ``max_long_edge`` (0: full size), JPEG ``jpeg_quality`` (0: the server's)."""
    if scope not in _SCOPES:
        raise DeskgymError("INVALID_ARGUMENT", f"scope {scope!r} is not one of {', '.join(_SCOPES)}", "scope")
    if window is not None and scope == "screen":
        scope = "window"
    return pb.ObserveSpec(scope=_SCOPES[scope], window=window or 0, max_long_edge=max_long_edge,
                          jpeg_quality=jpeg_quality)


@dataclass(frozen=True)
class Pool:
    """A created pool: its id, env ids, effective screen and episode bound."""

    pool_id: str
    env_ids: list[str]
    width: int
    height: int
    max_steps: int
    #: Where the server writes this pool's recording ("" when not recording).
    recording_path: str = ""
    #: The desktop profile its envs run.
    profile: str = "tasks"
    #: Boundary capabilities granted to it ("exec", ...).
    capabilities: tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, r: pb.CreatePoolResponse) -> Pool:
        return cls(r.pool_id, list(r.env_ids), r.screen.width, r.screen.height, r.max_steps, r.recording_path,
                   r.profile, tuple(r.capabilities))


#: What a checkpoint of a server older than the ``snapshot_kind`` fields captures:
#: ``replay`` (ACI §5: none | replay | disk | memory | process). deskgym.v1 defines Restore
#: and Fork as a replay of the checkpoint's action log on a freshly reset desktop, so an
#: empty field means that; a server that has the field says so itself
#: (``ProfileInfo.snapshot_kind``, ``Checkpoint.snapshot_kind``, ``EnvInfo.snapshot_kind``).
SNAPSHOT_KIND = "replay"


def snapshot_kind(wire: str) -> str:
    """The server's ``snapshot_kind`` (:data:`SNAPSHOT_KIND` from a server without one)."""
    return wire or SNAPSHOT_KIND


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint is (see :meth:`deskgym.Client.save`), whichever client made it:
    :class:`deskgym.Checkpoint` adds the sync client, :class:`deskgym.aio.AsyncCheckpoint`
    the asyncio one."""

    checkpoint_id: str
    pool_id: str
    env_id: str
    task: str
    seed: int
    step_index: int
    frame_hash: str
    width: int
    height: int
    #: What the checkpoint captures, in ACI's terms (§5), as the server says: ``replay``
    #: on every deskgym profile today (Restore and Fork replay the action log).
    snapshot_kind: str
    #: The latest earlier checkpoint of its pool whose episode this one continues ("": none).
    parent_checkpoint_id: str
    #: Replicas the server holds parked at this state as of the reply (``save(park=n)``; a
    #: fork or restore of it takes them and replays nothing), and those still being built.
    parked: int
    parking: int
    #: Where the latest parked replica's replay began: the parent's step count when it
    #: was advanced from the parent's parked replica (only the steps between), 0 when
    #: it was rebuilt from a reset.
    parked_from_step: int

    @staticmethod
    def fields_of(c: pb.Checkpoint) -> tuple[str, str, str, str, int, int, str, int, int, str, str, int, int, int]:
        return (c.checkpoint_id, c.pool_id, c.env_id, c.task, c.seed, c.step_index, c.frame_hash,
                c.screen.width, c.screen.height, snapshot_kind(c.snapshot_kind),
                c.chain.parent_checkpoint_id, c.chain.parked, c.chain.parking, c.chain.parked_from_step)


@dataclass(frozen=True)
class EnvEvent:
    """One record of an env's event log, as :meth:`deskgym.Client.watch_events` streams
    it: a row of the recording's ``events`` table (``kind``, ``env_id``, ``payload``)
    with the env's event number, its time, and how many events this watcher lost just
    before it (docs/protocol.md, "The event log")."""

    #: The env's event number (from 1, counting every event, watched or not).
    seq: int
    #: When the env produced it, Unix milliseconds.
    time_ms: int
    #: What happened: ``action``, ``ack``, ``reset``, ``restore``, ``exec``, ``put_file``...
    kind: str
    env_id: str
    #: The details (the recording's ``events.payload``, parsed).
    payload: dict[str, Any]
    #: Events missed just before this one (the watcher read too slowly); 0 normally.
    lost: int

    @classmethod
    def from_proto(cls, e: pb.EnvEvent) -> EnvEvent:
        try:
            payload = json.loads(e.payload)
        except ValueError:
            raise DeskgymError("INTERNAL", f"event {e.seq} ({e.kind}): the payload is not JSON") from None
        return cls(e.seq, e.time_ms, e.kind, e.env_id, payload, e.lost)


@dataclass(frozen=True)
class CapabilityRequest:
    """A call of this principal's waiting for a boundary power (a ``capability_required``
    event, or one of ``EnvInfo.pending_capabilities``): what a controller answers with
    :meth:`deskgym.Client.answer_capability` before ``timeout_ms`` runs out."""

    #: The env the call is on.
    env_id: str
    #: What the answer names it by.
    token: str
    #: ``"exec"``, ``"files"``, ``"clipboard"``, ``"windows"`` or ``"net.egress"``.
    capability: str
    #: ``net.egress``: the hosts asked for; empty for the other powers.
    scope: tuple[str, ...]
    #: Why (an Unlock's reason, or the call that needs it).
    reason: str
    #: The call that waits: ``"Unlock"``, ``"Exec"``, ``"PutFile"``...
    action: str
    #: Milliseconds it waits, from the event (or, listed, what is left of them).
    timeout_ms: int

    @classmethod
    def from_event(cls, e: EnvEvent) -> CapabilityRequest:
        """The request a ``capability_required`` event announces."""
        p = e.payload
        reason = str(p.get("reason", ""))
        # The log quotes client text (`"..."`); the controller reads it unquoted.
        if len(reason) >= 2 and reason[0] == reason[-1] == '"':
            reason = reason[1:-1]
        return cls(e.env_id, str(p["token"]), str(p["capability"]), tuple(p.get("scope", ())), reason,
                   str(p.get("action", "")), int(p.get("timeout_ms", 0)))

    @classmethod
    def from_proto(cls, env_id: str, r: pb.CapabilityRequest) -> CapabilityRequest:
        """One of ``EnvInfo.pending_capabilities``."""
        return cls(env_id, r.token, r.capability, tuple(r.scope), r.reason, r.action, r.timeout_ms)


def checkpoint_id(checkpoint: CheckpointInfo | str) -> str:
    """A checkpoint's id, given the checkpoint or its id."""
    return checkpoint.checkpoint_id if isinstance(checkpoint, CheckpointInfo) else checkpoint


def create_pool_request(
    task: str,
    num_envs: int,
    *,
    screen: tuple[int, int],
    seed: int,
    max_steps: int,
    encoding: str,
    settle_ms: int | None,
    settle_max_ms: int,
    labels: dict[str, str] | None,
    warm_spares: int,
    record: str | None,
    profile: str | None,
    capabilities: Sequence[str],
    task_options: Mapping[str, Any] | None,
    lease_ttl_s: float | None,
) -> pb.CreatePoolRequest:
    """A CreatePool request from :meth:`deskgym.Client.create_pool`'s arguments."""
    settle = pb.SettleConfig(settle_max_ms=settle_max_ms)
    if settle_ms is not None:
        settle.settle_ms = settle_ms
    width, height = check_screen(screen)
    return pb.CreatePoolRequest(
        task=task,
        num_envs=num_envs,
        screen=pb.ScreenSize(width=width, height=height),
        seed=seed,
        settle=settle,
        max_steps=max_steps,
        encoding=encoding_of(encoding),
        labels=labels or {},
        warm_spares=warm_spares,
        record=record or "",
        lease_ttl_ms=int(lease_ttl_s * 1000) if lease_ttl_s else 0,
        profile=profile or "",
        capabilities=list(capabilities),
        task_options={str(k): str(v) for k, v in (task_options or {}).items()},
    )


def reset_request(
    env_id: str, seed: int | None, encoding: str | None, if_none_match: Sequence[str], tree: pb.TreeRequest | None,
    frame_ring: int = 0,
) -> pb.ResetRequest:
    req = pb.ResetRequest(env_id=env_id, encoding=encoding_of(encoding), if_none_match=list(if_none_match), tree=tree,
                          frame_ring=frame_ring)
    if seed is not None:
        req.seed = seed
    return req


def step_request(
    env_id: str, action: pb.Action, encoding: str | None, if_none_match: Sequence[str], tree: pb.TreeRequest | None,
    observe: pb.ObserveSpec | dict[str, Any] | None, frame_ring: int = 0,
) -> pb.StepRequest:
    if isinstance(observe, dict):
        observe = observe_spec(**observe)
    return pb.StepRequest(
        env_id=env_id, action=action, encoding=encoding_of(encoding), if_none_match=list(if_none_match), tree=tree,
        observe=observe, frame_ring=frame_ring,
    )


def step_batch_request(
    items: Sequence[pb.StepRequest], resets: Iterable[pb.ResetRequest], if_none_match: Sequence[str],
    frame_ring: int = 0,
) -> pb.StepBatchRequest:
    req = pb.StepBatchRequest(items=list(items), resets=list(resets), if_none_match=list(if_none_match))
    for it in req.items:
        it.frame_ring = frame_ring
    for r in req.resets:
        r.frame_ring = frame_ring
    return req


def observe_request(
    env_id: str, encoding: str | None, if_none_match: Sequence[str], tree: pb.TreeRequest | None, settle_ms: int,
    frame_ring: int = 0,
) -> pb.ObserveRequest:
    return pb.ObserveRequest(env_id=env_id, encoding=encoding_of(encoding), if_none_match=list(if_none_match),
                             tree=tree, settle_ms=settle_ms, frame_ring=frame_ring)


def screenshot_request(
    env_id: str, *, scope: str = "screen", window: int | None = None, max_long_edge: int = 0, encoding: str = "png",
    jpeg_quality: int = 0, if_none_match: Sequence[str] = (),
) -> pb.ScreenshotRequest:
    o = observe_spec(scope, window, max_long_edge, jpeg_quality)
    return pb.ScreenshotRequest(
        env_id=env_id, scope=o.scope, window=o.window, max_long_edge=o.max_long_edge,
        encoding=encoding_of(encoding), jpeg_quality=o.jpeg_quality, if_none_match=list(if_none_match),
    )


def restore_request(env_id: str, checkpoint: CheckpointInfo | str, encoding: str | None) -> pb.RestoreRequest:
    return pb.RestoreRequest(env_id=env_id, checkpoint_id=checkpoint_id(checkpoint), encoding=encoding_of(encoding))


def fork_request(checkpoint: CheckpointInfo | str, n: int, encoding: str | None) -> pb.ForkRequest:
    return pb.ForkRequest(checkpoint_id=checkpoint_id(checkpoint), n=n, encoding=encoding_of(encoding))


def unlock_request(env_id: str, capability: Any, scope: Any, reason: Any) -> pb.UnlockRequest:
    """An Unlock request from :meth:`deskgym.Client.unlock`'s arguments (``scope``: a host
    or several), checked before the call: the server would read a wrong type as nothing."""
    if not isinstance(capability, str) or not capability:
        raise DeskgymError("INVALID_ARGUMENT", f"capability: expected a power's name ('files', 'net.egress'), "
                           f"got {capability!r}", "capability")
    hosts = [scope] if isinstance(scope, str) else scope
    if not isinstance(hosts, (list, tuple)) or not all(isinstance(h, str) for h in hosts):
        raise DeskgymError("INVALID_ARGUMENT", f"scope: expected a host name or a sequence of them, got {scope!r}",
                           "scope")
    if not isinstance(reason, str):
        raise DeskgymError("INVALID_ARGUMENT", f"reason: expected a str, got {type(reason).__name__}", "reason")
    return pb.UnlockRequest(env_id=env_id, capability=capability, scope=list(hosts), reason=reason)


def put_file_calls(
    env_id: str, path: str, data: bytes | str, mode: int, offset: int, max_file_bytes: int
) -> list[list[pb.PutFileChunk]]:
    """The messages of each PutFile call that writes ``data``: 1 MiB messages, and a call
    per ``max_file_bytes`` (the server's bound on one call), each continuing at its offset."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    step = 1 << 20
    limit = max_file_bytes or len(raw) or 1
    calls = []
    for start in range(0, max(len(raw), 1), limit):
        part = raw[start : start + limit]
        first = pb.PutFileChunk(env_id=env_id, path=path, offset=offset + start, mode=mode, data=part[:step])
        calls.append([first, *(pb.PutFileChunk(data=part[i : i + step]) for i in range(step, len(part), step))])
    return calls


def cached_frame(frames: FrameCache, ring: FrameRing | None, obs: pb.Observation) -> tuple[Any, bool] | None:
    """The decoded frame of an observation and whether it came from the cache; ``None``
    when it is ``not_modified`` and neither the cache nor the ring still holds it (the
    caller fetches it with GetFrames). Remembers the pixels it carries."""
    if obs.HasField("slot"):
        if ring is None:
            raise DeskgymError("INTERNAL", "a frame in a ring this client did not attach")
        return ring.frame(obs), False
    if not obs.not_modified:
        hold(frames, obs)
        return decode(obs), False
    key = (obs.frame_hash, obs.encoding)
    frame = frames.get(key)
    if frame is None and ring is not None:
        frame = ring.find(key)
    return None if frame is None else (frame, True)


def hold(frames: FrameCache, obs: pb.Observation) -> None:
    """Remembers the pixels an observation carries (no-op for ``not_modified``, and for
    frames in a ring: the ring remembers those while they are alive)."""
    if not obs.not_modified and obs.frame:
        frames.put((obs.frame_hash, obs.encoding), decode(obs), len(obs.frame))
