"""pyautogui code as deskgym actions.

OSWorld runs an agent's pyautogui code with ``python -c`` inside the VM: a new Python
process, an X connection and pyautogui's import for every step. Code made only of
pyautogui calls with literal arguments (``pyautogui.click(100, 200)``,
``pyautogui.hotkey('ctrl', 's')``, ``time.sleep(1)``...) means the same as a short list
of deskgym actions, which run without any of that. :func:`translate` returns that list,
or ``None`` for anything else (variables, loops, other modules, a call it cannot map
exactly), which then runs inside the desktop as OSWorld runs it.
"""

from __future__ import annotations

import ast
from typing import Any

__all__ = ["Sleep", "translate"]

#: pyautogui key names that differ from deskgym's (X keysym names and aliases).
_KEYS = {
    "ctrlleft": "Control_L", "ctrlright": "Control_R", "altleft": "Alt_L", "altright": "Alt_R",
    "shiftleft": "Shift_L", "shiftright": "Shift_R", "winleft": "Super_L", "winright": "Super_R",
    "command": "super", "option": "alt", "optionleft": "Alt_L", "optionright": "Alt_R",
    "prtsc": "Print", "prtscr": "Print", "print": "Print", "printscreen": "Print",
    "volumemute": "XF86AudioMute", "volumeup": "XF86AudioRaiseVolume", "volumedown": "XF86AudioLowerVolume",
    "playpause": "XF86AudioPlay", "nexttrack": "XF86AudioNext", "prevtrack": "XF86AudioPrev",
    "+": "plus", "\n": "Return", "\r": "Return", "\t": "Tab", " ": "space",
    "numlock": "Num_Lock", "scrolllock": "Scroll_Lock", "pause": "Pause", "apps": "Menu",
    **{f"num{i}": f"KP_{i}" for i in range(10)},
}
#: Names deskgym knows as they are (case-insensitive aliases and keysyms).
_SAME = {
    "ctrl", "control", "alt", "shift", "super", "win", "enter", "return", "esc", "escape", "backspace",
    "del", "delete", "pageup", "pgup", "pagedown", "pgdn", "left", "right", "up", "down", "home", "end",
    "tab", "space", "insert", "capslock", "menu", *(f"f{i}" for i in range(1, 25)),
}


class Sleep(float):
    """Seconds the harness waits between two actions (``time.sleep``)."""


def key(name: Any) -> str | None:
    """pyautogui's key name -> deskgym's, or ``None`` when unsure."""
    if not isinstance(name, str) or not name:
        return None
    low = name.lower()
    if name in _KEYS or low in _KEYS:
        return _KEYS.get(name, _KEYS.get(low))
    if low in _SAME:
        return low
    if len(name) == 1 and name.isprintable():
        return name
    return None


def _point(args: list[Any], kw: dict[str, Any]) -> tuple[int, int] | None:
    x, y = kw.get("x"), kw.get("y")
    if args:
        if isinstance(args[0], (tuple, list)) and len(args[0]) == 2:
            x, y = args[0]
        elif len(args) >= 2:
            x, y = args[0], args[1]
    if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
        return round(x), round(y)
    return None


def _call(fn: str, args: list[Any], kw: dict[str, Any]) -> list[Any] | None:
    """One pyautogui call as deskgym action dicts, or ``None``."""
    button = kw.get("button", "left")
    if button not in ("left", "middle", "right", "primary", "secondary"):
        return None
    button = {"primary": "left", "secondary": "right"}.get(button, button)
    if fn in ("click", "doubleClick", "rightClick", "middleClick", "tripleClick", "moveTo", "mouseDown", "mouseUp"):
        p = _point(args, kw)
        if p is None and fn not in ("mouseDown", "mouseUp"):
            return None  # at the current position: pyautogui knows it, we would have to ask
        at = {"x": p[0], "y": p[1]} if p else {}
        if fn == "moveTo":
            return [{"verb": "move", **at}]
        if fn in ("mouseDown", "mouseUp"):
            return [{"verb": "mouse_down" if fn == "mouseDown" else "mouse_up", "button": button, **at}]
        count = {"doubleClick": 2, "tripleClick": 3}.get(fn, kw.get("clicks", 1))
        if fn == "rightClick":
            button = "right"
        elif fn == "middleClick":
            button = "middle"
        if not isinstance(count, int) or not 1 <= count <= 3:
            return None
        return [{"verb": "click", "button": button, "count": count, **at}]
    if fn in ("scroll", "vscroll", "hscroll"):
        clicks = args[0] if args else kw.get("clicks")
        p = _point(args[1:], kw)
        if not isinstance(clicks, int) or p is None or abs(clicks) > 50:
            return None
        # pyautogui: positive scrolls up (vertical) / right (horizontal).
        d = {"dx": clicks, "dy": 0} if fn == "hscroll" else {"dx": 0, "dy": -clicks}
        return [{"verb": "scroll", "x": p[0], "y": p[1], **d}]
    if fn in ("write", "typewrite"):
        msg = args[0] if args else kw.get("message")
        if isinstance(msg, str):
            return [{"verb": "type_text", "text": msg}] if msg else []
        if isinstance(msg, list):
            keys = [key(k) for k in msg]
            return None if None in keys else [{"verb": "key", "keys": k} for k in keys]
        return None
    if fn == "press":
        names = args[0] if args else kw.get("keys")
        presses = kw.get("presses", args[1] if len(args) > 1 else 1)
        names = [names] if isinstance(names, str) else names
        if not isinstance(names, list) or not isinstance(presses, int) or not 0 <= presses <= 100:
            return None
        keys = [key(k) for k in names]
        return None if None in keys else [{"verb": "key", "keys": k} for k in keys for _ in range(presses)]
    if fn == "hotkey":
        keys = [key(k) for k in args]
        return None if not keys or None in keys else [{"verb": "key", "keys": "+".join(k for k in keys if k)}]
    if fn in ("keyDown", "keyUp"):
        k = key(args[0] if args else kw.get("key"))
        return None if k is None else [{"verb": "key_down" if fn == "keyDown" else "key_up", "keys": k}]
    return None


def translate(code: str) -> list[Any] | None:
    """Action dicts and :class:`Sleep`\\ s for pure pyautogui code, else ``None``."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    out: list[Any] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if all(a.name in ("pyautogui", "time") for a in stmt.names) and not getattr(stmt, "module", None):
                continue
            return None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            # `pyautogui.FAILSAFE = False` and the like change nothing here.
            t = stmt.targets[0]
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "pyautogui" and t.attr in ("FAILSAFE", "PAUSE"):
                continue
            return None
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            return None
        call = stmt.value
        f = call.func
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
            return None
        try:
            args = [ast.literal_eval(a) for a in call.args]
            kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg is not None}
        except (ValueError, SyntaxError, TypeError):
            return None
        if len(kw) != len(call.keywords):
            return None
        if f.value.id == "time" and f.attr == "sleep" and len(args) == 1 and isinstance(args[0], (int, float)):
            out.append(Sleep(max(0.0, float(args[0]))))
            continue
        if f.value.id != "pyautogui":
            return None
        acts = _call(f.attr, args, kw)
        if acts is None:
            return None
        out.extend(acts)
    return out
