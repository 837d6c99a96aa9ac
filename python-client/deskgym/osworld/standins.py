"""Stand-in files for the files OSWorld's tasks fetch, written where desktop-env's cache
looks first, so a task's reset, setup and evaluation run with no network.

A stand-in is a valid file of the type the task names (an .xlsx opens as a workbook, a
.pptx as a presentation, a .png as an image, an .mp4 as a video, an .xcf as a GIMP
image, a Thunderbird profile archive as a profile Thunderbird starts with), with made-up
content: enough to run the task's steps and its metric, never enough to score it: a gold file a metric compares
with (a ``cloud_file`` getter's) differs from every input file, so a task left undone
scores 0. Types with no stand-in (legacy binary Office files: .xls, .ppt) are reported,
not faked.

Where they go (desktop-env 1.0.2's layout): a ``download`` step's file at
``<cache>/<task id>/<uuid5(URL, url)>_<basename(path)>``; a ``cloud_file`` getter's
at ``<cache>/<task id>/<dest>``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import tarfile
import tempfile
import uuid
import wave
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["MANIFEST", "MARKETPLACE", "VERSION", "download_name", "fill", "marketplace_install", "needed", "stand_in",
           "vsix"]


def _image(fmt: str) -> Callable[[str], bytes]:
    def make(tag: str) -> bytes:
        from PIL import Image

        buf = io.BytesIO()
        Image.new("RGB", (64, 48), (200, 30, 30) if tag == "input" else (30, 30, 200)).save(buf, format=fmt)
        return buf.getvalue()

    return make


def _xlsx(tag: str) -> bytes:
    """A sheet named as LibreOffice and Excel name the first (metrics name it:
    ``RNSheet1``); the gold one also has a ``Sheet2`` holding a chart and a pivot table,
    so that a metric comparing only those (none in the input) tells the two apart."""
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    ws.append(["Name", "Value"])
    ws.append([f"stand-in {tag}", 1 if tag == "input" else 2])
    if tag != "input":
        _chart_and_pivot(wb.create_sheet("Sheet2"), ws, tag)
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def _chart_and_pivot(sheet: Any, data: Any, tag: str) -> None:
    """A bar chart of ``data``'s values and a pivot table summing them, on ``sheet``."""
    from openpyxl.chart import BarChart, Reference
    from openpyxl.pivot.cache import CacheDefinition, CacheField, CacheSource, SharedItems, WorksheetSource
    from openpyxl.pivot.table import DataField, FieldItem, Location, PivotField, RowColField, TableDefinition

    chart = BarChart()
    chart.title = f"stand-in {tag}"
    chart.add_data(Reference(data, min_col=2, min_row=1, max_row=2), titles_from_data=True)
    sheet.add_chart(chart, "D2")
    pivot = TableDefinition(
        name=f"stand-in {tag}", cacheId=1, dataCaption="Values",
        location=Location(ref="A1:B2", firstHeaderRow=1, firstDataRow=1, firstDataCol=1),
        pivotFields=[PivotField(axis="axisRow", showAll=False, items=[FieldItem(x=0), FieldItem(t="default")]),
                     PivotField(dataField=True, showAll=False)],
        rowFields=[RowColField(x=0)], dataFields=[DataField(name="Sum - Value", fld=1, subtotal="sum")])
    pivot.cache = CacheDefinition(
        cacheSource=CacheSource(type="worksheet", worksheetSource=WorksheetSource(ref="A1:B2", sheet=data.title)),
        cacheFields=[CacheField(name="Name", sharedItems=SharedItems(count=1)),
                     CacheField(name="Value", sharedItems=SharedItems())], recordCount=1, refreshOnLoad=True)
    sheet._pivots.append(pivot)


def _docx(tag: str) -> bytes:
    from docx import Document

    d = Document()
    d.add_paragraph(f"A stand-in {tag} document.")
    if tag != "input":
        # Metrics that compare only tables, images or the references find none in either
        # file and call them equal: the gold one has one of each.
        d.add_table(rows=1, cols=1).cell(0, 0).text = f"stand-in {tag}"
        d.add_picture(io.BytesIO(_image("PNG")(tag)))
        d.add_paragraph("References")
        d.add_paragraph(f"[1] A stand-in {tag} reference.")
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


