"""Put the desktop's 1.png where the cursor is: Insert > Image (from Search Commands),
the path typed into its file dialog, Enter; then a save as .docx. The files: a how-to
document, a screenshot-like 1.png, and the gold, the document with that image in it
(the metric compares the documents' images pixel for pixel)."""

from __future__ import annotations

import io
import pathlib
from typing import Any

from _common import put_cloud, put_download
from _office import command, doc_bytes, office, pick_file, save_keep_format

NAME = "Viewing_Your_Class_Schedule_and_Textbooks.docx"
PATH = f"/home/user/Desktop/{NAME}"
STEPS = ["Viewing Your Class Schedule and Textbooks", "Sign in to the student portal.",
         "Open the Academics tab.", "Choose My Class Schedule.", "Pick the term from the list.",
         "Your classes show with their rooms and times.", "Press View Textbooks next to a class.",
         "The list shows each required book.", "Here is what the page looks like:", "",
         "Buy or rent the books from the campus store."]


def _png() -> bytes:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (320, 200), (245, 245, 245))
    d = ImageDraw.Draw(img)
    d.rectangle((0, 0, 319, 28), fill=(40, 70, 140))
    for i in range(5):
        d.rectangle((12, 40 + i * 30, 300, 60 + i * 30), outline=(120, 120, 120), fill=(255, 255, 255 - i * 20))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _doc(image: bytes | None) -> bytes:
    from docx import Document
    from docx.shared import Inches

    d = Document()
    for text in STEPS:
        p = d.add_paragraph(text)
        if image is not None and text == "":
            p.add_run().add_picture(io.BytesIO(image), width=Inches(3))
    return doc_bytes(d)


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    png = _png()
    put_download(cache, task, _doc(None), NAME)
    put_download(cache, task, png, "1.png")
    put_cloud(cache, "Viewing_Your_Class_Schedule_and_Textbooks_Gold.docx", _doc(png))


def solve(env: Any) -> None:
    office(env, NAME)
    command(env, "Image")  # its first match: Insert / Image
    pick_file(env, "Insert Image", "/home/user/Desktop/1.png")
    save_keep_format(env, PATH)
