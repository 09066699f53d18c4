"""Scripted experts for ManiSkill3 tasks on the ``maniskill`` backend (:mod:`robot_rl.sim.batched_maniskill`),
reading only its flattened observation, so ``collect`` can record demos of ManiSkill's own tasks.

``PickCube-v1`` (Panda, ``pd_ee_delta_pos``): over the cube, down, close, carry to the goal, by proportional
steps in ManiSkill's normalised action units (1 = its largest end-effector step, 0.1 m). ``noise`` (0 =
clean) adds Gaussian action noise of std ``0.3 * noise`` on x, y, z and a per-episode grasp offset of std
``0.04 * noise`` m in x and y, so some demos fail. Success over 30 seeds (``PickCube-v1``'s 50 steps):
1.00 at noise 0 (20 steps on average), 0.93 at 0.2, 0.77 at 0.3 (the default, 32 steps).

``PushCube-v1`` (Panda, ``pd_ee_delta_pos``): gripper closed, over the point 5 cm behind the cube on the
cube-to-goal line, down to 2 cm above the table, then push along that line until the cube is in the goal
circle. ``noise``: the same action noise, and an offset of half that std (``0.02 * noise`` m) on the point
pushed at. Success rates: :class:`PushCubeV1Expert`.

``StackCube-v1`` (Panda, ``pd_ee_delta_pos``): pick the red cube as for ``PickCube-v1``, carry it over the
green one, lower it onto it, open and back off (ManiSkill's success: on top within 5 mm in height, released
and at rest). ``noise``: the same action noise, and an offset of std ``0.02 * noise`` m on the point over
the green cube where the red one is put down. Success rates: :class:`StackCubeV1Expert`.
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


class _PhasedExpert:
    """What the experts share: the ``noise`` knob (action noise of std ``ACTION_NOISE * noise`` and a
    per-episode xy offset of std ``offset_noise_m * noise`` m on the point they aim at), the seeded noise
    generator and the phase machine's start (``phase``, ``steps`` in it).

    Args:
        noise: suboptimality knob >= 0 (module docstring).
        seed: seeds the noise generator.

    Raises:
        ValueError: ``noise`` is negative.
    """

    offset_noise_m: float
    first_phase: int

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
        self.offset = np.append(self.rng.normal(0.0, self.offset_noise_m * self.noise, 2), 0.0)
        self.phase, self.steps = self.first_phase, 0

    def grasp(
        self, tcp: np.ndarray, cube: np.ndarray, held: bool, holding: tuple[int, ...]
    ) -> tuple[np.ndarray, float] | None:
        """The pick the experts share: advance the phase (approach 5 cm over ``cube`` (m), descend, close
        for ``CLOSE_STEPS`` steps, then ``CARRY`` when ``held``; back to approach when a phase in
        ``holding`` finds the cube dropped) and return the TCP target (m) and grip of a grasp phase, or
        ``None`` when the expert is past the grasp (its own phases decide)."""
        self.steps += 1
        if self.phase in holding and not held:
            self.phase, self.steps = APPROACH, 0
        if self.phase == APPROACH and np.linalg.norm((cube - tcp)[:2]) < 0.01:
            self.phase, self.steps = DESCEND, 0
        if self.phase == DESCEND and abs(cube[2] - tcp[2]) < 0.005:
            self.phase, self.steps = CLOSE, 0
        if self.phase == CLOSE and self.steps > CLOSE_STEPS:
            self.phase, self.steps = (CARRY if held else APPROACH), 0
        return {
            APPROACH: (cube + [0.0, 0.0, 0.05], 1.0),
            DESCEND: (cube, 1.0),
            CLOSE: (cube, -1.0),
        }.get(self.phase)

    def noisy(self, move: np.ndarray, grip: float) -> np.ndarray:
        """``move`` (3,) normalised + action noise, clipped to [-1, 1], then ``grip``: float32 (4,)."""
        move = move + self.rng.normal(0.0, ACTION_NOISE * self.noise, 3)
        return np.append(np.clip(move, -1.0, 1.0), grip).astype(np.float32)


class PickCubeV1Expert(_PhasedExpert):
    """Pick-and-place expert for ManiSkill3's ``PickCube-v1``; ``act`` returns float32 (4,) in [-1, 1]
    (dx, dy, dz, gripper: 1 open, -1 closed). Phases: approach 5 cm over the cube, descend, close for
    ``CLOSE_STEPS`` steps, carry to the goal (and approach again when the cube is not held).

    Args and raises: as :class:`_PhasedExpert`.
    """

    offset_noise_m = OFFSET_NOISE_M
    first_phase = APPROACH

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        state, env = obs[keys.STATE], obs[keys.ENV_STATE]
        tcp, cube, held = state[TCP], env[CUBE] + self.offset, env[GRASPED] > 0.5
        target, grip = self.grasp(tcp, cube, held, (CARRY,)) or (env[GOAL], -1.0)
        return self.noisy((target - tcp) * GAIN, grip)


PUSH_GOAL, PUSH_CUBE = slice(0, 3), slice(3, 6)
"""PushCube-v1's ``observation.environment_state``: goal position (m), cube position (m)."""
BEHIND_M, PUSH_HEIGHT_M = 0.05, 0.02
"""Where the TCP starts a push: this far behind the cube's centre (m), this high above the table (m)."""
ALIGN, LOWER, PUSH = range(3)


