"""Where :mod:`deskgym.agents.axstream` used to live: its names, re-exported."""

from deskgym.agents.axstream import *  # noqa: F403
