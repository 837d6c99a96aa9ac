"""Create an SSH user "charles" whose home is /home/test1 (useradd and chpasswd as root).

Unsolvable here: the sandbox's user has no root (no sudo in the desktop: the
postconfig's `sudo -S apt-get install -y expect` exits 127), so no user can be added and
the metric's `check_password.sh` (expect) cannot run; OSWorld's VM gives its user sudo."""

from __future__ import annotations

UNSOLVABLE = "needs root: the desktop has no sudo (the postconfig's `sudo apt-get install expect` fails) and no useradd"
