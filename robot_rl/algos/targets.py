"""Q-chunking backup targets and losses (Li, Zhou & Levine 2025, "Reinforcement Learning with Action
Chunking"; docs/algorithms.md §3). Pure functions on tensors."""

from __future__ import annotations

from typing import get_args

import torch

from robot_rl.config import RewardNorm, SuccessValue, TerminalChunks, success_value_problems

REWARD_NORMS: tuple[str, ...] = get_args(RewardNorm)
SUCCESS_VALUES: tuple[str, ...] = get_args(SuccessValue)


def reward_affine(norm: str, reward_range) -> tuple[float, float]:
    """``(shift, scale)`` of the per-step reward map ``r' = scale * (r - shift)`` for
    ``OfflineRLConfig.reward_norm`` / ``reward_range`` (see its docstring): ``max`` -> ``(r_max, 1/span)``,
    ``scale`` -> ``(0, 1/span)``, ``none`` -> ``(0, 1)``, with ``span = r_max - r_min`` (1 when the data
    holds one reward value).

    Raises:
        ValueError: unknown ``norm``; ``reward_range`` is not ``[r_min, r_max]`` with r_min <= r_max (an
            empty range is filled from the dataset by training; an agent built outside training must set it).
    """
    if norm not in REWARD_NORMS:
        raise ValueError(f"offline.reward_norm={norm!r}; expected one of {REWARD_NORMS}")
    if norm == "none":
        return 0.0, 1.0
    if len(reward_range) != 2 or not float(reward_range[0]) <= float(reward_range[1]):
        raise ValueError(
            f"offline.reward_range={list(reward_range)}: reward_norm={norm!r} needs [r_min, r_max] with "
            "r_min <= r_max (training fills an empty range from the dataset's next.reward)"
        )
    lo, hi = float(reward_range[0]), float(reward_range[1])
    scale = 1.0 / (hi - lo) if hi > lo else 1.0
    return (hi if norm == "max" else 0.0), scale


def normalize_chunk_rewards(
    rewards: torch.Tensor, valid: torch.Tensor, gamma: float, shift: float, scale: float
) -> torch.Tensor:
    """Apply ``r' = scale * (r - shift)`` to every valid step of discounted chunk rewards.

    ``rewards`` (B,) = sum_i gamma^i r_{t+i} valid_i; ``valid`` (B, h) float. Returns (B,) float32
    ``scale * (rewards - shift * sum_i gamma^i valid_i)``, which equals sum_i gamma^i r'_{t+i} valid_i.
    """
    discounts = gamma ** torch.arange(valid.shape[1], device=valid.device, dtype=valid.dtype)
    return scale * (rewards - shift * (valid * discounts).sum(1))


def check_success_value(mode: str, norm: str, gamma: float) -> None:
    """Check ``offline.success_value`` against the reward map and discount (see :func:`success_values`).

    Raises:
        ValueError: unknown ``mode``; a non-zero absorbing reward with ``gamma = 1`` (its value r'/(1 − γ)
            is infinite): only ``zero``, or ``r_max`` under ``reward_norm=max`` (r' = 0), is allowed there.
    """
    if mode not in SUCCESS_VALUES:
        raise ValueError(f"offline.success_value={mode!r}; expected one of {SUCCESS_VALUES}")
    problems = success_value_problems("offline.", mode, norm, gamma)
    if problems:
        raise ValueError(problems[0])


