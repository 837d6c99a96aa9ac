"""The other direction: a deskgym action written as a model would write it, for datasets
(:func:`deskgym.datasets.export` ``fmt="chat"``) and prompts.

Calls use the verbs and arguments of :mod:`deskgym.trl`'s tools (``click(x, y)``,
``type_text(text)``, ``key(keys)``, ...), so a model fine-tuned on an export calls the
tools GRPO later gives it; every written call reads back through :func:`parse_actions`
to the same action (tested)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

from deskgym.dialect._verbs import DialectError

__all__ = ["WRITE_FORMATS", "tool_call", "write_action"]

#: The text grammars an action can be written in (``tool_call``: Qwen/Hermes JSON in
#: XML; ``xml``: attribute elements).
WRITE_FORMATS = ("tool_call", "xml")

#: Arguments each verb's call carries, in order (the tools' parameters).
_ARGS: dict[str, tuple[str, ...]] = {
    "click": ("x", "y"), "double_click": ("x", "y"), "right_click": ("x", "y"), "move": ("x", "y"),
    "drag": ("x", "y", "to_x", "to_y"), "scroll": ("x", "y", "dy", "dx"), "type_text": ("text",),
    "key": ("keys",), "key_down": ("keys",), "key_up": ("keys",), "wait": ("ms",),
    "mouse_down": ("x", "y", "button"), "mouse_up": ("x", "y", "button"), "noop": (),
}


def tool_call(action: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(name, arguments)`` of one action in :func:`deskgym.to_proto`'s dict form (also
    as a recording stores it: a click with ``count`` 2 is a ``double_click``, with
    ``button`` right a ``right_click``). Raises :class:`DialectError` for a verb no tool
    call names (window and app verbs, element targets)."""
    a = dict(action)
    verb = str(a.get("verb", ""))
    if verb == "click":
        count, button = int(a.get("count") or 1), str(a.get("button") or "left")
        if count == 2 and button == "left":
            verb = "double_click"
        elif button == "right" and count == 1:
            verb = "right_click"
        elif (count, button) != (1, "left"):
            raise DialectError(f"a {button} click with count {count} has no tool", json.dumps(dict(action)),
                               "a left click (count 1 or 2) or a right click")
    if verb not in _ARGS or any(k in a for k in ("ref", "element", "to_ref", "to_element")):
        raise DialectError(f"verb {verb!r} has no tool call", json.dumps(dict(action)), ", ".join(_ARGS))
    args = {k: a[k] for k in _ARGS[verb] if a.get(k) is not None}
    if verb == "scroll" and not args.get("dx"):
        args.pop("dx", None)
    return verb, args


def _attr(v: Any) -> str:
    """An XML attribute value: escaped, with line ends as character references."""
    return html.escape(str(v), quote=True).replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;")


def write_action(action: Mapping[str, Any], format: str = "tool_call") -> str:
    """One action as text in ``format`` (one of :data:`WRITE_FORMATS`)."""
    name, args = tool_call(action)
    if format == "tool_call":
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
    if format == "xml":
        # Attributes, not an element's body: the grammar trims a body's whitespace, and a
        # typed newline is an Enter the model must keep.
        attrs = " ".join(f'{k}="{_attr(v)}"' for k, v in args.items())
        return f"<{name} {attrs}/>" if attrs else f"<{name}/>"
    raise DialectError(f"format {format!r} cannot be written", format, ", ".join(WRITE_FORMATS))
