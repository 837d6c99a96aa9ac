"""An animated GIF ~/Desktop/src_clip.gif of src.mp4's 5 s from 00:03: in a terminal,
ffmpeg cuts the clip from 3 s and writes it as a GIF with a palette made from the clip
(GIMP and VLC, which the setup opens, are one way; the metric reads only the file).

The stand-ins: src.mp4 is 10 s whose picture is one grey level per second (0, 25, 50,
...), so the clip's first frame tells where it starts. The metric (``compare_images``)
is the SSIM of the two files' first frames in grey: it is 1 only for a clip that starts
at 3 s, and less for one that starts a second early or late. The gold is that frame,
taken from the video by ffmpeg and written as a GIF by Pillow (not by the solution's
ffmpeg recipe). With no action there is no src_clip.gif (0)."""
from __future__ import annotations

import io
import pathlib
import subprocess
import tempfile
from typing import Any

from _common import put_cloud, put_download, terminal, type_line, until, wait_window
from PIL import Image


def _video(d: pathlib.Path) -> pathlib.Path:
    out = d / "src.mp4"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi",
                    "-i", "nullsrc=size=320x240:rate=10,geq=lum='25*floor(T)':cb=128:cr=128", "-t", "10",
                    "-c:v", "libx264", "-pix_fmt", "yuv420p", str(out)], check=True)
    return out


def _gold(video: pathlib.Path) -> bytes:
    """The video's frame at 3 s as a one-frame GIF, made by Pillow."""
    png = subprocess.run(["ffmpeg", "-loglevel", "error", "-ss", "3", "-i", str(video), "-frames:v", "1",
                          "-f", "image2pipe", "-c:v", "png", "-"], check=True, capture_output=True).stdout
    buf = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").save(buf, "GIF")
    return buf.getvalue()


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        video = _video(pathlib.Path(d))
        put_download(cache, task, video.read_bytes(), "/home/user/Desktop/src.mp4")
        put_cloud(cache, "src_clip_gold.gif", _gold(video))


def solve(env: Any) -> None:
    # GIMP and VLC, which the setup launched, take the focus when their windows come:
    # the terminal opens after them.
    wait_window(env, title="GNU Image Manipulation Program", wm_class="Gimp", timeout=90, settle=2.0)
    wait_window(env, title="VLC media player", timeout=60)
    terminal(env)
    type_line(env, "cd ~/Desktop && ffmpeg -loglevel error -y -ss 3 -t 5 -i src.mp4 -filter_complex "
                   "'[0:v]split[a][b];[a]palettegen[p];[b][p]paletteuse' src_clip.gif && echo done-$((6*7))",
              pause=2.0)
    until(lambda: env.deskgym.exec(["test", "-s", "/home/user/Desktop/src_clip.gif"]).ok, "src_clip.gif", 60)
