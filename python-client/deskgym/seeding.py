"""Episode seeds: the scheme the server uses for unseeded resets, so client-side code
(single envs, tests, dataset tools) derives exactly the same seeds.

Env *i* of a pool seeded ``s`` has the base ``b = s + i``; an explicit ``reset(seed=x)``
makes ``x`` the base. Its *k*-th unseeded episode since the base was set uses
``episode_seed(b, k)``: ``b`` for k = 0, then splitmix64 mixes (below 2**63), so no two
episodes of a vector env share a seed in practice and the same base replays the same
run. See docs/protocol.md, "Reset and seeds".
"""

from __future__ import annotations

_MASK = (1 << 64) - 1


def _splitmix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def episode_seed(base: int, k: int) -> int:
    """The seed of the ``k``-th unseeded episode after seed base ``base`` was set."""
    if k == 0:
        return base & _MASK
    return _splitmix64(_splitmix64(base & _MASK) ^ (k & _MASK)) >> 1
