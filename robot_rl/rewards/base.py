"""The progress-critic interface every reward model implements (docs/algorithms.md §9).

A critic compares two observations of the same episode under a task instruction and returns how much
closer to completion the second is (a VLAC progress delta in [-1, 1]) and the probability that the task is
done in the second. Everything that consumes a critic (labelling, shaping, the critic server, evaluation)
goes through ``ProgressCritic``, so a VLM and the compact CPU critic are interchangeable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from robot_rl.rewards.progress import reconstruct_progress


class CriticInputError(ValueError):
    """An observation or task text the critic cannot score; the message names the key and the fix."""


class CriticScoreError(ValueError):
    """The critic produced a non-finite score; it must never reach the learner as a reward."""


@dataclass
class CriticOutput:
    """A batch of critic scores.

    Attributes:
        delta: (B,) float32 in [-1, 1], progress of the second observation relative to the first.
        done: (B,) float32 in [0, 1], probability that the task is complete in the second observation.
    """

    delta: np.ndarray
    done: np.ndarray


class ProgressCritic(ABC):
    """Pairwise progress critic: (o_i, o_j, task) -> (delta, done), batched.

    Observations are LeRobot-keyed dicts: ``observation.images.<cam>`` (B, H, W, 3) uint8 RGB, HWC, and
    optionally ``observation.state`` (B, D) float32. ``image_keys``, ``image_size`` (H, W) and
    ``state_key`` say what a critic reads; inputs are checked against them before any model runs.
    """

    image_keys: tuple[str, ...]
    image_size: tuple[int, int]
    state_key: str | None = None

    @abstractmethod
    def _score(
        self, obs_i: dict[str, np.ndarray], obs_j: dict[str, np.ndarray], tasks: list[str]
    ) -> CriticOutput:
        """Model forward on already-checked inputs."""

    def predict(
        self, obs_i: dict[str, np.ndarray], obs_j: dict[str, np.ndarray], tasks: list[str] | str
    ) -> CriticOutput:
        """Score B pairs.

        Args:
            obs_i, obs_j: observation dicts with the critic's keys, leading batch dim B.
            tasks: B task strings, or one string for the whole batch.

        Returns:
            CriticOutput with (B,) delta and done, float32.

        Raises:
            CriticInputError: a missing key, a wrong image size, dtype or channel order, mismatched batch
                sizes, or an empty task string.
            CriticScoreError: the model produced NaN/inf.
        """
        tasks = self.check_pairs(obs_i, obs_j, tasks)
        return check_scores(self._score(obs_i, obs_j, tasks), len(tasks))

    @property
    def input_keys(self) -> list[str]:
        """Every observation key the critic reads: its image keys, then the state key if any."""
        return list(self.image_keys) + ([self.state_key] if self.state_key else [])

    def check_pairs(
        self, obs_i: dict[str, np.ndarray], obs_j: dict[str, np.ndarray], tasks: list[str] | str
    ) -> list[str]:
        """Check B pairs and their tasks as ``predict`` does; returns the B task strings.

        Raises:
            CriticInputError: see ``predict``.
        """
        batch = self.check_observations(obs_i, "obs_i")
        if self.check_observations(obs_j, "obs_j") != batch:
            raise CriticInputError(f"obs_i has {batch} observations but obs_j a different number")
        return check_tasks(tasks, batch)

    def episode_progress(
        self, frames: dict[str, np.ndarray], task: str, batch_size: int = 64, rule: str = "scale"
    ) -> np.ndarray:
        """Per-frame progress curve (T,) float64 in [0, 1] of one episode.

        Scores every consecutive pair (o_{t-1}, o_t) in batches and reconstructs values with the VLAC rules
        (``reconstruct_progress``), V_0 = 0.

        Args:
            frames: observation dict with a leading time dim T >= 1.
            task: the episode's instruction.
        """
        length = self.check_observations(frames, "frames")
        deltas = [
            self.predict(
                {k: v[:-1][s : s + batch_size] for k, v in frames.items()},
                {k: v[1:][s : s + batch_size] for k, v in frames.items()},
                task,
            ).delta
            for s in range(0, length - 1, batch_size)
        ]
        return reconstruct_progress(np.concatenate(deltas) if deltas else np.zeros(0), rule)

    def against_first(self, frames: dict[str, np.ndarray], task: str, batch_size: int = 64) -> CriticOutput:
        """Every frame scored against the episode's first: (T,) delta and done, float32.

        With the first frame as the 0% anchor (GVL), the hop c(o_0, o_t) is the progress of frame t itself,
        so ``delta`` is a per-frame value in [-1, 1] that does not accumulate errors along the episode;
        it is negative when frame t looks further from completion than the first frame (a reversed clip).
        """
        length = self.check_observations(frames, "frames")
        first = {k: v[:1] for k, v in frames.items()}
        outs = []
        for s in range(0, length, batch_size):
            chunk = {k: v[s : s + batch_size] for k, v in frames.items()}
            n = len(next(iter(chunk.values())))
            outs.append(self.predict({k: np.repeat(v, n, 0) for k, v in first.items()}, chunk, task))
        return CriticOutput(np.concatenate([o.delta for o in outs]), np.concatenate([o.done for o in outs]))

    def check_observations(self, obs: dict[str, np.ndarray], name: str) -> int:
        """Check keys, image shape/dtype/channel order and state dims; returns the batch size B."""
        sizes = set()
        for key in self.image_keys:
            if key not in obs:
                raise CriticInputError(f"{name} has no {key!r}; this critic reads {list(self.image_keys)}")
            sizes.add(len(check_image(obs[key], key, self.image_size)))
        if self.state_key is not None:
            if self.state_key not in obs:
                raise CriticInputError(f"{name} has no {self.state_key!r}; this critic reads the state too")
            sizes.add(len(np.asarray(obs[self.state_key])))
        if len(sizes) != 1:
            raise CriticInputError(f"{name}: keys have different batch sizes {sorted(sizes)}")
        return sizes.pop()


def check_image(images: np.ndarray, key: str, size: tuple[int, int]) -> np.ndarray:
    """Validate a (B, H, W, 3) uint8 RGB batch against the critic's (H, W).

    Raises:
        CriticInputError: naming ``key`` when the array is channel-first (B, 3, H, W), float, not 4-D, or
            not H x W (resize it, or set the critic's image size).
    """
    images = np.asarray(images)
    if images.ndim != 4:
        raise CriticInputError(f"{key}: expected (B, H, W, 3) images, got shape {images.shape}")
    if images.shape[-1] != 3:
        hint = " (channel-first; transpose to HWC)" if images.shape[1] == 3 else ""
        raise CriticInputError(f"{key}: expected RGB channels last (B, H, W, 3), got {images.shape}{hint}")
    if images.dtype != np.uint8:
        raise CriticInputError(f"{key}: expected uint8 pixels in [0, 255], got {images.dtype}")
    if tuple(images.shape[1:3]) != tuple(size):
        raise CriticInputError(
            f"{key}: image is {images.shape[1]}x{images.shape[2]} (HxW) but the critic was built for "
            f"{size[0]}x{size[1]}; resize the frames or use a critic trained at that size"
        )
    return images


def check_tasks(tasks: list[str] | str, batch: int) -> list[str]:
    """Broadcast one task string to B, and refuse empty ones.

    Raises:
        CriticInputError: an empty/blank task, or a list whose length is not B.
    """
    if isinstance(tasks, str):
        tasks = [tasks] * batch
    tasks = list(tasks)
    if len(tasks) != batch:
        raise CriticInputError(f"got {len(tasks)} task strings for {batch} observation pairs")
    for t in tasks:
        if not isinstance(t, str) or not t.strip():
            raise CriticInputError(
                "empty task string: a progress critic needs the instruction (e.g. 'pick up the cube')"
            )
    return tasks


def check_scores(out: CriticOutput, batch: int) -> CriticOutput:
    """Cast to (B,) float32 and reject NaN/inf.

    Raises:
        CriticScoreError: a non-finite delta or done, which must never be used as a reward.
    """
    delta = np.asarray(out.delta, dtype=np.float32).reshape(batch)
    done = np.asarray(out.done, dtype=np.float32).reshape(batch)
    bad = ~(np.isfinite(delta) & np.isfinite(done))
    if bad.any():
        raise CriticScoreError(
            f"critic returned NaN/inf for {int(bad.sum())} of {batch} pairs; the score is rejected and "
            "not used as a reward"
        )
    return CriticOutput(np.clip(delta, -1.0, 1.0), np.clip(done, 0.0, 1.0))
