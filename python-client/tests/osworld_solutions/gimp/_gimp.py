"""GIMP 2.10 as a user drives it from the keyboard: its window once it takes keys, a menu
item by its mnemonics, a dialog opened that way (again if the first keys were lost)."""

from __future__ import annotations

import io
import random
from typing import Any

from _common import hotkey, press, typewrite, until, wait_window, window

__all__ = ["dialog", "export_as", "keys", "ready", "textured"]


def ready(env: Any, image: str | None = None, timeout: float = 90) -> Any:
    """GIMP's window (the image's, ``[image]`` in its title, when the task opened one),
    once it takes keys."""
    title = f"[{image}]" if image else "GNU Image Manipulation Program"
    return wait_window(env, title=title, wm_class="Gimp", timeout=timeout, settle=2.0)


def keys(env: Any, *seq: str, pause: float = 0.6) -> None:
    """Presses each of ``seq`` in turn: ``"alt+i"`` as a chord, ``"p"`` as one key."""
    for k in seq:
        env.step(hotkey(*k.split("+")) if "+" in k else press(k), pause=pause)


def dialog(env: Any, title: str, *seq: str, tries: int = 3, timeout: float = 10) -> Any:
    """Opens the dialog titled ``title`` with the keys ``seq`` (a menu and its items);
    a menu the app opened late, or not at all, is closed and the keys pressed again."""
    for _ in range(tries):
        keys(env, *seq)
        try:
            return wait_window(env, title=title, timeout=timeout, settle=1.0)
        except AssertionError:
            env.step(press("escape"), pause=0.5)
            env.step(press("escape"), pause=0.5)
    return until(lambda: window(env, title=title), f"dialog {title}", 1)


def export_as(env: Any, name: str, options: str) -> None:
    """File > Export As (Ctrl+Shift+E) to ``name`` in the image's folder (the dialog opens
    there, the name selected), then the format's options dialog (its title has
    ``options``, e.g. "as JPEG") confirmed with its default, Export."""
    dialog(env, "Export Image", "ctrl+shift+e")
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite(name + "\n"), pause=1.0)
    wait_window(env, title=options, timeout=20, settle=0.5)
    env.step(press("enter"), pause=1.0)
    until(lambda: not window(env, title="Export Image"), "the export done", timeout=30)


def textured(w: int = 320, h: int = 240, fmt: str = "PNG") -> bytes:
    """A photo-like image in the middle tones: a checker of two greys, a left-to-right
    ramp and some noise (structure SSIM can see, room for more contrast)."""
    from PIL import Image

    rnd = random.Random(7)
    img = Image.new("RGB", (w, h))
    px = img.load()
    for y in range(h):
        for x in range(w):
            v = 60 + 70 * ((x // 40 + y // 30) % 2) + (x * 60) // w + rnd.randint(-8, 8)
            px[x, y] = (v, min(255, v + 20), max(0, v - 20))
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()
