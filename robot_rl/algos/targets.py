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
    """``mean_{k,b} w_b * (Q_k(s_b, A_b) - y_b)^2`` (QC code: mean over ensemble and batch).

    Args:
        q: (K, B) ensemble predictions.
        target: (B,) targets y.
        valid_last: (B,) float weight w, :func:`critic_weight`: ``valid[:, h-1]`` (0 drops chunks that run
            past the episode end) times whether the target can be formed.
    Returns:
        scalar float32.
    """
    if q.dim() != 2 or q.shape[1] != target.shape[0]:
        raise ValueError(f"q must be (K, B) with B={target.shape[0]}, got {tuple(q.shape)}")
    return ((q - target.unsqueeze(0)) ** 2 * valid_last.to(q.dtype).unsqueeze(0)).mean()


TERMINAL_CHUNKS = ("drop", "keep")


def critic_weight(batch: dict, terminal_chunks: str = "drop") -> torch.Tensor:
    """Per-chunk weight (B,) of the critic loss.

    ``critic_valid`` (``robot_rl.data.sampler``): all h steps recorded (``valid_{h-1}``, QC's rule) and a
    recorded next state or a true termination. ``terminal_chunks='keep'`` also keeps a chunk that ends in a
    true termination before its h-th step: its target is the exact partial sum R_t^(h) with mask 0 (the
    padded steps repeat the last action and earn nothing). 'drop' (QC's code) leaves it out.

    Raises:
        ValueError: ``terminal_chunks`` not in TERMINAL_CHUNKS.
    """
    if terminal_chunks not in TERMINAL_CHUNKS:
        raise ValueError(f"terminal_chunks={terminal_chunks!r}; expected one of {TERMINAL_CHUNKS}")
    weight = batch["critic_valid"]
    if terminal_chunks == "keep":
        weight = torch.maximum(weight, 1.0 - batch["masks"])
    return weight


def critic_td_step(
    critic,
    optimizer,
    obs,
    actions_norm,
    next_q,
    batch: dict,
    gamma: float,
    horizon: int,
    terminal_chunks: str = "drop",
):
    """One gradient step of the Q-chunking critic (ALGORITHMS.md §3).

    y = R_t^(h) + γ^h·mask·next_q (no gradient), loss = w·(Q_k(s_t, A_t) − y)² averaged over the
    ensemble, with w from :func:`critic_weight`. ``actions_norm`` (B, h, d) normalised; ``next_q`` (B,)
    aggregated target Q at s_{t+h}. Returns (loss, q, y): q (K, B) from this step's graph and the target
    y (B,).
    """
    y = qc_target(batch["rewards"], batch["masks"], next_q.detach(), gamma, horizon)
    q = critic(obs, actions_norm)
    loss = masked_critic_loss(q, y, critic_weight(batch, terminal_chunks))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss, q, y
