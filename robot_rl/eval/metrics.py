"""Evaluation metrics: success rate with a Wilson 95% interval, return, cycle time."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class EpisodeResult:
    """One evaluation episode. ``steps`` are control steps; ``cycle_time_s`` is seconds to success.
    ``task``: the env's instruction for the episode; ``instruction``: the one the policy read (a paraphrase
    under ``eval.paraphrases``, else ``task``); both "" for an env without instructions."""

    env_seed: int
    success: bool
    episode_return: float
    steps: int
    cycle_time_s: float | None
    task: str = ""
    instruction: str = ""


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% for z = 1.96). Raises ValueError if n <= 0."""
    if n <= 0:
        raise ValueError("wilson_interval needs at least one trial")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(wins_a: int, wins_b: int) -> float:
    """Two-sided exact McNemar p-value for paired binary outcomes (McNemar 1947; exact binomial form).

    ``wins_a``: pairs where only A succeeded; ``wins_b``: pairs where only B succeeded (the discordant
    pairs; concordant ones carry no information). Returns ``min(1, 2 * P[X <= min(a, b)])`` with
    X ~ Binomial(a + b, 1/2); 1.0 when there are no discordant pairs. Raises ValueError on negative counts.
    """
    if wins_a < 0 or wins_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got {wins_a}, {wins_b}")
    n, k = wins_a + wins_b, min(wins_a, wins_b)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def paired_comparison(a: list[EpisodeResult], b: list[EpisodeResult]) -> dict:
    """Pair two methods' episodes by ``env_seed`` (the same held-out seeds) and compare successes.

    Returns ``num_pairs``, ``only_a``, ``only_b`` (discordant pairs) and the exact McNemar ``p_value``.
    Raises ValueError when the two lists do not cover the same env seeds.
    """
    sa, sb = {e.env_seed: e.success for e in a}, {e.env_seed: e.success for e in b}
    if sa.keys() != sb.keys():
        raise ValueError("paired comparison needs both methods evaluated on the same env seeds")
    only_a = sum(sa[s] and not sb[s] for s in sa)
    only_b = sum(sb[s] and not sa[s] for s in sa)
    return {
        "num_pairs": len(sa),
        "only_a": only_a,
        "only_b": only_b,
        "p_value": mcnemar_exact(only_a, only_b),
    }


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
