"""Export the open document to PDF under its own name: File > Export as PDF (the
"Export Directly as PDF" command, from Search Commands), whose save dialog offers
View_Person_Organizational_Summary.pdf next to the document; Enter saves it. The gold is
the input exported by a headless LibreOffice (the metric compares the PDFs' text)."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import put_cloud, put_download, type_line, until, wait_window
from _office import command, doc_bytes, office, pdf_of

NAME = "View_Person_Organizational_Summary.docx"
PDF = "/home/user/Desktop/View_Person_Organizational_Summary.pdf"


def _doc() -> bytes:
    from docx import Document

    d = Document()
    d.add_heading("View Person Organizational Summary", 1)
    d.add_paragraph("Use this page to see a person's job, department and supervisor at a glance.")
    for step in ("Open the Person menu and choose Organizational Summary.",
                 "Type the person's name or ID and press Search.",
                 "Read the summary; press Print to keep a copy."):
        d.add_paragraph(step, style="List Number")
    return doc_bytes(d)


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    doc = _doc()
    put_download(cache, task, doc)
    pdf = pdf_of(doc, ".docx")
    for i in range(1, 5):
        put_cloud(cache, f"Constitution_Template_With_Guidelines_Gold_{i}.pdf", pdf)


def solve(env: Any) -> None:
    office(env, NAME)
    command(env, "Export Directly as PDF")
    wait_window(env, title="Export", timeout=30)
    type_line(env, "", pause=1.0)  # Enter: the offered name and folder
    until(lambda: env.deskgym.exec(["test", "-s", PDF]).ok, "the PDF written", timeout=60)
