"""The LibreOffice helpers of ``../libreoffice_writer/_office.py`` for the Impress
solutions (one copy for both apps: the loader puts only a module's own folder and the
one above on ``sys.path``)."""

from __future__ import annotations

import pathlib
import sys

_WRITER = str(pathlib.Path(__file__).resolve().parents[1] / "libreoffice_writer")
if _WRITER not in sys.path:
    sys.path.append(_WRITER)

from _office import (command, doc_bytes, find, office, pdf_of, pick_file, save_keep_format,  # noqa: E402
                     saved_by_office, shot)

__all__ = ["command", "doc_bytes", "find", "office", "pdf_of", "pick_file", "save_keep_format", "saved_by_office",
           "shot"]
