"""A scripted simulated human for ``robot_rl/PandaPickCube-v0`` and ``robot_rl/PandaPickColour-v0``: watches
the observations, takes over from a stalling or drifting policy with the clean scripted expert, and hands
back (docs/design.md §4, docs/algorithms.md §5).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from robot_rl import keys
from robot_rl.config import InterventionConfig
from robot_rl.runtime.intervention import DeviceError, HumanInput
from robot_rl.sim.expert import APPROACH, CLOSE, LIFT, LIFT_HEIGHT_M, PickCubeExpert
from robot_rl.sim.panda_tasks import named_colour

LIFTED_M = 0.02
"""The cube counts as lifted when its centre is this far above its height at the episode's first poll (m)."""
GRASP_DONE_Z_M = LIFT_HEIGHT_M - 0.02
"""A grasp the human started is finished once the cube centre is at least this high (m, world z)."""
LIFT_WEIGHT = 5.0
"""Weight of the cube's lift (m) against the pinch-to-cube distance (m) in the stall rule's progress."""
HELD_M = 0.03
"""At takeover the cube counts as already held when within this distance of the pinch site (m) with the
gripper more than half closed; the expert then starts in its lift phase."""
OBJECT_DIMS = 7
"""Per-cube entries of ``observation.environment_state``: position (3, m) and quaternion (4)."""


def check_thresholds(cfg: InterventionConfig) -> InterventionConfig:
    """``cfg`` when its simulated-human thresholds are in range (``stall_steps`` >= 1, ``stall_distance_m``
    >= 0 m, ``drift_distance_m`` > 0 m, ``takeover_steps`` >= 1, ``max_takeovers`` >= 0).

    Raises:
        ValueError: the first one out of range (names the ``intervention.`` key).
    """
    checks = {
        "stall_steps": cfg.stall_steps >= 1,
        "stall_distance_m": cfg.stall_distance_m >= 0,
        "drift_distance_m": cfg.drift_distance_m > 0,
        "takeover_steps": cfg.takeover_steps >= 1,
        "max_takeovers": cfg.max_takeovers >= 0,
    }
    for name, ok in checks.items():
        if not ok:
            raise ValueError(f"intervention.{name} out of range: {getattr(cfg, name)!r}")
    return cfg


class StallWatch:
    """The stall rule of the simulated humans: task progress (m, one value per control step) has not beaten
    its best value before the last ``steps`` steps by more than ``min_gain_m``.

    Args:
        steps: the window (control steps, >= 1); min_gain_m: the gain (m) that counts as progress.
    """

    def __init__(self, steps: int, min_gain_m: float) -> None:
        self.recent: deque[float] = deque(maxlen=steps)
        self.best_before = -np.inf
        self.min_gain_m = min_gain_m

    def update(self, progress: float) -> bool:
        """Add this step's ``progress`` (m); True when stalled (never before the window has filled once)."""
        if len(self.recent) == self.recent.maxlen:
            self.best_before = max(self.best_before, self.recent[0])
        self.recent.append(progress)
        return bool(np.isfinite(self.best_before) and max(self.recent) < self.best_before + self.min_gain_m)


class ScriptedHuman:
    """What the simulated humans share: thresholds (``cfg``), the per-episode counters
    (:attr:`takeovers`, :attr:`steps_driven`, :attr:`intervention_steps` as 0-based poll indices,
    :attr:`last_reason`), the takeover bookkeeping and the clean expert that drives (``expert``, reset for
    each takeover from the env seed and the takeover count). Subclasses decide when to take over and when
    to hand back.

    Raises:
        ValueError: a threshold out of range (:func:`check_thresholds`).
    """

    def __init__(self, cfg: InterventionConfig | None, expert) -> None:
        self.cfg = check_thresholds(cfg or InterventionConfig())
        self.expert = expert

    @property
    def driving(self) -> bool:
        """True while the simulated human controls the robot."""
        return self._driving

    def _start_episode(self, env_seed: int) -> None:
        self.env_seed = int(env_seed)
        self.takeovers = 0
        self.steps_driven = 0
        self.intervention_steps: list[int] = []
        self.last_reason: str | None = None
        self._t = 0
        self._driving = False
        self._driven = 0

    def _take_over(self, reason: str) -> None:
        self.expert.reset([abs(self.env_seed), self.takeovers])
        self.takeovers += 1
        self.last_reason = reason
        self._driving, self._driven = True, 0

    def _drive(self, t: int, action: np.ndarray) -> HumanInput:
        self._driven += 1
        self.steps_driven += 1
        self.intervention_steps.append(t)
        return HumanInput(action=action)

    def close(self) -> None:
        """Nothing to release."""


