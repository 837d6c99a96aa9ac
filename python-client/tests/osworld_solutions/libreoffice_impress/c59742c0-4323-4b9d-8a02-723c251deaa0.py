"""Add the desktop's Baseball.mp3 to the presentation: Insert > Audio or Video on slide 1
(the menu: Search Commands finds no "Audio or Video"), the path typed into its file
dialog, Enter; then a save as .pptx, which embeds the audio in the file (LibreOffice's
default: not linked).

The stand-ins: a one-slide presentation on baseball's history (python-pptx) and an MP3
of a rising tone with pauses, so the MFCCs the metric compares have shape. The metric,
``compare_audios``, decodes both files with librosa (the ``osworld-full`` extra;
``scripts/test.sh`` installs it): the embedded copy is the file itself, so its
similarity is 1. With no action the slide has no audio (0)."""

from __future__ import annotations

import pathlib
import subprocess
import tempfile
from typing import Any

from _common import put_download
from _impress import doc_bytes, office, pick_file, save_keep_format

NAME = "Mady_and_Mia_Baseball.pptx"
PATH = f"/home/user/Desktop/{NAME}"
AUDIO = "/home/user/Desktop/Baseball.mp3"


def _pptx() -> bytes:
    from pptx import Presentation

    p = Presentation()
    s = p.slides.add_slide(p.slide_layouts[0])
    s.shapes.title.text = "The History of Baseball"
    s.placeholders[1].text = "Mady and Mia"
    return doc_bytes(p)


def _mp3() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        out = pathlib.Path(d) / "a.mp3"
        # Two seconds of a sweep from 300 to 1,500 Hz, silence, again: MFCCs that change.
        tone = "aevalsrc='if(lt(mod(t,2.5),2),sin(2*PI*(300+300*mod(t,2.5))*mod(t,2.5)),0)':s=22050:d=5"
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", tone, "-c:a", "libmp3lame",
                        "-b:a", "64k", str(out)], check=True)
        return out.read_bytes()


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, _pptx(), NAME)
    put_download(cache, task, _mp3(), "Baseball.mp3")


def solve(env: Any) -> None:
    office(env, NAME)
    env.step("pyautogui.click(153, 30)", pause=2.0)  # the Insert menu
    env.step("pyautogui.click(210, 80)", pause=3.0)  # Audio or Video...
    pick_file(env, "Insert Audio or Video", AUDIO)
    save_keep_format(env, PATH)
