"""pyautogui code -> deskgym actions (no server): what translates, and what must not."""

from __future__ import annotations

import pytest

from deskgym.osworld.actions import Sleep, translate


@pytest.mark.parametrize(
    ("code", "actions"),
    [
        ("pyautogui.click(100, 200)", [{"verb": "click", "button": "left", "count": 1, "x": 100, "y": 200}]),
        ("pyautogui.click(x=5, y=6, button='right')", [{"verb": "click", "button": "right", "count": 1, "x": 5, "y": 6}]),
        ("pyautogui.doubleClick((7, 8))", [{"verb": "click", "button": "left", "count": 2, "x": 7, "y": 8}]),
        ("pyautogui.moveTo(1.6, 2.4)", [{"verb": "move", "x": 2, "y": 2}]),
        ("pyautogui.scroll(3, x=10, y=20)", [{"verb": "scroll", "x": 10, "y": 20, "dx": 0, "dy": -3}]),
        ("pyautogui.hotkey('ctrl', 'alt', 't')", [{"verb": "key", "keys": "ctrl+alt+t"}]),
        ("pyautogui.hotkey('ctrl', '+')", [{"verb": "key", "keys": "ctrl+plus"}]),
        ("pyautogui.press('enter', presses=2)", [{"verb": "key", "keys": "enter"}] * 2),
        ("pyautogui.press(['a', 'winleft'])", [{"verb": "key", "keys": "a"}, {"verb": "key", "keys": "Super_L"}]),
        ("import pyautogui, time\npyautogui.FAILSAFE = False\npyautogui.typewrite('hi\\n', interval=0.05); time.sleep(0.5)",
         [{"verb": "type_text", "text": "hi\n"}, Sleep(0.5)]),
        ("pyautogui.keyDown('shift'); pyautogui.keyUp('shift')", [{"verb": "key_down", "keys": "shift"}, {"verb": "key_up", "keys": "shift"}]),
        ("pyautogui.mouseDown(button='left')", [{"verb": "mouse_down", "button": "left"}]),
    ],
)
def test_pure_pyautogui_becomes_actions(code: str, actions: list) -> None:
    assert translate(code) == actions


@pytest.mark.parametrize(
    "code",
    [
        "pyautogui.click()",  # at the current position
        "x = 3\npyautogui.click(x, 4)",
        "for i in range(3): pyautogui.press('a')",
        "import subprocess; subprocess.run(['ls'])",
        "pyautogui.dragTo(10, 10)",
        "pyautogui.press('notakey')",
        "pyautogui.click(1, 2, button='left4')",
        "pyautogui.locateOnScreen('x.png')",
        "pyautogui.click(1, 2",
        "pyautogui.scroll(1000, x=1, y=1)",
    ],
)
def test_anything_else_runs_as_python(code: str) -> None:
    assert translate(code) is None
