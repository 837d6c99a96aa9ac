"""MiniWoB++ on deskgym: the task ids, and a scripted oracle that reads an episode's
page (its elements, as ``obs_type="rgb+a11y"`` or :meth:`DeskgymEnv.observe` give them)
and the instruction, and says what a perfect agent does on ten tasks.

The oracle answers in screen pixels (an element's centre, where deskgym's own click on
a ref lands), so the same plan drives MiniWoB++'s own environment (``CLICK_COORDS``,
``TYPE_TEXT``) for side-by-side runs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from deskgym.a11y import Element, Tree, tree_request
from deskgym.registration import miniwob_names

__all__ = ["ORACLE_TASKS", "OracleAgent", "Step", "as_actions", "miniwob_names", "plan"]

#: One step of a plan: ``("click", (x, y))`` or ``("type", text)``.
Step = tuple[str, Any]

#: Tasks the oracle solves.
ORACLE_TASKS = (
    "click-button", "click-button-sequence", "click-checkboxes", "click-link", "click-option",
    "click-tab", "enter-password", "enter-text", "focus-text", "login-user",
)


def _centre(e: Element) -> tuple[int, int]:
    if e.bounds is None:
        raise ValueError(f"element {e.ref} has no bounds")
    x, y, w, h = e.bounds
    return x + w // 2, y + h // 2


def _uncovered(e: Element, above: Sequence[Element]) -> tuple[int, int]:
    """A point of ``e`` that no element of ``above`` (drawn over it) covers: its centre
    when free, else the first free point row by row."""
    if e.bounds is None:
        raise ValueError(f"element {e.ref} has no bounds")
    x, y, w, h = e.bounds
    covers = [a.bounds for a in above if a.bounds is not None]

    def free(px: int, py: int) -> bool:
        return not any(ax <= px < ax + aw and ay <= py < ay + ah for ax, ay, aw, ah in covers)

    if free(x + w // 2, y + h // 2):
        return x + w // 2, y + h // 2
    for py in range(y + 1, y + h - 1, 2):
        for px in range(x + 1, x + w - 1, 2):
            if free(px, py):
                return px, py
    raise ValueError(f"element {e.ref} is covered")


def _one(elements: Sequence[Element], what: str, pred: Any) -> Element:
    found = [e for e in elements if pred(e)]
    if not found:
        raise ValueError(f"no {what} on the page")
    return found[0]


def _quoted(instruction: str) -> list[str]:
    return re.findall(r'"([^"]*)"', instruction)


def _labelled(elements: Sequence[Element], role: str, text: str) -> Element:
    """The input of ``role`` whose label's text is ``text``."""
    by_ref = {e.ref: e for e in elements}
    for e in elements:
        if e.role == "t" and e.name == text and e.parent in by_ref:
            for c in elements:
                if c.parent == e.parent and c.role == role:
                    return c
    raise ValueError(f"no {role} labelled {text!r}")


def plan(task: str, instruction: str, elements: Sequence[Element]) -> list[Step]:
    """What solves ``task`` (a name from :data:`ORACLE_TASKS`, with or without the
    ``miniwob/`` prefix) given its instruction and the page's elements."""
    task = task.removeprefix("miniwob/")
    els = list(elements)

    def button(name: str) -> Step:
        return ("click", _centre(_one(els, f"button {name!r}", lambda e: e.role == "button" and e.name == name)))

    def field(role: str, n: int = 0) -> Step:
        return ("click", _centre([e for e in els if e.role == role][n]))

    if task == "click-button":
        return [button(_quoted(instruction)[0])]
    if task in ("click-button-sequence", "click-test-2"):
        # The buttons lie where the seed put them; a later one may cover part of another.
        buttons = [e for e in els if e.role == "button"]
        out: list[Step] = []
        for name in re.findall(r"button (\w+)", instruction):
            b = _one(buttons, f"button {name!r}", lambda e: e.name == name)
            out.append(("click", _uncovered(b, buttons[buttons.index(b) + 1:])))
        return out
    if task in ("click-checkboxes", "click-option"):
        m = re.match(r"Select (.*) and click Submit\.", instruction)
        if m is None:
            raise ValueError(f"unexpected instruction {instruction!r}")
        items = [] if m.group(1) == "nothing" else m.group(1).split(", ")
        role = "input_checkbox" if task == "click-checkboxes" else "input_radio"
        return [("click", _centre(_labelled(els, role, i))) for i in items] + [button("Submit")]
    if task == "click-link":
        want = _quoted(instruction)[0].rstrip(".,;:!?")
        link = _one(els, f"link {want!r}", lambda e: "alink" in e.attributes.get("classes", "")
                    and e.name.rstrip(".,;:!?") == want)
        return [("click", _centre(link))]
    if task == "click-tab":
        n = re.findall(r"Tab #(\d+)", instruction)[0]
        return [("click", _centre(_one(els, f"tab {n}", lambda e: e.role == "a" and e.name == f"Tab #{n}")))]
    if task == "enter-text":
        return [field("input_text"), ("type", _quoted(instruction)[0]), button("Submit")]
    if task == "enter-password":
        pw = _quoted(instruction)[0]
        return [field("input_password", 0), ("type", pw), field("input_password", 1), ("type", pw), button("Submit")]
    if task == "focus-text":
        return [field("input_text")]
    if task == "login-user":
        user, pw = _quoted(instruction)[:2]
        return [field("input_text"), ("type", user), field("input_password"), ("type", pw), button("Login")]
    raise ValueError(f"the oracle does not know task {task!r}; it knows {', '.join(ORACLE_TASKS)}")


def as_actions(steps: Sequence[Step]) -> list[dict[str, Any]]:
    """A plan as deskgym actions (``DeskgymEnv.step`` dicts)."""
    return [
        {"verb": "click", "x": s[1][0], "y": s[1][1]} if s[0] == "click" else {"verb": "type_text", "text": s[1]}
        for s in steps
    ]


class OracleAgent:
    """The oracle as an agent of one env of a vector env (``act(frame, info)``, as the
    demo's agents): at each episode's first step it reads the page's elements through
    ``client`` and plans; then it plays the plan, and waits (``noop``) once done. A
    task the oracle does not know gets ``noop`` throughout."""

    name = "scripted"

    def __init__(self, client: Any, env_id: str, task: str) -> None:
        self.client, self.env_id, self.task = client, env_id, task
        self._plan: list[dict[str, Any]] = []

    def act(self, frame: Any, info: dict[str, Any]) -> dict[str, Any]:
        if int(info["step_index"]) == 0:
            tree = Tree.from_proto(self.client.observe(self.env_id, encoding="jpeg", tree=tree_request()).tree)
            try:
                self._plan = as_actions(plan(self.task, str(info["instruction"]), tree.elements))
            except ValueError:
                self._plan = []
        return self._plan.pop(0) if self._plan else {"verb": "noop"}
