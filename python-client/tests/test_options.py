"""One PoolOptions value shapes make, make_vec (one server or a list) and the env pool
alike; the keywords users pass today build the same value."""

from __future__ import annotations

import dataclasses

import pytest

import deskgym
from deskgym.envpool import DeskgymEnvPool
from deskgym.fleet import ShardedVectorEnv
from deskgym.options import PoolOptions

OPTS = PoolOptions(screen=(320, 240), max_steps=7, action_mode="multi_discrete", grid=(4, 3))


def test_options_and_keywords_make_the_same_envs_everywhere(address: str) -> None:
    kw = {"screen": (320, 240), "max_steps": 7, "action_mode": "multi_discrete", "grid": (4, 3)}
    made = [
        (deskgym.make("click-target", address=address, options=OPTS), deskgym.make("click-target", address=address, **kw)),
        (deskgym.make_vec("click-target", 2, address=address, options=OPTS),
         deskgym.make_vec("click-target", 2, address=address, **kw)),
        (deskgym.make_vec("click-target", 2, address=[address], options=OPTS),
         deskgym.make_vec("click-target", 2, address=[address], **kw)),
        (deskgym.make_vec("click-target", 2, address=address, batch_size=1, options=OPTS),
         deskgym.make_vec("click-target", 2, address=address, batch_size=1, **kw)),
    ]
    try:
        for a, b in made:
            assert a.pool_options == b.pool_options == OPTS, type(a)
            single_obs = getattr(a, "single_observation_space", a.observation_space)
            single_act = getattr(a, "single_action_space", a.action_space)
            assert single_obs.shape == (240, 320, 3), type(a)
            # multi_discrete over a 4x3 grid: cell x, cell y, and the verb.
            assert list(single_act.nvec[:2]) == [4, 3], type(a)  # type: ignore[attr-defined]
        env = made[0][0]
        assert env.max_steps == 7
        assert isinstance(made[2][0], ShardedVectorEnv) and isinstance(made[3][0], DeskgymEnvPool)
    finally:
        for a, b in made:
            a.close()
            b.close()


def test_keywords_override_the_options_they_are_given_with(address: str) -> None:
    env = deskgym.make("click-target", address=address, options=OPTS, screen=(200, 150))
    try:
        assert env.observation_space.shape == (150, 200, 3)
        assert env.pool_options == dataclasses.replace(OPTS, screen=(200, 150))
    finally:
        env.close()


def test_the_env_pool_takes_every_option_it_can_honour(address: str) -> None:
    pool = DeskgymEnvPool("click-target", 2, address=address, screen=(320, 240), info_timing=True, settle_ms=0)
    try:
        _, info = pool.reset(seed=0)
        assert all("latency_ms" in d for d in info["infos"])
    finally:
        pool.close()
    with pytest.raises(deskgym.DeskgymError) as e:
        DeskgymEnvPool("click-target", 2, address=address, record="run")
    assert e.value.code == "INVALID_ARGUMENT" and "record" in e.value.message


@pytest.mark.parametrize("make", [
    lambda: deskgym.make("click-target", address="127.0.0.1:1", scren=(1, 1)),
    lambda: deskgym.make_vec("click-target", 2, address="127.0.0.1:1", scren=(1, 1)),
    lambda: deskgym.make_vec("click-target", 2, address="127.0.0.1:1", batch_size=1, scren=(1, 1)),
])
def test_an_unknown_keyword_is_a_type_error_before_any_call(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TypeError, match="'scren'"):
        make()


def test_an_options_value_cannot_change_under_the_envs_that_share_it() -> None:
    caps = ["exec"]
    task_options = {"reward": "raw"}
    opts = PoolOptions(capabilities=caps, task_options=task_options)
    caps.append("files")
    task_options["clock"] = "real"
    assert opts.capabilities == ("exec",) and opts.task_options == {"reward": "raw"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.screen = (1, 1)  # type: ignore[misc]
    assert PoolOptions.names() >= {"screen", "obs_type", "record", "info_timing"}
