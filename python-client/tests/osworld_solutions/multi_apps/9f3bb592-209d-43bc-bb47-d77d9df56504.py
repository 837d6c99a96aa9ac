"""Extract the subtitles of ~/video.mp4 to ~/subtitles.srt. Not solvable offline: the
metric runs the task's check script, which imports pysrt, and only the postconfig's
`sudo pip install pysrt` (from PyPI) provides it: neither the desktop's Python nor the
host has it, and the desktop is offline (the sandbox's sudo runs pip as the user)."""
from __future__ import annotations

UNSOLVABLE = ("the check script imports pysrt, which only the postconfig's `sudo pip install pysrt` installs, from "
              "PyPI: the desktop is offline and its Python has no pysrt (Debian's python3-pysrt would provide it)")
