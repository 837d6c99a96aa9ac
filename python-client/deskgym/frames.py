"""The client-side frame cache: hash -> decoded frame, shared by every env of a client.

The server sends a frame's pixels only when the client does not already hold it
(``if_none_match``); this cache is what the client holds. Forked replicas that show the
same pixels therefore download each distinct frame once.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from deskgym.v1 import deskgym_pb2 as pb


def decode(obs: pb.Observation) -> np.ndarray | bytes:
    """RAW_RGB frames become read-only (H, W, 3) uint8 views (no copy); others stay bytes."""
    if obs.encoding == pb.IMAGE_ENCODING_RAW_RGB:
        return np.frombuffer(obs.frame, dtype=np.uint8).reshape(obs.height, obs.width, 3)
    return obs.frame


class FrameCache:
    """A bounded LRU of decoded frames keyed by (frame hash, encoding)."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._frames: OrderedDict[tuple[str, int], tuple[Any, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._frames)

    def __contains__(self, key: tuple[str, int]) -> bool:
        return key in self._frames

    def get(self, key: tuple[str, int]) -> Any | None:
        hit = self._frames.get(key)
        if hit is None:
            self.misses += 1
            return None
        self._frames.move_to_end(key)
        self.hits += 1
        return hit[0]

    def put(self, key: tuple[str, int], frame: Any, nbytes: int) -> None:
        if key in self._frames:
            self._frames.move_to_end(key)
            return
        self._frames[key] = (frame, nbytes)
        self.bytes += nbytes
        while self.bytes > self.max_bytes and len(self._frames) > 1:
            _, (_, n) = self._frames.popitem(last=False)
            self.bytes -= n

    def recent(self, encoding: int, k: int) -> list[str]:
        """The ``k`` most recently used hashes held in ``encoding`` (for ``if_none_match``)."""
        out = []
        for h, e in reversed(self._frames):
            if e == encoding:
                out.append(h)
                if len(out) == k:
                    break
        return out
