"""What the vector envs (one server, sharded, EnvPool-style) share: Gymnasium's autoreset
modes by the names users write, and a vector reset's seeds and mask."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from deskgym.errors import DeskgymError

__all__ = ["AUTORESET_MODES", "autoreset_mode", "reset_args"]

#: The spellings users write (Gymnasium's enum values are "NextStep", ...).
AUTORESET_MODES = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
    **{m.value: m for m in AutoresetMode},
}


def autoreset_mode(value: str | AutoresetMode) -> AutoresetMode | None:
    """``value`` as Gymnasium's enum, or ``None`` when it names no mode."""
    return value if isinstance(value, AutoresetMode) else AUTORESET_MODES.get(value)


def reset_args(
    n: int, seed: int | Sequence[int | None] | None, options: dict[str, Any] | None
) -> tuple[list[int | None], np.ndarray]:
    """A vector reset's per-env seeds (an int: ``seed + i``; a list: one each; ``None``:
    each env's own sequence) and its ``reset_mask`` (default: every env), checked."""
    if isinstance(seed, (int, np.integer)):
        seeds: list[int | None] = [int(seed) + i for i in range(n)]
    elif seed is None:
        seeds = [None] * n
    else:
        seeds = [None if s is None else int(s) for s in seed]
        if len(seeds) != n:
            raise DeskgymError("INVALID_ARGUMENT", f"seed: got {len(seeds)} seeds for {n} envs")
    mask = np.ones(n, dtype=bool)
    if options and "reset_mask" in options:
        mask = np.asarray(options["reset_mask"], dtype=bool)
        if mask.shape != (n,):
            raise DeskgymError("INVALID_ARGUMENT", f"options.reset_mask: expected shape ({n},), got {mask.shape}")
    return seeds, mask
