"""Action and observation modes that RL libraries accept as they are.

The full action space (``action_mode="dict"``) is a ``Dict`` with a ``Text`` inside:
right for agents, refused by SB3, RLlib and CleanRL. The other modes map a flat space
onto deskgym actions:

- ``"click_grid"``: ``Discrete(cols * rows)``; action ``i`` clicks the centre of grid
  cell ``(i % cols, i // cols)``. ``grid=(cols, rows)``, default ``(8, 6)``.
- ``"pointer"``: ``Box(0, 1, (3,), float32)``: normalised ``x``, ``y`` and a verb
  selector whose range [0, 1] is cut into equal parts, one per verb of
  :data:`POINTER_VERBS` (SB3's PPO/SAC and RLlib take a flat Box).
- ``"multi_discrete"``: ``MultiDiscrete([cols, rows, len(MD_VERBS)])``: a grid cell and
  a mouse or keyboard verb from :data:`MD_VERBS` (keys act wherever the focus is).

Observation formats (``obs_format=``): ``"uint8_hwc"`` (default, the raw frame) or
``"float32_chw"`` (channels first, scaled to [0, 1]: what PyTorch convolutions and
RLlib's default models expect). Both apply to ``obs_type="rgb"`` only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from deskgym.actions import SPACE_KEYS, action_space
from deskgym.errors import DeskgymError

#: Action modes accepted by ``make``/``make_vec``.
ACTION_MODES = ("dict", "click_grid", "pointer", "multi_discrete")
#: Observation formats accepted by ``make``/``make_vec``.
OBS_FORMATS = ("uint8_hwc", "float32_chw")
#: Verbs of the ``pointer`` mode, in the order the selector's range is cut.
POINTER_VERBS = ("move", "click", "double_click", "right_click")
#: Verbs of the ``multi_discrete`` mode.
MD_VERBS = ("noop", "click", "double_click", "right_click", "move", "scroll_up", "scroll_down") + tuple(
    f"key:{k}" for k in SPACE_KEYS
)

DEFAULT_GRID = (8, 6)


class ActionMode:
    """A Gymnasium action space for one screen size and its mapping to deskgym actions."""

    def __init__(self, mode: str, width: int, height: int, grid: tuple[int, int] = DEFAULT_GRID) -> None:
        if mode not in ACTION_MODES:
            raise DeskgymError("INVALID_ARGUMENT", f"action_mode {mode!r} is not one of {', '.join(ACTION_MODES)}")
        cols, rows = (int(grid[0]), int(grid[1]))
        if not (1 <= cols <= width and 1 <= rows <= height):
            raise DeskgymError("INVALID_ARGUMENT", f"grid {grid!r} must be at least 1x1 and at most {width}x{height}")
        self.mode = mode
        self.width, self.height = width, height
        self.cols, self.rows = cols, rows
        self.space: spaces.Space[Any]
        if mode == "dict":
            self.space = action_space(width, height)
        elif mode == "click_grid":
            self.space = spaces.Discrete(cols * rows)
        elif mode == "pointer":
            self.space = spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32)
        else:
            self.space = spaces.MultiDiscrete([cols, rows, len(MD_VERBS)])

    def _cell(self, col: int, row: int) -> tuple[int, int]:
        """The pixel at the centre of grid cell (col, row)."""
        x = (2 * col + 1) * self.width // (2 * self.cols)
        y = (2 * row + 1) * self.height // (2 * self.rows)
        return x, y

    def to_action(self, a: Any) -> Any:
        """A sample of :attr:`space` -> an action deskgym's ``to_proto`` accepts."""
        if self.mode == "dict":
            return a
        if self.mode == "click_grid":
            i = int(a)
            if not 0 <= i < self.cols * self.rows:
                raise DeskgymError("INVALID_ARGUMENT", f"action: {i} is outside 0..{self.cols * self.rows - 1}")
            x, y = self._cell(i % self.cols, i // self.cols)
            return {"verb": "click", "x": x, "y": y}
        if self.mode == "pointer":
            v = np.clip(np.asarray(a, dtype=np.float64).reshape(-1), 0.0, 1.0)
            if v.shape != (3,):
                raise DeskgymError("INVALID_ARGUMENT", f"action: expected 3 numbers (x, y, verb), got shape {v.shape}")
            verb = POINTER_VERBS[min(int(v[2] * len(POINTER_VERBS)), len(POINTER_VERBS) - 1)]
            return {"verb": verb, "nx": float(v[0]), "ny": float(v[1])}
        col, row, k = (int(t) for t in np.asarray(a).reshape(-1)[:3])
        x, y = self._cell(min(max(col, 0), self.cols - 1), min(max(row, 0), self.rows - 1))
        verb = MD_VERBS[min(max(k, 0), len(MD_VERBS) - 1)]
        if verb.startswith("key:"):
            return {"verb": "key", "keys": verb[4:]}
        if verb in ("scroll_up", "scroll_down"):
            return {"verb": "scroll", "x": x, "y": y, "dy": -3 if verb == "scroll_up" else 3}
        if verb == "noop":
            return {"verb": "noop"}
        return {"verb": verb, "x": x, "y": y}


def obs_space(fmt: str, space: spaces.Space[Any]) -> spaces.Space[Any]:
    """The observation space of ``fmt`` given the raw (H, W, 3) uint8 space."""
    if fmt not in OBS_FORMATS:
        raise DeskgymError("INVALID_ARGUMENT", f"obs_format {fmt!r} is not one of {', '.join(OBS_FORMATS)}")
    if fmt == "uint8_hwc":
        return space
    if not isinstance(space, spaces.Box) or space.dtype != np.uint8:
        raise DeskgymError("INVALID_ARGUMENT", "obs_format 'float32_chw' needs obs_type='rgb'")
    h, w, c = space.shape
    return spaces.Box(0.0, 1.0, shape=(c, h, w), dtype=np.float32)


def convert_obs(fmt: str, frame: Any) -> Any:
    """One frame in ``fmt`` (the uint8 HWC frame itself for the default)."""
    if fmt == "uint8_hwc":
        return frame
    return np.ascontiguousarray(np.transpose(frame, (2, 0, 1)), dtype=np.float32) / np.float32(255.0)
