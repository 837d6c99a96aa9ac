"""Structured observation: the accessibility tree of real applications (AT-SPI, read in
each env's sandbox), element refs and element targets, and OSWorld's XML; and the
bundled task app's widgets as a tree for the `tasks` profile."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import pytest
from conftest import Server
from gymnasium.utils.env_checker import check_env

import deskgym
from deskgym.a11y import Tree

#: OSWorld's namespace map (desktop_env/server/main.py, Ubuntu).
OSWORLD_NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}


def tree_until(env: deskgym.DeskgymEnv, pred: Callable[[Tree], Any], what: str, timeout: float = 30.0, **kw: Any) -> Tree:
    """Observes the tree until ``pred`` holds (applications register and fill in over time)."""
    t0 = time.monotonic()
    t = env.observe(structured=True, timeout_ms=20000, **kw)
    while not pred(t):
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"timed out waiting for {what}; last tree:\n{t.text[:4000]}")
        time.sleep(0.3)
        t = env.observe(structured=True, timeout_ms=20000, **kw)
    return t


def one(t: Tree, role: str, name: str | None = None) -> deskgym.Element:
    hits = [e for e in t.find(role=role, name=name) if e.showing]
    assert hits, f"no showing {role} {name!r} in:\n{t.text[:4000]}"
    return hits[0]


@pytest.mark.spec("aci:4.1.observe", "aci:4.1.element-actions", "aci:3.targets")
def test_task_app_widgets_are_a_tree_with_element_targets(address: str) -> None:
    env = deskgym.make("click-button", address=address, screen=(640, 480), obs_type="a11y")
    try:
        obs, info = env.reset(seed=3)
        assert isinstance(obs, str) and obs == env.last_tree.text
        t = env.last_tree
        assert [e.role for e in t][:3] == ["application", "frame", "label"]
        assert t[t.find(role="label")[0].ref].name == info["instruction"]
        # A reset restarts numbering: the same seed gives the same refs and text.
        again, _ = env.reset(seed=3)
        assert again == obs
        answer = info["instruction"].split('"')[1]
        buttons = t.find(role="push button")
        assert len(buttons) >= 3 and answer in {b.name for b in buttons}
        # A ref that was never minted, and a query matching several buttons, are typed errors.
        with pytest.raises(deskgym.DeskgymError) as e:
            env.step({"verb": "click", "ref": "e99"})
        assert e.value.code == "FAILED_PRECONDITION" and e.value.reason == "stale_element_ref"
        with pytest.raises(deskgym.DeskgymError) as e:
            env.step({"verb": "click", "element": {"role": "", "name": ""}})
        assert e.value.code == "INVALID_ARGUMENT"
        # A role alone names the one element of that role; several are ambiguous.
        with pytest.raises(deskgym.DeskgymError) as e:
            env.step({"verb": "click", "element": {"role": "push button"}})
        assert e.value.reason == "ambiguous_element"
        with pytest.raises(deskgym.DeskgymError) as e:
            env.step({"verb": "click", "element": {"role": "label", "name": "no such label"}})
        assert e.value.reason == "element_not_found"
        # Clicking the answer's ref is the pixel click at its centre: reward 1.
        obs, reward, terminated, _, _ = env.step({"verb": "click", "ref": one(t, "push button", answer).ref})
        assert (reward, terminated) == (1.0, True)
        # The query form resolves against the live tree.
        env.reset(seed=4)
        name = env.last_tree.find(role="push button")[0].name
        _, _, terminated, _, _ = env.step({"verb": "invoke_action", "element": {"role": "push button", "name": name}})
        assert terminated
    finally:
        env.close()


def test_set_value_types_into_the_task_field_and_gym_checks_pass(address: str) -> None:
    env = deskgym.make("type-word", address=address, screen=(640, 480), obs_type="rgb+a11y")
    try:
        obs, info = env.reset(seed=5)
        assert set(obs) == {"pixels", "a11y"} and env.observation_space.contains(obs)
        word = info["instruction"].split('"')[1]
        field = one(env.last_tree, "text")
        assert field.editable
        env.step({"verb": "set_value", "ref": field.ref, "value": "wrong"})
        obs, *_ = env.step({"verb": "set_value", "ref": field.ref, "value": word})
        assert env.last_tree[field.ref].text == word, obs["a11y"]
        _, reward, terminated, _, _ = env.step({"verb": "key", "keys": "Return"})
        assert (reward, terminated) == (1.0, True)
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.spec("aci:4.1.stable-ids", "aci:4.1.element-actions", "aci:4.1.observe")
def test_desktop_apps_trees_refs_set_value_and_stale_refs(exec_server: Server) -> None:
    lxml = pytest.importorskip("lxml.etree")
    env = deskgym.make(
        "blank", address=exec_server.address, profile="desktop", screen=(1280, 800),
        capabilities=["launch_app", "files", "windows"],
    )
    try:
        env.reset(seed=0)
        env.put_file("note.txt", "before\n")
        env.launch_app("editor", ["/home/user/note.txt"])
        env.launch_app("terminal")
        env.launch_app("files")
        t = tree_until(
            env,
            lambda t: t.find(role="terminal") and t.find(role="frame", name="note.txt") and t.find(role="push button", name="Home Folder"),
            "the editor, terminal and file manager",
        )
        assert {"mousepad", "gnome-terminal-server", "pcmanfm"} <= {e.name for e in t.find(role="application")}
        editor = one(t, "frame", "note.txt")
        text = next(e for e in t if e.role == "text" and e.editable and e.text.startswith("before"))
        # Refs are stable across observations, and after a change elsewhere.
        t2 = env.observe(structured=True, diff_from=t, timeout_ms=20000)
        assert t2[editor.ref].name == editor.name and t2[text.ref].role == "text"
        assert t2.server_diff is not None
        env.step({"verb": "key", "keys": "ctrl+alt+t"})  # another terminal window
        t3 = tree_until(env, lambda t: len(t.find(role="terminal")) >= 2, "a second terminal")
        assert t3[editor.ref].name == editor.name
        assert t3.diff(t2).added, "the new terminal's elements are new refs"
        # SetValue changes the text the editor then saves.
        env.step({"verb": "set_value", "ref": text.ref, "value": "written through AT-SPI\n"})
        assert env.observe(structured=True, timeout_ms=20000)[text.ref].text == "written through AT-SPI\n"
        win = next(w for w in env.windows() if "note.txt" in w.title)
        env.step({"verb": "activate_window", "window": win.id})
        env.step({"verb": "key", "keys": "ctrl+s"})
        t0 = time.monotonic()
        while env.get_file("note.txt") != b"written through AT-SPI\n" and time.monotonic() - t0 < 20:
            time.sleep(0.3)
        assert env.get_file("note.txt") == b"written through AT-SPI\n"
        # OSWorld's XML parses, and its namespace map finds showing nodes with positions.
        t = env.observe(structured=True, osworld_xml=True, timeout_ms=20000)
        root = lxml.fromstring(t.osworld_xml.encode())
        assert root.tag == "desktop-frame"
        placed = root.xpath('//*[@st:showing="true" and @cp:screencoord]', namespaces=OSWORLD_NS)
        assert len(placed) > 20
        assert root.xpath('//push-button[@name="Home Folder"]', namespaces=OSWORLD_NS)
        # OSWorld's own agent code (mm_agents, from the desktop-env wheel) reads it: the
        # node filter its agents linearize for prompts, and its set-of-marks drawing.
        from mm_agents.accessibility_tree_wrap.heuristic_retrieve import draw_bounding_boxes, filter_nodes

        kept = filter_nodes(ET.fromstring(t.osworld_xml))
        assert any(n.tag == "push-button" and n.get("name") == "Home Folder" for n in kept), [n.tag for n in kept]
        assert any(n.tag == "menu" and n.get("name") == "File" for n in kept)
        marks, drawn, table, image = draw_bounding_boxes(kept, env.screenshot(encoding="png").frame)
        assert marks and len(marks) == len(drawn) and image
        assert "Home Folder" in table, table
        # A ref to a window that closed is stale.
        env.step({"verb": "close_window", "window": win.id})
        tree_until(env, lambda t: not t.find(role="frame", name="note.txt"), "the editor to close")
        with pytest.raises(deskgym.DeskgymError) as e:
            env.step({"verb": "click", "ref": text.ref})
        assert e.value.reason == "stale_element_ref", e.value
    finally:
        env.close()


def test_chromium_page_and_writer_have_trees_and_a_ref_click_activates(exec_server: Server) -> None:
    env = deskgym.make(
        "blank", address=exec_server.address, profile="desktop", screen=(1280, 800),
        capabilities=["launch_app", "files"],
    )
    try:
        env.reset(seed=0)
        env.put_file(
            "page.html",
            "<html><head><title>Local page</title></head><body><h1>Hello deskgym</h1>"
            "<button onclick=\"document.title='clicked'\">Press me</button>"
            "<button onclick=\"document.title='invoked'\">Second</button>"
            "<input aria-label=Query></body></html>",
        )
        env.launch_app("chromium", ["/home/user/page.html"])
        t = tree_until(env, lambda t: t.find(role="push button", name="Press me"), "the page's button")
        assert one(t, "document web", "Local page")
        assert one(t, "heading", "Hello deskgym")
        assert "editable" in one(t, "entry", "Query").states
        env.step({"verb": "click", "ref": one(t, "push button", "Press me").ref})
        tree_until(env, lambda t: t.find(role="document web", name="clicked"), "the click's effect (title 'clicked')")
        # An AT-SPI action on an element found by role and name on the live tree.
        env.step({"verb": "invoke_action", "element": {"role": "push button", "name": "second"}, "action": "press"})
        tree_until(env, lambda t: t.find(role="document web", name="invoked"), "the invoked action's effect")
        env.launch_app("writer")
        t = tree_until(env, lambda t: t.find(role="document text", showing=True), "Writer's document", timeout=60)
        assert any("LibreOffice Writer" in f.name for f in t.find(role="frame"))
    finally:
        env.close()


@pytest.mark.spec("aci:4.1.bounded-walk")
def test_a_stopped_application_leaves_a_partial_tree_not_a_hung_env(exec_server: Server) -> None:
    env = deskgym.make(
        "blank", address=exec_server.address, profile="desktop", screen=(1024, 768),
        capabilities=["launch_app", "exec"],
    )
    try:
        env.reset(seed=0)
        env.launch_app("terminal")
        env.launch_app("editor")
        tree_until(env, lambda t: t.find(role="terminal") and t.find(role="application", name="mousepad"), "both apps")
        assert env.exec(["pkill", "-STOP", "mousepad"]).ok
        try:
            t = env.observe(structured=True, timeout_ms=4000)
            assert t.partial, t.text
            assert any("did not answer" in r or "deadline" in r for r in t.partial_reasons), t.partial_reasons
            assert t.find(role="terminal"), "the other application is still read"
            # The env itself goes on.
            env.step({"verb": "key", "keys": "ctrl+alt+t"})
        finally:
            env.exec(["pkill", "-CONT", "mousepad"])
        t = tree_until(env, lambda t: not t.partial and t.find(role="application", name="mousepad"), "mousepad again")
        assert not t.partial_reasons
    finally:
        env.close()
