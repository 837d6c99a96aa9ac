"""Give VLC's Play/Pause a global hotkey, one that works while the PDF reader has the
focus: Alt+Tab to the player (the lecture is fullscreen over it), Tools > Preferences
(Ctrl+P), maximized, Hotkeys, a double-click on Play/Pause's "Global" cell, Ctrl+Alt+Space
pressed into the "Global Hotkey change" prompt, Save (superuser's answer). VLC writes
global-key-play-pause to vlcrc. The stand-ins: lecture.pdf a one-page PDF whose document
title is the lecture's, so Evince's window has the title setup activates (strictly), and
Colorful-Flowers.mp3 a two-minute tone (setup starts it at 10 s)."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import hotkey, put_download, until, wait_window, window
from _vlc import mp3, preferences, save_preferences

TITLE = "6.006 Introduction to Algorithms, Lecture 2: Data Structures"


def pdf(title: str, text: str) -> bytes:
    """A one-page PDF showing ``text``, with ``title`` as its document title."""
    stream = f"BT /F1 24 Tf 72 720 Td ({text}) Tj ET".encode()
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> >>",
            b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            f"<< /Title ({title}) >>".encode()]
    out = b"%PDF-1.4\n"
    offsets = []
    for i, o in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + o + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info %d 0 R >>\n" % (len(objs) + 1, len(objs))
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return out


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, pdf(TITLE, "Lecture 2: Data Structures"), "lecture.pdf")
    put_download(cache, task, mp3(120), "Colorful-Flowers.mp3")


def solve(env: Any) -> None:
    env.step("pyautogui.keyDown('alt'); time.sleep(0.3); pyautogui.press('tab'); time.sleep(0.5); "
             "pyautogui.keyUp('alt')", pause=1.5)  # Alt+Tab, held as a user holds it for the switcher
    d = preferences(env)
    env.step(f"pyautogui.click({d.x + d.width - 27}, {d.y - 11})", pause=1.0)  # the title bar's maximize
    until(lambda: (w := window(env, title="Simple Preferences")) and w.width >= 1900, "the dialog maximized", 20)
    env.step("pyautogui.click(546, 62)", pause=1.5)  # Hotkeys
    env.step("pyautogui.doubleClick(600, 282)", pause=1.0)  # Play/Pause's Global cell
    wait_window(env, title="Global Hotkey change", timeout=20)
    env.step(hotkey("ctrl", "alt", "space"), pause=1.0)
    until(lambda: not window(env, title="Global Hotkey change"), "the hotkey assigned", 20)
    save_preferences(env)
