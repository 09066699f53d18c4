"""robot_rl.sim: MuJoCo tasks, scripted experts, vector envs and the bring-your-own-env adapter.

Importing this package registers ``robot_rl/PandaPickCube-v0`` with gymnasium.
"""

from __future__ import annotations

import gymnasium as gym

from robot_rl.config import EnvConfig
from robot_rl.sim.batched_factory import make_batched_env
from robot_rl.sim.factory import BUILTIN_ID, action_box, box_bounds, make_env, resolve_control_hz, robot_type
from robot_rl.sim.vector import make_vector_env

if BUILTIN_ID not in gym.registry:
    gym.register(id=BUILTIN_ID, entry_point="robot_rl.sim.panda_pick_cube:PandaPickCubeEnv")

__all__ = [
    "BUILTIN_ID",
    "EnvConfig",
    "action_box",
    "box_bounds",
    "make_batched_env",
    "make_env",
    "make_vector_env",
    "resolve_control_hz",
    "robot_type",
]
