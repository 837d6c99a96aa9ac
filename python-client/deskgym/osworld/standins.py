"""Stand-in files for the files OSWorld's tasks fetch, written where desktop-env's cache
looks first, so a task's reset, setup and evaluation run with no network.

A stand-in is a valid file of the type the task names (an .xlsx opens as a workbook, a
.pptx as a presentation, a .png as an image), with made-up content: enough to run the
task's steps and its metric, never enough to score it: a gold file a metric compares
with (a ``cloud_file`` getter's) differs from every input file, so a task left undone
scores 0. Types with no stand-in (audio, video, application packages, archives of a
profile) are reported, not faked.

Where they go (desktop-env 1.0.2's layout): a ``download`` step's file at
``<cache>/<task id>/<uuid5(URL, url)>_<basename(path)>``; a ``cloud_file`` getter's
at ``<cache>/<task id>/<dest>``.
"""

from __future__ import annotations

import io
import json
import os
import uuid
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["fill", "needed"]


def _image(fmt: str) -> Callable[[str], bytes]:
    def make(tag: str) -> bytes:
        from PIL import Image

        buf = io.BytesIO()
        Image.new("RGB", (64, 48), (200, 30, 30) if tag == "input" else (30, 30, 200)).save(buf, format=fmt)
        return buf.getvalue()

    return make


def _xlsx(tag: str) -> bytes:
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.append(["Name", "Value"])
    ws.append([f"stand-in {tag}", 1 if tag == "input" else 2])
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def _docx(tag: str) -> bytes:
    from docx import Document

    d = Document()
    d.add_paragraph(f"A stand-in {tag} document.")
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def _pptx(tag: str) -> bytes:
    from pptx import Presentation

    p = Presentation()
    s = p.slides.add_slide(p.slide_layouts[1])
    s.shapes.title.text = f"Stand-in {tag}"
    buf = io.BytesIO()
    p.save(buf)
    return buf.getvalue()


def _odf(kind: str) -> Callable[[str], bytes]:
    def make(tag: str) -> bytes:
        from odf import opendocument
        from odf.dc import Title
        from odf.text import P

        doc = {"odt": opendocument.OpenDocumentText, "ods": opendocument.OpenDocumentSpreadsheet,
               "odp": opendocument.OpenDocumentPresentation}[kind]()
        doc.meta.addElement(Title(text=f"stand-in {tag}"))
        if kind == "odt":
            doc.text.addElement(P(text=f"A stand-in {tag} document."))
        buf = io.BytesIO()
        doc.write(buf)
        return buf.getvalue()

    return make


def _pdf(tag: str) -> bytes:
    import fitz  # pymupdf

    d = fitz.open()
    d.new_page().insert_text((72, 72), f"A stand-in {tag} document.")
    out: bytes = d.tobytes()
    return out


def _zip(name: str, tag: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{name}/README.md", f"# stand-in {tag} project\n")
        z.writestr(f"{name}/environment.yml", "name: stand-in\n")
    return buf.getvalue()


_TEXT = {
    ".txt": "stand-in\n", ".md": "# stand-in\n", ".csv": "Name,Value\nstand-in,1\n", ".py": "print('stand-in')\n",
    ".json": '{"stand-in": 1}\n', ".html": "<html><body>stand-in</body></html>\n", ".xml": "<root>stand-in</root>\n",
    ".sh": "echo stand-in\n", ".yaml": "stand-in: 1\n", ".yml": "stand-in: 1\n",
    ".tex": "\\documentclass{article}\\begin{document}stand-in\\end{document}\n",
    ".svg": '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><title>stand-in</title></svg>\n',
    ".srt": "1\n00:00:00,000 --> 00:00:01,000\nstand-in\n",
    ".ipynb": json.dumps({"cells": [], "metadata": {"stand-in": 1}, "nbformat": 4, "nbformat_minor": 5}),
}

_MAKERS: dict[str, Callable[[str], bytes]] = {
    ".png": _image("PNG"), ".jpg": _image("JPEG"), ".jpeg": _image("JPEG"), ".gif": _image("GIF"),
    ".bmp": _image("BMP"), ".webp": _image("WEBP"), ".tif": _image("TIFF"), ".tiff": _image("TIFF"),
    ".xlsx": _xlsx, ".docx": _docx, ".pptx": _pptx, ".odt": _odf("odt"), ".ods": _odf("ods"),
    ".odp": _odf("odp"), ".pdf": _pdf,
}


def stand_in(name: str, tag: str = "input") -> bytes | None:
    """A valid file of ``name``'s type (``tag`` "input" or "gold": the two differ), or
    ``None`` when there is no stand-in for it."""
    ext = os.path.splitext(name)[1].lower()
    if ext == ".zip":
        return _zip(os.path.splitext(os.path.basename(name))[0], tag)
    if ext in _TEXT:
        # Every text names "stand-in": the gold one says which it is.
        return _TEXT[ext].replace("stand-in", "stand-in" if tag == "input" else f"stand-in-{tag}").encode()
    make = _MAKERS.get(ext)
    return make(tag) if make else None


def _cloud_files(spec: Any) -> Iterator[str]:
    for s in spec if isinstance(spec, list) else [spec]:
        if isinstance(s, dict) and s.get("type") == "cloud_file":
            dests = s["dest"] if s.get("multi") else [s["dest"]]
            yield from dests


def needed(task: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(cache-relative path, file name, "input" or "gold") of every file the task fetches."""
    out = []
    steps = list(task.get("config") or []) + list((task.get("evaluator") or {}).get("postconfig") or [])
    for step in steps:
        if step.get("type") == "download":
            for f in step["parameters"]["files"]:
                name = os.path.basename(f["path"])
                out.append((f"{uuid.uuid5(uuid.NAMESPACE_URL, f['url'])}_{name}", name, "input"))
    ev = task.get("evaluator") or {}
    for key in ("result", "expected"):
        for dest in _cloud_files(ev.get(key)):
            out.append((dest, dest, "gold" if key == "expected" else "input"))
    return out


def fill(cache_dir: str | Path, task: dict[str, Any]) -> list[str]:
    """Writes stand-ins for the task's files that are not in the cache yet; returns the
    names of those it has no stand-in for."""
    missing = []
    for rel, name, tag in needed(task):
        path = Path(cache_dir) / task["id"] / rel
        if path.exists():
            continue
        data = stand_in(name, tag)
        if data is None:
            missing.append(name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return missing
