"""What every grammar shares once its call is read: the verb names models use and the
deskgym action each means, the arguments each verb takes, coordinates in the model's
space (through :class:`deskgym.geometry.Display`), key names, and :class:`DialectError`.

A grammar reads its text into calls, ``(name, arguments)``; :func:`actions` turns one
call into deskgym's dict actions (:func:`deskgym.to_proto`'s form)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Anthropic's scroll directions and duration bound, OpenAI's and pyautogui's key names:
# the vendor adapters' own tables, so a name means the same through either door.
from deskgym.agents.anthropic import _SCROLL as _DIRECTIONS
from deskgym.agents.anthropic import MAX_DURATION_S
from deskgym.agents.openai import keysym
from deskgym.errors import DeskgymError
from deskgym.geometry import Display
from deskgym.osworld.actions import key as pyautogui_key

__all__ = ["Action", "COORDS", "Context", "DialectError", "Space", "VERBS", "actions", "chords", "xy_of"]

#: One deskgym action in :func:`deskgym.to_proto`'s dict form.
Action = dict[str, Any]

#: Coordinate spaces a model may point in: pixels of the frame it saw, normalised 0..1,
#: or the 0..1000 grid (UI-TARS, Qwen-VL's relative coordinates).
COORDS = ("pixels", "norm", "grid1000")
#: The longest snippet of model text an error quotes.
SNIPPET_CHARS = 120
#: The most wheel clicks one scroll may ask for (as OSWorld's translation allows).
MAX_SCROLL_CLICKS = 50

#: Each deskgym meaning and the verb names models use for it (compared in lower case,
#: ``-`` as ``_``). ``done`` and ``fail`` end the episode: a ``noop`` carrying ``end``.
VERBS: dict[str, tuple[str, ...]] = {
    "click": ("click", "left_click", "left_single", "single_click", "tap", "mouse_click", "leftclick"),
    "double_click": ("double_click", "left_double", "doubleclick", "dblclick", "double_tap"),
    "triple_click": ("triple_click", "tripleclick"),
    "right_click": ("right_click", "right_single", "rightclick", "context_click"),
    "middle_click": ("middle_click", "middleclick"),
    "move": ("move", "mouse_move", "move_to", "moveto", "move_mouse", "hover"),
    "drag": ("drag", "left_click_drag", "drag_and_drop", "drag_to", "dragto"),
    "mouse_down": ("mouse_down", "left_mouse_down", "mousedown"),
    "mouse_up": ("mouse_up", "left_mouse_up", "mouseup"),
    "scroll": ("scroll", "vscroll"),
    "hscroll": ("hscroll",),
    "type": ("type", "type_text", "write", "typewrite", "input", "input_text", "enter_text"),
    "key": ("key", "press", "hotkey", "keypress", "key_press", "press_key", "send_keys", "shortcut"),
    "key_down": ("key_down", "keydown"),
    "key_up": ("key_up", "keyup"),
    "hold_key": ("hold_key",),
    "wait": ("wait", "sleep", "pause"),
    "screenshot": ("screenshot",),
    "launch_app": ("launch_app", "open_app", "launch", "open_application"),
    "done": ("done", "finished", "finish", "terminate", "answer", "complete"),
    "fail": ("fail", "failed", "infeasible", "call_user"),
}
_MEANING = {name: meaning for meaning, names in VERBS.items() for name in names}
#: Tool names that carry the verb in an ``action`` argument (Anthropic's ``computer``
#: tool, Qwen-VL's ``computer_use``).
COMPUTER_TOOLS = ("computer", "computer_use", "computer_20250124", "computer_20241022")
EXPECTED_VERBS = "a verb among " + ", ".join(VERBS)

# Argument names, first found wins. A position is one value ([x, y], "(x,y)", a box) or
# an x/y pair.
_POS = ("coordinate", "coordinates", "point", "start_box", "box", "position", "pos", "xy", "location")
_START = ("start_coordinate", "start_point", "start_box", "start", "from", "from_coordinate", "source")
_END = ("end_coordinate", "end_point", "end_box", "end", "to", "to_coordinate", "destination", "coordinate", "point")
_TEXT = ("text", "content", "value", "string", "message", "typed_text")
_KEYS = ("keys", "key", "text", "combo", "hotkey", "key_comb", "shortcut", "value", "content")
_AMOUNT = ("amount", "scroll_amount", "clicks", "steps", "times")
_SECONDS = ("time", "seconds", "duration", "secs")
_APP = ("app", "app_name", "application", "program", "name")
_ANSWER = ("text", "content", "answer", "message", "value", "reason")

#: The argument a grammar's one unnamed value fills (an element's body, a positional
#: argument): ``<type>hi</type>``, ``hotkey('ctrl c')``, ``click('(1,2)')``.
BODY = {
    **{v: "coordinate" for v in ("click", "double_click", "triple_click", "right_click", "middle_click", "move",
                                 "mouse_down", "mouse_up")},
    "scroll": "direction", "hscroll": "direction",
    "type": "text", "key": "keys", "key_down": "keys", "key_up": "keys", "hold_key": "keys", "wait": "time",
    "launch_app": "app", "done": "text", "fail": "text",
}
#: Key names that only modify a chord ("ctrl shift t" is one chord, "Return Return" two keys).
_MODIFIERS = {"ctrl", "control", "alt", "shift", "super", "win", "cmd", "command", "meta", "option", "fn",
              "ctrlleft", "ctrlright", "altleft", "altright", "shiftleft", "shiftright", "winleft", "winright"}
_BUTTON_NAMES = {"left": "left", "right": "right", "middle": "middle", "wheel": "middle", "primary": "left",
                 "secondary": "right", "1": "left", "2": "middle", "3": "right"}
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def snippet(text: str) -> str:
    """``text`` on one line, cut to :data:`SNIPPET_CHARS`."""
    t = " ".join(text.split())
    return t if len(t) <= SNIPPET_CHARS else t[: SNIPPET_CHARS - 1] + "…"


class DialectError(DeskgymError):
    """Model text deskgym cannot run as actions: an unknown verb, a missing argument, a
    point outside the frame, text that matches no grammar. ``code`` is
    ``INVALID_ARGUMENT``; ``message`` says what was wrong, quotes the text (at most
    :data:`SNIPPET_CHARS`) and says what was expected, so a trainer can hand it back to
    the model as it is. Nothing of a reply that raised has run.

    Attributes beyond :class:`DeskgymError`'s: ``problem``, ``snippet``, ``expected``.
    Pickles intact, as its base does."""

    def __init__(self, problem: str | DeskgymError, snippet_text: str = "", expected: str | None = None,
                 field: str | None = None) -> None:
        # Gymnasium's AsyncVectorEnv re-raises a worker's error as `type(e)(e)`.
        if isinstance(problem, DialectError):
            what, snippet_text, expected, field = problem.problem, problem.snippet, problem.expected, problem.field
        elif isinstance(problem, DeskgymError):
            what, field = problem.message, field or problem.field
        else:
            what = problem
        self.problem: str = what
        self.snippet: str = snippet(snippet_text)
        self.expected: str | None = expected
        message = what + (f" in `{self.snippet}`" if self.snippet else "") + (f"; expected {expected}" if expected else "")
        super().__init__("INVALID_ARGUMENT", message, field)

    def __reduce__(self) -> tuple[type[DeskgymError], tuple[str, str, str | None, str | None]]:
        return (type(self), (self.problem, self.snippet, self.expected, self.field))


@dataclass(frozen=True)
class Space:
    """Where a model's coordinates are: ``coords`` (one of :data:`COORDS`) of the frame
    ``display`` describes. With a display every point becomes a screen pixel; without,
    pixels are the screen's and 0..1 / 0..1000 points travel normalised (``nx``/``ny``)."""

    coords: str
    display: Display | None = None

    def point(self, xy: tuple[float, float], what: str, src: str, prefix: str = "") -> Action:
        """The dict keys of one point (``x``/``y``, or with ``prefix="to_"`` a drag's end)."""
        x, y = xy
        if self.coords == "pixels":
            if x < 0 or y < 0:
                raise DialectError(f"{what} ({x:g}, {y:g}) is negative", src, "pixels of the screenshot, from (0, 0)")
            if self.display is None:
                return {prefix + "x": round(x), prefix + "y": round(y)}
            try:
                sx, sy = self.display.to_screen(_whole(x), _whole(y), what)
            except DeskgymError as e:
                raise DialectError(e, src, f"a point inside the {self.display.delivered_width}x"
                                   f"{self.display.delivered_height} screenshot") from None
            return {prefix + "x": sx, prefix + "y": sy}
        top = 1.0 if self.coords == "norm" else 1000.0
        if not (0 <= x <= top and 0 <= y <= top):
            raise DialectError(f"{what} ({x:g}, {y:g}) is outside 0..{top:g}", src,
                               f"coordinates in 0..{top:g} (coords={self.coords!r})")
        nx, ny = x / top, y / top
        if self.display is None:
            return {"n" + prefix + "x": nx, "n" + prefix + "y": ny}
        sx, sy = self.display.to_screen_norm(nx, ny, what)
        return {prefix + "x": sx, prefix + "y": sy}


