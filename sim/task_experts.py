"""Scripted experts of the task suite (:mod:`robot_rl.sim.panda_tasks`); each reads only the observation
dict (and ``obs["task"]``, the instruction, for pick-colour) and returns a float32 (4,) action.

``noise`` has :class:`robot_rl.sim.expert.PickCubeExpert`'s meaning on every task: Gaussian action noise
of std ``noise`` in normalised units (fraction of the +-3 cm step; half that on the gripper) plus
per-episode mistakes whose probability and size grow with ``noise``: a Gaussian xy offset of the grasp (or
push) point of std ``0.06 * noise`` m, closing too high (probability ``0.5 * noise``) and hesitating 5-15
steps (probability ``0.5 * noise``).
"""

from __future__ import annotations

import numpy as np

from robot_rl import keys
from robot_rl.sim.assets import CUBE_HALF_SIZE_M
from robot_rl.sim.expert import APPROACH, APPROACH_HEIGHT_M, LIFT, PhasedExpert, PickCubeExpert
from robot_rl.sim.panda_tasks import BIN_FLOOR_M, COLOURS, named_colour

CARRY_HEIGHT_M = 0.14
"""Pinch height (m) at which a grasped cube is carried (clears the tray walls and a cube)."""
RELEASE_STEPS = 4
LOST_DISTANCE_M = 0.06
"""Cube-to-pinch distance (m) beyond which a carried cube counts as dropped (start over)."""
PUSH_HEIGHT_M = 0.025
PUSH_BEHIND_M = 0.05
PUSH_STEP_M = 0.015
"""Pinch height (m) while pushing, distance (m) behind the cube's centre the push starts from, and the
largest push move per control step (m)."""


def _instruction(obs: dict) -> str:
    if keys.TASK not in obs:
        raise ValueError(f"this expert follows the instruction: obs needs {keys.TASK!r} (the env's task)")
    task = obs[keys.TASK]
    return str(task if isinstance(task, str) else np.asarray(task, dtype=object).reshape(-1)[0])


class PickColourExpert(PickCubeExpert):
    """Pick-colour: the pick-cube expert on the cube whose colour ``obs["task"]`` names.

    Raises (on :meth:`act`): ValueError when ``obs["task"]`` is missing or names no known colour.
    """

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        target = named_colour(_instruction(obs))
        if target is None:
            raise ValueError(f"instruction {_instruction(obs)!r} names none of the colours {list(COLOURS)}")
        cubes = np.asarray(obs[keys.ENV_STATE])[: len(COLOURS) * 7].reshape(len(COLOURS), 7)  # padding after
        return super().act({keys.STATE: obs[keys.STATE], keys.ENV_STATE: cubes[target]})


CARRY, LOWER, RELEASE, RETREAT = range(LIFT + 1, LIFT + 5)