def _xcf(tag: str) -> bytes:
    """A one-layer RGB GIMP image (XCF version 0, uncompressed 64x64 tiles)."""
    w, h = 64, 48
    rgb = (200, 30, 30) if tag == "input" else (30, 30, 200)

    def u(*v: int) -> bytes:
        return struct.pack(">" + "I" * len(v), *v)

    name = b"Background\0"
    head = b"gimp xcf file\0" + u(w, h, 0) + u(0, 0)  # RGB; no image properties
    layer_at = len(head) + 12  # one layer pointer, its end, the channel list's end
    # Visible, opaque; then the hierarchy pointer and no mask.
    layer = u(w, h, 0, len(name)) + name + u(8, 4, 1) + u(6, 4, 255) + u(0, 0)
    hier_at = layer_at + len(layer) + 8
    level_at = hier_at + 20
    data_at = level_at + 16  # one tile pointer
    return (head + u(layer_at, 0, 0) + layer + u(hier_at, 0) + u(w, h, 3, level_at, 0)
            + u(w, h, data_at, 0) + bytes(rgb) * (w * h))


def _raw(tag: str) -> bytes:
    """Raw 8-bit RGB pixels, 64x48 (what GIMP's raw-data loader reads)."""
    return bytes((200, 30, 30) if tag == "input" else (30, 30, 200)) * (64 * 48)


def _mp4(tag: str) -> bytes:
    """A minute of a plain colour at one frame a second (long enough to be playing when a
    getter looks), MPEG-4 video in MP4 (OpenCV's writer)."""
    import cv2
    import numpy as np

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "v.mp4")
        out = cv2.VideoWriter(path, cv2.VideoWriter.fourcc(*"mp4v"), 1, (64, 48))
        for _ in range(60):
            out.write(np.full((48, 64, 3), (30, 30, 200) if tag == "input" else (200, 30, 30), np.uint8))
        out.release()
        return Path(path).read_bytes()


def _mp3(tag: str) -> bytes:
    """Half a second of silence, MPEG-1 Layer III (128 kbit/s, 44.1 kHz, mono), with an
    ID3v1 title naming the tag."""
    frame = b"\xff\xfb\x90\xc0" + bytes(413)  # a frame of 417 bytes; all-zero side info is silence
    title = f"stand-in {tag}".encode()[:30].ljust(30, b"\0")
    return frame * 20 + b"TAG" + title + bytes(30 + 30 + 4 + 30) + b"\xff"


def _wav(tag: str) -> bytes:
    import math

    rate, hz = 8000, 440 if tag == "input" else 660
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * hz * i / rate)))
                               for i in range(rate // 2)))
    return buf.getvalue()


def _epub(tag: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml",
                   '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:'
                   'container"><rootfiles><rootfile full-path="content.opf" media-type="application/oebps-'
                   'package+xml"/></rootfiles></container>')
        z.writestr("content.opf",
                   '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="2.0" unique-'
                   f'identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>stand-in {tag}'
                   '</dc:title><dc:identifier id="id">stand-in</dc:identifier></metadata><manifest><item id="c" '
                   'href="c.html" media-type="application/xhtml+xml"/></manifest><spine><itemref idref="c"/></spine>'
                   '</package>')
        z.writestr("c.html", f"<html><body><p>stand-in {tag}</p></body></html>")
    return buf.getvalue()


#: Where OSWorld's Thunderbird tasks find the profile their archive unpacks.
THUNDERBIRD_PROFILE = ".thunderbird/t5q2a5hp.default-release"


def _thunderbird_profile(tag: str) -> dict[str, bytes]:
    """The files of a Thunderbird profile at the path OSWorld's archives unpack it to: a
    local mail folder and the files the tasks' getters read."""
    p = THUNDERBIRD_PROFILE
    return {
        ".thunderbird/profiles.ini": (
            "[Profile0]\nName=default-release\nIsRelative=1\nPath=t5q2a5hp.default-release\nDefault=1\n\n"
            "[General]\nStartWithLastProfile=1\nVersion=2\n").encode(),
        f"{p}/prefs.js": f'user_pref("mail.shell.checkDefaultClient", false);\n'
                         f'user_pref("deskgym.stand_in", "{tag}");\n'.encode(),
        f"{p}/xulstore.json": b"{}",
        f"{p}/Mail/Local Folders/Inbox": (
            "From - Mon Jan  1 00:00:00 2024\nFrom: stand-in@example.com\nTo: user@example.com\n"
            f"Subject: stand-in {tag}\n\nA stand-in message.\n\n").encode(),
        f"{p}/ImapMail/outlook.office365.com/msgFilterRules.dat": b'version="9"\nlogging="no"\n',
        f"{p}/global-messages-db.sqlite": _gloda(),
    }


def _history() -> bytes:
    """Chrome's History database, empty, as Chromium makes it: a database without
    Chromium's ``meta`` version is replaced at Chromium's start, with the visits the
    task's setup wrote into it (chrome/44ee5668 then scored 1 with no action)."""
    from deskgym.osworld._history_schema import META, SCHEMA

    rows = "".join(f"INSERT INTO meta VALUES ('{k}', '{v}');" for k, v in META)
    return _sqlite(SCHEMA + rows)


def _sqlite(schema: str) -> bytes:
    import sqlite3

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "db.sqlite")
        db = sqlite3.connect(path)
        db.executescript(schema)
        db.close()
        return Path(path).read_bytes()


