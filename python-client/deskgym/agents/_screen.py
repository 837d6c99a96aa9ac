"""What the vendor adapters share: the frame a model sees (the screen scaled down to a
size the vendor recommends) and the way back from a pixel of that frame to the screen's
through the frame's own geometry (:class:`deskgym.geometry.Display`, ACI's
``floor(p * source_size / delivered_size)``), so the model clicks what it saw."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from deskgym.errors import DeskgymError
from deskgym.geometry import Display

__all__ = ["Screen"]


@dataclass
class Screen:
    """One env's screen as a model sees it: ``width`` x ``height`` frames of the
    ``screen_width`` x ``screen_height`` display (``max_long_edge`` asks the server for
    them; 0: full size).

    ``env`` is what it needs of one: ``client``, ``env_id``, ``screen`` (width, height)
    and ``step(action)`` in Gymnasium's shape: a :class:`deskgym.DeskgymEnv`, or the
    run :func:`deskgym.drive.drive_session` steps a session's desktop through."""

    env: Any
    screen_width: int
    screen_height: int
    max_long_edge: int
    width: int = 0
    height: int = 0
    #: The last env step an action made: (obs, reward, terminated, truncated, info).
    last: tuple[Any, ...] | None = None
    #: The geometry of the last screenshot the model was given.
    display: Display | None = None

    @classmethod
    def fit(cls, env: Any, box: tuple[int, int] | None) -> Screen:
        """The screen scaled (never up) to fit ``box``; ``None``: full size. The frame's
        size is what the server delivers (it rounds), learned from one screenshot."""
        sw, sh = (int(v) for v in env.screen)
        scale = 1.0 if box is None else min(1.0, box[0] / sw, box[1] / sh)
        long_edge = 0 if scale >= 1.0 else max(1, int(max(sw, sh) * scale))
        me = cls(env, sw, sh, long_edge)
        me.png()
        return me

    def png(self) -> bytes:
        """A screenshot at the model's size, as PNG; later pixels map through its geometry."""
        obs = self.env.client.screenshot(self.env.env_id, max_long_edge=self.max_long_edge, encoding="png")
        self.display = Display.of(obs)
        self.width, self.height = int(obs.width), int(obs.height)
        data: bytes = obs.frame
        return data

    def png_base64(self) -> str:
        return base64.b64encode(self.png()).decode()

    def to_screen(self, x: Any, y: Any, what: str) -> tuple[int, int]:
        """A pixel of the model's frame on the screen; outside the frame is an error."""
        if self.display is None:
            self.png()
        assert self.display is not None
        return self.display.to_screen(x, y, what)

    def to_model(self, x: int, y: int) -> tuple[int, int]:
        """A screen pixel in the model's frame (the pointer's position, say)."""
        if self.display is None:
            self.png()
        assert self.display is not None
        return self.display.to_frame(x, y) or (x * self.width // self.screen_width, y * self.height // self.screen_height)

    def act(self, *actions: dict[str, Any]) -> tuple[Any, ...] | None:
        """Runs deskgym actions on the env; the last step's (obs, reward, terminated,
        truncated, info)."""
        for a in actions:
            self.last = self.env.step(a)
        return self.last

    @contextmanager
    def holding(self, keys: str) -> Iterator[None]:
        """``keys`` ("shift", "ctrl+alt") held down for the ``with`` body, released
        whatever happens in it."""
        self.act({"verb": "key_down", "keys": keys})
        try:
            yield
        finally:
            self.act({"verb": "key_up", "keys": keys})

    def pointer(self) -> tuple[int, int]:
        obs = self.env.client.screenshot(self.env.env_id, max_long_edge=16, encoding="png")
        return self.to_model(int(obs.pointer.x), int(obs.pointer.y))

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(seconds)
