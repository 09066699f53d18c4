"""Q-chunking backup targets and losses (Li, Zhou & Levine 2025, "Reinforcement Learning with Action
Chunking"; ALGORITHMS.md §3). Pure functions on tensors."""

from __future__ import annotations

import torch


def qc_target(
    rewards: torch.Tensor, masks: torch.Tensor, next_q: torch.Tensor, gamma: float, horizon: int
) -> torch.Tensor:
    """Chunked TD target ``y = R_t^(h) + gamma^h * mask * Qbar(s_{t+h}, A')`` (ALGORITHMS.md §3).

    Args:
        rewards: (B,) float32, the discounted chunk reward sum_{i<h} gamma^i r_{t+i}.
        masks: (B,) float32, 1 - terminal over the window.
        next_q: (B,) float32, aggregated target-critic value at the next chunk's start.
    Returns:
        (B,) float32 targets (no gradient is stopped here; callers compute next_q under no_grad).
    """
    return rewards + (gamma**horizon) * masks * next_q


def masked_critic_loss(q: torch.Tensor, target: torch.Tensor, valid_last: torch.Tensor) -> torch.Tensor:
    """``mean_{k,b} valid_{h-1}[b] * (Q_k(s_b, A_b) - y_b)^2`` (QC code: mean over ensemble and batch).

    Args:
        q: (K, B) ensemble predictions.
        target: (B,) targets y.
        valid_last: (B,) float, ``valid[:, h-1]``; 0 drops chunks that run past the episode end.
    Returns:
        scalar float32.
    """
    if q.dim() != 2 or q.shape[1] != target.shape[0]:
        raise ValueError(f"q must be (K, B) with B={target.shape[0]}, got {tuple(q.shape)}")
    return ((q - target.unsqueeze(0)) ** 2 * valid_last.to(q.dtype).unsqueeze(0)).mean()
