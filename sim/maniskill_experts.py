"""Scripted experts for ManiSkill3 tasks on the ``maniskill`` backend (:mod:`robot_rl.sim.batched_maniskill`),
reading only its flattened observation, so ``collect`` can record demos of ManiSkill's own tasks.

``PickCube-v1`` (Panda, ``pd_ee_delta_pos``): over the cube, down, close, carry to the goal, by proportional
steps in ManiSkill's normalised action units (1 = its largest end-effector step, 0.1 m). ``noise`` (0 =
clean) adds Gaussian action noise of std ``0.3 * noise`` on x, y, z and a per-episode grasp offset of std
``0.04 * noise`` m in x and y, so some demos fail. Success over 30 seeds (``PickCube-v1``'s 50 steps):
1.00 at noise 0 (20 steps on average), 0.93 at 0.2, 0.77 at 0.3 (the default, 32 steps).
"""

from __future__ import annotations

import numpy as np

from robot_rl import keys

TCP = slice(18, 21)
"""TCP position (m) in ``observation.state`` (after ``qpos`` (9) and ``qvel`` (9))."""
GRASPED, GOAL, CUBE = 0, slice(1, 4), slice(4, 7)
"""PickCube-v1's ``observation.environment_state``: is_grasped, goal position (m), cube position (m)."""
GAIN = 30.0
"""Normalised action per metre of error (full step at 3.3 cm)."""


ACTION_NOISE = 0.3
"""Action noise std per unit of ``noise``, in ManiSkill's normalised units (1 = its 0.1 m step): 0.3 at
``noise`` 1, so ``noise`` 0.3 is 9 mm, close to the built-in expert's 0.3 x 3 cm."""
OFFSET_NOISE_M = 0.04
"""Grasp xy offset std per unit of ``noise`` (m)."""
APPROACH, DESCEND, CLOSE, CARRY = range(4)
CLOSE_STEPS = 3


class PickCubeV1Expert:
    """Pick-and-place expert for ManiSkill3's ``PickCube-v1``; ``act`` returns float32 (4,) in [-1, 1]
    (dx, dy, dz, gripper: 1 open, -1 closed). Phases: approach 5 cm over the cube, descend, close for
    ``CLOSE_STEPS`` steps, carry to the goal (and approach again when the cube is not held).

    Args:
        noise: suboptimality knob >= 0 (module docstring).
        seed: seeds the noise generator.

    Raises:
        ValueError: ``noise`` is negative.
    """

    def __init__(self, noise: float = 0.0, seed: int = 0) -> None:
        if noise < 0:
            raise ValueError(f"noise must be >= 0, got {noise}")
        self.noise = float(noise)
        self.rng = np.random.default_rng(seed)
        self.reset()

    def reset(self, seed: int | list[int] | None = None) -> None:
        """New episode; ``seed`` (as ``numpy.random.default_rng``) reseeds the noise; ``None`` continues."""
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.offset = np.append(self.rng.normal(0.0, OFFSET_NOISE_M * self.noise, 2), 0.0)
        self.phase, self.steps = APPROACH, 0

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        state, env = obs[keys.STATE], obs[keys.ENV_STATE]
        tcp, cube, held = state[TCP], env[CUBE] + self.offset, env[GRASPED] > 0.5
        self.steps += 1
        if self.phase == CARRY and not held:
            self.phase, self.steps = APPROACH, 0
        if self.phase == APPROACH and np.linalg.norm((cube - tcp)[:2]) < 0.01:
            self.phase, self.steps = DESCEND, 0
        if self.phase == DESCEND and abs(cube[2] - tcp[2]) < 0.005:
            self.phase, self.steps = CLOSE, 0
        if self.phase == CLOSE and self.steps > CLOSE_STEPS:
            self.phase, self.steps = (CARRY if held else APPROACH), 0
        target, grip = {
            APPROACH: (cube + [0.0, 0.0, 0.05], 1.0),
            DESCEND: (cube, 1.0),
            CLOSE: (cube, -1.0),
            CARRY: (env[GOAL], -1.0),
        }[self.phase]
        move = (target - tcp) * GAIN + self.rng.normal(0.0, ACTION_NOISE * self.noise, 3)
        return np.append(np.clip(move, -1.0, 1.0), grip).astype(np.float32)
