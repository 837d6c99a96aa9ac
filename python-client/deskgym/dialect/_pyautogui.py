"""OSWorld's pyautogui action space: code in python code fences (or bare ``pyautogui.``
lines) and the special strings ``WAIT``, ``DONE`` and ``FAIL``, a block of their own or
the last line of a code block, as OSWorld's ``parse_code_from_string`` reads them.

The code becomes actions through :func:`deskgym.osworld.actions.translate`, the same
translation the OSWorld shim runs (decision 61): pyautogui calls with literal arguments
and ``time.sleep``. Anything else (variables, loops, a click at the current position,
``dragTo``) cannot be typed actions and raises; through the shim it would run as code."""

from __future__ import annotations

import re

from deskgym.dialect._verbs import Action, Context, DialectError
from deskgym.osworld.actions import Sleep, translate

#: OSWorld's special strings and what each is here (WAIT: OSWorld's own pause, 2 s).
SPECIAL: dict[str, Action] = {
    "WAIT": {"verb": "wait", "ms": 2000},
    "DONE": {"verb": "noop", "end": "success"},
    "FAIL": {"verb": "noop", "end": "failure"},
}
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n`]*\n?(.*?)(?:```|\Z)", re.S)
_CODE_LINE = re.compile(r"^\s*(?:import |from |pyautogui\.|time\.sleep\b)")
_EXPECTED = ("pyautogui calls with literal arguments, e.g. pyautogui.click(100, 200), "
             "pyautogui.hotkey('ctrl', 's'), time.sleep(1); or WAIT, DONE, FAIL")


def looks_like(text: str) -> bool:
    return "pyautogui." in text or any(_special(b) is not None for b in _blocks(text)) or _special(text) is not None


def _special(block: str) -> str | None:
    s = block.strip().strip("`").strip()
    return s if s in SPECIAL else None


def _blocks(text: str) -> list[str]:
    return [m.group(2) for m in _FENCE.finditer(text)
            if m.group(1).lower() in ("", "python", "py", "python3") or "pyautogui." in m.group(2)]


def _code(block: str, ctx: Context) -> list[Action]:
    plan = translate(block)
    if plan is None:
        raise DialectError("code that is not only pyautogui calls with literal arguments", block.strip(), _EXPECTED)
    out: list[Action] = []
    for a in plan:
        if isinstance(a, Sleep):
            out.append({"verb": "wait", "ms": round(float(a) * 1000)})
            continue
        act: Action = dict(a)
        if "x" in act:
            act.update(ctx.space.point((act.pop("x"), act.pop("y")), f"{act['verb']}.position", block.strip()))
        out.append(act)
    return out


def parse(text: str, ctx: Context) -> list[Action]:
    if ctx.space.coords == "norm":
        raise DialectError("pyautogui code points in pixels (or the 0..1000 grid), not in 0..1", text,
                           "coords='pixels' or coords='grid1000'")
    blocks = _blocks(text)
    if not blocks:
        if _special(text) is not None:
            return [dict(SPECIAL[text.strip().strip("`").strip()])]
        lines = text.splitlines()
        stray = [ln for ln in lines if "pyautogui." in ln and not _CODE_LINE.match(ln)]
        if stray:
            raise DialectError("pyautogui code outside a code block that is not a bare call", stray[0], _EXPECTED)
        blocks = ["\n".join(ln for ln in lines if _CODE_LINE.match(ln))]
    out: list[Action] = []
    for block in blocks:
        special = _special(block)
        if special is not None:
            out.append(dict(SPECIAL[special]))
            continue
        code, _, last = block.rstrip().rpartition("\n")
        special = _special(last)
        out += _code(code if special else block, ctx) if (code.strip() or not special) else []
        if special:
            out.append(dict(SPECIAL[special]))
    if not out:
        raise DialectError("no pyautogui code", text, _EXPECTED)
    return out
