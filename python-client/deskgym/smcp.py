"""Where :mod:`deskgym.agents.smcp` used to live: its names, re-exported, and the
``python -m deskgym.smcp`` command the docs give."""

from deskgym.agents.smcp import *  # noqa: F403
from deskgym.agents.smcp import main

if __name__ == "__main__":
    main()
