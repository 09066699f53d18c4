"""Scripted pick-and-lift expert for ``robot_rl/PandaPickCube-v0`` that reads only the observation dict.

State machine: move above the cube, descend, close, lift (and go back to the start if the cube is lost).
``noise`` (0 = clean) makes the demonstrations imperfect: Gaussian action noise of std ``noise`` in
normalised action units (fraction of the +-3 cm step; half that on the gripper), plus per-episode mistakes
whose probability and size grow with ``noise``: a Gaussian grasp xy offset (std ``0.06 * noise`` m; beyond
~2.5 cm across the fingers the grasp fails), closing too high (probability ``0.5 * noise``; the fingers
miss the cube) and hesitating 5-15 steps above the cube (probability ``0.5 * noise``; slow demos).
"""

from __future__ import annotations

import numpy as np

from robot_rl import keys
from robot_rl.sim.panda_pick_cube import MAX_DELTA_M

APPROACH_HEIGHT_M = 0.08
GRASP_HEIGHT_M = 0.0
"""Pinch-site height above the cube centre when closing (m)."""
LIFT_HEIGHT_M = 0.2
CLOSE_STEPS = 4
APPROACH, DESCEND, CLOSE, LIFT = range(4)


class PhasedExpert:
    """Base of the scripted experts (this module's and :mod:`robot_rl.sim.task_experts`): the noise knob,
    the per-episode mistakes, the phase counter and the proportional step towards a goal.

    Args:
        noise: suboptimality knob >= 0 (0 = clean); ~0.3 gives a mix of good and failed demos (module
            docstring).
        seed: seeds the noise generator (per-episode mistakes and action noise).

    Raises:
        ValueError: ``noise`` is negative.
    """

    first_phase = APPROACH

    def __init__(self, noise: float = 0.0, seed: int = 0) -> None:
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}")
        self.noise = float(noise)
        self.rng = np.random.default_rng(seed)
        self.low = np.array([-MAX_DELTA_M] * 3 + [0.0], dtype=np.float32)
        self.high = np.array([MAX_DELTA_M] * 3 + [1.0], dtype=np.float32)
        self.reset()

    def reset(self, seed: int | list[int] | None = None) -> None:
        """Start a new episode: phase back to ``first_phase``; draw this episode's mistakes.

        ``seed`` (an int or a list of ints, as ``numpy.random.default_rng``) reseeds the noise generator
        for this episode; ``None`` continues the current stream.
        """
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        n, rng = self.noise, self.rng
        self.phase, self.phase_steps = self.first_phase, 0
        self.offset = rng.normal(0.0, 1.0, size=2) * n * 0.06
        self.grasp_z = GRASP_HEIGHT_M + (rng.uniform(0.035, 0.06) if rng.random() < 0.5 * n else 0.0)
        self.hesitate_steps = int(rng.integers(5, 16)) if rng.random() < 0.5 * n else 0

    def _enter(self, phase: int) -> None:
        self.phase, self.phase_steps = phase, 0

    def _hesitate(self) -> bool:
        """True (and one hesitation step used up) while this episode's hesitation lasts."""
        if self.hesitate_steps > 0:
            self.hesitate_steps -= 1
            return True
        return False

    def _grasp(self, above: np.ndarray, pinch: np.ndarray) -> tuple[np.ndarray, float]:
        """The approach -> descend -> close phases, falling through when a phase ends within the step.

        ``above``: the grasp point (3,) m (cube centre plus this episode's offset); ``pinch`` (3,) m.
        Returns (goal (3,) m, gripper command) of the phase reached; (pinch, 0) in any later phase.
        """
        goal, grip = pinch.copy(), 0.0
        if self.phase == APPROACH:
            goal = above + [0.0, 0.0, APPROACH_HEIGHT_M]
            if np.linalg.norm(goal[:2] - pinch[:2]) < 0.01 and abs(goal[2] - pinch[2]) < 0.03:
                if self._hesitate():
                    goal = pinch.copy()
                else:
                    self._enter(DESCEND)
        if self.phase == DESCEND:
            goal = above + [0.0, 0.0, self.grasp_z]
            if abs(goal[2] - pinch[2]) < 0.01:
                self._enter(CLOSE)
        if self.phase == CLOSE:
            goal, grip = pinch.copy(), 1.0
            if self.phase_steps >= CLOSE_STEPS:
                self._enter(LIFT)
        return goal, grip

    def _action(self, goal: np.ndarray, pinch: np.ndarray, grip: float) -> np.ndarray:
        """One step 0.8·(goal − pinch) clipped to ±MAX_DELTA_M, the gripper command, this episode's action
        noise; float32 (4,) clipped to the env's action box."""
        self.phase_steps += 1
        delta = np.clip(0.8 * (goal - pinch), -MAX_DELTA_M, MAX_DELTA_M)
        action = np.concatenate([delta, [grip]])
        if self.noise > 0:
            action += self.rng.normal(0.0, self.noise, 4) * np.array([MAX_DELTA_M] * 3 + [0.5])
        return np.clip(action, self.low, self.high).astype(np.float32)


class PickCubeExpert(PhasedExpert):
    """One-env pick-and-lift expert (module docstring); arguments and errors as :class:`PhasedExpert`."""

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Action float32 (4,) within the env's bounds: ``[dx, dy, dz]`` (m) and gripper in [0, 1].

        ``obs`` needs ``observation.state`` (22,) and ``observation.environment_state`` (7,).
        """
        state = np.asarray(obs[keys.STATE], dtype=np.float64)
        cube = np.asarray(obs[keys.ENV_STATE], dtype=np.float64)[:3]
        pinch = state[14:17]
        above = cube.copy()
        above[:2] += self.offset
        goal, grip = self._grasp(above, pinch)
        if self.phase == LIFT:
            goal, grip = np.array([pinch[0], pinch[1], LIFT_HEIGHT_M]), 1.0
            if self.phase_steps > 3 and np.linalg.norm(cube - pinch) > 0.06:
                self._enter(APPROACH)
                goal, grip = above + [0.0, 0.0, APPROACH_HEIGHT_M], 0.0
        return self._action(goal, pinch, grip)


class VectorExpert:
    """``num_envs`` independent :class:`PickCubeExpert` s for batched observations.

    With the vector env's same-step autoreset, call ``reset(i)`` for every sub-env ``i`` whose episode
    ended on the last step, before the next :meth:`act` (its observation already starts a new episode).

    Args:
        num_envs: batch size N.
        noise: as :class:`PickCubeExpert`.
        seed: expert ``i`` is seeded with ``seed + i``.
    """

    def __init__(self, num_envs: int, noise: float = 0.0, seed: int = 0) -> None:
        self.experts = [PickCubeExpert(noise, seed + i) for i in range(num_envs)]

    def reset(self, i: int | None = None) -> None:
        """Reset expert ``i`` (all when ``None``)."""
        for j, expert in enumerate(self.experts):
            if i is None or i == j:
                expert.reset()

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Batched actions float32 (N, 4) from batched observations (each value (N, ...))."""
        return np.stack(
            [e.act({k: v[i] for k, v in obs.items()}) for i, e in enumerate(self.experts)]
        ).astype(np.float32)
