"""Recover the poster deleted to the Trash: in a terminal, `gio trash --restore` puts it
back where it was (~/Desktop). The poster is a small WebP image."""

from __future__ import annotations

import io
import pathlib
from typing import Any

from _common import put_download, terminal, type_line


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 160)).save(buf, format="WEBP")
    put_download(cache, task, buf.getvalue())


def solve(env: Any) -> None:
    terminal(env)
    type_line(env, "gio trash --restore trash:///poster_party_night.webp "
                   "|| mv ~/.local/share/Trash/files/poster_party_night.webp ~/Desktop/", pause=2.0)
