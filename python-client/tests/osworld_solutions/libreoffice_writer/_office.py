"""LibreOffice (Writer, Impress) as a user drives it: its window, commands by name from
the "Search Commands" box (Shift+Esc, LibreOffice 7.2 on: no menu positions to trust),
the Find toolbar, saving in the file's own format; and the task files (.docx, .pptx)
the solutions make offline, with python-docx / python-pptx or a headless LibreOffice."""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import tempfile
from typing import Any

from _common import hotkey, press, typewrite, until, wait_window, window

__all__ = ["command", "doc_bytes", "find", "office", "pdf_of", "pick_file", "save_keep_format", "saved_by_office",
           "shot"]


def office(env: Any, name: str, timeout: float = 120) -> Any:
    """The window of the document ``name`` (its title starts with the file name), once it
    takes keys; clicks into it so the document has the focus."""
    w = wait_window(env, title=name, timeout=timeout, settle=2.0)
    return w


def command(env: Any, name: str, pause: float = 2.0) -> None:
    """Runs the menu command ``name`` from Help > Search Commands (Shift+Esc): types the
    name, takes the first match."""
    env.step(hotkey("shift", "esc"), pause=1.5)
    env.step(typewrite(name), pause=1.5)
    env.step(press("enter"), pause=pause)


def find(env: Any, text: str, first: bool = True) -> None:
    """Selects the next match of ``text`` with the Find toolbar (Ctrl+F, type, Enter) and
    returns the focus to the document, the match still selected (Escape)."""
    env.step(hotkey("ctrl", "f"), pause=1.0)
    if first:
        env.step(hotkey("ctrl", "a"), pause=0.2)
        env.step(typewrite(text), pause=0.3)
    env.step(press("enter"), pause=0.8)
    env.step(press("escape"), pause=0.8)


def pick_file(env: Any, title: str, path: str) -> None:
    """In the file dialog titled ``title`` (Insert > Image, Insert > Audio or Video...):
    ``path`` typed into its location field (Ctrl+L), then Enter; returns once the
    dialog is gone."""
    wait_window(env, title=title, timeout=30, settle=2.0)
    env.step(hotkey("ctrl", "l"), pause=1.0)
    env.step(typewrite(path), pause=1.5)
    for _ in range(3):  # an Enter taken by the field's completion leaves the dialog open
        env.step(press("enter"), pause=5.0)
        if not window(env, title=title):
            break
    until(lambda: not window(env, title=title), f"the {title} dialog to close", timeout=20)


def _mtime(env: Any, path: str) -> str:
    r = env.deskgym.exec(["stat", "-c", "%Y.%s", path])
    return str(r.stdout).strip() if r.ok else ""


def _keep_dialog(env: Any) -> Any:
    return window(env, title="Keep current format") or window(env, title="Keep Current Format")


def save_keep_format(env: Any, path: str, timeout: float = 30) -> None:
    """Ctrl+S, keeping the file's format: "Use Word 2007-365!" / "Use PowerPoint Format!"
    (the default button) if LibreOffice asks (deskgym's profile, as OSWorld's, has the
    question turned off); returns once the file at ``path`` is written (observed by its
    time and size)."""
    before = _mtime(env, path)
    env.step(hotkey("ctrl", "s"), pause=1.0)
    try:
        saved = until(lambda: _keep_dialog(env) or _mtime(env, path) != before,
                      "the file saved or the format question", timeout)
    except AssertionError:
        shot(env, "not-saved")
        raise AssertionError(f"{path} not saved; windows: {[w.title for w in env.deskgym.windows()]}") from None
    if saved is not True:  # the dialog
        env.step(press("enter"), pause=1.0)
        until(lambda: _mtime(env, path) != before, "the file saved", timeout)
    env.step("WAIT", pause=1.0)


def shot(env: Any, tag: str) -> None:
    """A screenshot to $DESKGYM_SHOTS/<tag>.png when that is set (for working on a solution)."""
    out = os.environ.get("DESKGYM_SHOTS")
    if out:
        pathlib.Path(out).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(out) / f"{tag}.png").write_bytes(env.controller.get_screenshot())


def doc_bytes(doc: Any) -> bytes:
    """A python-docx or python-pptx document's file."""
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def _convert(data: bytes, suffix: str, to: str) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        src = pathlib.Path(d) / "src" / f"in{suffix}"
        src.parent.mkdir()
        src.write_bytes(data)
        subprocess.run(["soffice", f"-env:UserInstallation=file://{d}/profile", "--headless", "--convert-to",
                        to, "--outdir", f"{d}/out", str(src)], check=True, capture_output=True, timeout=240)
        return (pathlib.Path(d) / "out" / f"in.{to.split(':')[0]}").read_bytes()


def saved_by_office(data: bytes, suffix: str) -> bytes:
    """``data`` (a .docx or .pptx) opened and saved in its own format by a headless
    LibreOffice: a gold written by python-pptx then holds what LibreOffice writes for the
    same content (explicit run properties and the like), as the GUI's save does."""
    return _convert(data, suffix, suffix.lstrip("."))


def pdf_of(data: bytes, suffix: str) -> bytes:
    """``data`` (a document of type ``suffix``) exported to PDF by a headless LibreOffice,
    as Writer's File > Export as PDF does with the default settings."""
    return _convert(data, suffix, "pdf")
