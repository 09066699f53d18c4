"""ChunkSampler: hand-computed chunked transitions at episode boundaries (docs/algorithms.md §1)."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.training.sampler import ChunkSampler

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


def test_truncated_chunk_bootstraps_from_the_final_observation() -> None:
    """A chunk that ends exactly at a time-limit end bootstraps from s_{t+h}, the final observation (the
    state after the last step), not from s_{t+h-1}; without a recorded final observation (a LeRobot
    dataset) that chunk is left out of the critic loss. With h = 1 (SAC) the last step must not bootstrap
    from its own state."""
    arrays, ep = two_episodes(first_terminal=False)  # both episodes truncated
    final = {keys.STATE: np.array([[100.0, 100.0], [200.0, 200.0]], np.float32)}
    with_final = ChunkSampler(arrays, ep, [keys.STATE], horizon=3, gamma=G, final_obs=final)
    without = ChunkSampler(arrays, ep, [keys.STATE], horizon=3, gamma=G)
    starts = np.array([0, 3, 6, 7])  # 0 and 7 end exactly at their episode end; 3 and 6 inside episode 1
    b, d = with_final.get(starts), without.get(starts)
    np.testing.assert_array_equal(b["next_observations"][keys.STATE][:, 0], [100, 6, 9, 200])
    np.testing.assert_array_equal(b["critic_valid"], [1, 1, 1, 1])
    np.testing.assert_array_equal(d["next_observations"][keys.STATE][:, 0], [2, 6, 9, 9])
    np.testing.assert_array_equal(d["critic_valid"], [0, 1, 1, 0])
    one = ChunkSampler(arrays, ep, [keys.STATE], horizon=1, gamma=G, final_obs=final)
    last = one.get(np.array([2, 9]))
    np.testing.assert_array_equal(last["next_observations"][keys.STATE][:, 0], [100, 200])
    # a chunk past the end (valid_{h-1} = 0) stays out; one ending in a true termination needs no next state
    arrays_t, _ = two_episodes(first_terminal=True)
    term = ChunkSampler(arrays_t, ep, [keys.STATE], horizon=3, gamma=G).get(np.array([0, 1, 8]))
    np.testing.assert_array_equal(term["critic_valid"], [1, 0, 0])
    with pytest.raises(DatasetError, match="final_obs"):
        ChunkSampler(
            arrays, ep, [keys.STATE], horizon=3, gamma=G, final_obs={keys.STATE: final[keys.STATE][:1]}
        )


def test_terminal_chunks_keep_or_drop() -> None:
    """offline.terminal_chunks: 'keep' trains a chunk that ends in a true termination before its h-th step
    on its exact partial sum (mask 0); 'drop' (QC's code) leaves it out."""
    import torch

    from robot_rl.algos.targets import critic_weight

    arrays, ep = two_episodes(first_terminal=True)
    b = ChunkSampler(arrays, ep, [keys.STATE], horizon=3, gamma=G).get(np.array([0, 1, 2, 8]))
    tb = {k: torch.as_tensor(b[k]) for k in ("critic_valid", "masks")}
    np.testing.assert_array_equal(critic_weight(tb, "drop").numpy(), [1, 0, 0, 0])
    np.testing.assert_array_equal(critic_weight(tb, "keep").numpy(), [1, 1, 1, 0])
    with pytest.raises(ValueError, match="terminal_chunks"):
        critic_weight(tb, "sometimes")
