"""A typed client over every deskgym RPC; failures raise :class:`DeskgymError`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from deskgym.errors import DeskgymError
from deskgym.v1 import deskgym_pb2 as pb
from deskgym.v1 import deskgym_pb2_grpc as pb_grpc

DEFAULT_ADDRESS = "127.0.0.1:50051"

ENCODINGS = {
    "rgb": pb.IMAGE_ENCODING_RAW_RGB,
    "raw": pb.IMAGE_ENCODING_RAW_RGB,
    "png": pb.IMAGE_ENCODING_PNG,
    "jpeg": pb.IMAGE_ENCODING_JPEG,
}

_T = TypeVar("_T")


@dataclass(frozen=True)
class Pool:
    """A created pool: its id, env ids, effective screen and episode bound."""

    pool_id: str
    env_ids: list[str]
    width: int
    height: int
    max_steps: int


class Client:
    """Connection to a deskgym server.

    >>> import deskgym
    >>> c = deskgym.Client("127.0.0.1:50051")  # doctest: +SKIP
    >>> c.capabilities().protocol  # doctest: +SKIP
    'deskgym.v1'
    """

    def __init__(self, address: str = DEFAULT_ADDRESS, token: str | None = None, timeout: float = 120.0) -> None:
        self.address = address
        self.timeout = timeout
        # Raw 1280x720 frames are 2.7 MB each; a batch carries many.
        self._channel = grpc.insecure_channel(
            address,
            options=[
                ("grpc.max_receive_message_length", -1),
                ("grpc.max_send_message_length", 64 << 20),
            ],
        )
        self._stub = pb_grpc.DeskgymStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()

    def _call(self, method: Callable[..., _T], request: Any) -> _T:
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise DeskgymError.from_rpc(e) from None

    def close(self) -> None:
        """Closes the channel (pools stay until closed or reaped by the server)."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def capabilities(self) -> pb.Capabilities:
        """Server version, verbs, encodings, tasks and limits."""
        return self._call(self._stub.GetCapabilities, pb.GetCapabilitiesRequest())

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
    ) -> Pool:
        """Starts ``num_envs`` desktops running ``task``."""
        settle = pb.SettleConfig(settle_max_ms=settle_max_ms)
        if settle_ms is not None:
            settle.settle_ms = settle_ms
        r = self._call(
            self._stub.CreatePool,
            pb.CreatePoolRequest(
                task=task,
                num_envs=num_envs,
                screen=pb.ScreenSize(width=screen[0], height=screen[1]),
                seed=seed,
                settle=settle,
                max_steps=max_steps,
                encoding=encoding_of(encoding),
                labels=labels or {},
            ),
        )
        return Pool(r.pool_id, list(r.env_ids), r.screen.width, r.screen.height, r.max_steps)

    def close_pool(self, pool_id: str) -> int:
        """Stops every desktop of a pool; returns how many."""
        return self._call(self._stub.ClosePool, pb.ClosePoolRequest(pool_id=pool_id)).envs_closed

    def reset(self, env_id: str, seed: int | None = None, encoding: str | None = None) -> pb.ResetResponse:
        """Starts a new episode on one env."""
        req = pb.ResetRequest(env_id=env_id, encoding=encoding_of(encoding))
        if seed is not None:
            req.seed = seed
        return self._call(self._stub.Reset, req)

    def step(self, env_id: str, action: pb.Action, encoding: str | None = None) -> pb.StepResult:
        """Applies one action to one env."""
        return self._call(self._stub.Step, pb.StepRequest(env_id=env_id, action=action, encoding=encoding_of(encoding)))

    def step_batch(
        self, items: Sequence[pb.StepRequest], resets: Iterable[pb.ResetRequest] = ()
    ) -> pb.StepBatchResponse:
        """Steps several envs (and resets others) in one call; per-item status inside."""
        return self._call(self._stub.StepBatch, pb.StepBatchRequest(items=list(items), resets=list(resets)))

    def observe(self, env_id: str, encoding: str | None = None) -> pb.Observation:
        """Captures the screen without acting."""
        return self._call(self._stub.Observe, pb.ObserveRequest(env_id=env_id, encoding=encoding_of(encoding)))


def encoding_of(name: str | None) -> int:
    """"rgb" | "png" | "jpeg" | None -> wire enum (None: the pool's default)."""
    if name is None:
        return pb.IMAGE_ENCODING_UNSPECIFIED
    try:
        return ENCODINGS[name]
    except KeyError:
        raise DeskgymError("INVALID_ARGUMENT", f"obs_type/encoding {name!r} is not one of rgb, png, jpeg") from None
