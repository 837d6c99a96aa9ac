"""Where :mod:`deskgym.agents.mcp` used to live: its names, re-exported, and the
``python -m deskgym.mcp`` command the docs give."""

from deskgym.agents.mcp import *  # noqa: F403
from deskgym.agents.mcp import main

if __name__ == "__main__":
    main()
