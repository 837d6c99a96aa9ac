"""The conformance tables of docs/agents.md against the tests: every normative row of the
three seed specifications that deskgym claims (yes, choice, differs) is named by a test,
every test's declaration names a real row, and the tables in the docs are the ones the
declarations give (``scripts/conformance.py``)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]


def load() -> object:
    spec = importlib.util.spec_from_file_location("conformance", REPO / "scripts" / "conformance.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["conformance"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_every_claimed_row_is_named_by_a_test_and_the_tables_are_current() -> None:
    conformance = load()
    by_spec, problems = conformance.build()  # type: ignore[attr-defined]
    assert not problems, "\n".join(problems)
    doc = (REPO / "docs" / "agents.md").read_text()
    assert conformance.render(doc, by_spec) == doc, "stale tables: run python3 scripts/conformance.py"  # type: ignore[attr-defined]


def test_a_row_without_a_test_and_a_declaration_without_a_row_are_caught() -> None:
    # The check itself can fail: a claimed row nobody tests, and a test naming a row
    # that does not exist, are both reported.
    conformance = load()
    rows = conformance.rows  # type: ignore[attr-defined]

    def with_extra(spec: str) -> list[object]:
        out = rows(spec)
        if spec == "axstream":
            out.append(conformance.Row("axstream", "z.untested", "a requirement", "yes"))  # type: ignore[attr-defined]
        return out

    declarations = conformance.declarations  # type: ignore[attr-defined]
    conformance.rows = with_extra  # type: ignore[attr-defined]
    conformance.declarations = lambda: declarations() + [("axstream:z.nowhere", "t.py::test_x")]  # type: ignore[attr-defined]
    _, problems = conformance.build()  # type: ignore[attr-defined]
    assert any("axstream:z.untested" in p and "no test names it" in p for p in problems), problems
    assert any("axstream:z.nowhere" in p for p in problems), problems
