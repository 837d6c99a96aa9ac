"""Edit the friend's picture as his document asks and save it as pic.jpg on the Desktop:
the requirement (open in Writer) asks for the picture mirrored left to right; the
solution opens the picture in GIMP from a terminal, flips it with Image > Transform >
Flip Horizontally, and exports it as ~/Desktop/pic.jpg (File > Export As, JPEG).

The stand-ins: requirment.docx says to flip the picture horizontally; the picture is a
grey JPEG with no left-right symmetry (a ramp), so the flip is what the metric's SSIM
sees (its score is 1 only for the same pixels); the gold is the picture flipped (PIL)
and saved as a JPEG. With no action there is no pic.jpg (0)."""
from __future__ import annotations

import io
import pathlib
import sys
from typing import Any

from _common import put_cloud, put_download, terminal, type_line

_GIMP = str(pathlib.Path(__file__).resolve().parents[1] / "gimp")
if _GIMP not in sys.path:
    sys.path.append(_GIMP)

from _gimp import export_as, keys, ready  # noqa: E402

PICTURE = "ChMkKV8wsR6IBfEtABYfc0Tgu9cAAA1lQHO_78AFh-L733.jpg"
ASK = "Hi! Please flip this picture horizontally (mirror it left to right) and send it back as a JPEG. Thanks!"


def _photo(flip: bool) -> bytes:
    """A grey JPEG of 16 px blocks of one tone each (a left-to-right ramp over a checker):
    such blocks go through JPEG's DCT unchanged, so GIMP's export of the flipped picture
    and PIL's decode to the same pixels as the gold."""
    from PIL import Image

    w, h = 320, 240
    img = Image.new("L", (w, h))
    px = img.load()
    for y in range(h):
        for x in range(w):
            px[x, y] = 40 + 6 * (x // 16) + 30 * ((x // 16 + y // 16) % 2)
    if flip:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def _requirement() -> bytes:
    from docx import Document

    d = Document()
    d.add_heading("Picture edit", level=1)
    d.add_paragraph(ASK)
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, _requirement(), "requirment.docx")
    put_download(cache, task, _photo(False), PICTURE)
    put_cloud(cache, "pic_Gold.jpg", _photo(True))


def solve(env: Any) -> None:
    terminal(env)
    type_line(env, f"gimp ~/Desktop/{PICTURE} &")
    ready(env, PICTURE.split(".")[0])
    keys(env, "alt+i", "t", "h")  # Image > Transform > Flip Horizontally
    export_as(env, "pic.jpg", "as JPEG")
