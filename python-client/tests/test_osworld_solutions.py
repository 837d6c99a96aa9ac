"""Known-good OSWorld solutions (issue 41 item 3): one case per module under
``osworld_solutions/<domain>/<task id>.py``, each run as the contract says
(:func:`deskgym.osworld.suite.solution_task`: the task's files or stand-ins, a reset, 0
with no action, a second reset, the solution acting through ``env.step``, then 1), on a
real desktop with OSWorld's own setup, getters and metrics. A module with ``UNSOLVABLE``
is reported as skipped with its reason (``-rs`` lists them), never as a pass.

Which modules run (``DESKGYM_SOLUTIONS``):
- unset: CI's subset, the first solvable module of each domain in ``sample.json``'s
  order (a fixed rule, so nothing is hand-picked; every domain is covered);
- ``all``: every module (``-k vs_code`` or ``-k <task id prefix>`` narrows it);
- a comma-separated list of module paths, domains or task ids (prefixes).

    DESKGYM_SOLUTIONS=all pytest -q -rs python-client/tests/test_osworld_solutions.py -k vlc
    DESKGYM_SOLUTIONS=python-client/tests/osworld_solutions/os/5812b315-e7bd-4265-b51f-863c02174c28.py pytest ...
"""

from __future__ import annotations

import json
import os
import pathlib
import re
from typing import Any

import pytest
from test_osworld import make_env  # noqa: F401 - the fixture

from deskgym.osworld.suite import load_solution, solution_modules, solution_task

HERE = pathlib.Path(__file__).parent
ROOT = HERE / "osworld_solutions"
EXAMPLES = HERE / "osworld_tasks" / "evaluation_examples" / "examples"
SAMPLE: dict[str, list[str]] = json.loads((ROOT / "sample.json").read_text())
#: The screen OSWorld's tasks are made for (and the runner's default).
SCREEN = (1920, 1080)


def _unsolvable(path: pathlib.Path) -> bool:
    return re.search(r"^UNSOLVABLE\s*(:[^=]*)?=", path.read_text(), re.M) is not None


def ci_subset(modules: list[tuple[str, pathlib.Path]]) -> list[tuple[str, pathlib.Path]]:
    """The first solvable module of each domain, in the sample's order."""
    by_id = {p.stem: (d, p) for d, p in modules}
    out = []
    for domain, ids in SAMPLE.items():
        first = next((by_id[t] for t in ids if t in by_id and not _unsolvable(by_id[t][1])), None)
        if first is not None:
            out.append(first)
    return out


def selected() -> list[tuple[str, pathlib.Path]]:
    modules = solution_modules(ROOT)
    want = os.environ.get("DESKGYM_SOLUTIONS", "").strip()
    if not want:
        return ci_subset(modules)
    if want == "all":
        return modules
    keys = [k.strip() for k in want.split(",") if k.strip()]

    def chosen(d: str, p: pathlib.Path) -> bool:
        return any(pathlib.Path(k).resolve() == p.resolve() or k == d or p.stem.startswith(k) for k in keys)

    return [(d, p) for d, p in modules if chosen(d, p)]


SELECTED = selected()


def test_every_sampled_task_has_a_module_and_no_module_is_outside_the_sample() -> None:
    """The sample is solved as drawn: each task has its module (a solution, or
    ``UNSOLVABLE`` with the reason), and no module solves a task the draw did not pick."""
    have = {(d, p.stem) for d, p in solution_modules(ROOT)}
    drawn = {(d, t) for d, ids in SAMPLE.items() for t in ids}
    missing = sorted(f"{d}/{t}" for d, t in drawn - have)
    extra = sorted(f"{d}/{t}" for d, t in have - drawn)
    assert not extra, f"modules outside the sample: {extra}"
    if missing:
        # Reported, not failed, while the sample is being written (three helpers at once);
        # the count shows in every run's summary as an xfail until it is 0.
        pytest.xfail(f"{len(missing)} of the {len(drawn)} sampled tasks have no module yet: {missing[:5]} ...")


@pytest.mark.parametrize("domain,path", SELECTED, ids=[f"{d}/{p.stem}" for d, p in SELECTED])
def test_known_good_solution_scores_0_then_1(domain: str, path: pathlib.Path, make_env: Any) -> None:
    module = load_solution(path)
    if getattr(module, "UNSOLVABLE", None):
        pytest.skip(f"UNSOLVABLE {domain}/{path.stem}: {module.UNSOLVABLE}")
    task = json.loads((EXAMPLES / domain / f"{path.stem}.json").read_text())
    env = make_env(require_a11y_tree=False, screen_size=SCREEN)
    row = solution_task(env, module, domain, task)
    shown = {k: row.get(k) for k in ("status", "cause", "no_action", "score", "seconds", "solve_seconds")}
    print(f"{domain}/{path.stem}: {shown}")
    assert row["passed"], f"{domain}/{path.stem}: {shown}; setup failed: {row.get('setup_failed')}"
