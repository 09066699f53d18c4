"""RECAP's labels on a dataset of episodes (docs/algorithms.md §7; Physical Intelligence 2025, "π*0.6: a VLA
that learns from experience", RECAP): per-step rewards, per-task normalised Monte-Carlo returns, their value
bins, the N-step advantage and the advantage indicator. Plain numpy over flat per-frame arrays whose
episodes are contiguous (the layout of :class:`robot_rl.data.training.sampler.ChunkSampler`).

- Reward: ``r_t = -1`` for every step but an episode's last; the last step gets ``0`` when the episode
  succeeded and ``-c_fail`` when it failed. ``γ = 1``, so the return is
  ``G_t = -(T - 1 - t) + r_{T-1}`` (minus the steps left, minus ``c_fail`` on failure).
- Normalisation (our choice; the paper says only "per task, to [-1, 0]"): each task k is divided by
  ``Z_k = max(1, max_{t in task k} -G_t)``, the largest return magnitude among the task's frames, so the
  normalised returns ``G̃ = G / Z_k`` and rewards ``r̃ = r / Z_k`` lie in ``[-1, 0]``.
- Value bins: ``bins`` evenly spaced support points on ``[-1, 0]``; a return's bin is the nearest one.
- Advantage: ``A_t = Σ_{i<N, t+i<T} r̃_{t+i} + V(o_{t+N}) - V(o_t)``, with the bootstrap ``V(o_{t+N})``
  dropped (0) when ``t + N`` reaches the episode's end ``T`` (nothing follows an episode's end).
- Indicator: ``I_t = 1[A_t > ε_k]`` with ``ε_k`` the ``1 - positive_fraction`` quantile of the task's
  advantages (the top ``positive_fraction`` positive); human-intervention frames are always positive.
"""

from __future__ import annotations

import numpy as np


def recap_rewards(episode_end: np.ndarray, success: np.ndarray, c_fail: float) -> np.ndarray:
    """Per-step RECAP rewards.

    Args:
        episode_end: (N,) int, exclusive end row of each frame's episode.
        success: (N,) bool, whether each frame's episode succeeded.
        c_fail: the failure cost (>= 0), in steps.
    Returns:
        (N,) float64: -1, or at an episode's last frame 0 (success) / -c_fail (failure).
    """
    n = len(episode_end)
    last = np.arange(n) + 1 == np.asarray(episode_end)
    end_reward = np.where(np.asarray(success, dtype=bool), 0.0, -float(c_fail))
    return np.where(last, end_reward, -1.0)


def episode_returns(rewards: np.ndarray, episode_end: np.ndarray) -> np.ndarray:
    """Undiscounted return to the episode's end, ``G_t = Σ_{j=t}^{T-1} r_j``: (N,) float64."""
    csum = np.concatenate([[0.0], np.cumsum(np.asarray(rewards, dtype=np.float64))])
    return csum[np.asarray(episode_end)] - csum[:-1]


def normalised_returns(
    rewards: np.ndarray, episode_end: np.ndarray, task: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-task normalised returns and rewards (module docstring): -> ``(G̃ (N,), r̃ (N,))`` float64, both
    in [-1, 0] for RECAP rewards. ``task``: (N,) int task index of each frame."""
    returns = episode_returns(rewards, episode_end)
    task = np.asarray(task)
    scale = np.ones(len(returns))
    for k in np.unique(task):
        frames = task == k
        scale[frames] = max(1.0, float(np.max(-returns[frames])))
    return returns / scale, np.asarray(rewards, dtype=np.float64) / scale


def bin_support(bins: int) -> np.ndarray:
    """The value distribution's support: ``bins`` points evenly spaced on [-1, 0], (bins,) float64."""
    if bins < 2:
        raise ValueError(f"recap.value_bins={bins}: need at least 2 bins")
    return np.linspace(-1.0, 0.0, bins)


def value_bins(returns: np.ndarray, bins: int) -> np.ndarray:
    """Index of the support point nearest each normalised return (clipped to [-1, 0]): (N,) int64."""
    g = np.clip(np.asarray(returns, dtype=np.float64), -1.0, 0.0)
    return np.rint((g + 1.0) * (bins - 1)).astype(np.int64)


def advantages(
    rewards: np.ndarray, values: np.ndarray, episode_end: np.ndarray, lookahead: int
) -> np.ndarray:
    """N-step advantage ``A_t = Σ_{i<N} r̃_{t+i} + V(o_{t+N}) - V(o_t)``, truncated at the episode's end
    (no bootstrap there).

    Args:
        rewards: (N,) normalised per-step rewards r̃.
        values: (N,) V(o_t) of every frame.
        episode_end: (N,) int exclusive end row of each frame's episode.
        lookahead: N >= 1.
    Returns: (N,) float64.
    """
    if lookahead < 1:
        raise ValueError(f"recap.lookahead={lookahead}: must be >= 1")
    n = len(rewards)
    t = np.arange(n)
    end = np.asarray(episode_end)
    stop = np.minimum(t + lookahead, end)
    csum = np.concatenate([[0.0], np.cumsum(np.asarray(rewards, dtype=np.float64))])
    values = np.asarray(values, dtype=np.float64)
    bootstrap = np.where(stop < end, values[np.minimum(stop, n - 1)], 0.0)
    return csum[stop] - csum[t] + bootstrap - values


def indicators(
    adv: np.ndarray, task: np.ndarray, positive_fraction: float, intervention: np.ndarray | None = None
) -> tuple[np.ndarray, dict[int, float]]:
    """Advantage indicator ``I_t = 1[A_t > ε_task]``, intervention frames forced to 1.

    Args:
        adv: (N,) advantages.
        task: (N,) int task index per frame.
        positive_fraction: in (0, 1): ε_task is the ``1 - positive_fraction`` quantile of the task's
            advantages (np.quantile's linear interpolation and ties at ε_task move the positive share by
            about one frame per task).
        intervention: optional (N,) flags (nonzero = a human-correction frame).
    Returns:
        ``(I (N,) int64 in {0, 1}, {task: ε_task})``.
    """
    if not 0.0 < positive_fraction < 1.0:
        raise ValueError(f"recap.positive_fraction={positive_fraction}: must be in (0, 1)")
    adv, task = np.asarray(adv, dtype=np.float64), np.asarray(task)
    out = np.zeros(len(adv), dtype=np.int64)
    eps = {}
    for k in np.unique(task):
        frames = task == k
        eps[int(k)] = float(np.quantile(adv[frames], 1.0 - positive_fraction))
        out[frames] = adv[frames] > eps[int(k)]
    if intervention is not None:
        out[np.asarray(intervention).reshape(-1) > 0] = 1
    return out, eps
