"""Add the desktop's Baseball.mp3 to the presentation (Insert > Audio or Video on slide 1,
then save). Not solvable here: the metric, ``compare_audios``, decodes both MP3s with
librosa, which this venv lacks (it comes with the ``osworld-full`` extra), so no run can
score it."""

from __future__ import annotations

from typing import Any

UNSOLVABLE = ("the metric compare_audios decodes the audio with librosa, which is not installed "
              "here (deskgym's osworld-full extra); the task cannot score")


def solve(env: Any) -> None:
    raise NotImplementedError(UNSOLVABLE)
