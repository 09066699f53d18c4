"""Batched env API (robot_rl.sim.batched): the mujoco_cpu backend reproduces the single env exactly,
auto-reset keeps the final observation, per-env seeds reproduce, chunks stop at episode end, the scripted
expert succeeds, bad actions fail before anything is stepped; gym_vector behind the same API."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.config import ConfigError, EnvConfig, load_config
from robot_rl.sim import make_env
from robot_rl.sim.batched_factory import make_batched_env
from robot_rl.sim.expert import PickCubeExpert, VectorExpert
from robot_rl.sim.render import RendererError, select_backend

LOW = np.array([-0.03] * 3 + [0.0], np.float32)
HIGH = np.array([0.03] * 3 + [1.0], np.float32)


def _actions(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(LOW, HIGH, size=(n, 4)).astype(np.float32)


def _single_trajectory(cfg: EnvConfig, seed: int, actions: np.ndarray):
    """Per step: (obs after the step or the final obs, reward, terminated, truncated, success, next obs)."""
    env = make_env(cfg)
    obs, _ = env.reset(seed=seed)
    out = [obs]
    steps = []
    for a in actions:
        obs, r, te, tr, info = env.step(a)
        final = obs
        if te or tr:
            obs, _ = env.reset()
        steps.append((final, r, te, tr, info["is_success"], obs))
    env.close()
    return out[0], steps


def _batched(cfg: EnvConfig, n: int, backend: str, **kwargs):
    """``gym_vector`` in this process (SyncVectorEnv) for speed; ``gym_vector_async``: worker processes."""
    if backend.startswith("gym_vector"):
        kwargs.setdefault("asynchronous", backend == "gym_vector_async")
        backend = "gym_vector"
    return make_batched_env(cfg, num_envs=n, backend=backend, **kwargs)


@pytest.mark.parametrize(
    ("backend", "n", "threads", "controller"),
    [
        ("mujoco_cpu", 1, 1, "numpy"),
        ("mujoco_cpu", 3, 2, "numpy"),
        ("mujoco_cpu", 3, 2, "actuator"),
        ("gym_vector", 2, None, "numpy"),
    ],
)
def test_batched_matches_single_env_exactly(backend, n, threads, controller):
    """Each batched env reproduces the single env with its seed bit for bit (dense reward, auto-reset),
    with either arm controller."""
    cfg = EnvConfig(max_episode_steps=4, kwargs={"reward": "dense", "controller": controller})
    seeds = [11 + 7 * i for i in range(n)]
    actions = _actions(9)
    kwargs = {"num_threads": threads} if backend == "mujoco_cpu" else {}
    env = _batched(cfg, n, backend, **kwargs)
    try:
        obs, _ = env.reset(seed=seeds)
        refs = [_single_trajectory(cfg, s, actions) for s in seeds]
        for i, (first, _) in enumerate(refs):
            for k in first:
                np.testing.assert_array_equal(obs[k][i], first[k])
        finals = np.zeros(n, int)
        for t, a in enumerate(actions):
            obs, reward, terminated, truncated, info = env.step(np.repeat(a[None], n, axis=0))
            for i, (_, steps) in enumerate(refs):
                final, r, te, tr, success, nxt = steps[t]
                assert reward[i] == np.float32(r) and terminated[i] == te and truncated[i] == tr
                assert info["is_success"][i] == success and info["_final"][i] == (te or tr)
                for k in nxt:
                    np.testing.assert_array_equal(obs[k][i], nxt[k])
                    if te or tr:  # the finished episode's last observation is kept
                        np.testing.assert_array_equal(info["final_observation"][k][i], final[k])
            finals += info["_final"]
        assert finals.tolist() == [2] * n  # 9 steps: two 4-step episodes ended in every env
    finally:
        env.close()


def test_auto_reset_keeps_final_observation_and_starts_a_new_episode():
    env = make_batched_env(EnvConfig(max_episode_steps=2), num_envs=2, backend="mujoco_cpu")
    try:
        first, _ = env.reset(seed=[0, 1])
        a = np.zeros((2, 4), np.float32)
        obs, _, _, truncated, info = env.step(a)
        assert not truncated.any() and not info["_final"].any()
        before = obs[keys.STATE].copy()
        obs, _, _, truncated, info = env.step(a)
        assert truncated.all() and info["_final"].all()
        final = info["final_observation"]
        # the final observation moved on from the previous step; obs starts a new episode (new cube spot)
        assert not np.array_equal(final[keys.STATE], before)
        assert not np.allclose(final[keys.ENV_STATE][:, :2], obs[keys.ENV_STATE][:, :2])
        assert np.allclose(obs[keys.STATE][:, 7:14], 0.0)  # at rest after reset
    finally:
        env.close()


def test_per_env_seeds_reproduce_whatever_the_other_envs_do():
    cfg = EnvConfig(max_episode_steps=2)
    a = np.zeros((3, 4), np.float32)
    runs = []
    for seeds in ([5, 9, 2], [9, 5, 2]):
        env = make_batched_env(cfg, num_envs=3, backend="mujoco_cpu")
        obs, _ = env.reset(seed=seeds)
        cubes = [obs[keys.ENV_STATE].copy()]
        for _ in range(4):  # two auto-resets: the next episodes come from each env's own stream
            obs, *_ = env.step(a)
            cubes.append(obs[keys.ENV_STATE].copy())
        env.close()
        runs.append(np.stack(cubes))
    np.testing.assert_array_equal(runs[0][:, 0], runs[1][:, 1])
    np.testing.assert_array_equal(runs[0][:, 1], runs[1][:, 0])
    np.testing.assert_array_equal(runs[0][:, 2], runs[1][:, 2])
    env = make_batched_env(cfg, num_envs=2, backend="mujoco_cpu")
    obs_int, _ = env.reset(seed=5)  # an int seeds env i with seed + i
    env.close()
    np.testing.assert_array_equal(obs_int[keys.ENV_STATE][0], runs[0][0, 0])


@pytest.mark.parametrize("backend", ["mujoco_cpu", "gym_vector", "gym_vector_async"])
def test_step_chunk_stops_each_env_at_its_episode_end(backend):
    cfg = EnvConfig(max_episode_steps=3)
    env = _batched(cfg, 2, backend)
    try:
        env.reset(seed=[3, 4])
        env.step(np.zeros((2, 4), np.float32))
        env.reset(seed=[None, 8], options={"reset_mask": np.array([False, True])})
        chunk = np.repeat(_actions(4, seed=1)[None], 2, axis=0)
        res = env.step_chunk(chunk)
        # env 0 had 2 steps left, env 1 (just reset) 3: the rest of each chunk is not executed
        assert res.valid.tolist() == [[True, True, False, False], [True, True, True, False]]
        assert res.steps.tolist() == [2, 3] and res.final.all()
        assert res.truncated.tolist() == [[False, True, False, False], [False, False, True, False]]
        assert res.reward.shape == (2, 4) and not res.reward[~res.valid].any()
        # env 1's final observation is the single env's after 3 steps from seed 8; obs is its next episode
        _, steps = _single_trajectory(cfg, 8, chunk[1, :3])
        for k in steps[2][0]:
            np.testing.assert_array_equal(res.final_observation[k][1], steps[2][0][k])
            np.testing.assert_array_equal(res.obs[k][1], steps[2][5][k])
    finally:
        env.close()


def test_scripted_expert_succeeds_on_mujoco_cpu_as_on_the_single_env():
    cfg = EnvConfig()
    seeds = [100, 101, 102, 103]
    single = []
    env1 = make_env(cfg)
    for s in seeds:
        expert, (obs, _) = PickCubeExpert(0.0, seed=s), env1.reset(seed=s)
        done, info = False, {}
        while not done:
            obs, _, te, tr, info = env1.step(expert.act(obs))
            done = te or tr
        single.append(info["is_success"])
    env1.close()
    env = make_batched_env(cfg, num_envs=4, backend="mujoco_cpu", num_threads=2)
    experts = VectorExpert(4, 0.0, seed=0)
    for i, s in enumerate(seeds):
        experts.experts[i] = PickCubeExpert(0.0, seed=s)
    obs, _ = env.reset(seed=seeds)
    success = [None] * 4
    while any(s is None for s in success):
        obs, _, te, tr, info = env.step(experts.act(obs))
        for i in np.flatnonzero(te | tr):
            if success[i] is None:
                success[i] = bool(info["is_success"][i])
            experts.reset(int(i))
    env.close()
    assert success == single
    assert sum(success) >= 3, success


@pytest.mark.parametrize("backend", ["mujoco_cpu", "gym_vector"])
def test_bad_actions_fail_before_anything_is_stepped(backend):
    env = _batched(EnvConfig(), 2, backend)
    try:
        obs, _ = env.reset(seed=[0, 1])
        bad_nan = np.zeros((2, 4), np.float32)
        bad_nan[1, 2] = np.nan
        bad_range = np.zeros((2, 4), np.float32)
        bad_range[0, 3] = 1.5
        cases = [
            (env.step, bad_nan, r"actions\[1\] contains NaN"),
            (env.step, bad_range, r"actions\[0\]\[3\] = 1\.5 is outside its bounds \[0, 1\]"),
            (env.step, np.zeros((2, 3)), r"shape \(2, 4\)"),
            (env.step, np.zeros((3, 4)), r"shape \(2, 4\)"),
            (env.step_chunk, np.zeros((2, 4)), r"chunk must have shape \(2, h, d\)"),
            (env.step_chunk, np.stack([np.zeros((3, 4)), np.full((3, 4), np.inf)]), r"actions\[1, 0\]"),
        ]
        for fn, actions, match in cases:
            with pytest.raises(ValueError, match=match):
                fn(actions)
        after, *_ = env.step(np.zeros((2, 4), np.float32))
        _, steps = _single_trajectory(EnvConfig(), 0, np.zeros((1, 4), np.float32))
        ref = steps[0][5]
        np.testing.assert_array_equal(after[keys.STATE][0], ref[keys.STATE])  # exactly one step was taken
    finally:
        env.close()


def test_backend_choice_and_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env:\n  backend: mujoco_gpu\n")
    with pytest.raises(ConfigError, match="env.backend.*gym_vector, mujoco_cpu"):
        load_config(path)
    path.write_text("env:\n  backend: mujoco_cpu\n")
    assert load_config(path).env.backend == "mujoco_cpu"
    assert EnvConfig().backend == "gym_vector"
    with pytest.raises(ValueError, match="must be one of gym_vector, mujoco_cpu"):
        make_batched_env(EnvConfig(), backend="mujoco_gpu")
    with pytest.raises(ValueError, match="mujoco_cpu runs the built-in simulated task"):
        make_batched_env(EnvConfig(id="Reacher-v5"), backend="mujoco_cpu")


def test_mujoco_cpu_camera_matches_single_env():
    try:
        select_backend()
    except RendererError as err:
        pytest.skip(f"no offscreen GL backend on this machine: {err}")
    cfg = EnvConfig(cameras=["front"], image_size=64)
    env = make_batched_env(cfg, num_envs=2, backend="mujoco_cpu")
    single = make_env(cfg)
    try:
        obs, _ = env.reset(seed=[0, 1])
        ref, _ = single.reset(seed=1)
        key = keys.image_key("front")
        assert obs[key].shape == (2, 64, 64, 3) and obs[key].dtype == np.uint8
        assert env.single_observation_space[key].shape == (64, 64, 3)
        np.testing.assert_array_equal(obs[key][1], ref[key])
        a = _actions(1)
        obs, *_ = env.step(np.repeat(a, 2, axis=0))
        ref, *_ = single.step(a[0])
        np.testing.assert_array_equal(obs[key][1], ref[key])
    finally:
        env.close()
        single.close()
