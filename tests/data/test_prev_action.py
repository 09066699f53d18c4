"""``observation.prev_action`` with ``data.prev_action_steps`` = k (issue 38 item 4): the last executed
command, then the k - 1 changes before it, with the episode's start value for the commands before its first
frame. Training
(robot_rl.data.prev_action.previous_actions through TrainingSet) and run time (robot_rl.sources.
PrevActionSource) must build the same k-history for the same recorded episode, and k = 1 must stay the
single last command it was before the key existed."""

from __future__ import annotations

import numpy as np
import pytest
from repo_paths import LEROBOT_FIXTURES

from robot_rl import keys
from robot_rl.config import ConfigError, DataConfig
from robot_rl.data.prev_action import prev_action_steps, previous_actions
from robot_rl.data.training.training_set import TrainingSet
from robot_rl.sources import PrevActionSource

G1 = LEROBOT_FIXTURES / "g1_pick_bottle_v30"
D = 26  # the G1 fixture's action: 2 arms x 7 joints + 2 hands x 6


def test_previous_actions_hold_the_last_k_most_recent_first():
    actions = np.arange(1, 13, dtype=np.float32).reshape(6, 2)
    episodes = np.array([0, 0, 0, 1, 1, 2])
    starts = -actions  # only an episode's first row is read
    prev = previous_actions(actions, episodes, starts, 3)
    assert prev.dtype == np.float32 and prev.shape == (6, 6)
    expected = [
        [-1, -2, 0, 0, 0, 0],  # episode 0, t = 0: the start value s, no change before it
        [1, 2, 2, 4, 0, 0],  # t = 1: a[0], a[0] - s, s - s
        [3, 4, 2, 2, 2, 4],  # t = 2: a[1], a[1] - a[0], a[0] - s
        [-7, -8, 0, 0, 0, 0],  # episode 1 starts: nothing of episode 0 leaks in
        [7, 8, 14, 16, 0, 0],
        [-11, -12, 0, 0, 0, 0],
    ]
    np.testing.assert_array_equal(prev, expected)
    one = previous_actions(actions, episodes, starts)  # k = 1: the definition before the key
    np.testing.assert_array_equal(one, prev[:, :2])
    np.testing.assert_array_equal(one[:, 0], [-1, 1, 3, -7, 7, -11])
    with pytest.raises(ValueError, match="data.prev_action_steps"):
        previous_actions(actions, episodes, starts, 0)


def test_a_checkpoint_without_the_key_reads_one_step():
    assert prev_action_steps({"data": {"prev_action": True}}) == 1
    assert prev_action_steps({}) == 1
    assert prev_action_steps({"data": {"prev_action_steps": 2}}) == 2


class _Replay:
    """The policy's place in the chunk source: returns the next ``h`` actions of ``chunks`` (queried at
    t = 0, h, 2h, ...) and keeps each observation.prev_action it was fed."""

    def __init__(self, chunks: np.ndarray, h: int) -> None:
        self.chunks, self.h, self.t, self.fed = chunks, h, 0, []

    def reset(self, env_id: int, env_seed: int) -> None:
        self.t = 0

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        self.fed.append((self.t, obs[keys.PREV_ACTION][0].copy()))
        chunk = self.chunks[self.t : self.t + self.h]
        self.t += self.h
        return chunk[None]


def _runtime_history(state: np.ndarray, action: np.ndarray, steps: int, h: int, report: bool) -> dict:
    """{t: observation.prev_action fed at query t} when PrevActionSource drives one recorded episode in
    chunks of ``h``. ``report``: the caller reports each executed (recorded) action, and the chunks the
    policy returns are zeros that are never executed (a human drove); else the returned chunk is the
    recorded actions, taken as executed."""
    replay = _Replay(np.zeros_like(action) if report else action, h)
    source = PrevActionSource(replay, keys.STATE, D, num_envs=1, steps=steps)
    source.reset(0, 0)
    for t in range(0, len(action), h):
        source({keys.STATE: state[t][None]}, np.array([0]))
        if report:
            for a in action[t : t + h]:
                source.executed(0, a)
    return dict(replay.fed)


