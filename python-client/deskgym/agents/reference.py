"""Two reference agents for the bundled tasks: a random one, and a scripted one that
finds its targets in the pixels (no privileged state; the instruction text is the only
non-pixel input, as it is for any VLM agent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

#: Colours the bundled tasks draw with (see env-worker/src/families/task_app/tasks/mod.rs).
RED = (0xD6, 0x28, 0x28)
ORANGE = (0xF7, 0x7F, 0x00)
GREEN = (0x2A, 0x9D, 0x8F)
FIELD = (0xFC, 0xFC, 0xFC)
WHITE = (0xFF, 0xFF, 0xFF)
BLACK = (0x00, 0x00, 0x00)
#: Height of the instruction bar; its text starts at x = 8.
BAR_HEIGHT = 32
BAR_TEXT_X = 8


def mask(frame: np.ndarray, rgb: tuple[int, int, int]) -> np.ndarray:
    """Boolean (H, W) mask of the pixels of exactly ``rgb``."""
    return np.asarray(np.all(frame == np.array(rgb, dtype=np.uint8), axis=-1))


def centroid(m: np.ndarray) -> tuple[int, int] | None:
    ys, xs = np.nonzero(m)
    return (int(xs.mean()), int(ys.mean())) if len(xs) else None


class RandomAgent:
    """Samples the env's action space."""

    name = "random"

    def __init__(self, action_space: spaces.Space[Any], seed: int = 0) -> None:
        self.space = action_space
        self.space.seed(seed)

    def act(self, frame: np.ndarray, info: dict[str, Any]) -> Any:
        return self.space.sample()


class PixelAgent:
    """Solves the bundled tasks from the frame: colour masks for targets, and for
    click-button a glyph template cut from the instruction bar and matched against the
    button labels (the bar and the buttons use the same fixed-width font)."""

    name = "scripted"

    def act(self, frame: np.ndarray, info: dict[str, Any]) -> dict[str, Any]:
        solve = self.SOLVERS.get(info["task"])
        if solve is None:
            return {"verb": "noop"}
        return solve(self, frame, int(info["step_index"]), str(info["instruction"]))

    def _click_target(self, frame: np.ndarray, step: int, instr: str) -> dict[str, Any]:
        return self._click(centroid(mask(frame, RED)))

    def _drag_to_zone(self, frame: np.ndarray, step: int, instr: str) -> dict[str, Any]:
        item, zone = centroid(mask(frame, ORANGE)), centroid(mask(frame, GREEN))
        if item is None or zone is None:
            return {"verb": "noop"}
        return {"verb": "drag", "x": item[0], "y": item[1], "to_x": zone[0], "to_y": zone[1]}

    def _type_word(self, frame: np.ndarray, step: int, instr: str) -> dict[str, Any]:
        word = instr.split('"')[1] if instr.count('"') >= 2 else ""
        phase = [self._click(centroid(mask(frame, FIELD))), {"verb": "type_text", "text": word or "?"},
                 {"verb": "key", "keys": "Return"}]
        return phase[min(step, 2)]

    def _click_button(self, frame: np.ndarray, step: int, instr: str) -> dict[str, Any]:
        label = instr.split('"')[1] if instr.count('"') >= 2 else ""
        return self._click(find_label(frame, instr, label))

    #: Bundled task id -> its solver (``blank`` has no goal to solve). The keys are task
    #: ids of :data:`deskgym.tasks.BUNDLED`; tests/test_tasks.py holds them to it.
    SOLVERS: ClassVar[dict[str, Callable[[PixelAgent, np.ndarray, int, str], dict[str, Any]]]] = {
        "click-target": _click_target,
        "click-button": _click_button,
        "drag-to-zone": _drag_to_zone,
        "type-word": _type_word,
    }

    @staticmethod
    def _click(at: tuple[int, int] | None) -> dict[str, Any]:
        return {"verb": "click", "x": at[0], "y": at[1]} if at else {"verb": "noop"}


def _crop(m: np.ndarray) -> tuple[np.ndarray, int, int] | None:
    ys, xs = np.nonzero(m)
    if not len(xs):
        return None
    return m[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1], int(ys.min()), int(xs.min())


def find_label(frame: np.ndarray, instruction: str, label: str) -> tuple[int, int] | None:
    """Centre of the button text that matches ``label`` as drawn in the instruction bar."""
    if not label or label not in instruction:
        return None
    bar_ink = mask(frame[:BAR_HEIGHT], WHITE)
    cols = np.nonzero(bar_ink.any(axis=0))[0]
    if not len(cols):
        return None
    # Fixed-width font: the bar's ink spans the whole instruction.
    char_w = round((cols.max() + 1 - BAR_TEXT_X) / len(instruction))
    x0 = BAR_TEXT_X + instruction.index(label) * char_w
    cropped = _crop(bar_ink[:, x0 : x0 + len(label) * char_w])
    if cropped is None:
        return None
    template = cropped[0]
    th, tw = template.shape
    ty, tx = (int(v[0]) for v in np.nonzero(template))  # first ink pixel, raster order
    body = frame[BAR_HEIGHT:]
    ink = mask(body, BLACK)
    seen: set[tuple[int, int]] = set()
    for y, x in zip(*np.nonzero(ink)):
        top, left = int(y) - ty, int(x) - tx
        if (top, left) in seen or top < 0 or left < 0:
            continue
        seen.add((top, left))
        window = ink[top : top + th, left : left + tw]
        if window.shape == template.shape and np.array_equal(window, template):
            return left + tw // 2, BAR_HEIGHT + top + th // 2
    return None