class _PickPlaceExpert(PhasedExpert):
    """Pick a cube, carry it above a place point, lower it until its centre is at the place height, open,
    retreat; start over when the cube is dropped. Subclasses give the cube and the place point."""

    @staticmethod
    def cube_and_place(env_state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(cube position (3,), place position (3,): where the cube's centre is released), m, from
        ``observation.environment_state``."""
        raise NotImplementedError

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Action float32 (4,) from ``observation.state`` (22,) and ``observation.environment_state``."""
        pinch = np.asarray(obs[keys.STATE], dtype=np.float64)[14:17]
        cube, place = self.cube_and_place(np.asarray(obs[keys.ENV_STATE], dtype=np.float64))
        above = cube.copy()
        above[:2] += self.offset
        held = np.linalg.norm(cube - pinch) < LOST_DISTANCE_M
        if self.phase in (LIFT, CARRY, LOWER) and self.phase_steps > 3 and not held:
            self._enter(APPROACH)
        goal, grip = self._grasp(above, pinch)
        if self.phase == LIFT:
            goal, grip = np.array([pinch[0], pinch[1], CARRY_HEIGHT_M]), 1.0
            if pinch[2] > CARRY_HEIGHT_M - 0.02:
                self._enter(CARRY)
        if self.phase == CARRY:
            goal, grip = pinch + [*(place[:2] - cube[:2]), 0.0], 1.0
            goal[2] = CARRY_HEIGHT_M
            if np.linalg.norm(place[:2] - cube[:2]) < 0.01:
                self._enter(LOWER)
        if self.phase == LOWER:
            goal, grip = pinch + (place - cube), 1.0
            if cube[2] - place[2] < 0.008:
                self._enter(RELEASE)
        if self.phase == RELEASE:
            goal, grip = pinch.copy(), 0.0
            if self.phase_steps >= RELEASE_STEPS:
                self._enter(RETREAT)
        if self.phase == RETREAT:
            goal = np.array([pinch[0], pinch[1], CARRY_HEIGHT_M])
        return self._action(goal, pinch, grip)


class PlaceInBinExpert(_PickPlaceExpert):
    """Place-in-bin: pick the cube, lower it into the tray's middle, open. ``environment_state`` (10,)."""

    @staticmethod
    def cube_and_place(env_state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tray = env_state[7:10]
        return env_state[:3], np.array([tray[0], tray[1], BIN_FLOOR_M + CUBE_HALF_SIZE_M + 0.012])


class StackExpert(_PickPlaceExpert):
    """Stack: pick the red cube, lower it onto the blue cube, open. ``environment_state`` (14,)."""

    @staticmethod
    def cube_and_place(env_state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        bottom = env_state[7:10]
        return env_state[:3], bottom + [0.0, 0.0, 2 * CUBE_HALF_SIZE_M + 0.006]


RAISE, ABOVE, DOWN, PUSH = range(4)


class PushExpert(PhasedExpert):
    """Push-to-target with the gripper closed: go above a point behind the cube (away from the target),
    descend, push the cube along the cube-to-target line; lift and line up again when the pinch drifts off
    the line. ``environment_state`` (10,): cube pose (7,) and target centre (3,). ``grasp_z`` (closing too
    high) does not apply; the xy offset shifts the push start point."""

    first_phase = ABOVE

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Action float32 (4,) from ``observation.state`` (22,) and ``environment_state`` (10,)."""
        pinch = np.asarray(obs[keys.STATE], dtype=np.float64)[14:17]
        env = np.asarray(obs[keys.ENV_STATE], dtype=np.float64)
        cube, target = env[:2], env[7:9]
        to_target = target - cube
        dist = float(np.linalg.norm(to_target))
        d = to_target / max(dist, 1e-6)
        start = cube - d * PUSH_BEHIND_M + self.offset
        rel = pinch[:2] - cube
        lateral = abs(rel[0] * d[1] - rel[1] * d[0])
        behind = float(rel @ d)
        if self.phase == PUSH and (lateral > 0.02 or behind > -0.01) and dist > 0.02:
            self._enter(RAISE)
        if self.phase == RAISE:
            goal = np.array([pinch[0], pinch[1], APPROACH_HEIGHT_M])
            if pinch[2] > APPROACH_HEIGHT_M - 0.02:
                self._enter(ABOVE)
        if self.phase == ABOVE:
            goal = np.array([start[0], start[1], APPROACH_HEIGHT_M])
            if np.linalg.norm(goal[:2] - pinch[:2]) < 0.01:
                if self._hesitate():
                    goal = pinch.copy()
                else:
                    self._enter(DOWN)
        if self.phase == DOWN:
            goal = np.array([start[0], start[1], PUSH_HEIGHT_M])
            if abs(pinch[2] - PUSH_HEIGHT_M) < 0.01:
                self._enter(PUSH)
        if self.phase == PUSH:
            end = target - d * (PUSH_BEHIND_M - 0.02)
            step = np.clip(end - pinch[:2], -PUSH_STEP_M, PUSH_STEP_M) / 0.8  # slow: the cube must not slide
            goal = np.array([pinch[0] + step[0], pinch[1] + step[1], PUSH_HEIGHT_M])
        return self._action(goal, pinch, 1.0)


HOOK_GAP_M = 0.022
"""Distance (m) behind the handle bar's centre (towards the drawer) where the closed fingers go down."""
PULL_STEP_M = 0.02


class OpenDrawerExpert(PhasedExpert):
    """Open-drawer with the gripper closed: go above the gap between the handle bar and the drawer, go down
    into it, pull towards the robot (-x) until the drawer is open. ``environment_state`` (4,): handle
    centre (3,), opening (1,). ``grasp_z`` (closing too high) makes it hook too high (it may slip over
    the bar); the xy offset shifts the hook point."""

    first_phase = ABOVE

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Action float32 (4,) from ``observation.state`` (22,) and ``environment_state`` (4,)."""
        pinch = np.asarray(obs[keys.STATE], dtype=np.float64)[14:17]
        env = np.asarray(obs[keys.ENV_STATE], dtype=np.float64)
        handle = env[:3]
        hook = handle + [HOOK_GAP_M + self.offset[0] * 0.3, self.offset[1], self.grasp_z]
        if self.phase == ABOVE:
            goal = np.array([hook[0], hook[1], handle[2] + APPROACH_HEIGHT_M])
            if np.linalg.norm(goal[:2] - pinch[:2]) < 0.008:
                if self._hesitate():
                    goal = pinch.copy()
                else:
                    self._enter(DOWN)
        if self.phase == DOWN:
            goal = np.array([hook[0], hook[1], hook[2]])
            if abs(pinch[2] - hook[2]) < 0.01:
                self._enter(PUSH)
        if self.phase == PUSH:  # pull: keep the fingers in the gap, move it towards the robot
            goal = np.array([hook[0] - PULL_STEP_M, hook[1], hook[2]])
        return self._action(goal, pinch, 1.0)