@dataclass(frozen=True)
class Context:
    """How one grammar's calls become actions: its coordinate space, and what a ``wait``
    without a duration waits."""

    space: Space
    wait_ms: int = 1000
    #: Wheel clicks of a scroll given only a direction (UI-TARS's own harness scrolls 5).
    scroll_clicks: int = 5


def _whole(v: float) -> float | int:
    return int(v) if v == int(v) else v


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and _NUMBER.fullmatch(v.strip()):
        return float(v.strip())
    return None


def xy_of(v: Any) -> tuple[float, float] | None:
    """A point from ``[x, y]``, ``{"x", "y"}``, ``"(x,y)"``, ``"x y"``,
    ``"<point>x y</point>"``, ``"<|box_start|>(x,y)<|box_end|>"``; a box of four numbers
    is its centre. ``None`` when it is none of these."""
    nums: list[float | None]
    while isinstance(v, (list, tuple)) and len(v) == 1:
        v = v[0]
    if isinstance(v, Mapping):
        nums = [_number(v.get("x")), _number(v.get("y"))]
    elif isinstance(v, (list, tuple)):
        nums = [_number(n) for n in v]
    elif isinstance(v, str):
        nums = [float(n) for n in _NUMBER.findall(v)]
    else:
        return None
    if any(n is None for n in nums) or len(nums) not in (2, 4):
        return None
    n = [float(x) for x in nums if x is not None]
    return (n[0], n[1]) if len(n) == 2 else ((n[0] + n[2]) / 2, (n[1] + n[3]) / 2)


