"""Env wiring for the stages: vector envs with exact per-episode seeds, and dataset features from spaces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from robot_rl import keys
from robot_rl.config import ConfigError, EnvConfig
from robot_rl.eval.splits import SPLIT_SEED_OFFSETS
from robot_rl.sim import make_batched_env, make_vector_env
from robot_rl.sim.batched_rollout import RolloutView

# Demo episodes use env seeds [collect.seed * DEMO_SEED_STRIDE, + N); evaluation uses the test seeds from
# EVAL_SEED_OFFSET on (robot_rl.eval.splits: validation seeds from 1,500,000), shared by every method and
# training seed so comparisons are paired.
EVAL_SEED_OFFSET = SPLIT_SEED_OFFSETS["test"]
DEMO_SEED_STRIDE = 100_000


def make_rollout_vec_env(cfg: EnvConfig, num_envs: int | None = None):
    """The envs robot_rl.rollout drives (autoreset disabled, so it resets each sub-env with an exact seed),
    on the simulator ``cfg.backend`` names.

    ``gym_vector``: gymnasium's vector env (``make_vector_env``, any env id, a robot). ``mujoco_cpu``: the
    in-process batched env (:class:`robot_rl.sim.batched_mujoco.MujocoCpuBatchedEnv`) behind
    :class:`robot_rl.sim.batched_rollout.RolloutView`; the same episodes for the same seeds and actions.

    Raises:
        ValueError: what ``make_vector_env`` raises.
        ConfigError: what ``make_batched_env`` refuses (e.g. ``mujoco_cpu`` with a foreign ``env.id`` or a
            robot), naming ``env.backend``; ``env.tasks`` (collect and eval run one task, so that every
            method sees the same episodes); the CLI prints it as one line with exit code 2.
    """
    if cfg.tasks:
        raise ConfigError(
            f"env.tasks={list(cfg.tasks)}: collect and eval run one task each; unset env.tasks and give "
            "--env.id=<task> (with --eval.name=<task> for one file per task)"
        )
    if cfg.backend == "gym_vector":
        return make_vector_env(cfg, num_envs, autoreset_mode=AutoresetMode.DISABLED)
    try:
        env = make_batched_env(cfg, num_envs)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    return RolloutView(env)


def dataset_features(
    obs_space: gym.spaces.Dict, action_space: gym.spaces.Box, names: dict[str, list[str]] | None = None
) -> dict:
    """LeRobot ``info.json`` features for the env's observations, its action and robot_rl's per-step keys;
    ``names`` gives per-dimension names of some keys (e.g. a RobotEnv's ``feature_names``:
    ``shoulder_pan.pos``, ...), the others have ``names: None``."""
    names = names or {}
    features = {}
    for key, space in obs_space.spaces.items():
        if keys.is_image_key(key):
            features[key] = {
                "dtype": "video",
                "shape": list(space.shape),
                "names": ["height", "width", "channels"],
            }
        else:
            features[key] = {"dtype": "float32", "shape": list(space.shape), "names": names.get(key)}
    features[keys.ACTION] = {
        "dtype": "float32",
        "shape": list(action_space.shape),
        "names": names.get(keys.ACTION),
    }
    features[keys.REWARD] = {"dtype": "float32", "shape": [1], "names": None}
    for key in (keys.DONE, keys.SUCCESS, keys.INTERVENTION):
        features[key] = {"dtype": "bool", "shape": [1], "names": None}
    return features


def action_bounds(space: gym.spaces.Box) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` of an action box as float32 arrays of the action's shape (the robot's units)."""
    return space.low.astype(np.float32), space.high.astype(np.float32)
