"""Bring-your-own-env adapter: gymnasium's MuJoCo Reacher-v5 and a dict-observation toy env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from robot_rl import keys
from robot_rl.config import AdapterConfig, EnvConfig, PipelineConfig, load_config
from robot_rl.sim import make_env
from robot_rl.sim.adapter import AdapterError

REACHER_YAML = """\
env:
  id: Reacher-v5
  adapter:
    observation:
      observation.state: [""]
    task: "Reach the red target with the arm tip."
    success_key: is_success
  kwargs:
    max_episode_steps: 50
"""


def test_reacher_from_yaml(tmp_path):
    path = tmp_path / "reacher.yaml"
    path.write_text(REACHER_YAML)
    cfg = load_config(path, cls=PipelineConfig)
    env = make_env(cfg.env)
    obs, info = env.reset(seed=0)
    assert env.task == "Reach the red target with the arm tip."
    assert set(obs) == {keys.STATE}
    assert obs[keys.STATE].shape == (10,) and obs[keys.STATE].dtype == np.float32
    assert env.observation_space.contains(obs)
    assert env.action_space == gym.make("Reacher-v5").action_space
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert info["is_success"] is False  # Reacher reports no success flag
    env.close()


class DictEnv(gym.Env):
    observation_space = spaces.Dict(
        {
            "joints": spaces.Box(-1, 1, (2, 3), np.float64),
            "goal": spaces.Box(-1, 1, (2,), np.float64),
            "cam": spaces.Box(0, 255, (8, 8, 3), np.uint8),
        }
    )
    action_space = spaces.Box(-1, 1, (2,), np.float32)

    def _obs(self):
        return {
            "joints": np.ones((2, 3)),
            "goal": np.array([0.5, -0.5]),
            "cam": np.full((8, 8, 3), 7, np.uint8),
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 1.0, True, False, {"solved": 1}


gym.register("test_sim/Dict-v0", entry_point=DictEnv)


def test_dict_env_flatten_concat_and_success_key():
    adapter = AdapterConfig(
        observation={keys.STATE: ["joints", "goal"], keys.image_key("top"): ["cam"]},
        task="toy",
        success_key="solved",
    )
    env = make_env(EnvConfig(id="test_sim/Dict-v0", adapter=adapter))
    obs, info = env.reset(seed=0)
    np.testing.assert_array_equal(obs[keys.STATE], [1, 1, 1, 1, 1, 1, 0.5, -0.5])
    assert obs[keys.image_key("top")].dtype == np.uint8 and obs[keys.image_key("top")].shape == (8, 8, 3)
    assert info["is_success"] is False
    _, _, _, _, info = env.step(np.zeros(2, np.float32))
    assert info["is_success"] is True


def test_unknown_foreign_key_is_named():
    adapter = AdapterConfig(observation={keys.STATE: ["joints", "velocity"]})
    with pytest.raises(AdapterError, match="velocity"):
        make_env(EnvConfig(id="test_sim/Dict-v0", adapter=adapter))
    with pytest.raises(AdapterError, match="plain array"):
        make_env(EnvConfig(id="Reacher-v5", adapter=AdapterConfig(observation={keys.STATE: ["qpos"]})))


def test_module_is_imported_first():
    with pytest.raises(ModuleNotFoundError):
        make_env(EnvConfig(id="nowhere/Env-v0", module="robot_rl_no_such_module"))