def _first(args: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str, Any] | None:
    for n in names:
        if n in args and args[n] is not None and args[n] != "":
            return n, args[n]
    return None


def keyname(name: str, src: str) -> str:
    """A key name as deskgym's (X keysyms and its aliases), from pyautogui's, OpenAI's
    (``ENTER``, ``ARROWLEFT``) or xdotool's spelling."""
    n = name.strip()
    if not n:
        raise DialectError("an empty key name", src, "key names such as 'ctrl', 'Return', 'a'")
    return pyautogui_key(n) or keysym(n)


def _chord(text: str, src: str) -> str:
    parts = ["+"] if text == "+" else (text[:-2].split("+") + ["+"] if text.endswith("++") else text.split("+"))
    return "+".join(keyname(p, src) for p in parts)


def chords(v: Any, src: str) -> list[str]:
    """Key presses: a list is one chord (``["ctrl", "c"]``); a string is xdotool's
    ``"ctrl+s"`` / several separated by spaces (``"ctrl+a BackSpace"``), or one chord
    of space-separated names when all but the last are modifiers (UI-TARS'
    ``"ctrl shift t"``)."""
    if isinstance(v, (list, tuple)) and v and all(isinstance(k, str) for k in v):
        return ["+".join(_chord(k, src) for k in v)]
    if not isinstance(v, str) or not v.strip():
        raise DialectError(f"keys {v!r} are not key names", src, "keys such as 'ctrl+s', 'Return' or ['ctrl', 's']")
    tokens = v.split()
    if len(tokens) > 1 and "+" not in v and all(t.lower() in _MODIFIERS for t in tokens[:-1]):
        return ["+".join(keyname(t, src) for t in tokens)]
    return [_chord(t, src) for t in tokens]


