"""UI-TARS action strings: the calls after ``Action:`` in a reply framed as UI-TARS
frames it, such as ``click(start_box='(100,200)')`` or ``type(content='hi')``.

The calls are read from the text after the last ``Action:`` (every call-shaped line
there is a call); without that framing, from the lines that are a call and nothing else.
Arguments are Python's (keyword or positional; strings in either quote, with UI-TARS'
escapes), read by Python's own parser and, when the model left a quote unescaped
(``type(content='it's')``), by splitting at ``key=``. A point is ``'(x,y)'``, a box
``'(x1,y1,x2,y2)'`` (its centre), ``'<|box_start|>(x,y)<|box_end|>'`` or
``'<point>x y</point>'``; a call the reply cut off before its ``)`` is closed when no
string was left open."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

from deskgym.dialect._verbs import BODY, Action, Context, DialectError, actions, is_verb, meaning

_FRAME = re.compile(r"^[ \t*#>-]*Action\s*:", re.M | re.I)
_THOUGHT = re.compile(r"^[ \t*#>-]*(?:Thought|Reflection)\s*:", re.M | re.I)
#: A call: after the framing, any name and "(" not part of a dotted name; without it,
#: only at the start of a line (after a bullet or an opening tag such as <answer>).
_FRAMED_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")
_LINE_CALL = re.compile(r"^[ \t*>-]*(?:<\w+>\s*)?([A-Za-z_]\w*)\s*\(", re.M)
_LINE_END = re.compile(r"\)[\s;]*(?:</\w+>\s*)*$")
_EXPECTED = "a call such as click(start_box='(100,200)') or type(content='hello')"
_ESCAPES = {"n": "\n", "t": "\t", "'": "'", '"': '"', "\\": "\\"}


def _scan(body: str, start: int) -> int | None:
    """The index of the ``)`` closing the call whose arguments start at ``start``;
    ``len(body)`` for a call cut off outside a string; ``None`` inside one."""
    depth, quote, j = 1, "", start
    while j < len(body):
        ch = body[j]
        if quote:
            if ch == "\\":
                j += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return None if quote else len(body)


def _calls(body: str, framed: bool) -> Iterator[tuple[str, str, str]]:
    """(name, argument text, the call's text) of each call."""
    pos = 0
    for m in (_FRAMED_CALL if framed else _LINE_CALL).finditer(body):
        if m.start() < pos:
            continue
        end = _scan(body, m.end())
        line_end = body.find("\n", m.end())
        line = re.sub(r"(?:</\w+>|[;\s])*$", "", body[m.start(1): len(body) if line_end < 0 else line_end])
        if (end is None or end >= m.start(1) + len(line)) and line.endswith(")"):
            # A quote the model did not escape ran past the line: the call is its line.
            end = m.start(1) + len(line) - 1
        if end is None:
            raise DialectError("the call is cut off inside a string", body[m.start():], _EXPECTED)
        rest = body[end + 1:].split("\n", 1)[0]
        if not framed and re.sub(r"</\w+>|[;\s]", "", rest):
            continue  # prose that happens to start with a word and a parenthesis
        pos = end + 1
        yield m.group(1), body[m.end():end], body[m.start(1): end + 1]


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), s)


def _split_args(text: str) -> tuple[list[Any], dict[str, Any]]:
    try:
        call = ast.parse(f"f({text})", mode="eval").body
        assert isinstance(call, ast.Call)
        return ([ast.literal_eval(a) for a in call.args],
                {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg is not None})
    except (SyntaxError, ValueError, TypeError, AssertionError, MemoryError, RecursionError):
        pass
    kw: dict[str, Any] = {}
    parts = re.split(r",\s*(?=[A-Za-z_]\w*\s*=)", text.strip())
    for part in parts:
        m = re.match(r"\s*([A-Za-z_]\w*)\s*=\s*(.*)$", part, re.S)
        if m is None:
            continue
        v = m.group(2).strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
            v = _unescape(v[1:-1])
        kw[m.group(1)] = v
    return [], kw


def framed(text: str) -> bool:
    return _FRAME.search(text) is not None


def looks_like(text: str) -> bool:
    """An ``Action:`` framing, or a line that is a call of a known verb (the last line
    may be cut off)."""
    if framed(text):
        return True
    lines = text.rstrip().split("\n")
    for i, line in enumerate(lines):
        m = _LINE_CALL.match(line)
        if m and is_verb(m.group(1)) and (_LINE_END.search(line) or i == len(lines) - 1):
            return True
    return False


def parse(text: str, ctx: Context) -> list[Action]:
    frames = list(_FRAME.finditer(text))
    # Each Action: part, to the next Action: or Thought: (a reply may hold several).
    body = "\n".join(_THOUGHT.split(text[m.end(): frames[k + 1].start() if k + 1 < len(frames) else len(text)])[0]
                     for k, m in enumerate(frames)) if frames else text
    out: list[Action] = []
    for name, arg_text, src in _calls(body, framed=bool(frames)):
        pos, kw = _split_args(arg_text)
        args: dict[str, Any] = dict(kw)
        if pos:
            verb = meaning(name, src)
            if len(pos) == 2 and all(isinstance(p, (int, float)) for p in pos):
                args.setdefault("x", pos[0])
                args.setdefault("y", pos[1])
            elif verb in BODY:
                args.setdefault(BODY[verb], pos[0])
        out += actions(name, args, ctx, src)
    if not out:
        raise DialectError("no action call", body if frames else text, _EXPECTED)
    return out
