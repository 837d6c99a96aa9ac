"""GIMP 2.10 as a user drives it from the keyboard: its window once it takes keys, a menu
item by its mnemonics, a dialog opened that way (again if the first keys were lost)."""

from __future__ import annotations

import io
import random
import struct
from typing import Any

from _common import hotkey, press, typewrite, until, wait_window, window

__all__ = ["dialog", "export_as", "keys", "ready", "textured", "xcf"]


def ready(env: Any, image: str | None = None, timeout: float = 90) -> Any:
    """GIMP's window (the image's, its title naming ``image``, when the task opened one:
    "[name] (imported)" for a PNG or JPEG, "name.xcf" for GIMP's own), once it takes keys."""
    title = image or "GNU Image Manipulation Program"
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


def textured(w: int = 320, h: int = 240, fmt: str | None = "PNG", noise: int = 8) -> Any:
    """A photo-like image in the middle tones: a checker of two greys, a left-to-right
    ramp and some noise, ``noise`` at most (structure SSIM can see, room for more contrast): the file's bytes
    in ``fmt``, or the PIL image with no ``fmt``."""
    from PIL import Image

    rnd = random.Random(7)
    img = Image.new("RGB", (w, h))
    px = img.load()
    for y in range(h):
        for x in range(w):
            v = 60 + 70 * ((x // 40 + y // 30) % 2) + (x * 60) // w + rnd.randint(-noise, noise)
            px[x, y] = (v, min(255, v + 20), max(0, v - 20))
    buf = io.BytesIO()
    if fmt is None:
        return img
    img.save(buf, format=fmt)
    return buf.getvalue()


def xcf(w: int, h: int, layers: list[tuple[str, Any]]) -> bytes:
    """An RGB GIMP image (XCF version 0, uncompressed 64x64 tiles) of ``layers``, top
    first: (name, PIL image of size ``w`` x ``h``, RGB or RGBA), each visible and opaque;
    the top one saved as the active layer (with none saved, GIMP makes the bottom one
    active)."""

    def u(*v: int) -> bytes:
        return struct.pack(">" + "I" * len(v), *v)

    head = b"gimp xcf file\0" + u(w, h, 0) + u(0, 0)  # RGB; no image properties
    at = len(head) + 4 * (len(layers) + 2)  # the layer pointers, their end, the channels' end
    pointers, blobs = [], []
    for i, (name, img) in enumerate(layers):
        bpp = 4 if img.mode == "RGBA" else 3
        raw = name.encode() + b"\0"
        props = u(8, 4, 1) + u(6, 4, 255) + u(15, 8, 0, 0) + u(0, 0)  # visible, opaque, at 0,0
        if i == 0:
            props = u(2, 0) + props
        layer = u(w, h, 1 if bpp == 4 else 0, len(raw)) + raw + props
        hier_at = at + len(layer) + 8
        tiles = [(x, y) for y in range(0, h, 64) for x in range(0, w, 64)]
        level_at = hier_at + 20
        data_at = level_at + 8 + 4 * (len(tiles) + 1)
        level, data = u(w, h), b""
        for x, y in tiles:
            level += u(data_at + len(data))
            data += img.crop((x, y, min(x + 64, w), min(y + 64, h))).tobytes()
        blob = layer + u(hier_at, 0) + u(w, h, bpp, level_at, 0) + level + u(0) + data
        pointers.append(at)
        blobs.append(blob)
        at += len(blob)
    return head + u(*pointers, 0, 0) + b"".join(blobs)