def _int(v: Any, what: str, src: str, lo: int, hi: int) -> int:
    n = _number(v)
    if n is None or n != int(n) or not lo <= n <= hi:
        raise DialectError(f"{what} {v!r} is not a whole number in {lo}..{hi}", src)
    return int(n)


class _Call:
    """One call's arguments, read with the grammar's context."""

    def __init__(self, verb: str, args: Mapping[str, Any], ctx: Context, src: str) -> None:
        self.verb, self.args, self.ctx, self.src = verb, args, ctx, src

    def fail(self, problem: str, expected: str) -> DialectError:
        return DialectError(f"{self.verb}: {problem}", self.src, expected)

    def point(self, names: tuple[str, ...], pairs: tuple[tuple[str, str], ...], what: str, prefix: str = "",
              required: bool = True) -> Action | None:
        found = _first(self.args, names)
        xy: tuple[float, float] | None = None
        if found is not None:
            xy = xy_of(found[1])
            if xy is None:
                raise self.fail(f"{found[0]}={found[1]!r} is not a point", "[x, y], '(x,y)' or '<point>x y</point>'")
        else:
            for kx, ky in pairs:
                if kx in self.args or ky in self.args:
                    x, y = _number(self.args.get(kx)), _number(self.args.get(ky))
                    if x is None or y is None:
                        raise self.fail(f"{kx}/{ky} ({self.args.get(kx)!r}, {self.args.get(ky)!r}) are not two numbers",
                                        f"numbers for both {kx!r} and {ky!r}")
                    xy = (x, y)
                    break
        if xy is None:
            if required:
                raise self.fail(f"missing the {what}", f"{names[0]} [x, y] (or {pairs[0][0]} and {pairs[0][1]})")
            return None
        return self.ctx.space.point(xy, f"{self.verb}.{what}", self.src, prefix)

    def at(self, required: bool = True) -> Action | None:
        """The call's position: a point, or an element ref (``ref="e12"``)."""
        if isinstance(self.args.get("ref"), str):
            return {"ref": self.args["ref"]}
        return self.point(_POS, (("x", "y"),), "position", required=required)

    def text(self, names: tuple[str, ...], what: str, example: str) -> str:
        found = _first(self.args, names)
        if found is None or isinstance(found[1], (dict, list)):
            raise self.fail(f"missing the {what}", example)
        return str(found[1])

    def button(self, default: str = "left") -> str:
        b = self.args.get("button", default)
        name = _BUTTON_NAMES.get(str(b).lower()) if b is not None else default
        if name is None:
            raise self.fail(f"button {b!r} is unknown", "left, right or middle")
        return name

    def seconds_ms(self, default: int | None) -> int:
        if "ms" in self.args:
            return _int(self.args["ms"], f"{self.verb}: ms", self.src, 0, int(MAX_DURATION_S * 1000))
        found = _first(self.args, _SECONDS)
        if found is None:
            if default is None:
                raise self.fail("missing the duration", "duration in seconds")
            return default
        s = _number(found[1])
        if s is None or not 0 <= s <= MAX_DURATION_S:
            raise self.fail(f"{found[0]} {found[1]!r} is not seconds in 0..{MAX_DURATION_S:g}", "seconds")
        return round(s * 1000)

    def held(self, acts: list[Action]) -> list[Action]:
        """``acts`` with the call's modifier keys held around them (Anthropic's ``text``
        on a click, ``modifiers`` anywhere)."""
        found = _first(self.args, ("modifiers", "modifier", "hold_keys"))
        if found is None and self.args.get("_tool") == "computer" and isinstance(self.args.get("text"), str):
            found = ("text", self.args["text"])
        if found is None:
            return acts
        keys = chords(found[1], self.src)
        if len(keys) != 1 or not all(k.lower() in _MODIFIERS for k in keys[0].split("+")):
            raise self.fail(f"{found[0]}={found[1]!r} are not modifier keys", "modifiers such as 'shift' or 'ctrl+alt'")
        return [{"verb": "key_down", "keys": keys[0]}, *acts, {"verb": "key_up", "keys": keys[0]}]


