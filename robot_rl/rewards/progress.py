"""Progress arithmetic shared by every critic: VLAC value reconstruction and Robo-Dopamine hop labels.

The two are inverses. A hop label says how much of the *remaining* distance (forward) or of the *covered*
distance (backward) a pair moves; reconstructing values from hops with the VLAC rules recovers the
progress curve exactly. docs/algorithms.md §9 (VLAC; Robo-Dopamine).
"""

from __future__ import annotations

from typing import get_args

import numpy as np

from robot_rl.config import NegativeRule

NEGATIVE_RULES: tuple[str, ...] = get_args(NegativeRule)


def reconstruct_progress(deltas: np.ndarray, rule: str = "scale") -> np.ndarray:
    """Per-frame progress V (T,) in [0, 1] from the T-1 pairwise deltas c_t = critic(o_{t-1}, o_t).

    VLAC reconstruction (docs/algorithms.md §9), V_0 = 0:
      - c > 0: V <- V + (1 - V) * c  (a share of the remaining distance);
      - c < 0, ``rule='scale'``: V <- V * (1 + c)  (a share of the covered distance);
      - c < 0, ``rule='mix'`` and V > 0.5: V <- V + c / 2, the mean of the 'scale' update and the
        forward-style update V + (1 - V) * c. docs/algorithms.md names the mix rule without stating it; this
        is
        our choice. It forgives a single bad delta late in an episode more than 'scale' does.

    Args:
        deltas: (T-1,) float in [-1, 1]; values outside are clipped.
        rule: 'scale' or 'mix'.

    Returns:
        (T,) float64 progress, V[0] = 0.

    Raises:
        ValueError: unknown rule, or a non-finite delta.
    """
    if rule not in NEGATIVE_RULES:
        raise ValueError(f"unknown negative-delta rule {rule!r}; choose one of {NEGATIVE_RULES}")
    deltas = np.asarray(deltas, dtype=np.float64).reshape(-1)
    if not np.isfinite(deltas).all():
        raise ValueError("progress deltas contain NaN/inf; a critic score must be finite to be used")
    values = np.zeros(len(deltas) + 1)
    for t, c in enumerate(np.clip(deltas, -1.0, 1.0)):
        values[t + 1] = vlac_step(values[t], float(c), rule)
    return values


def vlac_step(v: float, c: float, rule: str = "scale") -> float:
    """One VLAC update of progress ``v`` by delta ``c`` in [-1, 1] (rules in ``reconstruct_progress``)."""
    if c >= 0:
        return v + (1.0 - v) * c
    if rule == "mix" and v > 0.5:
        return v + c / 2.0
    return v * (1.0 + c)


def hop_labels(progress_i: np.ndarray, progress_j: np.ndarray) -> np.ndarray:
    """Training target c for the pair (o_i, o_j) from true progress values, in [-1, 1].

    Robo-Dopamine hop (docs/algorithms.md §9) with Φ = progress, Φ(s_goal) = 1 and Φ(s_0) = 0:
    c = (p_j - p_i) / (1 - p_i) when p_j >= p_i, and (p_j - p_i) / p_i when p_j < p_i. Pairs that cannot
    move (p_i = 1 forward, p_i = 0 backward) get 0. ``reconstruct_progress`` with rule 'scale' inverts it.

    Args:
        progress_i, progress_j: (B,) float in [0, 1].

    Returns:
        (B,) float32.
    """
    p_i = np.asarray(progress_i, dtype=np.float64)
    p_j = np.asarray(progress_j, dtype=np.float64)
    diff = p_j - p_i
    denom = np.where(diff >= 0, 1.0 - p_i, p_i)
    safe = np.where(denom > 1e-8, denom, 1.0)
    return np.where(denom > 1e-8, diff / safe, 0.0).clip(-1.0, 1.0).astype(np.float32)


def time_progress(length: int, success_step: int) -> np.ndarray:
    """Time-progress labels (length,) float32 for one successful episode: a linear rise from 0 at frame 0
    to 1 at its first success frame, then 1 (VLAC and GVL both label demos by time)."""
    end = max(int(success_step), 1)
    return np.clip(np.arange(length, dtype=np.float32) / end, 0.0, 1.0)
