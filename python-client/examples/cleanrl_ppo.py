"""A CleanRL-style PPO loop on deskgym (single file, PyTorch, no RL library).

    python python-client/examples/cleanrl_ppo.py --address 127.0.0.1:50051 --steps 20000

The env is a vector env stepped with one RPC per step; actions are clicks on an 8x8
grid (``action_mode="click_grid"``) and observations float32 CHW in [0, 1].
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn

import deskgym


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", default=deskgym.DEFAULT_ADDRESS)
    p.add_argument("--task", default="click-target")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--steps", type=int, default=20_000)
    p.add_argument("--rollout", type=int, default=64)
    a = p.parse_args()

    envs = deskgym.make_vec(a.task, a.envs, address=a.address, screen=(64, 64), max_steps=8, seed=0,
                            action_mode="click_grid", obs_format="float32_chw", autoreset_mode="next_step")
    n_actions = int(envs.single_action_space.n)
    net = nn.Sequential(nn.Conv2d(3, 16, 5, stride=2), nn.ReLU(), nn.Conv2d(16, 32, 5, stride=2), nn.ReLU(),
                        nn.Flatten(), nn.LazyLinear(128), nn.ReLU())
    policy, value = nn.Linear(128, n_actions), nn.Linear(128, 1)
    net(torch.zeros(1, *envs.single_observation_space.shape))
    opt = torch.optim.Adam([*net.parameters(), *policy.parameters(), *value.parameters()], lr=2.5e-4)

    obs, _ = envs.reset(seed=0)
    done = np.zeros(a.envs, dtype=bool)
    returns, ep_ret = [], np.zeros(a.envs)
    for update in range(a.steps // (a.rollout * a.envs)):
        buf = []
        for _ in range(a.rollout):
            x = torch.as_tensor(obs)
            with torch.no_grad():
                h = net(x)
                dist = torch.distributions.Categorical(logits=policy(h))
                act = dist.sample()
            # Next-step autoreset: the step after an end is the reset; it carries no reward.
            nxt, rew, term, trunc, _ = envs.step(act.numpy())
            buf.append((x, act, dist.log_prob(act), torch.as_tensor(rew, dtype=torch.float32), torch.as_tensor(done)))
            ep_ret += rew
            ended = term | trunc
            returns += list(ep_ret[ended])
            ep_ret[ended] = 0
            obs, done = nxt, ended
        # Monte-Carlo returns within the rollout (gamma 0.99), then one PPO epoch.
        g = torch.zeros(a.envs)
        for x, act, logp, rew, was_done in reversed(buf):
            g = rew + 0.99 * g * (~was_done).float()
            h = net(x)
            dist = torch.distributions.Categorical(logits=policy(h))
            adv = g - value(h).squeeze(-1).detach()
            ratio = (dist.log_prob(act) - logp).exp()
            loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean() + 0.5 * (value(h).squeeze(-1) - g).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if returns:
            print(f"update {update}: mean return of the last 50 episodes {np.mean(returns[-50:]):.3f}")
    envs.close()


if __name__ == "__main__":
    main()
