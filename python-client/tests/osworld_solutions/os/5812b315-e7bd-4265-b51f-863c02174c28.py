"""Create an SSH user "charles" whose home is /home/test1 (useradd and chpasswd as root).

Unsolvable here: the sandbox's `sudo` checks the password and runs the command as the
user (the sandbox is the boundary), so `useradd` cannot add a user; the postconfig's
`sudo apt-get install -y expect` succeeds since the osworld profile installs expect and
the sandbox's sudo answers apt from the host's packages (decision 168), but the metric's
`check_password.sh` logs in as a user that cannot exist. OSWorld's VM gives its user
real root."""

from __future__ import annotations

UNSOLVABLE = ("needs root: the sandbox's sudo runs commands as the user, so useradd cannot add the user "
              "the metric logs in as")
