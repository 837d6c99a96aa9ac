"""Observations: frames to numpy/bytes, infos to dicts, and the matching spaces."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from deskgym.frames import decode
from deskgym.v1 import deskgym_pb2 as pb

__all__ = ["Bytes", "decode", "info", "observation_space"]

#: A tiny valid PNG, used as the sample of a :class:`Bytes` space.
_PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8ffff3f0005fe02fea7d6a4e00000000049454e44ae426082"
)


class Bytes(spaces.Space[bytes]):
    """Encoded images (PNG or JPEG bytes): what ``obs_type="png"|"jpeg"`` returns."""

    def __init__(self, encoding: str) -> None:
        super().__init__(shape=None, dtype=None)
        self.encoding = encoding

    def sample(self, mask: Any = None, probability: Any = None) -> bytes:
        return _PNG_1X1

    def contains(self, x: Any) -> bool:
        return isinstance(x, (bytes, bytearray))

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Bytes({self.encoding!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Bytes) and other.encoding == self.encoding


def observation_space(obs_type: str, width: int, height: int) -> spaces.Space[Any]:
    """``Box(0, 255, (H, W, 3), uint8)`` for "rgb", else :class:`Bytes`."""
    if obs_type == "rgb":
        return spaces.Box(0, 255, shape=(height, width, 3), dtype=np.uint8)
    return Bytes(obs_type)


#: Server-side extras that describe the machine, not the episode.
_OPERATOR_EXTRAS = {"display"}


_POLICIES = {pb.SETTLE_POLICY_SYNC: "sync", pb.SETTLE_POLICY_DAMAGE: "damage", pb.SETTLE_POLICY_BROWSER: "browser"}


def stats(obs: pb.Observation, step_info: pb.StepInfo, cached: bool) -> dict[str, Any]:
    """What was measured in a Reset/Step: differs between identical runs, so it stays out
    of ``info`` unless asked for (``info_timing=True``)."""
    return {
        "settle_ms": obs.settle.waited_ms,
        "latency_ms": step_info.latency_ms,
        # True when the pixels came from the client's frame cache, not the wire.
        "frame_cached": cached,
    }


def info(obs: pb.Observation, step_info: pb.StepInfo, timing: bool = False, cached: bool = False) -> dict[str, Any]:
    """The ``info`` dict of Reset/Step: instruction, frame hash, pointer, settle, task...

    Only what the same seed and actions reproduce exactly, so Gymnasium's and SB3's
    determinism checks pass; ``timing=True`` adds the measured :func:`stats`.
    """
    d: dict[str, Any] = {
        "instruction": step_info.instruction,
        "task": step_info.task,
        "frame_hash": obs.frame_hash,
        "pointer": (obs.pointer.x, obs.pointer.y),
        "settle_quiesced": obs.settle.quiesced,
        "settle_policy": _POLICIES.get(obs.settle.policy, "unknown"),
        "step_index": step_info.step_index,
        "seed": step_info.seed,
    }
    if timing:
        d.update(stats(obs, step_info, cached))
    for k, v in step_info.extra.items():
        if k not in _OPERATOR_EXTRAS:
            d.setdefault(k, v)
    return d
