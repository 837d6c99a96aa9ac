"""The tag grammars: JSON in ``<tool_call>`` (Qwen, Hermes), ``<invoke name>`` with
``<parameter name>`` (Claude's text form), ``<function=NAME>`` / ``<function name>``
with ``<parameter=KEY>`` (UI-TARS-2, Qwen3-Coder), and elements whose tag is the verb
(``<click x="100" y="200"/>``, ``<type>hi</type>``, ``<action name="click">``).

Every tag may carry a namespace prefix (``<seed:tool_call>``); a block the reply never
closed runs to the next block or the end; attributes may be unquoted or single-quoted;
JSON may have trailing commas, single quotes, bare keys, or lack its last closing
quote, brackets and braces (see :func:`loads` for when that is unambiguous)."""

from __future__ import annotations

import ast
import html
import json
import re
from collections.abc import Iterator
from typing import Any

from deskgym.dialect._verbs import BODY, Action, Context, DialectError, actions, is_verb, meaning

_NS = r"(?:[\w-]+:)?"
_FENCE = re.compile(r"^\s*```[\w-]*[ \t]*\n?|\n?```\s*$")
_ATTR = re.compile(r"""([\w:-]+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>/]+(?:/(?!>)[^\s"'>/]*)*))""")
#: Tags around the model's prose or its answer: not actions, their content is read.
_PROSE = {"answer", "response", "output", "thought", "summary"}
#: Attributes that make an unknown tag action-shaped (an error, not prose).
_ACTION_ATTRS = {"x", "y", "coordinate", "coordinates", "point", "keys", "key", "text", "start_box", "direction"}
_JSON_EXPECTED = 'JSON such as {"name": "click", "arguments": {"coordinate": [100, 200]}}'


def _attrs(text: str) -> dict[str, str]:
    return {m.group(1).split(":")[-1]: html.unescape(next(g for g in m.groups()[1:] if g is not None))
            for m in _ATTR.finditer(text)}


def _value(raw: str) -> Any:
    """A parameter's text: one newline either side dropped (Qwen3-Coder writes values on
    their own lines); a JSON list or object decoded; anything else stays text (``"007"``
    is typed as written; numbers are read where a number is wanted)."""
    v = raw[1:] if raw.startswith("\n") else raw
    v = v[:-1] if v.endswith("\n") else v
    t = v.strip()
    if t[:1] in ("[", "{"):
        try:
            return loads(t, closed=True, src=t)
        except DialectError:
            return v
    return v


# --- JSON, repaired where the meaning is unambiguous ---------------------------------

_TOKEN = re.compile(r"[\w.+-]+")
_KEY_COLON = re.compile(r"\s*:")


def _normalise(text: str, closed: bool) -> str | None:
    """``text`` as strict JSON: single-quoted strings and bare keys quoted, Python's
    True/False/None spelt JSON's way, trailing commas dropped, and what a reply left open
    closed: brackets and braces always after a complete value; a string only when its
    block was closed by its end tag (the model meant to stop there) and the string holds
    no bracket, brace or comma it might have swallowed. ``None`` when that is not sure:
    cut inside a string, after a key, or after a number that may have been cut."""
    out: list[str] = []
    stack: list[str] = []
    last = ""  # the kind of the last token: open, value, number, comma, colon
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j, body = i + 1, []
            while j < n and text[j] != c:
                if text[j] == "\\" and j + 1 < n:
                    body.append(text[j:j + 2] if text[j + 1] != "'" else "'")
                    j += 2
                    continue
                body.append('\\"' if text[j] == '"' else text[j])
                j += 1
            s = "".join(body)
            if j >= n and (not closed or re.search(r"[\]},]", s)):
                return None
            out.append('"' + s.replace("\n", "\\n").replace("\t", "\\t") + '"')
            last, i = "value", j + 1
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
            out.append(c)
            last, i = "open", i + 1
        elif c in "}]":
            if not stack or stack[-1] != c:
                return None
            _drop_comma(out)
            out.append(stack.pop())
            last, i = "value", i + 1
        elif c in ",:":
            out.append(c)
            last, i = ("comma" if c == "," else "colon"), i + 1
        elif c.isspace():
            out.append(c)
            i += 1
        else:
            m = _TOKEN.match(text, i)
            if m is None:
                return None
            tok = m.group()
            if _KEY_COLON.match(text, m.end()) and re.fullmatch(r"[A-Za-z_]\w*", tok):
                out.append(json.dumps(tok))  # a bare key
                last = "value"
            else:
                out.append({"True": "true", "False": "false", "None": "null"}.get(tok, tok))
                last = "number" if re.fullmatch(r"[-+]?[\d.]+(?:[eE][-+]?\d+)?", tok) else "value"
            i = m.end()
    if last == "colon" or (last == "number" and stack and not closed):
        return None
    if last == "comma":
        _drop_comma(out)
    return "".join(out) + "".join(reversed(stack))


