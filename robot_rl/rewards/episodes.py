"""Whole episodes of a LeRobot dataset, decoded for a critic: frames, task text and success step."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.rewards.base import ProgressCritic


@dataclass
class CriticEpisode:
    """One episode as a critic sees it.

    Attributes:
        index: episode index in the dataset.
        frames: {key: (T, ...)}: ``observation.images.<cam>`` (T, H, W, 3) uint8 and, when read,
            ``observation.state`` (T, D) float32.
        task: the episode's instruction.
        success_step: first frame flagged ``next.success`` (or, for ``success='episode_end'``, the last
            frame); None for a failed episode.
    """

    index: int
    frames: dict[str, np.ndarray]
    task: str
    success_step: int | None

    @property
    def length(self) -> int:
        return len(next(iter(self.frames.values())))


def critic_episodes(
    critic: ProgressCritic, root: str | Path, episodes: list[int] | None = None, success: str = "dataset"
) -> Iterator[CriticEpisode]:
    """``iter_episodes`` with what ``critic`` reads: its cameras at its image size, and its state key."""
    return iter_episodes(
        root, list(critic.image_keys), critic.image_size[0], critic.state_key, episodes, success
    )


def iter_episodes(
    root: str | Path,
    image_keys: list[str],
    image_size: int,
    state_key: str | None = None,
    episodes: list[int] | None = None,
    success: str = "dataset",
) -> Iterator[CriticEpisode]:
    """Decode ``episodes`` (default: all) of the dataset at ``root`` at image_size x image_size, one at a
    time from one open dataset (memory stays at one episode).

    Args:
        success: ``dataset`` reads ``next.success`` (a dataset without it is an error); ``episode_end``
            counts every episode as successful at its last frame (teleoperated demos without labels).

    Raises:
        DatasetError: naming the dataset when a camera or ``next.success`` is missing, or an episode
            index is out of range.
    """
    ds = LeRobotDataset(root)
    try:
        missing = [k for k in image_keys if k not in ds.video_keys]
        if missing:
            raise DatasetError(f"{ds.root}: no video feature {missing}; it has {ds.video_keys}")
        table = ds.load_tabular()
        if success == "dataset" and keys.SUCCESS not in table:
            raise DatasetError(
                f"{ds.root}: no {keys.SUCCESS!r} column to tell successful episodes from failed ones; "
                "use success='episode_end' (critic --data.reward=episode_end) for demo-only data"
            )
        if state_key is not None and state_key not in table:
            raise DatasetError(f"{ds.root}: no {state_key!r} column")
        chosen = list(range(ds.num_episodes)) if episodes is None else list(episodes)
        bad = [e for e in chosen if not 0 <= e < ds.num_episodes]
        if bad:
            raise DatasetError(f"{ds.root}: episodes {bad} out of range for {ds.num_episodes} episodes")
        for ep in chosen:
            lo, hi = int(ds.episode_from[ep]), int(ds.episode_to[ep])
            frames = {k: ds.episode_video(ep, k, (image_size, image_size)) for k in image_keys}
            if state_key is not None:
                frames[state_key] = np.asarray(table[state_key][lo:hi], dtype=np.float32)
            task = ds.tasks[int(table[keys.TASK_INDEX][lo])]
            yield CriticEpisode(ep, frames, task, _success_step(table, lo, hi, success))
    finally:
        ds.close()


def _success_step(table: dict[str, np.ndarray], lo: int, hi: int, success: str) -> int | None:
    if success == "episode_end":
        return hi - lo - 1
    flags = np.asarray(table[keys.SUCCESS][lo:hi]).reshape(-1).astype(bool)
    return int(np.argmax(flags)) if flags.any() else None
