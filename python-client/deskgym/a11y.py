"""The accessibility tree of a desktop, as :meth:`DeskgymEnv.observe` returns it with
``structured=True``: typed elements with stable refs, a prompt-sized text rendering,
lookups by role and name, and diffs between two readings."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gymnasium import spaces

from deskgym.v1 import deskgym_pb2 as pb

__all__ = ["A11yText", "Element", "Tree", "TreeDiff", "tree_request"]


@dataclass(frozen=True)
class Element:
    """One element: ``ref`` (``"e12"``) names it in actions (``{"verb": "click", "ref": "e12"}``)
    while it lives; a gone element's ref answers ``stale_element_ref``."""

    ref: str
    role: str
    name: str
    description: str = ""
    text: str = ""
    states: frozenset[str] = frozenset()
    #: ``(x, y, width, height)`` in screen pixels, or ``None`` when it has no place.
    bounds: tuple[int, int, int, int] | None = None
    actions: tuple[str, ...] = ()
    #: ``(current, min, max, step)`` for elements with a numeric value.
    value: tuple[float, float, float, float] | None = None
    parent: str = ""
    depth: int = 0
    editable: bool = False
    attributes: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def showing(self) -> bool:
        """On screen (the AT-SPI ``showing`` state)."""
        return "showing" in self.states

    @property
    def center(self) -> tuple[int, int] | None:
        """Where a click on this element lands."""
        if self.bounds is None:
            return None
        x, y, w, h = self.bounds
        return x + w // 2, y + h // 2

    @classmethod
    def from_proto(cls, e: pb.Element) -> Element:
        b = e.bounds if e.HasField("bounds") else None
        v = e.value if e.HasField("value") else None
        return cls(
            ref=e.ref,
            role=e.role,
            name=e.name,
            description=e.description,
            text=e.text,
            states=frozenset(e.states),
            bounds=(b.x, b.y, b.width, b.height) if b is not None else None,
            actions=tuple(a.name for a in e.actions),
            value=(v.current, v.min, v.max, v.step) if v is not None else None,
            parent=e.parent,
            depth=e.depth,
            editable=e.editable,
            attributes=dict(e.attributes),
        )

    def _line(self) -> tuple[Any, ...]:
        # What a diff compares: everything but identity.
        return (self.role, self.name, self.text, self.states, self.bounds, self.actions, self.value)


@dataclass(frozen=True)
class TreeDiff:
    """What changed between two readings, by ref."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    #: ``+``/``~``/``-`` lines (the server's rendering when it made the diff).
    text: str

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


@dataclass(frozen=True)
class Tree:
    """One reading of the tree."""

    revision: int
    elements: tuple[Element, ...]
    #: One line per element on screen, indented by depth (for prompts).
    text: str
    #: ``text`` was cut at the line budget.
    truncated: bool
    #: Some elements are missing (an application did not answer in time); see ``partial_reasons``.
    partial: bool
    partial_reasons: tuple[str, ...]
    node_count: int
    capture_ms: float
    #: OSWorld's XML (``accessibility_tree``), when asked for with ``osworld_xml=True``.
    osworld_xml: str = ""
    #: The server's diff against ``diff_from``, when asked for.
    server_diff: TreeDiff | None = None
    #: Ref of the focused element, or ``""``.
    focus: str = ""

    @classmethod
    def from_proto(cls, t: pb.AccessibilityTree) -> Tree:
        d = t.diff if t.HasField("diff") else None
        return cls(
            revision=t.revision,
            elements=tuple(Element.from_proto(e) for e in t.elements),
            text=t.text,
            truncated=t.truncated,
            partial=t.partial,
            partial_reasons=tuple(t.partial_reasons),
            node_count=t.node_count,
            capture_ms=t.capture_ms,
            osworld_xml=t.osworld_xml,
            server_diff=TreeDiff(tuple(d.added), tuple(d.removed), tuple(d.changed), d.text) if d is not None else None,
            focus=t.focus,
        )

    def __iter__(self) -> Iterator[Element]:
        return iter(self.elements)

    def __len__(self) -> int:
        return len(self.elements)

    def __getitem__(self, key: str) -> Element:
        """The element whose ref is ``key`` (``tree["e12"]``), else the one element whose
        name is exactly ``key`` (``tree["Delete all"]``, as ACI's example has it). Two
        elements of that name are a ``KeyError`` naming their refs: a guess would act
        on an element the caller did not mean."""
        for e in self.elements:
            if e.ref == key:
                return e
        named = [e for e in self.elements if e.name == key]
        if len(named) == 1:
            return named[0]
        if named:
            raise KeyError(f"{len(named)} elements are named {key!r} ({', '.join(e.ref for e in named)}): "
                           "use a ref, or find(role=..., name=...)")
        raise KeyError(key)

    def find(self, role: str | None = None, name: str | None = None, *, showing: bool | None = None) -> list[Element]:
        """Elements with ``role`` (any when ``None``) whose name matches ``name`` as the
        server's element targets match it: exactly, else case-insensitively, else as a
        case-insensitive substring (the first of these that matches anything)."""
        pool = [
            e for e in self.elements
            if (role is None or e.role.lower() == role.lower()) and (showing is None or e.showing == showing)
        ]
        if name is None:
            return pool
        low = name.lower()
        for test in (lambda e: e.name == name, lambda e: e.name.lower() == low, lambda e: low in e.name.lower()):
            hits = [e for e in pool if test(e)]
            if hits:
                return hits
        return []

    def diff(self, prev: Tree) -> TreeDiff:
        """What changed since ``prev`` (an earlier reading of the same env and episode)."""
        old = {e.ref: e for e in prev.elements}
        new = {e.ref: e for e in self.elements}
        added = tuple(r for r in new if r not in old)
        removed = tuple(r for r in old if r not in new)
        changed = tuple(r for r in new if r in old and new[r]._line() != old[r]._line())
        lines = [f"~ {r} {new[r].role} {new[r].name!r}" for r in changed]
        lines += [f"+ {r} {new[r].role} {new[r].name!r}" for r in added]
        if removed:
            lines.append(f"- {', '.join(removed)} ({len(removed)} removed)")
        return TreeDiff(added, removed, changed, "\n".join(lines or ["no change"]) + "\n")


def tree_request(
    *,
    osworld_xml: bool = False,
    line_budget: int = 0,
    diff_from: Tree | int | None = 0,
    timeout_ms: int = 0,
    omit_elements: bool = False,
) -> pb.TreeRequest:
    """A ``TreeRequest`` (0 means the server's default); ``diff_from``: a tree read
    before, or its revision, to get only what changed since."""
    return pb.TreeRequest(
        enabled=True,
        osworld_xml=osworld_xml,
        line_budget=line_budget,
        diff_from=diff_from.revision if isinstance(diff_from, Tree) else int(diff_from or 0),
        timeout_ms=timeout_ms,
        omit_elements=omit_elements,
    )


class A11yText(spaces.Space[str]):
    """The tree's text rendering as an observation (``obs_type="a11y"``)."""

    def __init__(self) -> None:
        super().__init__(shape=None, dtype=None)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return 'e1 application "app"\n'

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "A11yText()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, A11yText)