def success_values(
    success_reward: torch.Tensor,
    mode: str,
    affine: tuple[float, float],
    reward_range,
    gamma: float,
) -> torch.Tensor:
    """Value of the absorbing state after a success, ``V = r'_a / (1 − γ)`` = Σ_{i≥0} γ^i r'_a (issue 38).

    The success state is absorbing and earns ``r_a`` at every step after it (Sutton & Barto 2018, §3.4: an
    episode's end as an absorbing state; here it keeps earning instead of earning 0), mapped by the
    critic's per-step reward map ``r' = scale · (r − shift)`` (``affine``, :func:`reward_affine`):
    ``r_max``: r_a = ``reward_range[1]``; ``r_success``: r_a = the success frame's reward; ``zero``: V = 0.
    With ``gamma = 1`` (allowed only where r'_a = 0, :func:`check_success_value`) V is 0.

    Args:
        success_reward: (B,) or (B, h) float32 raw reward r of the success frame.
    Returns:
        float32 tensor of ``success_reward``'s shape.
    Raises:
        ValueError: ``r_max`` without ``reward_range = [r_min, r_max]`` (training fills an empty range
            from the dataset's next.reward).
    """
    if mode == "zero" or gamma >= 1.0:
        return torch.zeros_like(success_reward)
    if mode == "r_max" and len(reward_range) != 2:
        raise ValueError(
            f"offline.success_value=r_max needs offline.reward_range=[r_min, r_max], got "
            f"{list(reward_range)} (training fills an empty range from the dataset's next.reward)"
        )
    shift, scale = affine
    raw = torch.full_like(success_reward, float(reward_range[1])) if mode == "r_max" else success_reward
    return scale * (raw - shift) / (1.0 - gamma)


def success_tail(
    batch: dict,
    mode: str,
    affine: tuple[float, float],
    reward_range,
    gamma: float,
    weight_key: str = "success_discount",
    reward_key: str = "success_reward",
) -> torch.Tensor | None:
    """``batch[weight_key] · V(batch[reward_key])`` (:func:`success_values`), float32, the discounted
    absorbing value of a success; None when the batch lacks ``weight_key`` (built by hand, not by the chunk
    sampler: no success). The keys: QC's and QC-FQL's chunk (``success_discount`` (B,), γ^{j+1} for a
    success at step j, else 0: ``γ^{j+1} r'_a / (1 − γ)``), CO-RFT's prefixes (``step_success`` (B, h), 1
    at a success, with ``step_rewards``) and its Monte-Carlo return (``mc_success_discount`` (B,),
    γ^{T−t}, with ``mc_success_reward``)."""
    if weight_key not in batch:
        return None
    values = success_values(batch[reward_key].float(), mode, affine, reward_range, gamma)
    return batch[weight_key].float() * values


def qc_target(
    rewards: torch.Tensor, masks: torch.Tensor, next_q: torch.Tensor, gamma: float, horizon: int
) -> torch.Tensor:
    """Chunked TD target ``y = R_t^(h) + gamma^h * mask * Qbar(s_{t+h}, A')`` (docs/algorithms.md §3).

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


TERMINAL_CHUNKS: tuple[str, ...] = get_args(TerminalChunks)


def critic_weight(batch: dict, terminal_chunks: str = "drop") -> torch.Tensor:
    """Per-chunk weight (B,) of the critic loss.

    ``critic_valid`` (``robot_rl.data.training.sampler``): all h steps recorded (``valid_{h-1}``, QC's
    rule) and a recorded next state or a true termination. ``terminal_chunks='keep'`` also keeps a chunk
    that ends in a true termination before its h-th step: its target is the exact partial sum R_t^(h) with
    mask 0 (the padded steps repeat the last action and earn nothing). 'drop' (QC's code) leaves it out.

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
    affine: tuple[float, float] = (0.0, 1.0),
    terminal_chunks: str = "drop",
    tail: torch.Tensor | None = None,
):
    """One gradient step of the Q-chunking critic (docs/algorithms.md §3).

    y = R'_t^(h) + tail + γ^h·mask·next_q (no gradient), with R' the chunk reward under the per-step map
    ``affine = (shift, scale)`` (:func:`reward_affine`) and ``tail`` (B,) the absorbing value of a success
    inside the chunk (:func:`success_tail`; None: 0); loss = w·(Q_k(s_t, A_t) − y)² averaged over the
    ensemble, with w from :func:`critic_weight`. ``actions_norm`` (B, h, d) normalised; ``next_q`` (B,)
    aggregated target Q at s_{t+h}. Returns (loss, q, y): q (K, B) from this step's graph and the target
    y (B,).
    """
    rewards = normalize_chunk_rewards(batch["rewards"], batch["valid"], gamma, *affine)
    if tail is not None:
        rewards = rewards + tail
    y = qc_target(rewards, batch["masks"], next_q.detach(), gamma, horizon)
    q = critic(obs, actions_norm)
    loss = masked_critic_loss(q, y, critic_weight(batch, terminal_chunks))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss, q, y