def _drop_comma(out: list[str]) -> None:
    k = len(out) - 1
    while k >= 0 and out[k].isspace():
        k -= 1
    if k >= 0 and out[k] == ",":
        del out[k]


def loads(text: str, closed: bool, src: str) -> Any:
    """JSON (or a Python literal) a model wrote, repaired by :func:`_normalise`."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    fixed = _normalise(text, closed)
    if fixed is not None:
        try:
            return json.loads(fixed)
        except (ValueError, RecursionError):
            pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    how = "is cut off where its meaning is unclear" if fixed is None else "is not JSON"
    raise DialectError(f"the call {how}", src, _JSON_EXPECTED)


# --- blocks ------------------------------------------------------------------------------


def _blocks(text: str, tag: str, open_re: str) -> Iterator[tuple[re.Match[str], str, bool]]:
    """Each ``<tag ...>`` block: its opening match, its content, whether it was closed.
    An unclosed block runs to the next opening of the same tag (or the end)."""
    opens = list(re.finditer(open_re, text, re.S))
    for k, m in enumerate(opens):
        limit = opens[k + 1].start() if k + 1 < len(opens) else len(text)
        end = re.compile(rf"</{_NS}{tag}\s*>").search(text, m.end(), limit)
        yield m, text[m.end(): end.start() if end else limit], end is not None


def tool_calls(text: str, ctx: Context) -> list[Action]:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, each block one call
    or a list of calls; ``arguments`` may also be a JSON string (OpenAI's form)."""
    out: list[Action] = []
    for m, body, closed in _blocks(text, "tool_call", rf"<{_NS}tool_call\s*>"):
        src = m.group() + body
        content = _FENCE.sub("", body).strip()
        if not content:
            raise DialectError("an empty tool call", src, _JSON_EXPECTED)
        value = loads(content, closed, src)
        for call in value if isinstance(value, list) else [value]:
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                call = call["function"]  # {"type": "function", "function": {...}}
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise DialectError("a tool call without a name", src, _JSON_EXPECTED)
            args = call.get("arguments", call.get("parameters", call.get("args", {})))
            if isinstance(args, str):
                args = loads(args, True, src) if args.strip() else {}
            if not isinstance(args, dict):
                raise DialectError("arguments that are not an object", src, _JSON_EXPECTED)
            out += actions(call["name"], args, ctx, src)
    return out


def _params(body: str, stop: str) -> dict[str, Any]:
    """``<parameter name="k">v</parameter>`` and ``<parameter=k>v</parameter>`` of one
    call's body; an unclosed parameter runs to the next one or the call's end."""
    out: dict[str, Any] = {}
    opens = list(re.finditer(rf"<{_NS}(?:parameter|param|arg)(?:\s*=\s*([^\s>]+)|\b([^>]*))>", body))
    for k, m in enumerate(opens):
        limit = opens[k + 1].start() if k + 1 < len(opens) else len(body)
        end = re.compile(rf"</{_NS}(?:parameter|param|arg)\s*>|{stop}").search(body, m.end(), limit)
        key = m.group(1).strip("\"'") if m.group(1) is not None else _attrs(m.group(2)).get("name")
        if key:
            out[key] = _value(body[m.end(): end.start() if end else limit])
    return out


def invokes(text: str, ctx: Context) -> list[Action]:
    """``<invoke name="computer"><parameter name="action">left_click</parameter>...``,
    optionally inside ``<function_calls>``."""
    out: list[Action] = []
    for m, body, _ in _blocks(text, "invoke", rf"<{_NS}invoke\b([^>]*)>"):
        src = m.group() + body
        name = _attrs(m.group(1)).get("name")
        if not name:
            raise DialectError("an invoke without a name", src, '<invoke name="click"><parameter name="x">...')
        body = re.split(rf"</{_NS}function_calls\s*>", body)[0]
        out += actions(name, _params(body, rf"</{_NS}invoke\s*>"), ctx, src)
    return out


