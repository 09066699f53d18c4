"""``robot_rl/PandaPickCube-v0``: a torque-driven Franka Panda with a Robotiq 2F-85 picks up a 4 cm cube.

Spaces, controller, success hold and truncation are those of every built-in task
(:class:`robot_rl.sim.panda_base.PandaTaskEnv`); ``observation.environment_state`` float32 (7,) is the cube
position (m, world) and quaternion (w, x, y, z).

Reward (``reward="sparse"``, the default) is 1.0 on the step success is reached, else 0.0.
``reward="dense"`` gives a shaped per-step reward in [0, 10] from the new state (:func:`dense_reward`):
``2 * reach + 3 * grasp + 5 * lift``, the scale of common manipulation benchmarks (Meta-World's 0-10).
Success: the cube is more than ``lift_height_m`` above its rest height for ``success_hold_steps``
consecutive control steps; the episode then terminates (in both reward modes).
It is truncated after ``max_episode_steps`` (or at once, with ``info["sim_unstable"] = True``, if MuJoCo
reports a diverged simulation). ``info["is_success"]`` is present on every step.
"""

from __future__ import annotations

import numpy as np

from robot_rl.sim.assets import CUBE_HALF_SIZE_M, PICK_CUBE_OBJECTS
from robot_rl.sim.panda_base import (
    CAMERAS,
    DOWN_QUAT,
    HOME_PINCH_POS,
    MAX_DELTA_M,
    MAX_LAG_M,
    RENDER_SIZE,
    STATE_DIM,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
    PandaTaskEnv,
    check_action,
)

__all__ = [
    "CAMERAS",
    "CUBE_X_RANGE",
    "CUBE_Y_RANGE",
    "DENSE_REWARD_MAX",
    "DOWN_QUAT",
    "ENV_STATE_DIM",
    "HOME_PINCH_POS",
    "MAX_DELTA_M",
    "MAX_LAG_M",
    "RENDER_SIZE",
    "REWARD_MODES",
    "STATE_DIM",
    "TASK",
    "WORKSPACE_HIGH",
    "WORKSPACE_LOW",
    "PandaPickCubeEnv",
    "check_action",
    "dense_reward",
]

TASK = "Pick up the cube and lift it."
CUBE_X_RANGE = (0.38, 0.55)
CUBE_Y_RANGE = (-0.15, 0.15)
"""Cube spawn region (m, world; ``env.spawn_region`` replaces it)."""
ENV_STATE_DIM = 7
REWARD_MODES = ("sparse", "dense")
DENSE_REWARD_MAX = 10.0
GRASP_DISTANCE_M = 0.02
"""Largest pinch-to-cube-centre distance (m) at which a closing gripper counts as grasping."""
GRASP_CLOSURE = (0.3, 0.9)
"""Gripper closure range (0 open, 1 closed) of fingers closed on the 4 cm cube (about 0.59)."""


def dense_reward(pinch: np.ndarray, cube: np.ndarray, closure: float, rest_z: float, lift_m: float) -> float:
    """Shaped pick-and-lift reward in [0, :data:`DENSE_REWARD_MAX`] of one state.

    ``2 * (1 - tanh(10 d)) + 3 * grasp + 5 * clip((z - rest_z) / lift_m, 0, 1)``, with ``d`` the
    pinch-to-cube distance (m), ``grasp`` 1 when ``d`` < :data:`GRASP_DISTANCE_M` and the closure is in
    :data:`GRASP_CLOSURE`, ``z`` the cube height (m). Reach + grasp + lift terms as in robosuite's Lift and
    Meta-World's 0-10 rewards. ``pinch``, ``cube``: (3,) world positions (m); ``closure`` in [0, 1].
    """
    d = float(np.linalg.norm(np.asarray(pinch) - np.asarray(cube)))
    reach = 1.0 - np.tanh(10.0 * d)
    grasp = float(d < GRASP_DISTANCE_M and GRASP_CLOSURE[0] < closure < GRASP_CLOSURE[1])
    lift = float(np.clip((float(cube[2]) - rest_z) / lift_m, 0.0, 1.0))
    return float(2.0 * reach + 3.0 * grasp + 5.0 * lift)


class PandaPickCubeEnv(PandaTaskEnv):
    """Pick-and-lift with the gym-hil Panda; see the module docstring for the task and
    :class:`~robot_rl.sim.panda_base.PandaTaskEnv` for the arguments (``reward``: ``"sparse"`` or
    ``"dense"``, :func:`dense_reward` every step).

    Raises:
        ValueError: bad rates, unknown camera, render mode or reward, non-positive sizes or step counts.
    """

    objects = PICK_CUBE_OBJECTS
    env_state_dim = ENV_STATE_DIM
    instruction = TASK
    reward_modes = REWARD_MODES
    spawn_default = (*CUBE_X_RANGE, *CUBE_Y_RANGE)

    def _setup_objects(self) -> None:
        self._cube_qpos = self.model.joint("block").qposadr[0]
        self._cube_body = self.model.body("block").id
        self._cube_rest_z = CUBE_HALF_SIZE_M

    def _place_objects(self) -> None:
        x = self.np_random.uniform(*self.spawn_x)
        y = self.np_random.uniform(*self.spawn_y)
        self.data.qpos[self._cube_qpos : self._cube_qpos + 7] = [x, y, CUBE_HALF_SIZE_M, 1.0, 0.0, 0.0, 0.0]

    def _env_state(self) -> np.ndarray:
        return self.free_pose(self._cube_qpos)

    def _goal_reached(self) -> bool:
        return bool(self.data.xpos[self._cube_body][2] - self._cube_rest_z > self.lift_height_m)

    def _dense_reward(self) -> float:
        d = self.data
        return dense_reward(
            d.site_xpos[self._pinch],
            d.xpos[self._cube_body],
            self.gripper_closure(),
            self._cube_rest_z,
            self.lift_height_m,
        )
