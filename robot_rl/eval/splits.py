"""Evaluation env seeds split into validation and test seeds (issue 38's tuning protocol).

Any setting (a method's weight, a budget, a checkpoint) may be chosen only on *validation* seeds; a table
reports *test* seeds, looked at once, after the choice. Both are disjoint from the demonstration seeds
(``collect.seed * 100_000 + j``), the online and PPO training seeds (from 2,000,000) and the recording
seeds (from 3,000,000), and shared by every method and training seed so comparisons stay paired.
"""

from __future__ import annotations

SPLIT_SEED_OFFSETS = {"test": 1_000_000, "validation": 1_500_000}
"""Env seed of episode 0 of each split; episode i runs env seed ``offset + i``."""
EVAL_SPLITS = tuple(SPLIT_SEED_OFFSETS)
"""``eval.split`` values."""
MAX_EPISODES = 500_000
"""Episodes a split holds before it would run into the next one's seeds."""


def split_seeds(split: str, episodes: int) -> list[int]:
    """The env seeds of the first ``episodes`` episodes of ``split``.

    Raises:
        ValueError: unknown split, or more than :data:`MAX_EPISODES` episodes."""
    if split not in SPLIT_SEED_OFFSETS:
        raise ValueError(f"eval.split={split!r}: must be one of {list(EVAL_SPLITS)}")
    if not 0 <= episodes <= MAX_EPISODES:
        raise ValueError(f"eval.episodes_per_seed={episodes}: a split holds at most {MAX_EPISODES}")
    return [SPLIT_SEED_OFFSETS[split] + i for i in range(episodes)]


def eval_variant(name: str, split: str) -> str:
    """The name a split's evaluation is filed under: ``name`` (``eval.name``) on the test split, so test
    results keep their files; ``name`` + ``_validation`` (or ``validation``) on the validation split, so a
    validation look never stands in for, overwrites or reuses a test result."""
    if split == "test":
        return name
    return f"{name}_{split}" if name else split
