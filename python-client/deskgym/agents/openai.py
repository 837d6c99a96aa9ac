"""OpenAI's computer-use tool (Responses API, ``computer_use_preview``) on a deskgym env:
the tool's definition, and each ``computer_call`` item's ``action`` run on the env,
answered with the ``computer_call_output`` item the API takes back.

    from deskgym.agents.openai import ComputerTool
    tool = ComputerTool(env)                     # env: deskgym.make(...), reset
    tools = [tool.definition()]                  # display_width/height: the frame's size
    ...                                          # for each computer_call item of the output:
    item = tool.run(call)                        # goes in the next request's input

``size=`` scales the screenshots down to fit a box (default: the screen as it is) and
coordinates are mapped back to the screen, so a click lands on what the model saw.
``keypress`` names (``"CTRL"``, ``"ENTER"``, ``"ARROWLEFT"``, ``"A"``) are mapped to X
keysyms; a ``scroll``'s pixels become wheel clicks of 100 pixels (at least one when not
0); ``wait`` waits 2 s, as OpenAI's sample applications do; ``keys`` on a pointer action
are held around it. The call's ``pending_safety_checks`` are acknowledged in the output
only when ``acknowledge`` says so: deciding is the harness's. An action the tool does not
allow raises :class:`~deskgym.errors.DeskgymError` (INVALID_ARGUMENT); nothing runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from deskgym.agents._screen import Screen
from deskgym.errors import DeskgymError

__all__ = ["ComputerTool", "keysym"]

#: Pixels of one wheel click (a scroll's ``scroll_x`` / ``scroll_y`` are pixels).
SCROLL_STEP_PX = 100
#: What a ``wait`` (which carries no duration) waits, seconds.
WAIT_S = 2.0
_BUTTONS = {"left": "left", "right": "right", "wheel": "middle"}
#: OpenAI's key names (as in its sample applications' key maps) -> X keysyms.
_KEYS = {
    "ctrl": "ctrl", "control": "ctrl", "alt": "alt", "option": "alt", "shift": "shift", "cmd": "super",
    "meta": "super", "super": "super", "win": "super", "enter": "Return", "return": "Return", "esc": "Escape",
    "escape": "Escape", "backspace": "BackSpace", "delete": "Delete", "del": "Delete", "tab": "Tab",
    "space": "space", "arrowup": "Up", "arrowdown": "Down", "arrowleft": "Left", "arrowright": "Right",
    "up": "Up", "down": "Down", "left": "Left", "right": "Right", "home": "Home", "end": "End",
    "pageup": "Prior", "pagedown": "Next", "insert": "Insert", "capslock": "Caps_Lock", "/": "slash",
    "\\": "backslash", "-": "minus", "=": "equal", ",": "comma", ".": "period", ";": "semicolon",
    "'": "apostrophe", "`": "grave", "[": "bracketleft", "]": "bracketright",
}


def keysym(name: str) -> str:
    """An OpenAI key name as an X keysym (``"ENTER"`` -> ``Return``, ``"A"`` -> ``a``,
    ``"F5"`` -> ``F5``)."""
    if not isinstance(name, str) or not name:
        raise DeskgymError("INVALID_ARGUMENT", f"keys: expected key names, got {name!r}", "keys")
    low = name.lower()
    if low in _KEYS:
        return _KEYS[low]
    if len(name) == 1:
        return low
    if low[0] == "f" and low[1:].isdigit():
        return "F" + low[1:]
    return name


def _clicks(px: Any, what: str) -> int:
    if isinstance(px, bool) or not isinstance(px, (int, float)):
        raise DeskgymError("INVALID_ARGUMENT", f"{what}: expected pixels, got {px!r}", what)
    if px == 0:
        return 0
    n = max(1, round(abs(px) / SCROLL_STEP_PX))
    return min(50, n) * (1 if px > 0 else -1)


class ComputerTool:
    """The computer tool of one env. ``size``: the box screenshots fit in (default: full
    size); ``environment``: what the definition tells the model; ``acknowledge``: given
    a call's pending safety checks, those to acknowledge (default: none)."""

    def __init__(self, env: Any, size: tuple[int, int] | None = None, environment: str = "linux",
                 acknowledge: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None) -> None:
        self.screen = Screen.fit(env, size)
        self.environment = environment
        self.acknowledge = acknowledge or (lambda checks: [])

    def definition(self) -> dict[str, Any]:
        """The tool as the Responses API's ``tools`` list takes it."""
        return {"type": "computer_use_preview", "display_width": self.screen.width,
                "display_height": self.screen.height, "environment": self.environment}

    def run(self, call: dict[str, Any]) -> dict[str, Any]:
        """Runs one ``computer_call`` item; the ``computer_call_output`` item: a screenshot
        after the action. A call carrying ``actions`` (the batch the GA ``computer``
        tool sends) runs them in order, then answers once."""
        batch = call.get("actions") if call.get("action") is None else [call.get("action")]
        if (call.get("type", "computer_call") != "computer_call" or not isinstance(batch, list) or not batch
                or not all(isinstance(a, dict) for a in batch)):
            raise DeskgymError("INVALID_ARGUMENT", "expected a computer_call item with an action", "action")
        for a in batch:
            self._act(a)
        out: dict[str, Any] = {"type": "computer_call_output", "call_id": call.get("call_id", ""),
                               "output": {"type": "input_image",
                                          "image_url": "data:image/png;base64," + self.screen.png_base64()}}
        acked = self.acknowledge(list(call.get("pending_safety_checks") or []))
        if acked:
            out["acknowledged_safety_checks"] = acked
        return out

    def _xy(self, a: dict[str, Any], what: str = "x, y") -> tuple[int, int]:
        return self.screen.to_screen(a.get("x"), a.get("y"), what)

    def _held(self, a: dict[str, Any], act: dict[str, Any]) -> None:
        keys = a.get("keys")
        if not keys:
            self.screen.act(act)
            return
        if not isinstance(keys, list):
            raise DeskgymError("INVALID_ARGUMENT", f"keys: expected a list of key names, got {keys!r}", "keys")
        with self.screen.holding("+".join(keysym(k) for k in keys)):
            self.screen.act(act)

    def _act(self, a: dict[str, Any]) -> None:
        kind, s = a.get("type"), self.screen
        if kind == "screenshot":
            return
        if kind in ("click", "double_click"):
            button = a.get("button", "left")
            if button not in _BUTTONS:
                raise DeskgymError("INVALID_ARGUMENT", f"button: {button!r} is not left, right or wheel (back and "
                                   "forward have no X button here)", "button")
            x, y = self._xy(a)
            self._held(a, {"verb": "click", "x": x, "y": y, "button": _BUTTONS[button],
                           "count": 2 if kind == "double_click" else 1})
        elif kind == "move":
            x, y = self._xy(a)
            self._held(a, {"verb": "move", "x": x, "y": y})
        elif kind == "drag":
            path = a.get("path")
            if not isinstance(path, list) or len(path) < 2 or not all(isinstance(p, dict) for p in path):
                raise DeskgymError("INVALID_ARGUMENT", "path: expected at least two {x, y} points", "path")
            pts = [s.to_screen(p.get("x"), p.get("y"), f"path[{i}]") for i, p in enumerate(path)]
            if len(pts) == 2:
                self._held(a, {"verb": "drag", "x": pts[0][0], "y": pts[0][1], "to_x": pts[1][0], "to_y": pts[1][1]})
            else:
                # Through every point of the path, the button held.
                s.act({"verb": "move", "x": pts[0][0], "y": pts[0][1]}, {"verb": "mouse_down"})
                try:
                    s.act(*({"verb": "move", "x": x, "y": y} for x, y in pts[1:]))
                finally:
                    s.act({"verb": "mouse_up"})
        elif kind == "keypress":
            keys = a.get("keys")
            if not isinstance(keys, list) or not keys:
                raise DeskgymError("INVALID_ARGUMENT", f"keys: expected a list of key names, got {keys!r}", "keys")
            s.act({"verb": "key", "keys": "+".join(keysym(k) for k in keys)})
        elif kind == "type":
            text = a.get("text")
            if not isinstance(text, str):
                raise DeskgymError("INVALID_ARGUMENT", f"text: expected a string, got {text!r}", "text")
            if text:
                s.act({"verb": "type_text", "text": text})
        elif kind == "scroll":
            x, y = self._xy(a)
            dx, dy = _clicks(a.get("scroll_x", 0), "scroll_x"), _clicks(a.get("scroll_y", 0), "scroll_y")
            self._held(a, {"verb": "scroll", "x": x, "y": y, "dx": dx, "dy": dy} if dx or dy
                       else {"verb": "move", "x": x, "y": y})
        elif kind == "wait":
            s.sleep(WAIT_S)
        else:
            raise DeskgymError("INVALID_ARGUMENT", f"type: {kind!r} is not a computer-use action", "type")