class SimulatedHuman(ScriptedHuman):
    """Scripted intervention for the built-in pick tasks (implements ``InterventionDevice``).

    It sees only the observation passed to :meth:`poll` each control step (pinch site
    ``observation.state[14:17]``, gripper closure ``[21]``, the target cube's position, all m in the world
    frame) and the episode's instruction (:meth:`instruct`), never the policy's action. The target cube is
    the first 7 entries of ``observation.environment_state`` (pick-cube), or on pick-colour (three cubes,
    7 entries each, in :data:`~robot_rl.sim.panda_tasks.COLOURS` order) the one whose colour the
    instruction names. Rule, per episode (``cfg`` = :class:`~robot_rl.config.InterventionConfig`):

    - **Stall (no progress):** task progress ``P = -|pinch - cube| + LIFT_WEIGHT * max(0, lift)`` (m;
      ``lift`` is the cube centre's height above its height at the episode's first poll) has not beaten its
      best value before the last ``stall_steps`` steps by more than ``stall_distance_m``, and the cube is
      not lifted (``lift`` at most :data:`LIFTED_M`). This catches a policy that stands still and one
      that jitters or circles near the cube without getting closer.
    - **Drift:** the pinch-to-cube distance exceeds its smallest value since the episode start (or the last
      hand-back) by more than ``drift_distance_m``: the gripper moves away from the cube, or drops it.
    - On either, while fewer than ``max_takeovers`` takeovers happened this episode (0 = no cap), it takes
      over from this step on with a clean ``PickCubeExpert(noise=0)`` reset for the takeover (seeded from
      the env seed). If the cube is already held (within :data:`HELD_M` of the pinch site, gripper closure
      > 0.5) the expert starts lifting; otherwise it approaches.
    - **Hand-back** (``poll`` returns ``action=None`` again) at the first step after it has driven at least
      ``takeover_steps`` steps, unless a grasp is under way: once the expert has commanded the gripper
      closed (its close or lift phase), the human keeps control until the cube centre reaches
      :data:`GRASP_DONE_Z_M` (0.18 m world z, 2 cm below the expert's lift target; the env's default
      success, 0.1 m lift held 3 steps, ends the episode before that) or the grasp is lost (the expert
      goes back to its approach phase). Detection restarts after a hand-back (a fresh stall window and
      drift reference).

    Deterministic given the env seed and the observations. It never gives a label (the env reports
    success). Counters for the current episode: :attr:`takeovers`, :attr:`steps_driven`;
    :attr:`intervention_steps` lists the poll indices (0-based) it drove; :attr:`last_reason` is
    ``"stall"``, ``"drift"`` or None.

    Args:
        cfg: thresholds (``stall_steps`` >= 1, ``stall_distance_m`` >= 0 m, ``drift_distance_m`` > 0 m,
            ``takeover_steps`` >= 1, ``max_takeovers`` >= 0); default ``InterventionConfig()``.

    Raises:
        ValueError: a threshold out of range (the message names the ``intervention.`` key).
    """

    def __init__(self, cfg: InterventionConfig | None = None) -> None:
        super().__init__(cfg, PickCubeExpert(noise=0.0, seed=0))
        self.target = 0  # the cube the instruction names (index into environment_state's cubes)
        self.reset(0)

    def reset(self, env_seed: int) -> None:
        """Start an episode of the env reset with ``env_seed``: counters to 0, the policy drives, the target
        is the first cube until :meth:`instruct` names another."""
        self._start_episode(env_seed)
        self.target = 0
        self._rest_z: float | None = None
        self._grasping = False
        self._watch_restart()

    def instruct(self, task: str) -> None:
        """The episode's instruction: an instruction naming exactly one of
        :data:`~robot_rl.sim.panda_tasks.COLOURS` makes that colour's cube the target (pick-colour); any
        other (pick-cube's) keeps the first."""
        named = named_colour(task)
        self.target = 0 if named is None else named

    def poll(self, obs: dict[str, np.ndarray]) -> HumanInput:
        """The expert's float32 (4,) action while the simulated human drives this step, else ``action=None``.

        Raises:
            DeviceError: ``obs`` lacks ``observation.environment_state`` (an env without a simulated scene,
                e.g. a stock ROS 2 arm: the simulated human cannot see the cube there).
            KeyError: ``obs`` lacks ``observation.state``.
            ValueError: ``observation.environment_state`` holds no cube at the instructed target.
        """
        if keys.ENV_STATE not in obs:
            raise DeviceError(
                f"the simulated human (sim_human) reads the cube's pose from {keys.ENV_STATE}, which this "
                "env does not give (a robot without a simulated scene); use a real device, or "
                "intervention.device=none"
            )
        state = np.asarray(obs[keys.STATE], dtype=np.float64)
        env_state = np.asarray(obs[keys.ENV_STATE], dtype=np.float64)
        lo = self.target * OBJECT_DIMS
        if env_state.shape[-1] < lo + OBJECT_DIMS:
            raise ValueError(
                f"the simulated human's target cube {self.target} needs observation.environment_state of "
                f">= {lo + OBJECT_DIMS} entries, got {env_state.shape[-1]}"
            )
        target = env_state[lo : lo + OBJECT_DIMS]
        cube = target[:3]
        pinch = state[14:17]
        if self._rest_z is None:
            self._rest_z = float(cube[2])
        t, self._t = self._t, self._t + 1
        if self._driving and self._hand_back(cube):
            self._driving = False
            self._watch_restart()
        if not self._driving:
            reason = self._trigger(pinch, cube)
            if reason is None:
                return HumanInput()
            self._take_over(reason)
            self._grasping = False
            if float(state[21]) > 0.5 and np.linalg.norm(cube - pinch) < HELD_M:  # already held: lift it
                self.expert.phase, self.expert.phase_steps = LIFT, 0
        action = self.expert.act({keys.STATE: obs[keys.STATE], keys.ENV_STATE: target})
        if self.expert.phase in (CLOSE, LIFT):
            self._grasping = True
        return self._drive(t, action)

    def _watch_restart(self) -> None:
        self._stall = StallWatch(self.cfg.stall_steps, self.cfg.stall_distance_m)
        self._min_dist = np.inf

    def _trigger(self, pinch: np.ndarray, cube: np.ndarray) -> str | None:
        dist = float(np.linalg.norm(pinch - cube))
        lift = float(cube[2] - self._rest_z)
        stalled = self._stall.update(-dist + LIFT_WEIGHT * max(0.0, lift))
        self._min_dist = min(self._min_dist, dist)
        if self.cfg.max_takeovers and self.takeovers >= self.cfg.max_takeovers:
            return None
        if lift <= LIFTED_M and stalled:
            return "stall"
        if dist > self._min_dist + self.cfg.drift_distance_m:
            return "drift"
        return None

    def _hand_back(self, cube: np.ndarray) -> bool:
        if self._grasping:
            if self.expert.phase == APPROACH:  # the grasp was lost; the expert starts over
                self._grasping = False
            elif cube[2] < GRASP_DONE_Z_M:
                return False
        return self._driven >= self.cfg.takeover_steps
