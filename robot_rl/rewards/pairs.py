"""Training pairs for a progress critic: time-progress targets plus VLAC-style negatives.

A batch mixes (shares from ``RewardModelConfig``):
  - ordered pairs (o_i, o_j) from one successful episode, half of them reversed (j < i), with the
    Robo-Dopamine hop of the time-progress labels as target (docs/algorithms.md §9); gaps are short (1-3
    frames, what episode scoring sees) or uniform over the episode, half each;
  - mismatched task text: a successful pair scored under another instruction -> delta 0, done 0;
  - stagnation: a frame paired with itself -> delta 0;
  - failed episodes: two frames of a failed episode from ``failed_from`` of its length on (gaps drawn as for
    ordered pairs, either order) -> delta 0, done 0. A failed attempt makes no lasting progress, so its
    arm motion must not read as progress; short gaps matter because episode scoring chains neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_rl.config import RewardModelConfig
from robot_rl.rewards.episodes import CriticEpisode
from robot_rl.rewards.progress import hop_labels, time_progress

# Instructions used as mismatched task text when the dataset has a single task.
DISTRACTOR_TASKS = (
    "open the top drawer",
    "push the red button",
    "stack the blue block on the green block",
    "wipe the table with the sponge",
    "pour water into the cup",
    "close the laptop lid",
    "put the spoon in the bowl",
    "fold the towel",
)


@dataclass
class PairBatch:
    """B training pairs.

    Attributes:
        obs_i, obs_j: {key: (B, ...)} observation dicts (images uint8 HWC, state float32).
        tasks: B instructions.
        delta: (B,) float32 target progress delta in [-1, 1].
        done: (B,) float32 target done label of o_j, 0 or 1.
    """

    obs_i: dict[str, np.ndarray]
    obs_j: dict[str, np.ndarray]
    tasks: list[str]
    delta: np.ndarray
    done: np.ndarray


class PairSampler:
    """Draws ``PairBatch``es from decoded episodes; a batch is a function of the generator passed in.

    Raises:
        ValueError: no successful episode (within ``reward_model.success_max_steps`` when set) to learn
            progress from, or ``reward_model.failed_from`` outside [0, 1).
    """

    def __init__(self, episodes: list[CriticEpisode], cfg: RewardModelConfig) -> None:
        if not 0.0 <= cfg.failed_from < 1.0:
            raise ValueError(f"reward_model.failed_from must be in [0, 1), got {cfg.failed_from}")
        self.cfg = cfg
        limit = cfg.success_max_steps or None
        self.success = [
            e
            for e in episodes
            if e.success_step is not None and e.length > 1 and (limit is None or e.success_step < limit)
        ]
        self.failed = [e for e in episodes if e.success_step is None and e.length > 1]
        if not self.success:
            raise ValueError(
                "no successful episode with 2+ frames"
                + (f" that succeeds within reward_model.success_max_steps={limit}" if limit else "")
                + ": a progress critic needs demos that succeed"
            )
        self.progress = [time_progress(e.length, e.success_step) for e in self.success]
        tasks = sorted({e.task for e in episodes})
        self.other_tasks = {
            t: [u for u in tasks if u != t] + [d for d in DISTRACTOR_TASKS if d != t] for t in tasks
        }

    def sample(self, batch_size: int, rng: np.random.Generator) -> PairBatch:
        """One batch of ``batch_size`` pairs drawn with ``rng``."""
        cfg = self.cfg
        kinds = rng.choice(
            4,
            size=batch_size,
            p=_shares(cfg.mismatch_frac, cfg.stagnation_frac, cfg.failed_frac if self.failed else 0.0),
        )
        picks = [self._pair(int(kind), rng) for kind in kinds]
        keys = list(picks[0][0].frames)
        return PairBatch(
            obs_i={k: np.stack([ep.frames[k][i] for ep, i, *_ in picks]) for k in keys},
            obs_j={k: np.stack([ep.frames[k][j] for ep, _, j, *_ in picks]) for k in keys},
            tasks=[p[3] for p in picks],
            delta=np.array([p[4] for p in picks], dtype=np.float32),
            done=np.array([p[5] for p in picks], dtype=np.float32),
        )

    def _pair(self, kind: int, rng: np.random.Generator) -> tuple[CriticEpisode, int, int, str, float, float]:
        if kind == 3:  # failed episode from failed_from on: no progress, not done
            ep = self.failed[rng.integers(len(self.failed))]
            start = min(int(self.cfg.failed_from * ep.length), ep.length - 2)
            i, j = _ordered(ep.length - start, rng)
            return ep, start + i, start + j, ep.task, 0.0, 0.0
        n = rng.integers(len(self.success))
        ep, progress = self.success[n], self.progress[n]
        if kind == 2:  # stagnation: the same frame twice
            i = int(rng.integers(ep.length))
            return ep, i, i, ep.task, 0.0, float(progress[i] >= 1.0)
        i, j = _ordered(ep.length, rng)
        if kind == 1:  # the right frames, the wrong instruction
            others = self.other_tasks[ep.task]
            return ep, i, j, others[rng.integers(len(others))], 0.0, 0.0
        delta = float(hop_labels(progress[i : i + 1], progress[j : j + 1])[0])
        return ep, i, j, ep.task, delta, float(progress[j] >= 1.0)


def _shares(mismatch: float, stagnation: float, failed: float) -> np.ndarray:
    shares = np.array([1.0 - mismatch - stagnation - failed, mismatch, stagnation, failed])
    if (shares < 0).any():
        raise ValueError(
            f"critic negative shares mismatch_frac + stagnation_frac + failed_frac = "
            f"{mismatch + stagnation + failed:.2f} leave no ordered pairs; keep their sum below 1"
        )
    return shares / shares.sum()


def _ordered(length: int, rng: np.random.Generator) -> tuple[int, int]:
    """Two distinct frames, short gap or uniform half the time each, in random order."""
    gap = int(rng.integers(1, min(3, length - 1) + 1)) if rng.random() < 0.5 else int(rng.integers(1, length))
    i = int(rng.integers(0, length - gap))
    j = i + gap
    return (j, i) if rng.random() < 0.5 else (i, j)
