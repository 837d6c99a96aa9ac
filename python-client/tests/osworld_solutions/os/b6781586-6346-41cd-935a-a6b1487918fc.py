"""Set the time zone to UTC+0 (`timedatectl set-timezone UTC`).

Unsolvable here: the metric reads `timedatectl status`, which needs systemd as PID 1
and its D-Bus (the sandbox has neither: "System has not been booted with systemd"), and
setting the zone needs root; OSWorld's VM boots Ubuntu with systemd."""

from __future__ import annotations

UNSOLVABLE = "the metric reads `timedatectl status`: no systemd in the sandbox (and setting a zone needs root)"
