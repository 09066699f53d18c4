"""PandaPickCube-v0: spaces, determinism, action validation, success bookkeeping."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from robot_rl import keys
from robot_rl.config import EnvConfig
from robot_rl.sim import BUILTIN_ID, make_env
from robot_rl.sim.panda_pick_cube import ENV_STATE_DIM, STATE_DIM, TASK


@pytest.fixture(scope="module")
def env():
    e = make_env(EnvConfig())
    yield e
    e.close()


def test_spaces_and_dtypes(env):
    obs, info = env.reset(seed=0)
    assert info == {"is_success": False, "task": TASK}
    assert env.observation_space.contains(obs)
    assert obs[keys.STATE].shape == (STATE_DIM,) and obs[keys.STATE].dtype == np.float32
    assert obs[keys.ENV_STATE].shape == (ENV_STATE_DIM,) and obs[keys.ENV_STATE].dtype == np.float32
    assert env.action_space.shape == (4,) and env.action_space.dtype == np.float32
    assert env.unwrapped.task == TASK
    assert env.metadata["render_fps"] == 10.0
    # gripper points down and starts open, cube on the floor
    quat = obs[keys.STATE][17:21]
    assert abs(abs(quat[1]) - 1.0) < 1e-2
    assert obs[keys.STATE][21] < 0.05
    assert abs(obs[keys.ENV_STATE][2] - 0.02) < 1e-3
    obs, reward, terminated, truncated, info = env.step(np.zeros(4, np.float32))
    assert env.observation_space.contains(obs)
    assert reward == 0.0 and not terminated and not truncated and info["is_success"] is False


def test_registered_with_gymnasium():
    e = gym.make(BUILTIN_ID, disable_env_checker=True)
    assert e.unwrapped.task == TASK
    e.close()


def test_deterministic_under_seed():
    def rollout(seed: int) -> list[np.ndarray]:
        e = make_env(EnvConfig())
        rng = np.random.default_rng(7)
        obs, _ = e.reset(seed=seed)
        out = [obs[keys.STATE], obs[keys.ENV_STATE]]
        for _ in range(8):
            obs, *_ = e.step(rng.uniform(e.action_space.low, e.action_space.high).astype(np.float32))
            out += [obs[keys.STATE], obs[keys.ENV_STATE]]
        return out

    a, b, c = rollout(3), rollout(3), rollout(4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[1], c[1]), "different seeds should place the cube differently"


def test_cube_position_varies_with_seed(env):
    xy = {tuple(np.round(env.reset(seed=s)[0][keys.ENV_STATE][:2], 4)) for s in range(5)}
    assert len(xy) == 5


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_action_raises(env, bad):
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action contains NaN"):
        env.step(np.array([0.0, bad, 0.0, 0.0], np.float32))


def test_out_of_range_action_names_index_and_bounds(env):
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"action\[2\] = 0.05.*\[-0.03.*0.03") as err:
        env.step(np.array([0.0, 0.0, 0.05, 0.0], np.float32))
    assert "bounds" in str(err.value)
    with pytest.raises(ValueError, match=r"action\[3\]"):
        env.step(np.array([0.0, 0.0, 0.0, 1.5], np.float32))
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(3, np.float32))
    env.step(np.array([0.03 + 5e-7, 0.0, 0.0, 1.0], np.float32))  # within the 1e-6 tolerance


def test_truncates_at_max_episode_steps():
    e = make_env(EnvConfig(max_episode_steps=3))
    e.reset(seed=0)
    flags = [e.step(np.zeros(4, np.float32))[3] for _ in range(3)]
    assert flags == [False, False, True]


def test_controller_tracks_target(env):
    obs, _ = env.reset(seed=0)
    start = obs[keys.STATE][14:17].copy()
    for _ in range(5):
        obs, *_ = env.step(np.array([0.02, 0.0, -0.02, 0.0], np.float32))
    for _ in range(5):
        obs, *_ = env.step(np.zeros(4, np.float32))
    moved = obs[keys.STATE][14:17] - start
    np.testing.assert_allclose(moved, [0.1, 0.0, -0.1], atol=0.01)


def test_bad_config_raises():
    with pytest.raises(ValueError, match="whole multiple"):
        make_env(EnvConfig(control_hz=7.0, physics_hz=500.0))
    with pytest.raises(ValueError, match="unknown camera"):
        make_env(EnvConfig(cameras=["top"]))


def test_dense_reward_variant_scores_progress_and_keeps_success_termination():
    """env.kwargs.reward=dense: a shaped 0-10 reward every step; success still terminates (issue 14 §2)."""
    from robot_rl.sim.expert import PickCubeExpert

    with pytest.raises(ValueError, match="reward must be one of"):
        make_env(EnvConfig(kwargs={"reward": "shaped"}))
    runs = {}
    for mode in ("sparse", "dense"):
        env = make_env(EnvConfig(kwargs={"reward": mode}))
        expert = PickCubeExpert(noise=0.0)
        obs, _ = env.reset(seed=3)
        expert.reset(seed=3)
        rewards, terminated = [], False
        for _ in range(60):
            obs, r, terminated, truncated, info = env.step(expert.act(obs))
            rewards.append(r)
            if terminated or truncated:
                break
        env.close()
        runs[mode] = (np.array(rewards), terminated, info["is_success"])
    sparse, dense = runs["sparse"], runs["dense"]
    assert sparse[1] and dense[1] and sparse[2] and dense[2] and len(sparse[0]) == len(dense[0])
    assert sparse[0].tolist() == [0.0] * (len(sparse[0]) - 1) + [1.0]
    r = dense[0]
    assert np.all((r >= 0) & (r <= 10)) and r[-1] > 9.5  # lifted and grasped at success
    assert r[0] < 1.0 and np.all(r[:5] > 0) and np.all(np.diff(r[:5]) > 0)  # reaching pays as it closes in