def functions(text: str, ctx: Context) -> list[Action]:
    """``<function=click><parameter=x>100</parameter>...</function>`` and the same with
    ``<function name="click">`` / ``<parameter name="x">``."""
    out: list[Action] = []
    for m, body, _ in _blocks(text, "function", rf"<{_NS}function(?:\s*=\s*([^\s>]+)|\s+([^>]*))>"):
        src = m.group() + body
        name = m.group(1).strip("\"'") if m.group(1) is not None else _attrs(m.group(2) or "").get("name")
        if not name:
            raise DialectError("a function call without a name", src, "<function=click><parameter=x>...")
        out += actions(name, _params(body, rf"</{_NS}function\s*>"), ctx, src)
    return out


# --- elements: the tag is the verb -----------------------------------------------------

_CHILD = re.compile(rf"<{_NS}([A-Za-z_]\w*)>(.*?)</{_NS}\1\s*>", re.S)
# (Each attribute starts after whitespace with its name: no run of spaces can be split two
# ways, so a tag the reply never closed costs a linear scan, not a backtracking one.)
_TAG = re.compile(rf"<(/?){_NS}([A-Za-z_][\w-]*)((?:\s+[^\s<>\"'=/]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'<>/]+))?)*)"
                  r"\s*(/?)>")


def element_tags(text: str) -> bool:
    """Whether ``text`` holds an element whose tag is a verb, ``<action>``, or any tag
    with an action's attributes (an unknown verb, refused by name)."""
    return any(m.group(1) == "" and m.group(2).lower() not in _PROSE
               and (m.group(2).lower() == "action" or is_verb(m.group(2)) or _attrs(m.group(3)).keys() & _ACTION_ATTRS)
               for m in _TAG.finditer(text))


def elements(text: str, ctx: Context) -> list[Action]:
    """``<click x="100" y="200"/>``, ``<type>hello</type>``, ``<key>ctrl+s</key>``,
    ``<action name="click"><param name="x">100</param></action>``. An element's body is
    the verb's main argument (:data:`~deskgym.dialect._verbs.BODY`) or its child
    elements; an unknown tag with an action's attributes is an unknown verb."""
    out: list[Action] = []
    pos = 0
    while True:
        m = _TAG.search(text, pos)
        if m is None:
            return out
        pos = m.end()
        closing, tag, attr_text, self_closing = m.group(1), m.group(2), m.group(3), m.group(4)
        attrs: dict[str, Any] = dict(_attrs(attr_text))
        low = tag.lower()
        if closing or low in _PROSE:
            continue
        if low == "action":
            name = attrs.pop("name", attrs.pop("type", attrs.pop("verb", "")))
        elif is_verb(tag):
            name = tag
        elif attrs.keys() & _ACTION_ATTRS:
            name = tag  # action-shaped: raises "unknown verb" below
        else:
            continue
        body, src = "", m.group()
        if not name:
            raise DialectError("an <action> without a name", src, '<action name="click" x="100" y="200"/>')
        if not self_closing:
            # Its body ends at its end tag, or unclosed, at the next action's tag.
            limit = _next_action(text, pos)
            end = re.compile(rf"</{_NS}{re.escape(tag)}\s*>", re.I).search(text, pos, limit)
            stop = end.start() if end else limit
            body, src = text[pos:stop], text[m.start(): end.end() if end else stop]
            pos = end.end() if end else stop
        children = _params(body, "$^") or {c.group(1): _value(html.unescape(c.group(2))) for c in _CHILD.finditer(body)}
        if children:
            attrs.update(children)
        elif body.strip():
            key = BODY.get(meaning(name, src))
            if key is None:
                raise DialectError(f"<{tag}> takes no text", src, f"<{tag}/> with attributes")
            if key != "coordinate" or not attrs.keys() & {"x", "y", "coordinate", "point", "ref"}:
                # (A pointer element that has its position: its text describes the target.)
                attrs.setdefault(key, _value(html.unescape(body)))
        out += actions(name, attrs, ctx, src)


def _next_action(text: str, pos: int) -> int:
    for m in _TAG.finditer(text, pos):
        if not m.group(1) and m.group(2).lower() not in ("param", "parameter", "arg") and (
                m.group(2).lower() == "action" or is_verb(m.group(2))):
            return m.start()
    return len(text)
