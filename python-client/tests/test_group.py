"""Group starts (issue 42 item 7): N sessions at the identical start state, each
replica's frame hash and task state checked and reported, on a bundled task, a MiniWoB++
page and an OSWorld task, against the real server."""

from __future__ import annotations

import json
import pathlib
import shutil
from collections.abc import Iterator

import numpy as np
import pytest

import deskgym
from deskgym.group import judge

from conftest import Server

SMALL = (320, 240)
OSWORLD_TASK = pathlib.Path(__file__).parent / "osworld_tasks" / "os" / "e0df059f-28a6-4169-924f-b9623e7184cc.json"


def test_bad_routes_sizes_and_tasks_are_refused_before_any_desktop() -> None:
    for kw in (dict(route="clone"), dict(n=0), dict(n=2.5)):
        args = {"task": "click-target", "seed": 0, "n": 2, **kw}
        with pytest.raises(deskgym.DeskgymError) as e:
            deskgym.make_group(address="127.0.0.1:1", **args)  # type: ignore[arg-type]
        assert e.value.code == "INVALID_ARGUMENT", kw
    with pytest.raises(deskgym.DeskgymError) as e:
        deskgym.make_group(json.loads(OSWORLD_TASK.read_text()), 0, 2, route="fork", address="127.0.0.1:1")
    assert e.value.code == "INVALID_ARGUMENT" and "replay log" in e.value.message
    with pytest.raises(deskgym.DeskgymError) as e:
        deskgym.make_group({"instruction": "no config"}, 0, 2, address="127.0.0.1:1")
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(deskgym.DeskgymError) as e:
        deskgym.make_group("/nowhere/task.json", 0, 2, address="127.0.0.1:1")
    assert e.value.code == "NOT_FOUND"


def test_the_reference_is_what_most_replicas_show() -> None:
    s, t = {"seed": 1}, {"seed": 2}
    r = judge(["b", "a", "a", "b", "a"], [s, s, t, s, s], ["seed"] * 5, [""] * 5, requested="auto", route="seed")
    assert r.reference_hash == "a" and r.state == s, "three show a; the first of them says the state"
    assert r.diverged == [0, 2, 3] and not r.identical
    assert [x.same_frame for x in r.replicas] == [False, True, True, False, True]
    assert [x.same_state for x in r.replicas] == [True, True, False, True, True]
    tie = judge(["b", "a"], [s, s], ["seed"] * 2, [""] * 2, requested="seed", route="seed")
    assert tie.reference_hash == "b", "a tie goes to the earliest replica"
    assert "replicas [1] differ" in str(tie)


def _independent(group: deskgym.Group) -> None:
    """The replicas are N desktops, not one: a click on one changes only its own screen."""
    ids = {env.env_id for env in group}
    assert len(ids) == len(group)
    env = group[0]
    x, y = SMALL[0] // 2, SMALL[1] // 2
    _, _, _, _, info = env.step({"verb": "drag", "x": 5, "y": 5, "to_x": x, "to_y": y})
    others = {o.client.observe(o.env_id).frame_hash for o in list(group)[1:]}
    assert others == {group.report.reference_hash}


@pytest.mark.real
@pytest.mark.parametrize("route", ["auto", "fork"])
def test_a_group_of_eight_starts_identical_on_a_bundled_task(address: str, route: str) -> None:
    with deskgym.make_group("click-target", 7, 8, route=route, address=address, screen=SMALL) as group:
        rep = group.report
        assert rep.identical, rep
        assert len(group) == 8 and len({r.frame_hash for r in rep.replicas}) == 1
        assert rep.route == ("seed" if route == "auto" else "fork") and rep.requested == route
        assert [r.route for r in rep.replicas] == (["seed"] * 8 if route == "auto" else ["seed"] + ["fork"] * 7)
        if route == "fork":
            assert [r.fidelity for r in rep.replicas[1:]] == ["exact"] * 7
        assert all(np.array_equal(group.observations[0], o) for o in group.observations)
        assert {i["seed"] for i in group.infos} == {7} and len({i["instruction"] for i in group.infos}) == 1
        # The same start as one env reset with the seed on its own.
        with deskgym.make("click-target", address=address, screen=SMALL) as one:
            _, info = one.reset(seed=7)
        assert info["frame_hash"] == rep.reference_hash
        _independent(group)
        # Sessions close alone too; the group's close is then idempotent.
        group[3].close()
    with deskgym.Client(address) as c, pytest.raises(deskgym.DeskgymError) as e:
        c.observe(group[0].env_id)
    assert e.value.code == "NOT_FOUND", "closing the group released its desktops"


@pytest.fixture(scope="module")
def mw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    from deskgym.registration import miniwob_dir

    if miniwob_dir() is None or shutil.which("chromium") is None:
        pytest.skip("needs the miniwob package and Chromium (scripts/test.sh installs both)")
    data = tmp_path_factory.mktemp("miniwob-group")
    s = Server("--idle-timeout-s", "0", "--data-dir", str(data), "--miniwob-dir", str(miniwob_dir()))
    yield s
    s.stop()


@pytest.mark.real
def test_a_group_of_eight_starts_identical_on_a_miniwob_page(mw: Server) -> None:
    with deskgym.make_group("miniwob/click-button", 11, 8, address=mw.address) as group:
        rep = group.report
        assert rep.identical and rep.route == "seed", rep
        assert len({i["instruction"] for i in group.infos}) == 1 and group.infos[0]["instruction"]
        # Another seed is another page: the check can tell starts apart.
        with deskgym.make("miniwob/click-button", address=mw.address) as other:
            _, info = other.reset(seed=12)
        assert info["frame_hash"] != rep.reference_hash or info["instruction"] != group.infos[0]["instruction"]


@pytest.mark.real
def test_a_group_of_eight_starts_identical_on_an_osworld_task(exec_server: Server, tmp_path: pathlib.Path) -> None:
    pytest.importorskip("desktop_env")
    t = json.loads(OSWORLD_TASK.read_text())
    group = deskgym.make_group(OSWORLD_TASK, 0, 8, address=exec_server.address, cache_dir=str(tmp_path / "cache"),
                               screen_size=(1280, 720), require_a11y_tree=False)
    try:
        rep = group.report
        assert rep.identical and rep.route == "seed", rep
        assert rep.state["setup"] == [("config", 1, "execute", True), ("config", 2, "execute", True)], rep.state
        assert all(o["instruction"] == t["instruction"] for o in group.observations)
        # The task state the setup made is on every replica, not only its pixels.
        for env in group:
            assert env.deskgym.exec("test -d ~/Desktop/todo_list_Jan_1", shell=True).exit_code == 0
            assert env.evaluate() == 0
    finally:
        group.close()
