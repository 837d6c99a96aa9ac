"""Take the subtitles out of ~/video.mp4 and keep them as ~/subtitles.srt: in a terminal,
ffmpeg writes the video's subtitle track to subtitles.srt, then copies the video without
it over video.mp4 (VLC, playing it, keeps the old file open).

The stand-ins: video.mp4 is 8 s of a test pattern and a tone with a mov_text subtitle
track as its third stream (ffmpeg lists it as "Stream #0:2[0x3](und): Subtitle", as the
task's own video); the gold .srt is the track's text. The check script, downloaded by the
postconfig, is a stand-in doing what the task's does: pysrt compares subtitles.srt with
the gold, and ``ffmpeg -i video.mp4`` must list no subtitle stream; it prints "true" or
"false". The postconfig's ``sudo pip install pysrt`` is answered from the host's Python
(decision 204). With no action there is no subtitles.srt (0)."""
from __future__ import annotations

import pathlib
import subprocess
import tempfile
from typing import Any

from _common import put_download, read_file, terminal, type_line, until

GOLD = """1
00:00:00,500 --> 00:00:02,500
This is the first line to listen to.

2
00:00:03,000 --> 00:00:05,000
And this is the second one.

3
00:00:05,500 --> 00:00:07,500
The third closes the clip.
"""

#: What the task's check script does, as a stand-in (run by ``python`` in the desktop,
#: from the home folder).
CHECK = '''import subprocess

import pysrt


def same_subtitles(name, gold):
    return pysrt.open("/home/user/" + name) == pysrt.open("/home/user/" + gold)


def no_subtitle_stream(video):
    probe = subprocess.run(["ffmpeg", "-i", video], capture_output=True, text=True)
    return "Stream #0:2[0x3](und): Subtitle" not in probe.stderr


print("true" if same_subtitles("subtitles.srt", "subtitles_Gold.srt") and no_subtitle_stream("video.mp4")
      else "false")
'''


def _video() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        srt, out = pathlib.Path(d) / "gold.srt", pathlib.Path(d) / "video.mp4"
        srt.write_text(GOLD)
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=5",
                        "-f", "lavfi", "-i", "sine=frequency=440", "-i", str(srt), "-t", "8",
                        "-map", "0", "-map", "1", "-map", "2", "-c:v", "libx264", "-pix_fmt", "yuv420p",
                        "-c:a", "aac", "-c:s", "mov_text", str(out)], check=True)
        return out.read_bytes()


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, _video(), "/home/user/video.mp4")
    put_download(cache, task, GOLD, "/home/user/subtitles_Gold.srt")
    put_download(cache, task, CHECK, "/home/user/Desktop/subtitles_script.py")


def solve(env: Any) -> None:
    terminal(env)
    type_line(env, "cd ~ && ffmpeg -loglevel error -y -i video.mp4 -map 0:s:0 subtitles.srt && "
                   "ffmpeg -loglevel error -y -i video.mp4 -map 0 -map -0:s -c copy nosubs.mp4 && "
                   "mv nosubs.mp4 video.mp4 && echo done-$((6*7))", pause=2.0)
    until(lambda: "third closes" in read_file(env, "/home/user/subtitles.srt"), "subtitles.srt", 30)
    until(lambda: env.deskgym.exec(["test", "-e", "/home/user/nosubs.mp4"]).exit_code != 0, "the video replaced", 30)
