"""robot_rl.sim: MuJoCo tasks, scripted experts, vector envs and the bring-your-own-env adapter.

Importing this package registers ``robot_rl/PandaPickCube-v0`` and the rest of the task suite
(:data:`robot_rl.sim.tasks.TASKS`) with gymnasium.
"""

from __future__ import annotations

import gymnasium as gym

from robot_rl.config import EnvConfig
from robot_rl.sim.batched_factory import make_batched_env
from robot_rl.sim.factory import BUILTIN_ID, action_box, box_bounds, make_env, resolve_control_hz, robot_type
from robot_rl.sim.tasks import TASKS
from robot_rl.sim.vector import make_vector_env

for _task_id, _spec in TASKS.items():
    if _task_id not in gym.registry:
        gym.register(id=_task_id, entry_point=_spec.env)

__all__ = [
    "BUILTIN_ID",
    "TASKS",
    "EnvConfig",
    "action_box",
    "box_bounds",
    "make_batched_env",
    "make_env",
    "make_vector_env",
    "resolve_control_hz",
    "robot_type",
]
