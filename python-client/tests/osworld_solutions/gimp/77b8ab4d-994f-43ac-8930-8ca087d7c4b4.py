"""Put the photo on the Desktop as export.jpg: File > Export As (Ctrl+Shift+E), the name
typed over the selected one, Export, and the JPEG options' Export. The photo is a
textured image, also the gold (OSWorld's gold is the task's own photo, the same URL), so a
copy of it passes the metric's SSIM and the stand-ins' unlike pair would not."""

from __future__ import annotations

import io
import pathlib
from typing import Any

from _common import put_cloud, put_download
from _gimp import export_as, ready


def _photo(w: int = 320, h: int = 240) -> bytes:
    from PIL import Image

    img = Image.new("RGB", (w, h))
    px = img.load()
    for y in range(h):
        for x in range(w):
            px[x, y] = (255 * x // w, 78 + 100 * ((x // 40 + y // 30) % 2), 255 * y // h)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    photo = _photo()
    put_download(cache, task, photo)
    put_cloud(cache, "The_Lost_River_Of_Dreams.jpg", photo)


def solve(env: Any) -> None:
    ready(env, "The_Lost_River_Of_Dreams")
    export_as(env, "export.jpg", "as JPEG")