class PushCubeV1Expert(_PhasedExpert):
    """Push expert for ManiSkill3's ``PushCube-v1``; ``act`` returns float32 (4,) in [-1, 1] (dx, dy, dz,
    gripper -1: closed). Phases: align over the push start (5 cm behind the cube on the cube-to-goal line),
    lower to 2 cm, push through the cube towards the goal (align again when the cube drifts off the line).
    Over 30 seeds (50-step horizon; ManiSkill's goal circle has a 10 cm radius, so noise mostly costs
    time): success 1.00 at noise 0 (11.6 steps on average), 1.00 at 0.3 (12.0), 1.00 at 0.6 (12.6), 0.93
    at 1.0 (18.3).

    Args and raises: as :class:`_PhasedExpert`.
    """

    offset_noise_m = OFFSET_NOISE_M / 2
    first_phase = ALIGN

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        state, env = obs[keys.STATE], obs[keys.ENV_STATE]
        tcp, cube, goal = state[TCP], env[PUSH_CUBE] + self.offset, env[PUSH_GOAL]
        line = (goal - cube)[:2]
        line = line / max(float(np.linalg.norm(line)), 1e-6)
        start = np.append(cube[:2] - BEHIND_M * line, PUSH_HEIGHT_M)
        # the TCP's distance from the cube-to-goal line (m)
        rel = (tcp - cube)[:2]
        off_line = abs(rel[0] * line[1] - rel[1] * line[0])
        if self.phase == PUSH and off_line > 0.02:
            self.phase = ALIGN
        if self.phase == ALIGN and np.linalg.norm((start - tcp)[:2]) < 0.01:
            self.phase = LOWER
        if self.phase == LOWER and abs(tcp[2] - PUSH_HEIGHT_M) < 0.01:
            self.phase = PUSH
        target = {
            ALIGN: np.append(start[:2], max(PUSH_HEIGHT_M + 0.05, tcp[2])),
            LOWER: start,
            PUSH: np.append(goal[:2] + 0.03 * line, PUSH_HEIGHT_M),
        }[self.phase]
        gain = GAIN if self.phase != PUSH else GAIN / 3  # push slowly: the cube must not be flicked away
        return self.noisy((target - tcp) * gain, -1.0)


STACK_A, STACK_B = slice(0, 3), slice(7, 10)
"""StackCube-v1's ``observation.environment_state``: cube A's position (m, then its quaternion), cube B's."""
GRIPPER = slice(7, 9)
"""The Panda's finger joints (m, 0.04 open) in ``observation.state``."""
CARRY_HEIGHT_M, STACK_HEIGHT_M = 0.07, 0.041
"""Over cube B: carrying height and releasing height of the TCP above B's centre (m; stacked: 0.04)."""
RELEASE_STEPS = 4
LOWER_ONTO, RELEASE, RETREAT = range(4, 7)
"""StackCube-v1's phases after the shared pick's (``APPROACH``, ``DESCEND``, ``CLOSE``, ``CARRY``)."""


class StackCubeV1Expert(_PhasedExpert):
    """Stacking expert for ManiSkill3's ``StackCube-v1``; ``act`` returns float32 (4,) in [-1, 1]. Phases:
    approach 5 cm over cube A, descend, close, carry to :data:`CARRY_HEIGHT_M` over cube B, lower to
    :data:`STACK_HEIGHT_M`, open for :data:`RELEASE_STEPS` steps, retreat upwards (and approach again when
    cube A is dropped before it is over B). Over 30 seeds (50-step horizon): success 0.90 at noise 0 (30.6
    steps on average; the failures are arm motions ManiSkill's end-effector controller does not carry
    out), 0.80 at 0.3 (34.9), 0.50 at 0.6 (42.4).

    Args and raises: as :class:`_PhasedExpert`.
    """

    offset_noise_m = OFFSET_NOISE_M / 2
    first_phase = APPROACH

    def act(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        state, env = obs[keys.STATE], obs[keys.ENV_STATE]
        tcp, a, b = state[TCP], env[STACK_A], env[STACK_B]
        held = np.linalg.norm(a - tcp) < 0.02 and state[GRIPPER].sum() > 0.02  # fingers on the cube
        picking = self.grasp(tcp, a, bool(held), (CARRY, LOWER_ONTO))
        over_b = b + self.offset + [0.0, 0.0, CARRY_HEIGHT_M]
        if self.phase == CARRY and np.linalg.norm((over_b - tcp)[:2]) < 0.005 and tcp[2] > b[2] + 0.05:
            self.phase, self.steps = LOWER_ONTO, 0
        on_b = np.linalg.norm((b + self.offset - tcp)[:2]) < 0.008
        low = min(tcp[2] - b[2] - STACK_HEIGHT_M, a[2] - b[2] - 0.04) < 0.004  # at the release height, or A
        if self.phase == LOWER_ONTO and low and on_b:  # resting on B
            self.phase, self.steps = RELEASE, 0
        if self.phase == RELEASE and self.steps > RELEASE_STEPS:
            self.phase, self.steps = RETREAT, 0
        target, grip = (
            picking
            or {
                CARRY: (over_b if tcp[2] > b[2] + 0.05 else np.append(tcp[:2], over_b[2]), -1.0),
                LOWER_ONTO: (
                    np.append((b + self.offset)[:2], b[2] + STACK_HEIGHT_M if on_b else tcp[2]),
                    -1.0,
                ),
                RELEASE: (tcp, 1.0),
                RETREAT: (np.append(tcp[:2], b[2] + 0.12), 1.0),
            }[self.phase]
        )
        gain = GAIN / 2 if self.phase == LOWER_ONTO else GAIN
        return self.noisy((target - tcp) * gain, grip)