def _key(name: str) -> str:
    return re.sub(r"[-\s]+", "_", name.strip().lower())


def is_verb(name: str) -> bool:
    """Whether ``name`` is a verb :func:`meaning` knows (a grammar's detector asks
    before it claims a reply)."""
    return _key(name) in _MEANING


def meaning(name: str, src: str) -> str:
    m = _MEANING.get(_key(name))
    if m is None:
        raise DialectError(f"unknown verb {name!r}", src, EXPECTED_VERBS)
    return m


def actions(name: str, args: Mapping[str, Any], ctx: Context, src: str) -> list[Action]:
    """One call (a verb name or a computer tool's name, and its arguments) as deskgym
    actions; a verb it does not know or an argument it lacks raises :class:`DialectError`
    quoting ``src``."""
    args = dict(args)
    tool = name.strip().lower()
    if tool in COMPUTER_TOOLS:
        if not isinstance(args.get("action"), str):
            raise DialectError(f"a {name!r} call without its action", src, f"an 'action' argument: {EXPECTED_VERBS}")
        name = args.pop("action")
        args["_tool"] = "computer" if tool != "computer_use" else tool
    verb = meaning(name, src)
    c = _Call(verb, args, ctx, src)
    if verb in ("click", "double_click", "triple_click", "right_click", "middle_click"):
        at = c.at()
        assert at is not None
        if verb in ("double_click", "right_click") and "button" not in args:
            return c.held([{"verb": verb, **at}])
        act: Action = {"verb": "click", **at}
        button = "middle" if verb == "middle_click" else "right" if verb == "right_click" else c.button()
        count = {"double_click": 2, "triple_click": 3}.get(verb, 1)
        if "count" in args or "num_clicks" in args:
            count = _int(args.get("count", args.get("num_clicks")), f"{verb}: count", src, 1, 3)
        if button != "left":
            act["button"] = button
        if count != 1:
            act["count"] = count
        return c.held([act])
    if verb == "move":
        at = c.at()
        assert at is not None
        return c.held([{"verb": "move", **at}])
    if verb in ("mouse_down", "mouse_up"):
        act = {"verb": verb, **(c.at(required=False) or {})}
        if c.button() != "left":
            act["button"] = c.button()
        return [act]
    if verb == "drag":
        end = c.point(_END, (("to_x", "to_y"), ("end_x", "end_y"), ("x2", "y2")), "end", prefix="to_")
        assert end is not None
        # A `coordinate` the end did not take is the start ({"coordinate", "end_coordinate"}).
        taken = _first(args, _END)
        rest = tuple(n for n in ("coordinate", "point") if taken is None or n != taken[0])
        start = c.point(_START + rest, (("start_x", "start_y"), ("x1", "y1"), ("x", "y")), "start", required=False)
        if start is None:
            # From where the pointer is (Qwen-VL's left_click_drag): press, move, release.
            move = {"verb": "move", **{k.replace("to_", ""): v for k, v in end.items()}}
            return c.held([{"verb": "mouse_down"}, move, {"verb": "mouse_up"}])
        return c.held([{"verb": "drag", **start, **end}])
    if verb in ("scroll", "hscroll"):
        return c.held([{"verb": "scroll", **_scroll(c, verb)}])
    if verb == "type":
        text = c.text(_TEXT, "text to type", "text='...'")
        if not text:
            raise c.fail("nothing to type", "text='...'")
        return [{"verb": "type_text", "text": text}]
    if verb == "key":
        keys = _first(args, _KEYS)
        if keys is None:
            raise c.fail("missing the keys", "keys such as 'ctrl+s', 'Return' or ['ctrl', 's']")
        return [{"verb": "key", "keys": k} for k in chords(keys[1], src)]
    if verb in ("key_down", "key_up", "hold_key"):
        keys = _first(args, _KEYS)
        if keys is None:
            raise c.fail("missing the keys", "keys such as 'shift'")
        chord = "+".join(chords(keys[1], src))
        if verb != "hold_key":
            return [{"verb": verb, "keys": chord}]
        return [{"verb": "key_down", "keys": chord}, {"verb": "wait", "ms": c.seconds_ms(None)},
                {"verb": "key_up", "keys": chord}]
    if verb == "wait":
        return [{"verb": "wait", "ms": c.seconds_ms(ctx.wait_ms)}]
    if verb == "screenshot":
        return [{"verb": "noop"}]
    if verb == "launch_app":
        act = {"verb": "launch_app", "app": c.text(_APP, "app", "app='terminal'")}
        if isinstance(args.get("args"), list):
            act["args"] = [str(a) for a in args["args"]]
        return [act]
    # done / fail: the model's verdict; `terminate`'s `status` says which.
    status = "failure" if verb == "fail" else str(args.get("status", "success")).lower()
    if status not in ("success", "failure", "fail", "failed", "infeasible"):
        raise c.fail(f"status {args.get('status')!r} is unknown", "status 'success' or 'failure'")
    verdict: Action = {"verb": "noop", "end": "success" if status == "success" else "failure"}
    said = _first(args, _ANSWER)
    if said is not None:
        verdict["text"] = str(said[1])
    return [verdict]


