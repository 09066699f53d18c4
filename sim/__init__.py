"""robot_rl.sim: MuJoCo tasks, scripted experts, vector envs and the bring-your-own-env adapter.

Importing this package registers ``robot_rl/PandaPickCube-v0`` and the rest of the task suite
(:data:`robot_rl.sim.tasks.TASKS`) with gymnasium. The factories are imported lazily, on first use of
their name, so that a task module (``robot_rl.sim.panda_pick_cube``, which ``robot_rl.hardware`` and
``robot_rl.teleop`` import) does not pull in :func:`make_env`, which builds those packages' envs: the
package would otherwise close an import cycle sim -> hardware -> sim (issue 36).
"""

from __future__ import annotations

import gymnasium as gym

from robot_rl.lazy import lazy_getattr
from robot_rl.sim.tasks import TASKS

_EXPORTS = {
    "EnvConfig": "robot_rl.config",
    "make_batched_env": "robot_rl.sim.batched_factory",
    "BUILTIN_ID": "robot_rl.sim.factory",
    "action_box": "robot_rl.sim.factory",
    "box_bounds": "robot_rl.sim.factory",
    "make_env": "robot_rl.sim.factory",
    "resolve_control_hz": "robot_rl.sim.factory",
    "robot_type": "robot_rl.sim.factory",
    "make_vector_env": "robot_rl.sim.vector",
}

for _task_id, _spec in TASKS.items():
    if _task_id not in gym.registry:
        gym.register(id=_task_id, entry_point=_spec.env)

__all__ = ["TASKS", *_EXPORTS]

__getattr__ = lazy_getattr(__name__, _EXPORTS)
