"""The learner's OnlineReplay keeps each episode's final observation on disk, so a chunk that reaches a
time-limit end bootstraps from the right state after a restart too (ALGORITHMS.md §1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.runtime.replay import OnlineReplay

SHAPES = {keys.STATE: (2,)}


def toy_episode(length: int, offset: float, final: float) -> dict[str, np.ndarray]:
    """A truncated episode (next.done never set) whose state counts up from ``offset``."""
    return {
        keys.STATE: (offset + np.arange(length, dtype=np.float32))[:, None].repeat(2, 1),
        keys.ACTION: np.zeros((length, 3), np.float32),
        keys.REWARD: np.ones(length, np.float32),
        keys.DONE: np.zeros(length, bool),
        keys.SUCCESS: np.zeros(length, bool),
        keys.INTERVENTION: np.zeros(length, bool),
        keys.final_key(keys.STATE): np.full(2, final, np.float32),
    }


def test_final_observation_is_stored_and_used_after_reopen(tmp_path: Path) -> None:
    replay = OnlineReplay(tmp_path / "replay", SHAPES, action_dim=3, horizon=1, gamma=0.9)
    assert replay.add(0, 0, toy_episode(4, 0.0, final=50.0))
    assert replay.add(0, 1, toy_episode(3, 10.0, final=60.0))
    for attempt in range(2):  # live, then reopened from disk as after a learner crash
        sampler = replay._build()
        batch = sampler.get(np.array([3, 6, 1]))
        np.testing.assert_array_equal(batch["next_observations"][keys.STATE][:, 0], [50, 60, 2])
        np.testing.assert_array_equal(batch["critic_valid"], [1, 1, 1])
        replay = OnlineReplay(tmp_path / "replay", SHAPES, action_dim=3, horizon=1, gamma=0.9)
        assert replay.num_episodes == 2, attempt
    episode = replay.buffer.episode(1)
    np.testing.assert_array_equal(episode[keys.final_key(keys.STATE)], [60, 60])


def test_an_episode_without_its_final_observation_is_refused(tmp_path: Path) -> None:
    replay = OnlineReplay(tmp_path / "replay", SHAPES, action_dim=3, horizon=2, gamma=0.9)
    frames = toy_episode(4, 0.0, final=1.0)
    del frames[keys.final_key(keys.STATE)]
    with pytest.raises(DatasetError, match="final.observation.state"):
        replay.add(0, 0, frames)
    assert replay.num_episodes == 0 and replay.acked == {}
