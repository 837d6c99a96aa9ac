"""Actions: the plain dict forms users write, the Gymnasium action space, and their
conversion to the wire ``Action``.

Dict forms (pixels ``x``/``y`` or normalised ``nx``/``ny`` in [0, 1]):

- ``{"verb": "click", "x": 100, "y": 200}`` (optional ``button``: left/middle/right,
  ``count``: 1..3), also ``double_click``, ``right_click``, ``move``
- ``{"verb": "drag", "x": 10, "y": 10, "to_x": 200, "to_y": 150}``
- ``{"verb": "scroll", "x": 10, "y": 10, "dx": 0, "dy": 3}`` (wheel clicks; with
  ``"pixels": True``, pixels as ACI has them, sent as clicks of 100 px)
- ``{"verb": "mouse_down"}`` / ``{"verb": "mouse_up"}`` (optional position, ``button``)
- ``{"verb": "type_text", "text": "hello"}``, ``{"verb": "key", "keys": "ctrl+s"}``
- ``{"verb": "wait", "ms": 100}``, ``{"verb": "noop"}``
- ``{"verb": "launch_app", "app": "terminal"}`` (an app of the profile; with the
  ``exec`` grant also a program name on PATH or an absolute path, ``args`` verbatim)
- ``{"verb": "activate_window", "window": id}`` or ``{"verb": "activate_window",
  "app": "Text Editor"}`` (the first window whose title contains it); also
  ``close_window``, ``move_window``, ``resize_window`` by id

Wherever a position goes, an element of the accessibility tree may go instead:
``"ref": "e12"`` (a ref from :meth:`DeskgymEnv.observe` with ``structured=True``), or
``"element": {"role": "push button", "name": "Save"}`` (resolved against the live tree);
a drag's end is ``to_ref`` / ``to_element``. Element verbs:
``{"verb": "invoke_action", "ref": "e12", "action": "click"}`` and
``{"verb": "set_value", "ref": "e7", "value": "hello"}``.

Samples of :func:`action_space` carry ``verb`` as an index into :data:`SPACE_VERBS`.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from gymnasium import spaces

from deskgym.errors import DeskgymError
from deskgym.v1 import deskgym_pb2 as pb

#: Verbs a sample of :func:`action_space` can hold (index = ``sample["verb"]``).
SPACE_VERBS = ("click", "double_click", "right_click", "move", "drag", "scroll", "type_text", "key", "noop")
#: Keys a sample can press (index = ``sample["key"]``).
SPACE_KEYS = ("Return", "BackSpace", "Tab", "Escape", "space", "Left", "Right", "Up", "Down", "ctrl+a")

_BUTTONS: dict[str | int | None, pb.MouseButton] = {
    None: pb.MOUSE_BUTTON_UNSPECIFIED,
    "left": pb.MOUSE_BUTTON_LEFT,
    "middle": pb.MOUSE_BUTTON_MIDDLE,
    "right": pb.MOUSE_BUTTON_RIGHT,
    1: pb.MOUSE_BUTTON_LEFT,
    2: pb.MOUSE_BUTTON_MIDDLE,
    3: pb.MOUSE_BUTTON_RIGHT,
}


def action_space(width: int, height: int) -> spaces.Dict:
    """A space whose every sample is a valid action on a ``width`` x ``height`` screen."""
    return spaces.Dict(
        {
            "verb": spaces.Discrete(len(SPACE_VERBS)),
            "x": spaces.Discrete(width),
            "y": spaces.Discrete(height),
            "to_x": spaces.Discrete(width),
            "to_y": spaces.Discrete(height),
            "dx": spaces.Discrete(11, start=-5),
            "dy": spaces.Discrete(11, start=-5),
            "text": spaces.Text(min_length=1, max_length=12, charset=string.ascii_lowercase),
            "key": spaces.Discrete(len(SPACE_KEYS)),
        }
    )


def _bad(field: str, msg: str) -> DeskgymError:
    return DeskgymError("INVALID_ARGUMENT", f"action.{field}: {msg}")


def _element(a: Mapping[str, Any], ref: str, element: str, field: str) -> pb.Target | None:
    if ref in a:
        return pb.Target(element_ref=str(a[ref]))
    if element in a:
        q = a[element]
        if not isinstance(q, Mapping) or not ("name" in q or "role" in q):
            raise _bad(field, f"{element!r} takes {{'role': ..., 'name': ...}} (either or both)")
        return pb.Target(element=pb.ElementQuery(role=str(q.get("role", "")), name=str(q.get("name", ""))))
    return None


def _target(a: Mapping[str, Any], x: str, y: str, field: str, required: bool = True) -> pb.Target | None:
    prefix = "to_" if x.startswith("to_") else ""
    by_element = _element(a, prefix + "ref", prefix + "element", field)
    if by_element is not None:
        return by_element
    nx, ny = "n" + x, "n" + y
    if x in a or y in a:
        if x not in a or y not in a:
            raise _bad(field, f"give both {x!r} and {y!r}")
        return pb.Target(point_px=pb.PointPx(x=int(a[x]), y=int(a[y])))
    if nx in a or ny in a:
        if nx not in a or ny not in a:
            raise _bad(field, f"give both {nx!r} and {ny!r}")
        return pb.Target(point_norm=pb.PointNorm(x=float(a[nx]), y=float(a[ny])))
    if required:
        raise _bad(
            field,
            f"missing position: give {x!r}/{y!r} in pixels, {nx!r}/{ny!r} in [0, 1], "
            f"{prefix + 'ref'!r} (an element ref) or {prefix + 'element'!r} ({{'role', 'name'}})",
        )
    return None


def _button(a: Mapping[str, Any]) -> pb.MouseButton:
    b = a.get("button")
    b = b.lower() if isinstance(b, str) else (int(b) if b is not None else None)
    if b not in _BUTTONS:
        raise _bad("button", f"{a.get('button')!r} is not left, middle or right")
    return _BUTTONS[b]


def to_proto(action: Any) -> pb.Action:
    """Converts a dict form, a space sample or a ``pb.Action`` into a ``pb.Action``.

    Shape errors raise :class:`DeskgymError` (``INVALID_ARGUMENT``) here; range checks
    against the screen happen on the server, which knows its size.
    """
    if isinstance(action, pb.Action):
        return action
    if not isinstance(action, Mapping):
        raise _bad("verb", f"expected a dict with a 'verb' key, got {type(action).__name__}")
    verb = action.get("verb")
    if verb is None:
        raise _bad("verb", "missing 'verb'")
    if not isinstance(verb, str):
        i = int(verb)
        if not 0 <= i < len(SPACE_VERBS):
            raise _bad("verb", f"index {i} is outside 0..{len(SPACE_VERBS) - 1}")
        verb = SPACE_VERBS[i]
        if verb == "key":
            action = {**action, "keys": SPACE_KEYS[int(action.get("key", 0)) % len(SPACE_KEYS)]}
    a = action
    if verb == "click":
        return pb.Action(click=pb.Click(target=_target(a, "x", "y", "click.target"), button=_button(a), count=int(a.get("count", 1))))
    if verb == "double_click":
        return pb.Action(double_click=pb.DoubleClick(target=_target(a, "x", "y", "double_click.target")))
    if verb == "right_click":
        return pb.Action(right_click=pb.RightClick(target=_target(a, "x", "y", "right_click.target")))
    if verb == "move":
        return pb.Action(move=pb.Move(target=_target(a, "x", "y", "move.target")))
    if verb == "drag":
        return pb.Action(
            drag=pb.Drag(
                **{"from": _target(a, "x", "y", "drag.from")},
                to=_target(a, "to_x", "to_y", "drag.to"),
                button=_button(a),
                duration_ms=int(a.get("duration_ms", 0)),
                modifiers=str(a.get("modifiers", "")),
            )
        )
    if verb == "scroll":
        return pb.Action(
            scroll=pb.Scroll(target=_target(a, "x", "y", "scroll.target"), dx=int(a.get("dx", 0)), dy=int(a.get("dy", 0)),
                             pixels=bool(a.get("pixels", False)))
        )
    if verb == "mouse_down":
        return pb.Action(mouse_down=pb.MouseDown(target=_target(a, "x", "y", "mouse_down.target", required=False), button=_button(a)))
    if verb == "mouse_up":
        return pb.Action(mouse_up=pb.MouseUp(target=_target(a, "x", "y", "mouse_up.target", required=False), button=_button(a)))
    if verb == "type_text":
        if "text" not in a:
            raise _bad("type_text.text", "missing 'text'")
        return pb.Action(type_text=pb.TypeText(text=str(a["text"])))
    if verb == "key":
        if "keys" not in a:
            raise _bad("key.keys", "missing 'keys' (e.g. 'ctrl+s')")
        return pb.Action(key=pb.Key(keys=str(a["keys"])))
    if verb in ("key_down", "key_up"):
        if "keys" not in a:
            raise _bad(f"{verb}.keys", "missing 'keys' (e.g. 'shift')")
        if verb == "key_down":
            return pb.Action(key_down=pb.KeyDown(keys=str(a["keys"])))
        return pb.Action(key_up=pb.KeyUp(keys=str(a["keys"])))
    if verb in ("invoke_action", "set_value"):
        t = _element(a, "ref", "element", f"{verb}.target")
        if t is None:
            raise _bad(f"{verb}.target", "give 'ref' (e.g. 'e12') or 'element' ({'role': ..., 'name': ...})")
        if verb == "invoke_action":
            return pb.Action(invoke_action=pb.InvokeAction(target=t, action=str(a.get("action", ""))))
        if "value" not in a:
            raise _bad("set_value.value", "missing 'value'")
        return pb.Action(set_value=pb.SetValue(target=t, value=str(a["value"])))
    if verb == "wait":
        return pb.Action(wait=pb.Wait(ms=int(a.get("ms", 0))))
    if verb == "noop":
        return pb.Action(noop=pb.Noop())
    if verb == "launch_app":
        if "app" not in a:
            raise _bad("launch_app.app", "missing 'app' (a name of the profile's apps, e.g. 'terminal')")
        return pb.Action(launch_app=pb.LaunchApp(app=str(a["app"]), args=[str(x) for x in a.get("args", ())]))
    if verb == "activate_window" and "window" not in a and "app" in a:
        return pb.Action(activate_window=pb.ActivateWindow(app=str(a["app"])))
    if verb in ("activate_window", "close_window", "move_window", "resize_window"):
        if "window" not in a:
            raise _bad(f"{verb}.window", "missing 'window' (an id from windows())"
                       + (" or 'app' (a title substring)" if verb == "activate_window" else ""))
        w = int(a["window"])
        if verb == "activate_window":
            return pb.Action(activate_window=pb.ActivateWindow(window=w))
        if verb == "close_window":
            return pb.Action(close_window=pb.CloseWindow(window=w))
        if verb == "move_window":
            return pb.Action(move_window=pb.MoveWindow(window=w, x=int(a.get("x", 0)), y=int(a.get("y", 0))))
        return pb.Action(resize_window=pb.ResizeWindow(window=w, width=int(a.get("width", 0)), height=int(a.get("height", 0))))
    raise _bad("verb", f"unknown verb {verb!r}; known: click, double_click, right_click, move, drag, scroll, "
               "mouse_down, mouse_up, type_text, key, key_down, key_up, wait, noop, launch_app, activate_window, "
               "close_window, move_window, resize_window, invoke_action, set_value")