def offline_td_step(agent, obs, actions_norm, next_q, batch: dict):
    """:func:`critic_td_step` of an offline agent (QC, QC-FQL): its ``critic`` and ``optimizers["critic"]``,
    its ``policy.horizon`` and reward map ``reward_affine``, and its config's ``gamma``, ``terminal_chunks``
    and absorbing success (``success_value``, ``reward_range``: :func:`success_tail`). Returns (loss, q, y)
    as :func:`critic_td_step`."""
    cfg, affine = agent.cfg, agent.reward_affine
    tail = success_tail(batch, cfg.success_value, affine, cfg.reward_range, cfg.gamma)
    optimizer, horizon = agent.optimizers["critic"], agent.policy.horizon
    return critic_td_step(
        agent.critic,
        optimizer,
        obs,
        actions_norm,
        next_q,
        batch,
        cfg.gamma,
        horizon,
        affine,
        cfg.terminal_chunks,
        tail,
    )


def prefix_targets(
    step_rewards: torch.Tensor,
    step_dones: torch.Tensor,
    next_q: torch.Tensor,
    gamma: float,
    step_absorbing: torch.Tensor | None = None,
) -> torch.Tensor:
    """CO-RFT per-prefix TD targets (Huang et al. 2025; docs/algorithms.md §6, [unverified] there).

    For prefix length k = 1..h (column k − 1):
    ``y_k = Σ_{i<k} γ^i r_{t+i} + γ^k · mask_k · Qbar(s_{t+k}, π(s_{t+k}))`` with
    ``mask_k = 1 − max_{i<k} done_{t+i}`` (a termination inside the prefix stops the bootstrap; a time-limit
    truncation is not a done and keeps it). This is §6's ``Σ_{i≤k} γ^i r_{t+i} + γ^{k+1} Qbar(s_{t+k+1}, ·)``
    with its 0-based k renamed to the prefix length k + 1; y_h is the §3 Q-chunking target. With
    ``step_absorbing`` (B, h), the absorbing value V of a success at step i (:func:`success_values`, 0 where
    step i is not the window's first termination and a success), y_k also gains ``Σ_{i<k} γ^{i+1} V_i``.

    Args:
        step_rewards: (B, h) float32 per-step rewards r_{t+i}, already mapped and 0 on padded steps.
        step_dones: (B, h) float32 1 where step t+i terminated (0 on padded steps).
        next_q: (B, h) float32, column k − 1 the aggregated target value at s_{t+k} (no gradient is stopped
            here; compute it under no_grad).
    Returns:
        (B, h) float32 targets.
    Raises:
        ValueError: the three shapes differ.
    """
    if not step_rewards.shape == step_dones.shape == next_q.shape or step_rewards.dim() != 2:
        raise ValueError(
            f"step_rewards, step_dones, next_q must all be (B, h), got {tuple(step_rewards.shape)}, "
            f"{tuple(step_dones.shape)}, {tuple(next_q.shape)}"
        )
    h = step_rewards.shape[1]
    discounts = gamma ** torch.arange(h + 1, device=step_rewards.device, dtype=step_rewards.dtype)
    partial = torch.cumsum(step_rewards * discounts[:h], dim=1)
    masks = 1.0 - torch.cummax(step_dones, dim=1).values
    if step_absorbing is not None:
        partial = partial + torch.cumsum(step_absorbing * discounts[1:], dim=1)
    return partial + discounts[1:] * masks * next_q
