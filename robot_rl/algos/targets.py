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


def critic_td_step(critic, optimizer, obs, actions_norm, next_q, batch: dict, gamma: float, horizon: int):
    """One gradient step of the Q-chunking critic (ALGORITHMS.md §3).

    y = R_t^(h) + γ^h·mask·next_q (no gradient), loss = valid_{h-1}·(Q_k(s_t, A_t) − y)² averaged over the
    ensemble. ``actions_norm`` (B, h, d) normalised; ``next_q`` (B,) aggregated target Q at s_{t+h}.
    Returns (loss, q, y): q (K, B) from this step's graph and the target y (B,).
    """
    y = qc_target(batch["rewards"], batch["masks"], next_q.detach(), gamma, horizon)
    q = critic(obs, actions_norm)
    loss = masked_critic_loss(q, y, batch["valid"][:, -1])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss, q, y