def _gloda() -> bytes:
    """Thunderbird's message index (gloda) with its two tables metrics query, empty."""
    return _sqlite(
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, folderID INTEGER, messageKey INTEGER, "
        "conversationID INTEGER, date INTEGER, headerMessageID TEXT, deleted INTEGER, "
        "jsonAttributes TEXT, notability INTEGER);"
        "CREATE TABLE messageAttributes (conversationID INTEGER, messageID INTEGER, "
        "attributeID INTEGER, value NUMERIC);")


def _tar(name: str, tag: str) -> bytes:
    """A .tar.gz / .tar.xz: a Thunderbird profile where the name says so, else a folder of
    one text file named after the archive."""
    stem = os.path.basename(name).split(".tar")[0].lstrip(".") or "stand-in"
    files = (_thunderbird_profile(tag) if "thunderbird-profile" in name
             else {f"{stem}/README.md": f"# stand-in {tag}\n".encode()})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz" if name.endswith(".xz") else "w:gz") as t:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mtime = len(data), 1_700_000_000
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


#: OSWorld's eval extension (``vscodeEvalExtension/eval-0.0.1.vsix`` in the tasks'
#: ``vscodeEvalExtension.zip``), as a stand-in: the command a metric reads back
#: (``eval.OpenProject`` writes the open folder's name to ``~/OpenProject.txt``).
EVAL_EXTENSION_JS = """const vscode = require('vscode');
const fs = require('fs');
const path = require('path');
const os = require('os');
exports.activate = (context) => {
  context.subscriptions.push(vscode.commands.registerCommand('eval.OpenProject', () => {
    const folders = vscode.workspace.workspaceFolders || [];
    fs.writeFileSync(path.join(os.homedir(), 'OpenProject.txt'), folders.length ? folders[0].name : '');
  }));
};
"""


def vsix(name: str, version: str = "0.0.1", main_js: str | None = None, commands: tuple[str, ...] = (),
         publisher: str = "undefined_publisher") -> bytes:
    """A VS Code extension package (what ``code --install-extension`` takes): ``name``
    by ``publisher`` (none by default), with ``main_js`` as its code and ``commands``
    contributed."""
    manifest = f"""<?xml version="1.0" encoding="utf-8"?>
<PackageManifest Version="2.0.0" xmlns="http://schemas.microsoft.com/developer/vsx-schema/2011">
  <Metadata><Identity Language="en-US" Id="{name}" Version="{version}" Publisher="{publisher}"/>
    <DisplayName>{name}</DisplayName><Description xml:space="preserve">{name}</Description>
    <Properties><Property Id="Microsoft.VisualStudio.Code.Engine" Value="^1.0.0"/></Properties></Metadata>
  <Installation><InstallationTarget Id="Microsoft.VisualStudio.Code"/></Installation>
  <Dependencies/>
  <Assets><Asset Type="Microsoft.VisualStudio.Code.Manifest" Path="extension/package.json" Addressable="true"/></Assets>
</PackageManifest>
"""
    pkg: dict[str, Any] = {"name": name, "displayName": name, "version": version, "engines": {"vscode": "^1.0.0"}}
    if publisher != "undefined_publisher":
        pkg["publisher"] = publisher
    if main_js is not None:
        pkg["main"] = "./extension.js"
    if commands:
        pkg["activationEvents"] = [f"onCommand:{c}" for c in commands]
        pkg["contributes"] = {"commands": [{"command": c, "title": c.split(".")[-1]} for c in commands]}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("extension.vsixmanifest", manifest)
        z.writestr("[Content_Types].xml", '<?xml version="1.0" encoding="utf-8"?><Types xmlns="http://schemas.'
                   'openxmlformats.org/package/2006/content-types"><Default Extension=".json" ContentType="application/'
                   'json"/><Default Extension=".js" ContentType="application/javascript"/><Default Extension=".vsixmanifest"'
                   ' ContentType="text/xml"/></Types>')
        z.writestr("extension/package.json", json.dumps(pkg))
        if main_js is not None:
            z.writestr("extension/extension.js", main_js)
    return buf.getvalue()


