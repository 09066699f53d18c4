"""Scripted expert: clean expert succeeds, noisy expert gives a mix of good and bad demos."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.config import CollectConfig, EnvConfig
from robot_rl.sim import make_env
from robot_rl.sim.expert import PickCubeExpert, VectorExpert


def run_episodes(noise: float, seeds: range, expert_seed: int = 0) -> tuple[list[bool], list[int]]:
    env = make_env(EnvConfig())
    expert = PickCubeExpert(noise=noise, seed=expert_seed)
    low, high = env.action_space.low, env.action_space.high
    successes, lengths = [], []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        expert.reset()
        t = 0
        while True:
            action = expert.act(obs)
            assert action.shape == (4,) and action.dtype == np.float32
            assert np.all(action >= low) and np.all(action <= high)
            obs, reward, terminated, truncated, info = env.step(action)
            t += 1
            if terminated or truncated:
                break
        assert reward == (1.0 if info["is_success"] else 0.0)
        successes.append(info["is_success"])
        lengths.append(t)
    return successes, lengths


def test_clean_expert_succeeds():
    successes, lengths = run_episodes(0.0, range(10))
    assert sum(successes) >= 9, successes
    assert np.mean(lengths) <= 30, lengths


def test_default_noise_gives_good_and_bad_demos():
    successes, _ = run_episodes(CollectConfig().expert_noise, range(100, 120), expert_seed=1)
    assert 0 < sum(successes) < len(successes), successes


def test_negative_noise_rejected():
    with pytest.raises(ValueError, match="noise"):
        PickCubeExpert(noise=-0.1, seed=0)


def test_vector_expert_batches_and_resets():
    env = make_env(EnvConfig())
    obs, _ = env.reset(seed=0)
    batched = {k: np.stack([v, v]) for k, v in obs.items()}
    vexp = VectorExpert(2, noise=0.0, seed=0)
    actions = vexp.act(batched)
    assert actions.shape == (2, 4) and actions.dtype == np.float32
    np.testing.assert_array_equal(actions[0], PickCubeExpert(0.0, 0).act(obs))
    vexp.reset(1)
    vexp.reset()
