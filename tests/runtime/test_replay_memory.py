"""Issue 15 §4: the learner's online replay holds at most ``online.replay_capacity`` env steps in memory
(FIFO over whole online episodes, every episode still on disk), appends in amortised O(1), and a restart
reads back only the newest window."""

from __future__ import annotations

import numpy as np
import pytest
from online_setup import toy_episode

from robot_rl import keys
from robot_rl.runtime.replay import OnlineReplay
from robot_rl.runtime.replay_memory import EpisodeMemory, newest_window

SHAPES = {keys.STATE: (3,)}


def _episode(length: int, value: float, intervened: bool = False) -> dict[str, np.ndarray]:
    """A toy episode whose state and action are ``value`` and whose final observation is ``1000 + value``."""
    return toy_episode(length, intervened, value, final=1000.0 + value)


def _expected_window(lengths: list[int], capacity: int) -> list[int]:
    """The newest whole episodes whose lengths fit in ``capacity`` (at least the newest one)."""
    held, total = [], 0
    for index in reversed(range(len(lengths))):
        if held and total + lengths[index] > capacity:
            break
        held.insert(0, index)
        total += lengths[index]
    return held


def _check_held(replay: OnlineReplay, lengths: list[int], capacity: int, rng: np.random.Generator) -> None:
    """Memory holds exactly the expected episodes, aligned with their final observations, and samples
    come from them only."""
    held = _expected_window(lengths, capacity)
    memory = replay.memory
    assert memory.num_steps == sum(lengths[i] for i in held) <= max(capacity, lengths[-1])
    assert np.unique(memory.episode_index()).tolist() == held
    # the held rows and final observations are those of the same episodes on disk
    start = sum(lengths[: held[0]])
    on_disk = replay.buffer.arrays(start)
    np.testing.assert_array_equal(memory.frames()[keys.STATE], on_disk[keys.STATE])
    np.testing.assert_array_equal(memory.episode_index() + 0, np.repeat(held, [lengths[i] for i in held]))
    final = keys.final_key(keys.STATE)
    np.testing.assert_array_equal(memory.finals()[final], replay.buffer.episode_arrays(held[0])[final])
    batch = replay.sample_online(256, rng)
    state = batch["observations"][keys.STATE][:, 0]
    assert set(state.astype(int)) <= set(held)  # value = disk episode index: never an evicted episode
    nxt = batch["next_observations"][keys.STATE][:, 0]
    assert ((nxt == state) | (nxt == 1000.0 + state)).all()  # own steps or own final observation
    assert (nxt == 1000.0 + state).any()


def test_capacity_holds_the_newest_whole_episodes_fifo(tmp_path):
    capacity, rng = 40, np.random.default_rng(0)
    replay = OnlineReplay(tmp_path / "r", SHAPES, 2, horizon=3, gamma=0.9, capacity=capacity)
    lengths = [int(n) for n in rng.integers(1, 15, size=40)] + [55, 4]  # one episode longer than capacity
    for index, length in enumerate(lengths):
        assert replay.add(index % 2, index // 2, _episode(length, index, intervened=index % 3 == 0))
        _check_held(replay, lengths[: index + 1], capacity, rng)
        held = _expected_window(lengths[: index + 1], capacity)
        assert replay.intervention_steps == sum(lengths[i] for i in held if i % 3 == 0)
    assert replay.memory.rows.moved > 0  # evictions advanced the start and compactions ran
    # disk keeps every episode: the count, the env-step budget and the oldest episode
    assert (replay.num_episodes, replay.num_steps) == (len(lengths), sum(lengths))
    assert replay.buffer.episode(0)[keys.STATE][0, 0] == 0.0


def test_restart_reads_back_only_the_newest_window(tmp_path):
    lengths = [7, 3, 9, 12, 5, 8, 6, 2, 10, 4]
    replay = OnlineReplay(tmp_path / "r", SHAPES, 2, horizon=2, gamma=0.9, capacity=0)
    for index, length in enumerate(lengths):
        replay.add(index % 3, index // 3, _episode(length, index))
    assert replay.memory.num_steps == sum(lengths)  # 0 = unbounded
    rng = np.random.default_rng(1)
    for capacity in (20, 5):
        again = OnlineReplay(tmp_path / "r", SHAPES, 2, horizon=2, gamma=0.9, capacity=capacity)
        assert again.acked == {0: 4, 1: 3, 2: 3}  # from every episode, evicted ones included
        assert again.memory.rows.allocated <= capacity + capacity // 4 + max(lengths)  # not the history
        _check_held(again, lengths, capacity, rng)
    assert again.add(1, 3, _episode(6, len(lengths)))  # appending after a restart evicts as before
    _check_held(again, [*lengths, 6], 5, rng)
    assert newest_window(np.cumsum(lengths), 20) == 7 and newest_window(np.zeros(0, np.int64), 20) == 0


def test_appends_reuse_the_arrays_and_copy_each_row_a_bounded_number_of_times():
    """Amortised O(1): with the capacity reached, appends neither reallocate nor concatenate; compactions
    move each row at most 4 more times on average; readers get views."""
    image = "observation.images.front"
    spec = {image: ((16, 16, 3), np.uint8), keys.ACTION: ((2,), np.float32)}
    capacity, length = 1000, 10
    memory = EpisodeMemory(spec, {keys.final_key(image): ((16, 16, 3), np.uint8)}, capacity)
    frames = {image: np.zeros((length, 16, 16, 3), np.uint8), keys.ACTION: np.zeros((length, 2), np.float32)}
    finals = {keys.final_key(image): np.zeros((16, 16, 3), np.uint8)}
    for episode in range(150):  # past the capacity: the arrays have reached their size
        memory.append(frames, finals, episode)
    store, reallocations, moved = memory.rows.data[image], memory.rows.reallocations, memory.rows.moved
    assert len(store) == capacity + capacity // 4 and reallocations <= 2
    for episode in range(150, 3000):
        frames[image][:] = episode % 251
        memory.append(frames, finals, episode)
        assert memory.rows.data[image] is store and memory.num_steps == capacity
    assert memory.rows.reallocations == reallocations
    assert memory.rows.moved - moved <= 4 * (3000 - 150) * length
    held = memory.frames()[image]
    assert np.shares_memory(held, store)  # a view, not a copy
    assert held[:, 0, 0, 0].tolist() == np.repeat(np.arange(2900, 3000) % 251, length).tolist()
    assert memory.episode_index()[0] == 2900
    with pytest.raises(ValueError, match="capacity must be >= 0"):
        EpisodeMemory(spec, {}, -1)


def test_negative_capacity_is_a_config_error(tmp_path):
    from robot_rl.config import ConfigError, load_config

    assert load_config(None, []).online.replay_capacity == 100_000
    with pytest.raises(ConfigError, match="online.replay_capacity=-1"):
        load_config(None, [f"--run_dir={tmp_path}", "--online.replay_capacity=-1"])
