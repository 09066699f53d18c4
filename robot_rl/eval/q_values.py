"""Critic calibration on held-out episodes: Q of the recorded chunks against their Monte-Carlo returns.

For each scored frame t of an episode [lo, hi) with per-step rewards r (mapped by the agent's
``reward_affine``, the units the critic is trained in), the discounted return to the episode's end is
``G_t = sum_{j=t}^{hi-1} gamma^(j-t) r'_j``, plus ``gamma^(hi-t) V`` when the episode ends in a success (the
absorbing success value of ``offline.success_value``, as in the TD targets; :func:`calibration_returns`).
On an episode that ends in a true termination G_t is the exact return of the recorded behaviour; on a
truncated one it omits the rewards after the cut. Metrics:

- ``val_q_data``: mean aggregated ``Q(s_t, A_t)`` of the recorded chunk A_t;
- ``val_q_policy``: mean aggregated ``Q(s_t, A)`` of the chunk the agent would execute (for QC the
  best-of-N pick, so ``val_q_policy - val_q_data`` is how much more the critic likes its pick than the data);
- ``val_mc_return``: mean G_t over the same frames;
- ``val_q_minus_mc_terminal``: mean ``Q(s_t, A_t) - G_t`` over frames of terminated episodes only, where
  G_t is exact: a large positive value is overestimation (NaN when no scored episode terminates).
"""

from __future__ import annotations

import numpy as np
import torch

from robot_rl.algos.base import prepare_actions
from robot_rl.algos.batch import batch_to_torch
from robot_rl.algos.targets import success_tail
from robot_rl.data.lerobot.tools import evenly_spaced
from robot_rl.data.training.sampler import ChunkSampler
from robot_rl.data.training.training_set import Split, TrainingSet


def calibration_returns(
    sampler: ChunkSampler, success_value: str, affine: tuple[float, float], reward_range
) -> np.ndarray:
    """(N,) float64 Monte-Carlo return ``G_t`` of every frame of ``sampler``, in the critic's units: the
    discounted mapped rewards ``r' = scale · (r − shift)`` (``affine``) to the end of t's episode, plus,
    where the episode ends in a success, the absorbing success value ``γ^{hi−t} · V``
    (:func:`~robot_rl.algos.targets.success_tail` under ``success_value``), which the critic's TD targets
    also count; without it a success under ``reward_norm`` other than ``max`` would read as overestimation.

    Raises:
        ValueError: ``success_value=r_max`` without a ``reward_range`` while an episode ends in a success
            (:func:`~robot_rl.algos.targets.success_values`).
    """
    shift, scale = affine
    g, d = sampler.mc_returns()
    frames = np.arange(len(g))
    returns = scale * (g - shift * d)
    mc = {k: torch.from_numpy(v) for k, v in sampler.mc_success(frames).items()}
    if not mc["mc_success_discount"].any():  # no episode ends in a success: no tail (and no range needed)
        return returns
    tail = success_tail(
        mc, success_value, affine, reward_range, sampler.gamma, "mc_success_discount", "mc_success_reward"
    )
    return returns + tail.double().numpy()


@torch.no_grad()
def q_calibration(
    agent, data: TrainingSet, split: Split, max_frames: int, device: str = "cpu", batch_size: int = 256
) -> dict[str, float]:
    """The module's metrics for an agent with a ``critic`` (QC, QC-FQL) on up to ``max_frames`` evenly
    spaced frames of ``split``. Policy noise comes from a forked, fixed-seed RNG (training RNG untouched).

    Raises:
        AttributeError: ``agent`` has no ``critic`` or ``reward_affine`` (BC).
        ValueError: see :func:`calibration_returns`.
    """
    sampler, cfg = split.sampler, agent.cfg
    returns = calibration_returns(sampler, cfg.success_value, agent.reward_affine, cfg.reward_range)
    last = sampler.episode_end - 1
    terminated = sampler.dones[last]
    indices = evenly_spaced(0, len(split.rows), max_frames)
    critic = agent.critic
    q_data, q_policy = [], []
    was_training = agent.policy.training
    agent.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for lo in range(0, len(indices), batch_size):
            batch = batch_to_torch(data.batch(split, indices[lo : lo + batch_size]), device)
            obs = batch["observations"]
            actions = prepare_actions(agent.policy, batch["actions"], batch["valid"], obs)
            q_data.append(critic.q_agg(critic(obs, actions)).cpu().numpy())
            chosen = agent.policy.normalize_actions(agent.act(obs), obs)
            q_policy.append(critic.q_agg(critic(obs, chosen)).cpu().numpy())
    agent.train(was_training)
    q_d, q_p, g = np.concatenate(q_data), np.concatenate(q_policy), returns[indices]
    term = terminated[indices]
    gap = float(np.mean(q_d[term] - g[term])) if term.any() else float("nan")
    return {
        "val_q_data": float(q_d.mean()),
        "val_q_policy": float(q_p.mean()),
        "val_mc_return": float(g.mean()),
        "val_q_minus_mc_terminal": gap,
    }
