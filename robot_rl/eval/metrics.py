"""Evaluation metrics: success rate with a Wilson 95% interval, return, cycle time."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class EpisodeResult:
    """One evaluation episode. ``steps`` are control steps; ``cycle_time_s`` is seconds to success."""

    env_seed: int
    success: bool
    episode_return: float
    steps: int
    cycle_time_s: float | None


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% for z = 1.96). Raises ValueError if n <= 0."""
    if n <= 0:
        raise ValueError("wilson_interval needs at least one trial")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def summarize(episodes: list[EpisodeResult]) -> dict:
    """Aggregate episodes: ``success_rate`` with ``success_ci95``, ``mean_return``, ``cycle_time_s``
    (mean over successful episodes, None if none succeeded) and ``num_episodes``."""
    n = len(episodes)
    wins = sum(e.success for e in episodes)
    times = [e.cycle_time_s for e in episodes if e.success and e.cycle_time_s is not None]
    return {
        "num_episodes": n,
        "success_rate": wins / n,
        "success_ci95": list(wilson_interval(wins, n)),
        "mean_return": float(np.mean([e.episode_return for e in episodes])),
        "cycle_time_s": float(np.mean(times)) if times else None,
    }


def summarize_seeds(per_seed: dict[int, list[EpisodeResult]]) -> dict:
    """Pool episodes over training seeds and also report each seed and the across-seed std of success."""
    pooled = summarize([e for eps in per_seed.values() for e in eps])
    seed_rates = {str(s): summarize(eps)["success_rate"] for s, eps in per_seed.items()}
    pooled["seeds"] = sorted(per_seed)
    pooled["success_rate_per_seed"] = seed_rates
    pooled["success_rate_std_across_seeds"] = float(np.std(list(seed_rates.values())))
    return pooled


def episodes_to_json(episodes: list[EpisodeResult]) -> list[dict]:
    return [asdict(e) for e in episodes]
