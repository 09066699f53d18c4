"""ChunkSampler: hand-computed chunked transitions at episode boundaries (ALGORITHMS.md §1)."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.sampler import ChunkSampler

G = 0.9


def two_episodes(first_terminal: bool) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Episode 0: 3 frames (terminal or truncated); episode 1: 7 frames, truncated (done never set)."""
    n = 10
    arrays = {
        keys.STATE: np.arange(n, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32),
        keys.ACTION: np.arange(n, dtype=np.float32)[:, None] + np.array([[0.0, 0.5]], np.float32),
        keys.REWARD: np.array([1, 2, 3, 10, 20, 30, 40, 50, 60, 70], np.float32),
        keys.DONE: np.zeros(n, bool),
        keys.INTERVENTION: np.array([0, 1, 1, 0, 0, 0, 0, 1, 0, 1], bool),
    }
    arrays[keys.DONE][2] = first_terminal
    return arrays, np.array([0, 0, 0, 1, 1, 1, 1, 1, 1, 1])


@pytest.mark.parametrize("terminal", [True, False])
def test_short_episode_with_long_horizon(terminal: bool) -> None:
    arrays, ep = two_episodes(terminal)
    s = ChunkSampler(arrays, ep, [keys.STATE], horizon=5, gamma=G)
    b = s.get(np.array([0, 1, 2]))
    np.testing.assert_array_equal(b["valid"], [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    np.testing.assert_allclose(b["rewards"], [1 + G * 2 + G**2 * 3, 2 + G * 3, 3], rtol=1e-6)
    np.testing.assert_array_equal(b["masks"], [0, 0, 0] if terminal else [1, 1, 1])
    # next observation clamped to the episode's last frame (index 2), never episode 1's frames
    np.testing.assert_array_equal(b["next_observations"][keys.STATE][:, 0], [2, 2, 2])
    np.testing.assert_array_equal(b["observations"][keys.STATE][:, 0], [0, 1, 2])
    # actions past the end repeat the last action of the episode
    np.testing.assert_array_equal(b["actions"][0, :, 0], [0, 1, 2, 2, 2])
    np.testing.assert_array_equal(b["actions"][2, :, 1], [2.5] * 5)
    np.testing.assert_array_equal(b["is_intervention"][0], [0, 1, 1, 0, 0])
    assert (
        b["actions"].dtype == np.float32 and b["valid"].dtype == np.float32 and b["masks"].dtype == np.float32
    )


def test_inside_and_across_second_episode() -> None:
    arrays, ep = two_episodes(True)
    s = ChunkSampler(arrays, ep, [keys.STATE], horizon=3, gamma=G)
    b = s.get(np.array([3, 7, 8, 9]))
    np.testing.assert_array_equal(b["valid"], [[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 0, 0]])
    np.testing.assert_allclose(
        b["rewards"], [10 + G * 20 + G**2 * 30, 50 + G * 60 + G**2 * 70, 60 + G * 70, 70]
    )
    np.testing.assert_array_equal(b["masks"], [1, 1, 1, 1])  # truncated: bootstrap
    np.testing.assert_array_equal(b["next_observations"][keys.STATE][:, 0], [6, 9, 9, 9])
    np.testing.assert_array_equal(b["is_intervention"], [[0, 0, 0], [1, 0, 1], [0, 1, 0], [1, 0, 0]])


def test_terminal_inside_window_zeroes_mask() -> None:
    arrays, ep = two_episodes(False)
    arrays[keys.DONE][5] = True  # a mid-episode termination flag (e.g. a reset-free env)
    s = ChunkSampler(arrays, ep, [keys.STATE], horizon=3, gamma=G)
    b = s.get(np.array([3, 4, 6]))
    np.testing.assert_array_equal(b["masks"], [0, 0, 1])


def test_sample_all_indices_and_errors() -> None:
    arrays, ep = two_episodes(True)
    s = ChunkSampler(arrays, ep, [keys.STATE], horizon=4, gamma=0.99, source=np.array([0] * 3 + [1] * 7))
    np.testing.assert_array_equal(s.all_indices(), np.arange(10))
    full = s.get(s.all_indices())
    assert full["source"].tolist() == [0] * 3 + [1] * 7
    b1, b2 = s.sample(6, np.random.default_rng(3)), s.sample(6, np.random.default_rng(3))
    np.testing.assert_array_equal(b1["actions"], b2["actions"])
    assert b1["observations"][keys.STATE].shape == (6, 2) and b1["rewards"].shape == (6,)
    del arrays[keys.DONE]
    with pytest.raises(DatasetError, match="'next.done'"):
        ChunkSampler(arrays, ep, [keys.STATE], horizon=4, gamma=0.99)
    with pytest.raises(IndexError):
        s.get(np.array([10]))