def _eval_extension_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("vscodeEvalExtension/eval-0.0.1.vsix",
                   vsix("eval", main_js=EVAL_EXTENSION_JS, commands=("eval.OpenProject",)))
    return buf.getvalue()


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
    ".js": "console.log('stand-in');\n", ".css": "/* stand-in */\nbody { color: black; }\n",
    ".bib": "@misc{standin, title={stand-in}}\n",
    ".code-workspace": json.dumps({"folders": [{"path": "."}], "settings": {"stand-in": 1}}),
    ".eml": "From: stand-in@example.com\nTo: user@example.com\nSubject: stand-in\n\nA stand-in message.\n",
    # A mail folder (mbox) has no extension: Thunderbird's `Local Folders/<name>`.
    "": "From - Mon Jan  1 00:00:00 2024\nFrom: stand-in@example.com\nSubject: stand-in\n\nstand-in\n\n",
}

_MAKERS: dict[str, Callable[[str], bytes]] = {
    ".png": _image("PNG"), ".jpg": _image("JPEG"), ".jpeg": _image("JPEG"), ".gif": _image("GIF"),
    ".bmp": _image("BMP"), ".webp": _image("WEBP"), ".tif": _image("TIFF"), ".tiff": _image("TIFF"),
    ".xlsx": _xlsx, ".docx": _docx, ".pptx": _pptx, ".odt": _odf("odt"), ".ods": _odf("ods"),
    ".odp": _odf("odp"), ".pdf": _pdf, ".xcf": _xcf, ".raw": _raw, ".mp4": _mp4, ".mp3": _mp3, ".wav": _wav, ".epub": _epub,
}


def stand_in(name: str, tag: str = "input") -> bytes | None:
    """A valid file of ``name``'s type (``tag`` "input" or "gold": the two differ), or
    ``None`` when there is no stand-in for it."""
    ext = os.path.splitext(name)[1].lower()
    if name.endswith((".tar.gz", ".tar.xz", ".tgz")):
        return _tar(name, tag)
    if name == "history_new.sqlite":
        return _history()
    if os.path.basename(name) == "vscodeEvalExtension.zip":
        return _eval_extension_zip()
    if ext == ".vsix":
        base = os.path.splitext(os.path.basename(name))[0]
        stem, _, version = base.rpartition("-")
        if stem and version[:1].isdigit():
            return vsix(stem)
        # A marketplace extension's id (``publisher.name``): the stand-in has that
        # identity, so ``code --list-extensions`` names it as the real one would be.
        ext_id = _extension_id(base)
        return vsix(ext_id[1], publisher=ext_id[0]) if ext_id else vsix(base)
    if ext in (".zip", ".whl"):
        return _zip(os.path.splitext(os.path.basename(name))[0], tag)
    if ext in _TEXT:
        # Every text names "stand-in": the gold one says which it is.
        return _TEXT[ext].replace("stand-in", "stand-in" if tag == "input" else f"stand-in-{tag}").encode()
    make = _MAKERS.get(ext)
    return make(tag) if make else None


def _specs(spec: Any) -> list[dict[str, Any]]:
    """A getter spec (one, a list, or none) as a list of the dicts in it."""
    return [s for s in (spec if isinstance(spec, list) else [spec]) if isinstance(s, dict)]


def _cloud_files(spec: Any) -> Iterator[tuple[str, str]]:
    for s in spec if isinstance(spec, list) else [spec]:
        if isinstance(s, dict) and s.get("type") == "cloud_file":
            if s.get("multi"):
                yield from zip(s["dest"], s["path"])
            else:
                yield s["dest"], s["path"]


#: The browsing-history template desktop-env's ``update_browse_history`` step fetches
#: (into the task's cache folder, as ``history_new.sqlite``).
HISTORY_URL = ("https://huggingface.co/datasets/xlangai/ubuntu_osworld_file_cache/resolve/main/chrome/"
               "44ee5668-ecd5-4366-a6ce-c1c9b8d4e938/history_empty.sqlite?download=true")


#: Where a marketplace extension is cached from: Open VSX's record of its latest version
#: (code-server's marketplace; ``files.download`` in the record names the ``.vsix``, which
#: :mod:`deskgym.osworld.cache` follows). OSWorld's image installs from Microsoft's.
MARKETPLACE = "https://open-vsx.org/api/{publisher}/{name}/latest"


