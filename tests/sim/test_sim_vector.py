"""Vector envs: batched dict observations, same-step autoreset."""

from __future__ import annotations

import numpy as np
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

from robot_rl import keys
from robot_rl.config import EnvConfig
from robot_rl.sim import make_vector_env


def test_async_vector_env_two_workers():
    venv = make_vector_env(EnvConfig(max_episode_steps=2), num_envs=2)
    try:
        assert isinstance(venv, AsyncVectorEnv)
        obs, info = venv.reset(seed=[0, 1])
        assert obs[keys.STATE].shape == (2, 22) and obs[keys.STATE].dtype == np.float32
        assert obs[keys.ENV_STATE].shape == (2, 7)
        assert not np.array_equal(obs[keys.ENV_STATE][0], obs[keys.ENV_STATE][1])
        actions = np.zeros((2, 4), np.float32)
        obs, reward, terminated, truncated, info = venv.step(actions)
        assert reward.shape == (2,) and not truncated.any()
        obs, reward, terminated, truncated, info = venv.step(actions)
        assert truncated.all()
        # SAME_STEP autoreset: final observations are in info, obs is already the next episode's first
        assert info["_final_obs"].all()
        assert info["final_obs"][0][keys.STATE].shape == (22,)
        assert "is_success" in info["final_info"]
    finally:
        venv.close()


def test_single_env_is_sync():
    venv = make_vector_env(EnvConfig(), num_envs=1)
    obs, _ = venv.reset(seed=0)
    assert isinstance(venv, SyncVectorEnv)
    assert obs[keys.STATE].shape == (1, 22)
    venv.close()


def test_asynchronous_overrides_the_default_choice():
    one_worker = make_vector_env(EnvConfig(), num_envs=1, asynchronous=True)
    in_process = make_vector_env(EnvConfig(), num_envs=2, asynchronous=False)
    try:
        assert isinstance(one_worker, AsyncVectorEnv) and isinstance(in_process, SyncVectorEnv)
        assert one_worker.reset(seed=0)[0][keys.STATE].shape == (1, 22)
    finally:
        one_worker.close()
        in_process.close()
