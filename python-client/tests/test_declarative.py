"""The five bundled declarative tasks on the `desktop` profile: each solved by a
scripted oracle through pixel actions (keys and typing into real applications), and
each failed by a near miss that the task's own checker must not accept."""

from __future__ import annotations

import time
from typing import Any

import pytest

import deskgym

WAIT: dict[str, Any] = {"verb": "wait", "ms": 1500}


def typed(text: str) -> dict[str, Any]:
    return {"verb": "type_text", "text": text}


def key(keys: str) -> dict[str, Any]:
    return {"verb": "key", "keys": keys}


#: Not an action: the oracle waits until the application shows a dialog (read from the
#: accessibility tree), as a user would, so a loaded machine cannot make it type too early.
#: A shortcut pressed before the application's window took focus is lost: with no dialog
#: after 5 s the oracle presses it again, as a user would.
DIALOG: dict[str, Any] = {"until": "dialog"}
#: How long the oracle waits for a dialog before pressing its shortcut again.
REPRESS_S = 5.0

#: task -> (oracle actions, near-miss actions)
CASES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
    "desktop/terminal-copy": (
        [WAIT, typed("cp ~/src/*.txt ~/dst/\n")],
        [WAIT, typed("cp ~/src/a.txt ~/src/b.txt ~/dst/\n")],
    ),
    "desktop/gsettings-clock": (
        [WAIT, typed("gsettings set org.gnome.desktop.interface clock-format 12h\n")],
        [WAIT, typed("gsettings set org.gnome.desktop.interface clock-format 24h\n")],
    ),
    "desktop/create-folder": (
        [WAIT, key("ctrl+shift+n"), DIALOG, key("ctrl+a"), typed("reports\n")],
        [WAIT, key("ctrl+shift+n"), DIALOG, key("ctrl+a"), typed("report\n")],
    ),
    "desktop/rename-file": (
        [WAIT, key("ctrl+a"), key("F2"), DIALOG, key("ctrl+a"), typed("final.txt\n")],
        [WAIT, key("ctrl+a"), key("F2"), DIALOG, key("ctrl+a"), typed("final.md\n")],
    ),
    "desktop/editor-save": (
        [WAIT, typed("hello deskgym"), key("ctrl+s")],
        [WAIT, typed("hello deskgym")],  # typed but never saved
    ),
}


def play(address: str, task: str, actions: list[dict[str, Any]], max_steps: int) -> tuple[float, bool, bool]:
    env = deskgym.make(task, address=address, screen=(1024, 768), max_steps=max_steps)
    try:
        _, info = env.reset(seed=7)
        assert info["instruction"], "declarative tasks carry their instruction"
        total, terminated, truncated = 0.0, False, False
        queue = list(actions)
        last: dict[str, Any] = WAIT
        while not (terminated or truncated):
            # Then wait for the application to finish (a command running, a save).
            a = queue.pop(0) if queue else {"verb": "wait", "ms": 300}
            if a is DIALOG:
                t0 = pressed = time.monotonic()
                while not env.observe(structured=True).find(role="dialog", showing=True):
                    assert time.monotonic() - t0 < 30, f"{task}: no dialog opened"
                    if time.monotonic() - pressed > REPRESS_S:
                        env.step(last)
                        pressed = time.monotonic()
                    time.sleep(0.2)
                continue
            _, r, terminated, truncated, _ = env.step(a)
            last = a
            total += float(r)
        return total, terminated, truncated
    finally:
        env.close()


@pytest.mark.parametrize("task", sorted(CASES))
def test_oracle_solves_it(address: str, task: str) -> None:
    oracle, _ = CASES[task]
    total, terminated, truncated = play(address, task, oracle, max_steps=len(oracle) + 10)
    assert (total, terminated, truncated) == (1.0, True, False), task


@pytest.mark.parametrize("task", sorted(CASES))
def test_near_miss_fails_it(address: str, task: str) -> None:
    _, miss = CASES[task]
    total, terminated, truncated = play(address, task, miss, max_steps=len(miss) + 3)
    assert (total, terminated, truncated) == (0.0, False, True), task
