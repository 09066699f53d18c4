"""Task progress of the suite's manipulation tasks beyond picking, read from one observation: a potential
(m) that rises towards success, for the simulated human's stall and drift rules
(:class:`robot_rl.teleop.task_human.TaskHuman`). Pick-cube and pick-colour have their own rule in
:class:`robot_rl.teleop.sim_human.SimulatedHuman`.

Each is minus the distance (m) left along the scripted expert's course, so every sub-goal the robot
reaches raises it: the pinch site towards the object, the object towards its goal; closing on a cube and
opening at its place count as short distances. Between sub-goals it may stay flat for a few steps (fewer
than the default stall window, ``intervention.stall_steps`` = 8, on the clean expert's course).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from robot_rl import keys
from robot_rl.sim.panda_tasks import DRAWER_OPEN_M
from robot_rl.sim.task_experts import (
    CARRY_HEIGHT_M,
    PUSH_BEHIND_M,
    PUSH_HEIGHT_M,
    PlaceInBinExpert,
    StackExpert,
)

Progress = Callable[[dict[str, np.ndarray]], float]

OVER_M = 0.02
"""Horizontal distance (m) of the cube from its place point within which it counts as over it."""
PLACED_Z_M = 0.015
"""Height error (m) of the cube's centre at its place point within which it counts as placed."""
NEAR_M = 0.03
"""Pinch-to-cube distance (m) within which closing the gripper counts as progress."""
GRIP_M = 0.05
"""Progress (m) of a full gripper stroke at the cube (closing) or at the place point (opening)."""


def _pinch_and_env(obs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    state = np.asarray(obs[keys.STATE], dtype=np.float64)
    return state[14:17], np.asarray(obs[keys.ENV_STATE], dtype=np.float64)


def _place_progress(cube_and_place, obs: dict[str, np.ndarray]) -> float:
    """Pick-and-place: minus the rest of the expert's path (m), plus a gripper term. With ``d`` the cube's
    horizontal distance to its place point: ``|pinch - cube| + |CARRY - z| + d + (CARRY - place_z)``
    while ``d`` > :data:`OVER_M` (reach, lift, carry, lower), else ``|pinch - cube| + |z - place_z|``
    (the two meet at the switch up to ``OVER_M``); the gripper term ``GRIP_M * closure`` while the cube is
    within :data:`~robot_rl.teleop.sim_human.HELD_M`-like reach (closing on it is progress), and
    ``GRIP_M * (2 - closure)`` once it is at its place (opening is)."""
    pinch, env = _pinch_and_env(obs)
    closure = float(np.asarray(obs[keys.STATE], dtype=np.float64)[21])
    cube, place = cube_and_place(env)
    reach = float(np.linalg.norm(pinch - cube))
    d = float(np.linalg.norm(cube[:2] - place[:2]))
    if d > OVER_M:
        rest = abs(CARRY_HEIGHT_M - cube[2]) + d + (CARRY_HEIGHT_M - place[2])
    else:
        rest = abs(cube[2] - place[2])
    placed = d <= OVER_M and abs(cube[2] - place[2]) < PLACED_Z_M
    grip = GRIP_M * (2.0 - closure) if placed else GRIP_M * closure if reach < NEAR_M else 0.0
    return -(reach + rest) + grip


place_in_bin_progress = partial(_place_progress, PlaceInBinExpert.cube_and_place)
stack_progress = partial(_place_progress, StackExpert.cube_and_place)


def push_progress(obs: dict[str, np.ndarray]) -> float:
    """Push-to-target: ``-|pinch - start| - 2 |cube_xy - target_xy|`` (m); ``start`` is the push point
    :data:`~robot_rl.sim.task_experts.PUSH_BEHIND_M` behind the cube on the target line, at the push
    height. While pushing, the pinch stays there and the cube's distance to the target shrinks."""
    pinch, env = _pinch_and_env(obs)
    cube, target = env[:2], env[7:9]
    to_target = target - cube
    dist = float(np.linalg.norm(to_target))
    start = cube - to_target / max(dist, 1e-6) * PUSH_BEHIND_M
    return -float(np.linalg.norm(pinch - [start[0], start[1], PUSH_HEIGHT_M])) - 2.0 * dist


def drawer_progress(obs: dict[str, np.ndarray]) -> float:
    """Open-drawer: ``-|pinch - handle| + 2 min(opening, DRAWER_OPEN_M)`` (m); the handle's centre is
    ``environment_state[0:3]``, the opening ``[3]``."""
    pinch, env = _pinch_and_env(obs)
    return -float(np.linalg.norm(pinch - env[:3])) + 2.0 * min(float(env[3]), DRAWER_OPEN_M)


PROGRESS: dict[str, Progress] = {
    "robot_rl/PandaPlaceInBin-v0": place_in_bin_progress,
    "robot_rl/PandaStack-v0": stack_progress,
    "robot_rl/PandaPushToTarget-v0": push_progress,
    "robot_rl/PandaOpenDrawer-v0": drawer_progress,
}
"""The progress of every suite task that :class:`~robot_rl.teleop.task_human.TaskHuman` drives."""