def _g1_training_set(
    steps: int, cache_dir, velocity: bool = False, reference: str = keys.PREV_ACTION
) -> TrainingSet:
    """The G1 fixture's training set with ``steps`` past commands, relative to a[t-1] (``velocity``: to its
    constant-velocity extrapolation) or to ``reference``; episode 4 held out."""
    cfg = DataConfig(
        path=str(G1),
        images=False,
        val_episodes=[4],
        prev_action=True,
        prev_action_start=keys.STATE,
        prev_action_steps=steps,
    )
    return TrainingSet(
        G1,
        cfg,
        horizon=5,
        gamma=0.99,
        cache_dir=cache_dir,
        action_reference=reference,
        reference_velocity=velocity,
    )


@pytest.mark.skipif(not G1.is_dir(), reason=f"fixture absent: {G1}")
@pytest.mark.parametrize("steps", [1, 3])
def test_training_and_run_time_build_the_same_history_of_a_recorded_episode(tmp_path, steps):
    data = _g1_training_set(steps, tmp_path)
    assert data.obs_shapes[keys.PREV_ACTION] == (steps * D,)
    sampler = data.val.sampler
    trained = sampler.get(sampler.all_indices())["observations"][keys.PREV_ACTION]
    table = data.dataset.load_tabular()
    rows = data.val.rows
    action = np.asarray(table[keys.ACTION]).reshape(-1, D)[rows]
    state = np.asarray(table[keys.STATE]).reshape(-1, D)[rows]
    # by hand: command j of frame t is a[t-1-j], or the state at the episode's first frame before it;
    # the feature is a[t-1], then the change from each command to the one after it
    past = [
        [action[t - 1 - j] if t - 1 - j >= 0 else state[0] for j in range(steps)] for t in range(len(rows))
    ]
    by_hand = np.stack([np.concatenate([p[0]] + [p[j - 1] - p[j] for j in range(1, steps)]) for p in past])
    np.testing.assert_array_equal(trained, by_hand)
    if steps == 1:  # exactly the values before data.prev_action_steps existed
        np.testing.assert_array_equal(trained, np.concatenate([state[:1], action[:-1]]))
    for h, report in [(1, False), (4, False), (4, True)]:
        fed = _runtime_history(state, action, steps, h, report)
        assert sorted(fed) == list(range(0, len(action), h))
        for t, value in fed.items():
            np.testing.assert_array_equal(value, trained[t], err_msg=f"h={h} report={report} t={t}")


@pytest.mark.skipif(not G1.is_dir(), reason=f"fixture absent: {G1}")
def test_relative_action_statistics_take_the_most_recent_command_as_reference(tmp_path):
    """policy.action_reference: observation.prev_action with k = 3 is relative to a[t-1] (its first d
    values), so the action statistics are those of k = 1."""
    stats = []
    for steps in (1, 3):
        data = _g1_training_set(steps, tmp_path)
        stats.append(data.stats[keys.ACTION])
    assert stats[0].q01.shape == (5, D)
    for name in ("mean", "std", "q01", "q99", "min", "max"):
        np.testing.assert_array_equal(getattr(stats[1], name), getattr(stats[0], name), err_msg=name)


@pytest.mark.skipif(not G1.is_dir(), reason=f"fixture absent: {G1}")
def test_g1_velocity_reference_statistics_and_their_config_errors(tmp_path):
    """The training set's per-step action statistics use the same reference as the policy
    (``policy.action_reference_velocity``): on the G1 fixture the first step's residual on the extrapolation
    is smaller than its change from a[t−1] (continuing the last change predicts the next command better than
    holding it), and the config errors name the key."""
    hold = _g1_training_set(2, tmp_path).stats[keys.ACTION]
    velocity = _g1_training_set(2, tmp_path, velocity=True).stats[keys.ACTION]
    assert velocity.mean.shape == hold.mean.shape == (5, 26)
    assert np.median(velocity.std[0] / hold.std[0]) < 0.9
    with pytest.raises(ConfigError, match="data.prev_action_steps >= 2"):
        _g1_training_set(1, tmp_path, velocity=True)
    with pytest.raises(ConfigError, match="policy.action_reference="):
        _g1_training_set(2, tmp_path, velocity=True, reference=keys.STATE)
