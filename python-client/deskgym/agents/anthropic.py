"""Anthropic's computer-use tool (``computer_20250124``) on a deskgym env: the tool's
definition for the Messages API, and each ``tool_use`` block's ``input`` run on the env,
answered with the ``tool_result`` block the API takes back.

    from deskgym.agents.anthropic import ComputerTool
    tool = ComputerTool(env)                     # env: deskgym.make(...), reset
    tools = [tool.definition()]                  # display_width_px/height_px: the scaled size
    ...                                          # for each tool_use block of the reply:
    result = tool.run(block["input"], block["id"])   # append to the next user message

Screenshots are scaled down to fit 1280x800 (the resolution Anthropic recommends at most;
``size=`` to choose), and every coordinate the model gives is mapped back to the screen
(``floor(p * screen / frame)``), so a click lands on what the model saw. Keys take
xdotool's syntax, as the tool's description tells the model (``"ctrl+s"``, ``"Return"``,
several separated by spaces). An input the tool does not allow is answered with
``is_error`` and a message the model can act on; nothing runs.
"""

from __future__ import annotations

from typing import Any

from deskgym.agents._screen import Screen
from deskgym.errors import DeskgymError

__all__ = ["ComputerTool", "TOOL_TYPE"]

#: The tool version this adapter speaks.
TOOL_TYPE = "computer_20250124"
#: The largest screenshot Anthropic recommends (WXGA).
DEFAULT_BOX = (1280, 800)
#: The limits Anthropic's documentation gives `hold_key` and `wait` durations, seconds.
MAX_DURATION_S = 100.0
_BUTTONS = {"left_click": "left", "right_click": "right", "middle_click": "middle"}
_CLICKS = {"double_click": 2, "triple_click": 3}
_SCROLL = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}


def _text(v: Any, what: str) -> str:
    if not isinstance(v, str) or not v:
        raise DeskgymError("INVALID_ARGUMENT", f"{what}: expected a non-empty string, got {v!r}", what)
    return v


def _keys(text: str) -> list[str]:
    """xdotool's key syntax: chords joined by '+', several separated by spaces."""
    return [k for k in text.split() if k]


class ComputerTool:
    """The ``computer`` tool of one env. ``size``: the box screenshots fit in (default
    1280x800); ``display_number`` goes in the definition as Anthropic's does."""

    def __init__(self, env: Any, size: tuple[int, int] | None = DEFAULT_BOX, display_number: int | None = None,
                 name: str = "computer") -> None:
        self.screen = Screen.fit(env, size)
        self.name = name
        self.display_number = display_number

    def definition(self) -> dict[str, Any]:
        """The tool as the Messages API's ``tools`` list takes it."""
        d: dict[str, Any] = {"type": TOOL_TYPE, "name": self.name, "display_width_px": self.screen.width,
                             "display_height_px": self.screen.height}
        if self.display_number is not None:
            d["display_number"] = self.display_number
        return d

    def run(self, tool_input: dict[str, Any], tool_use_id: str) -> dict[str, Any]:
        """Runs one ``tool_use`` input; the ``tool_result`` block: a screenshot after the
        action (text for ``cursor_position``), or ``is_error`` with the reason."""
        try:
            content = self._run(tool_input)
        except DeskgymError as e:
            return {"type": "tool_result", "tool_use_id": tool_use_id, "is_error": True,
                    "content": [{"type": "text", "text": e.message}]}
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}

    def _image(self) -> list[dict[str, Any]]:
        return [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": self.screen.png_base64()}}]

    def _at(self, inp: dict[str, Any], key: str = "coordinate") -> tuple[int, int]:
        c = inp.get(key)
        if not isinstance(c, (list, tuple)) or len(c) != 2:
            raise DeskgymError("INVALID_ARGUMENT", f"{key}: expected [x, y], got {c!r}", key)
        return self.screen.to_screen(c[0], c[1], key)

    def _duration(self, inp: dict[str, Any]) -> float:
        d = inp.get("duration")
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= MAX_DURATION_S:
            raise DeskgymError("INVALID_ARGUMENT", f"duration: expected seconds in 0..{MAX_DURATION_S:g}, got {d!r}",
                               "duration")
        return float(d)

    def _run(self, inp: dict[str, Any]) -> list[dict[str, Any]]:
        action = inp.get("action")
        s = self.screen
        if action == "screenshot":
            return self._image()
        if action == "cursor_position":
            x, y = s.pointer()
            return [{"type": "text", "text": f"X={x},Y={y}"}]
        if action == "key":
            s.act(*({"verb": "key", "keys": k} for k in _keys(_text(inp.get("text"), "text"))))
        elif action == "hold_key":
            keys, seconds = _text(inp.get("text"), "text"), self._duration(inp)
            with s.holding(keys):
                s.sleep(seconds)
        elif action == "type":
            s.act({"verb": "type_text", "text": _text(inp.get("text"), "text")})
        elif action == "mouse_move":
            x, y = self._at(inp)
            s.act({"verb": "move", "x": x, "y": y})
        elif action in ("left_mouse_down", "left_mouse_up"):
            verb = "mouse_down" if action == "left_mouse_down" else "mouse_up"
            s.act({"verb": verb, **self._maybe_at(inp)})
        elif action in _BUTTONS or action in _CLICKS:
            self._with_modifiers(inp, {"verb": "click", "button": _BUTTONS.get(action, "left"),
                                       "count": _CLICKS.get(action, 1), **self._maybe_at(inp)})
        elif action == "left_click_drag":
            (x0, y0), (x1, y1) = self._at(inp, "start_coordinate"), self._at(inp)
            s.act({"verb": "drag", "x": x0, "y": y0, "to_x": x1, "to_y": y1})
        elif action == "scroll":
            x, y = self._at(inp)
            direction, amount = inp.get("scroll_direction"), inp.get("scroll_amount")
            if direction not in _SCROLL:
                raise DeskgymError("INVALID_ARGUMENT", f"scroll_direction: expected up, down, left or right, got "
                                   f"{direction!r}", "scroll_direction")
            if isinstance(amount, bool) or not isinstance(amount, int) or not 0 <= amount <= 50:
                raise DeskgymError("INVALID_ARGUMENT", f"scroll_amount: expected wheel clicks in 0..50, got {amount!r}",
                                   "scroll_amount")
            ux, uy = _SCROLL[direction]
            self._with_modifiers(inp, {"verb": "scroll", "x": x, "y": y, "dx": ux * amount, "dy": uy * amount})
        elif action == "wait":
            s.sleep(self._duration(inp))
        else:
            raise DeskgymError("INVALID_ARGUMENT", f"action: {action!r} is not an action of {TOOL_TYPE}", "action")
        return self._image()

    def _with_modifiers(self, inp: dict[str, Any], act: dict[str, Any]) -> None:
        """``act`` with the keys of ``text`` ("shift", "ctrl+alt") held, as the tool
        lets a click or scroll hold them."""
        mods = inp.get("text")
        if not mods:
            self.screen.act(act)
            return
        with self.screen.holding(_text(mods, "text")):
            self.screen.act(act)

    def _maybe_at(self, inp: dict[str, Any]) -> dict[str, Any]:
        if inp.get("coordinate") is None:
            return {}
        x, y = self._at(inp)
        return {"x": x, "y": y}