def download_name(url: str, path: str) -> str:
    """The name desktop-env gives the cached file of a download of ``url`` to ``path``
    (in the task's cache folder)."""
    return f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{os.path.basename(path)}"


def _extension_id(text: str) -> tuple[str, str] | None:
    """(publisher, name) when ``text`` reads as a marketplace extension's id,
    ``publisher.name``."""
    publisher, dot, name = text.partition(".")
    return (publisher, name) if dot and publisher and name and "." not in name else None


def marketplace_install(command: Any) -> tuple[int, str, str] | None:
    """For a setup command that installs a VS Code extension from the marketplace by id
    (``code --install-extension publisher.name``, as an argv list), (the id's index in
    the command, the id, the URL its ``.vsix`` is cached under); ``None`` for any other
    command (a ``.vsix`` path, a shell line)."""
    if not isinstance(command, list) or not command or os.path.basename(str(command[0])) != "code":
        return None
    for i, arg in enumerate(command[:-1]):
        ext = str(command[i + 1])
        ext_id = _extension_id(ext)
        if (arg == "--install-extension" and ext_id and "/" not in ext and not ext.startswith("-")
                and not ext.lower().endswith(".vsix")):
            return i + 1, ext, MARKETPLACE.format(publisher=ext_id[0], name=ext_id[1])
    return None


def needed(task: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(cache-relative path, file name, "input" or "gold", URL) of every file the task
    fetches: its setup's and postconfig's downloads, the extensions it installs from the
    marketplace (as a download of ``<id>.vsix`` from :data:`MARKETPLACE`), its
    browsing-history template and its evaluator's ``cloud_file`` getters (desktop-env's
    layout). A download that the ``expected`` side reads back from the desktop (a
    ``vm_file`` of its path: the gold a postconfig fetches) is a gold one."""
    out = []
    ev = task.get("evaluator") or {}
    golds: set[str] = set()
    for s in _specs(ev.get("expected")):
        if s.get("type") == "vm_file":
            # One path, or a list of them (``multi``: multi_apps 185f29bd).
            path = s.get("path")
            golds.update(p for p in (path if isinstance(path, list) else [path]) if isinstance(p, str))
    steps = list(task.get("config") or []) + list(ev.get("postconfig") or [])
    for step in steps:
        if step.get("type") == "download":
            for f in step["parameters"]["files"]:
                name = os.path.basename(f["path"])
                tag = "gold" if f["path"] in golds else "input"
                out.append((download_name(f["url"], name), name, tag, f["url"]))
        elif step.get("type") in ("command", "execute") and (
                found := marketplace_install((step.get("parameters") or {}).get("command"))):
            _, ext_id, url = found
            out.append((download_name(url, f"{ext_id}.vsix"), f"{ext_id}.vsix", "input", url))
        elif step.get("type") == "update_browse_history":
            out.append(("history_new.sqlite", "history_new.sqlite", "input", HISTORY_URL))
    for key in ("result", "expected"):
        for dest, url in _cloud_files(ev.get(key)):
            out.append((dest, dest, "gold" if key == "expected" else "input", url))
    return out


#: The stand-ins' version: raise it when a stand-in changes (what a file holds, or whether
#: it is a gold one), so a cache an earlier version filled gets the new ones.
VERSION = 2

#: In each task's cache folder: ``{file: [version, sha256]}`` of the stand-ins written there.
MANIFEST = ".deskgym-standins.json"


def fill(cache_dir: str | Path, task: dict[str, Any]) -> list[str]:
    """Writes stand-ins for the task's files that are not in the cache yet, and anew
    those an earlier :data:`VERSION` wrote and nothing changed since (a file fetched
    over one, or one written before the folder had a manifest, stays); returns the names
    of those it has no stand-in for."""
    folder = Path(cache_dir) / task["id"]
    manifest = folder / MANIFEST
    try:
        made: dict[str, list[Any]] = json.loads(manifest.read_text())
    except (OSError, ValueError):
        made = {}  # none yet (or unreadable): what is there stays, as before manifests
    missing, wrote = [], False
    for rel, name, tag, _url in needed(task):
        path = folder / rel
        if path.exists():
            version, digest = made.get(rel, (VERSION, None))
            if version >= VERSION or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                continue
        data = stand_in(name, tag)
        if data is None:
            missing.append(name)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        made[rel], wrote = [VERSION, hashlib.sha256(data).hexdigest()], True
    if wrote:
        # Whole or not at all: a manifest cut short would forget what it recorded.
        part = manifest.with_name(manifest.name + ".part")
        part.write_text(json.dumps(made, indent=1, sort_keys=True))
        part.replace(manifest)
    return missing
