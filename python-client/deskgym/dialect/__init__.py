"""Model text as deskgym actions: the grammars computer-use models write their actions
in, parsed into the dict actions :func:`deskgym.to_proto` takes (ACI spec §3.1).

    from deskgym.dialect import DialectError, parse_actions
    try:
        actions = parse_actions(reply, display=Display.of(obs))   # obs: what the model saw
    except DialectError as e:
        feedback = e.message           # hand it back to the model: what, where, what to write
    for a in actions:
        env.step(a)

Grammars (``format=``; ``"auto"`` tries them in this order, an explicit one reads only
its own) and where each points unless ``coords=`` says otherwise:

| format      | what the model writes                                         | coords   |
|-------------|---------------------------------------------------------------|----------|
| `function`  | `<function=click><parameter=x>..` or `<function name="..">`    | grid1000 |
|             | (UI-TARS-2 / Seed, Qwen3-Coder, Qwen3.5)                      |          |
| `tool_call` | `<tool_call>{"name": .., "arguments": {..}}</tool_call>`       | pixels   |
|             | (Qwen2.5-VL `computer_use`, Hermes; Qwen3-VL wants grid1000)  |          |
| `invoke`    | `<invoke name=".."><parameter name="..">..` (Claude's text)   | pixels   |
| `pyautogui` | OSWorld's python code blocks; `WAIT`, `DONE`, `FAIL`          | pixels   |
| `uitars`    | `Thought: .. Action: click(start_box='(x,y)')`                | grid1000 |
| `xml`       | `<click x="100" y="200"/>`, `<type>hi</type>`, `<action ..>`  | pixels   |

``coords`` (:data:`COORDS`): ``"pixels"`` of the screenshot the model saw, ``"norm"``
0..1 of it, ``"grid1000"`` 0..1000 of it. With ``display`` (the
:class:`~deskgym.geometry.Display` of that screenshot) every point becomes a screen
pixel through the frame's geometry; without one, pixels are taken as the screen's and
normalised points travel as ``nx``/``ny`` (the wire's ``point_norm``).

Grammar x verb: what each family writes for each deskgym action. The call grammars
share one verb table (:data:`VERBS`), so every name below is accepted in every one of
them, as a call's name, as the ``action`` of a ``computer`` / ``computer_use`` tool
call, as an element's tag or as a UI-TARS call:

| deskgym action     | Qwen `computer_use` | Claude `computer`  | UI-TARS          | generic             | OSWorld pyautogui   |
|--------------------|---------------------|--------------------|------------------|---------------------|---------------------|
| click              | left_click          | left_click         | click            | click, left_single  | click               |
| double_click       | double_click        | double_click       | left_double      | double_click        | doubleClick         |
| click, count 3     | triple_click        | triple_click       | —                | triple_click        | tripleClick         |
| right_click        | right_click         | right_click        | right_single     | right_click         | rightClick          |
| click, middle      | middle_click        | middle_click       | —                | middle_click        | middleClick         |
| move               | mouse_move          | mouse_move         | hover            | move, mouse_move    | moveTo              |
| drag               | left_click_drag (1) | left_click_drag    | drag             | drag                | — (2)               |
| mouse_down / up    | —                   | left_mouse_down/up | —                | mouse_down / up     | mouseDown / mouseUp |
| scroll             | scroll, hscroll (3) | scroll             | scroll (4)       | scroll              | scroll, hscroll     |
| type_text          | type                | type               | type             | type_text, write    | write, typewrite    |
| key                | key (5)             | key                | hotkey, press    | key, press, hotkey  | press, hotkey       |
| key_down / up      | —                   | hold_key (6)       | keydown / keyup  | key_down / key_up   | keyDown / keyUp     |
| wait               | wait (`time` s)     | wait (`duration`)  | wait() = 5 s     | wait (s, ms; 1 s)   | time.sleep; WAIT 2 s|
| noop               | —                   | screenshot         | —                | screenshot          | —                   |
| launch_app         | —                   | —                  | open_app         | launch_app          | —                   |
| noop, end=success  | terminate, answer   | —                  | finished         | done, finished      | DONE                |
| noop, end=failure  | terminate (failure) | —                  | call_user        | fail                | FAIL                |

(1) Qwen's drag has only its end: ``mouse_down``, ``move``, ``mouse_up`` from where the
pointer is. (2) ``dragTo`` starts at the pointer, which OSWorld's translation cannot
know: refused. (3) ``pixels`` are signed wheel clicks, positive up (``hscroll``: right).
(4) a direction only: 5 wheel clicks, as UI-TARS' harness scrolls. (5) a ``keys`` list
is one chord. (6) ``key_down``, ``wait``, ``key_up``.

Arguments: a position is ``coordinate`` / ``point`` / ``start_box`` / ``x`` and ``y``
(a list, ``"(x,y)"``, a box's centre, ``<|box_start|>``, ``<point>x y</point>``) or an
element ``ref``; a drag's ends ``start_coordinate`` / ``start_box`` / ``x``, ``y`` and
``coordinate`` / ``end_box`` / ``to_x``, ``to_y``; text ``text`` / ``content``; keys
``keys`` / ``key`` / ``text`` (``"ctrl+s Return"``: two presses; ``"ctrl c"``, all but
the last a modifier: one chord); a scroll ``direction`` with ``amount`` /
``scroll_amount``, or ``dx`` / ``dy``; a wait ``time`` / ``duration`` seconds or
``ms``; ``modifiers`` held around a pointer action (and Claude's ``text`` on a click).
Arguments a verb does not take are ignored; reasoning (``<think>..</think>``) is never
read for actions.

``done`` and ``fail`` have no desktop action: they are a ``noop`` carrying ``"end":
"success"`` or ``"failure"`` (and the model's ``"text"``), so every parsed action steps
and the harness ends the episode on ``end``. Nothing is dropped silently: an unknown
verb, a missing argument, a point outside the frame or text that matches no grammar
raises :class:`DialectError` (``INVALID_ARGUMENT``), whose message quotes the text and
says what was expected; the whole reply is refused, never half of it.

The other way, :func:`write_action` writes an action in a grammar (:data:`WRITE_FORMATS`)
and :func:`tool_call` gives its ``(name, arguments)``, in the verbs of
:mod:`deskgym.trl`'s tools; what they write reads back to the same action.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from deskgym.dialect import _markup, _pyautogui, _uitars
from deskgym.dialect._verbs import COORDS, VERBS, Action, Context, DialectError, Space
from deskgym.dialect._write import WRITE_FORMATS, tool_call, write_action
from deskgym.errors import DeskgymError
from deskgym.geometry import Display

__all__ = ["COORDS", "DEFAULT_COORDS", "FORMATS", "VERBS", "WRITE_FORMATS", "Action", "DialectError", "detect",
           "parse_actions", "tool_call", "write_action"]

_NS = r"(?:[\w-]+:)?"


def _has(pattern: str) -> Callable[[str], bool]:
    found = re.compile(pattern).search
    return lambda text: found(text) is not None


_GRAMMARS: dict[str, tuple[Callable[[str], bool], Callable[[str, Context], list[Action]]]] = {
    "function": (_has(rf"<{_NS}function(?:\s*=|\s+name\s*=)"), _markup.functions),
    "tool_call": (_has(rf"<{_NS}tool_call\s*>"), _markup.tool_calls),
    "invoke": (_has(rf"<{_NS}invoke\b"), _markup.invokes),
    "pyautogui": (_pyautogui.looks_like, _pyautogui.parse),
    "uitars": (_uitars.looks_like, _uitars.parse),
    "xml": (_markup.element_tags, _markup.elements),
}
#: The grammars, in the order ``"auto"`` tries them.
FORMATS = ("auto", *_GRAMMARS)
#: Where each grammar's points are unless ``coords=`` says: UI-TARS and the Seed /
#: Qwen3 ``<function=>`` form point in 0..1000; the rest in pixels of the screenshot.
DEFAULT_COORDS = {"function": "grid1000", "tool_call": "pixels", "invoke": "pixels", "pyautogui": "pixels",
                  "uitars": "grid1000", "xml": "pixels"}
#: Reasoning blocks (Qwen3, DeepSeek-R1, UI-TARS-1.5 ``<think>``): never actions, even
#: where they quote one. A lone end tag: its opening was in the chat template.
_REASONING = re.compile(r"<(/?)(think|thinking|reasoning|reflection)\s*>", re.I)
#: What a ``wait`` without a duration waits, per grammar (UI-TARS' prompt says 5 s).
_WAIT_MS = {"uitars": 5000}
_EXPECTED = {
    "function": "<function=click><parameter=x>100</parameter><parameter=y>200</parameter></function>",
    "tool_call": '<tool_call>{"name": "click", "arguments": {"coordinate": [100, 200]}}</tool_call>',
    "invoke": '<invoke name="click"><parameter name="coordinate">[100, 200]</parameter></invoke>',
    "pyautogui": "a ```python block of pyautogui calls, or WAIT, DONE, FAIL",
    "uitars": "Action: click(start_box='(100,200)')",
    "xml": '<click x="100" y="200"/>',
}


def _without_reasoning(text: str) -> str:
    """``text`` less its closed reasoning blocks, and less all before a closing tag
    whose opening the chat template wrote."""
    out, pos, opened = [], 0, ""
    for m in _REASONING.finditer(text):
        name = m.group(2).lower()
        if not m.group(1) and not opened:
            out.append(text[pos:m.start()])
            opened, pos = name, m.start()
        elif m.group(1) and name == opened:
            opened, pos = "", m.end()
        elif m.group(1) and not opened:
            out, pos = [], m.end()
    out.append(text[pos:])  # (an unclosed block is kept: what follows it may be the answer)
    return "".join(out)


def detect(text: str) -> str | None:
    """The grammar ``"auto"`` reads ``text`` with (its reasoning left out, as
    :func:`parse_actions` leaves it), or ``None`` when none matches."""
    text = _without_reasoning(text)
    for name, (matches, _) in _GRAMMARS.items():
        if matches(text):
            return name
    return None


def parse_actions(text: str, format: str = "auto", display: Display | None = None, *,
                  coords: str | None = None) -> list[Action]:
    """The actions of a model's reply, in order, as :func:`deskgym.to_proto` dicts.

    ``format``: one of :data:`FORMATS`. ``display``: the geometry of the screenshot the
    model saw (``Display.of(obs)``); points become screen pixels through it. ``coords``:
    ``"pixels"``, ``"norm"`` or ``"grid1000"``; default per grammar
    (:data:`DEFAULT_COORDS`). Raises :class:`DialectError` for text it cannot turn into
    actions (nothing of the reply is returned then), :class:`DeskgymError` for a
    ``format`` or ``coords`` it does not know."""
    if format not in FORMATS:
        raise DeskgymError("INVALID_ARGUMENT", f"format {format!r} is not one of {', '.join(FORMATS)}", "format")
    if coords is not None and coords not in COORDS:
        raise DeskgymError("INVALID_ARGUMENT", f"coords {coords!r} is not one of {', '.join(COORDS)}", "coords")
    grammar = detect(text) if format == "auto" else format
    said, text = text, _without_reasoning(text)
    if grammar is None:
        raise DialectError("no action found", said,
                           "one of: " + "; ".join(_EXPECTED[g] for g in ("tool_call", "invoke", "function", "xml",
                                                                          "uitars", "pyautogui")))
    ctx = Context(Space(coords or DEFAULT_COORDS[grammar], display), wait_ms=_WAIT_MS.get(grammar, 1000))
    out = _GRAMMARS[grammar][1](text, ctx)
    if not out:
        raise DialectError(f"no {grammar} action found", text, _EXPECTED[grammar])
    return out