def _scroll(c: _Call, verb: str) -> Action:
    at = c.at()
    assert at is not None
    if "dx" in c.args or "dy" in c.args:
        lim = MAX_SCROLL_CLICKS
        return {**at, "dx": _int(c.args.get("dx", 0), "scroll: dx", c.src, -lim, lim),
                "dy": _int(c.args.get("dy", 0), "scroll: dy", c.src, -lim, lim)}
    if "pixels" in c.args and _first(c.args, ("direction", "scroll_direction")) is None:
        # Qwen-VL: signed, positive up (or right, for hscroll), as its harness hands
        # them to pyautogui.scroll: wheel clicks.
        n = _int(c.args["pixels"], f"{verb}: pixels", c.src, -MAX_SCROLL_CLICKS, MAX_SCROLL_CLICKS)
        return {**at, "dx": n, "dy": 0} if verb == "hscroll" else {**at, "dx": 0, "dy": -n}
    found = _first(c.args, ("direction", "scroll_direction"))
    if found is None:
        raise c.fail("missing the direction", "direction='down' (up, down, left, right) or dx/dy wheel clicks")
    direction = str(found[1]).strip().lower()
    if direction not in _DIRECTIONS:
        raise c.fail(f"direction {found[1]!r} is unknown", "up, down, left or right")
    amount = _first(c.args, (*_AMOUNT, "pixels"))
    n = c.ctx.scroll_clicks if amount is None else _int(amount[1], f"{verb}: {amount[0]}", c.src, 0, MAX_SCROLL_CLICKS)
    ux, uy = _DIRECTIONS[direction]
    return {**at, "dx": ux * n, "dy": uy * n}


