"""Frame geometry (ACI's ``display``): from a pixel of the frame a model saw to the screen.

Every observation carries where its pixels come from: the screen's size, the part of the
screen it shows (a window, clipped to the screen) and the size it was delivered at (after
``max_long_edge``). Actions stay in screen pixels; a model that points at a pixel of a
scaled or window-scoped frame is mapped back through the frame it saw, never through a
size guessed from the image::

    obs = client.screenshot(env_id, scope="active_window", max_long_edge=640)
    d = Display.of(obs)
    x, y = d.to_screen(120, 48)            # the model's click, on the screen
    client.step(env_id, to_proto({"verb": "click", "x": x, "y": y}))

A delivered pixel ``p`` is the screen point ``source_origin + floor(p * source_size /
delivered_size)`` on each axis; a normalised ``n`` in [0, 1] is ``source_origin +
round(n * (source_size - 1))``, so 1.0 is the last pixel of the source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deskgym.errors import DeskgymError
from deskgym.v1 import deskgym_pb2 as pb

__all__ = ["Display", "to_screen"]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class Display:
    """Where one frame's pixels come from on the screen."""

    #: The screen: the space of pixel actions.
    screen_width: int
    screen_height: int
    #: The source rectangle on the screen (before scaling).
    x: int
    y: int
    width: int
    height: int
    #: The frame's own size.
    delivered_width: int
    delivered_height: int
    #: Device pixels per screen pixel (1 on X11).
    dpr: float = 1.0

    @classmethod
    def of(cls, obs: pb.Observation) -> Display:
        """The geometry of ``obs`` (a Step's, Reset's, Observe's or Screenshot's
        observation). A frame without one (a frame fetched by hash, an older server) is
        an error: a click is never guessed from the image's size."""
        if not obs.HasField("display"):
            raise DeskgymError(
                "FAILED_PRECONDITION",
                "this observation has no frame geometry (a frame by hash, or a server older than "
                "deskgym 0.1 with ACI geometry); pass the observation the model saw",
                "display",
            )
        g = obs.display
        r = g.source_rect
        return cls(g.screen_width, g.screen_height, r.x, r.y, r.width, r.height,
                   g.delivered_width, g.delivered_height, g.dpr or 1.0)

    @property
    def whole(self) -> bool:
        """The frame is the whole screen at full size (the mapping is the identity)."""
        return (self.x, self.y, self.width, self.height) == (0, 0, self.screen_width, self.screen_height) and (
            self.delivered_width, self.delivered_height) == (self.width, self.height)

    def to_screen(self, px: Any, py: Any, what: str = "point") -> tuple[int, int]:
        """The screen pixel under the frame's pixel (px, py); outside the frame is an
        error naming ``what``."""
        if not (_number(px) and _number(py)):
            raise DeskgymError("INVALID_ARGUMENT", f"{what}: expected two numbers, got {px!r}, {py!r}", what)
        if not (0 <= px < self.delivered_width and 0 <= py < self.delivered_height):
            raise DeskgymError(
                "INVALID_ARGUMENT",
                f"{what} ({px}, {py}) is outside the {self.delivered_width}x{self.delivered_height} frame",
                what,
            )
        return (self.x + int(px) * self.width // self.delivered_width,
                self.y + int(py) * self.height // self.delivered_height)

    def to_screen_norm(self, nx: Any, ny: Any, what: str = "point") -> tuple[int, int]:
        """The screen pixel at normalised (nx, ny) of the frame (1.0: its last pixel)."""
        if not (_number(nx) and _number(ny) and 0 <= nx <= 1 and 0 <= ny <= 1):
            raise DeskgymError("INVALID_ARGUMENT", f"{what}: ({nx!r}, {ny!r}) is not two numbers in [0, 1]", what)
        return self.x + round(nx * (self.width - 1)), self.y + round(ny * (self.height - 1))

    def map_action(self, action: dict[str, Any]) -> dict[str, Any]:
        """A dict action (:func:`deskgym.to_proto`'s form) whose ``x``, ``y`` and
        ``to_x``, ``to_y`` are pixels of this frame, with them on the screen."""
        out = dict(action)
        for kx, ky in (("x", "y"), ("to_x", "to_y")):
            if kx in out or ky in out:
                out[kx], out[ky] = self.to_screen(out.get(kx), out.get(ky), kx.replace("x", "point"))
        return out

    def to_frame(self, sx: int, sy: int) -> tuple[int, int] | None:
        """A screen pixel in the frame's pixels (the one whose span holds it); ``None``
        outside the source rectangle."""
        px, py = sx - self.x, sy - self.y
        if not (0 <= px < self.width and 0 <= py < self.height):
            return None
        return (min(self.delivered_width - 1, ((px + 1) * self.delivered_width - 1) // self.width),
                min(self.delivered_height - 1, ((py + 1) * self.delivered_height - 1) // self.height))


def to_screen(obs: pb.Observation, px: Any, py: Any) -> tuple[int, int]:
    """The screen pixel under pixel (px, py) of the frame ``obs`` delivered."""
    return Display.of(obs).to_screen(px, py)
