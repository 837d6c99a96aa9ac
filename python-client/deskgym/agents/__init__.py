"""Everything an agent drives deskgym through, one face per module:

- :mod:`deskgym.agents.axstream`: a model's streamed actions run while it still writes
  (the server's ``Drive`` stream; ``axstream-spec 0.1``).
- :mod:`deskgym.agents.mcp`: desktops as MCP tools and resources (extra ``[agents]``);
  ``python -m deskgym.mcp`` starts it.
- :mod:`deskgym.agents.smcp`: an A2C-SMCP Computer whose MCP server is that one (extra
  ``[agents]``); ``python -m deskgym.smcp`` starts it.
- :mod:`deskgym.agents.anthropic` / :mod:`deskgym.agents.openai`: the vendors'
  computer-use tools, over the frame geometry they share (``_screen``).
- :mod:`deskgym.agents.reference`: the random and scripted pixel agents the demo,
  benches and tests play the bundled tasks with, re-exported here.

Only the reference agents are imported with the package: the protocol modules pull in
their optional SDKs, so each is imported by name. ``deskgym.axstream``, ``deskgym.mcp``
and ``deskgym.smcp`` remain as re-exports of these modules (and the ``python -m``
commands).
"""

from deskgym.agents.reference import (
    BAR_HEIGHT,
    BAR_TEXT_X,
    BLACK,
    FIELD,
    GREEN,
    ORANGE,
    RED,
    WHITE,
    PixelAgent,
    RandomAgent,
    centroid,
    find_label,
    mask,
)

__all__ = [
    "BAR_HEIGHT",
    "BAR_TEXT_X",
    "BLACK",
    "FIELD",
    "GREEN",
    "ORANGE",
    "RED",
    "WHITE",
    "PixelAgent",
    "RandomAgent",
    "centroid",
    "find_label",
    "mask",
]
