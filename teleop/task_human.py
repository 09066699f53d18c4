"""A scripted simulated human for the suite's tasks beyond picking (place-in-bin, stack, push-to-target,
open-drawer): watches the task's progress, takes over from a stalling or regressing policy with the task's
clean scripted expert, finishes the manipulation it started and hands back (docs/design.md §4,
docs/algorithms.md
§5). The pick tasks keep :class:`robot_rl.teleop.sim_human.SimulatedHuman`.
"""

from __future__ import annotations

import numpy as np

from robot_rl.config import InterventionConfig
from robot_rl.runtime.intervention import HumanInput
from robot_rl.sim.task_progress import PROGRESS
from robot_rl.sim.tasks import make_expert
from robot_rl.teleop.sim_human import ScriptedHuman, SimulatedHuman, StallWatch


class TaskHuman(ScriptedHuman):
    """Scripted intervention for ``task_id`` (implements ``InterventionDevice``), one of
    :data:`robot_rl.sim.task_progress.PROGRESS`.

    It sees only the observation passed to :meth:`poll` each control step (never the policy's action) and
    rates it with the task's progress ``P`` (m, :mod:`robot_rl.sim.task_progress`). Rule, per episode
    (``cfg`` = :class:`~robot_rl.config.InterventionConfig`, as the pick tasks' human):

    - **Stall:** ``P`` has not beaten its best value before the last ``stall_steps`` steps by more than
      ``stall_distance_m``.
    - **Regress:** ``P`` is more than ``drift_distance_m`` below its best since the episode start (or the
      last hand-back): the policy moved away from the object or lost it.
    - On either, while fewer than ``max_takeovers`` takeovers happened (0 = no cap), it takes over with the
      task's clean expert (noise 0, reset for the takeover, seeded from the env seed and the takeover count).
    - **Hand-back** once it has driven ``takeover_steps`` steps while the expert is still in its first phase
      (moving to the object); once the expert has moved on (grasped, lined up behind the cube, hooked the
      handle) it keeps control to the episode's end, which success brings. Detection restarts after a
      hand-back.

    Deterministic given the env seed and the observations. Counters for the current episode as
    :class:`~robot_rl.teleop.sim_human.SimulatedHuman`: :attr:`takeovers`, :attr:`steps_driven`,
    :attr:`intervention_steps`, :attr:`last_reason` (``"stall"``, ``"regress"`` or None).

    Raises:
        ValueError: ``task_id`` is not a task it drives (lists them), or a threshold out of range (names
            the ``intervention.`` key).
    """

    def __init__(self, task_id: str, cfg: InterventionConfig | None = None) -> None:
        if task_id not in PROGRESS:
            raise ValueError(f"TaskHuman drives {', '.join(PROGRESS)}; got {task_id!r}")
        super().__init__(cfg, make_expert(task_id, noise=0.0))
        self.progress = PROGRESS[task_id]
        self.reset(0)

    def reset(self, env_seed: int) -> None:
        """Start an episode of the env reset with ``env_seed``: counters to 0, the policy drives."""
        self._start_episode(env_seed)
        self._watch_restart()

    def poll(self, obs: dict[str, np.ndarray]) -> HumanInput:
        """The expert's float32 (4,) action while the simulated human drives this step, else ``action=None``.

        Raises:
            KeyError: ``obs`` lacks ``observation.state`` or ``observation.environment_state``.
        """
        progress = self.progress(obs)
        t, self._t = self._t, self._t + 1
        if self._driving and self._driven >= self.cfg.takeover_steps:
            if self.expert.phase == self.expert.first_phase:
                self._driving = False
                self._watch_restart()
        if not self._driving:
            reason = self._trigger(progress)
            if reason is None:
                return HumanInput()
            self._take_over(reason)
        return self._drive(t, self.expert.act(obs))

    def _watch_restart(self) -> None:
        self._stall = StallWatch(self.cfg.stall_steps, self.cfg.stall_distance_m)
        self._best = -np.inf

    def _trigger(self, progress: float) -> str | None:
        stalled = self._stall.update(progress)
        self._best = max(self._best, progress)
        if self.cfg.max_takeovers and self.takeovers >= self.cfg.max_takeovers:
            return None
        if stalled:
            return "stall"
        if progress < self._best - self.cfg.drift_distance_m:
            return "regress"
        return None


def simulated_human(task_id: str, cfg: InterventionConfig) -> ScriptedHuman:
    """The scripted simulated human of the env ``task_id`` (``intervention.device=sim_human``):
    :class:`TaskHuman` for a task with a progress measure (:data:`robot_rl.sim.task_progress.PROGRESS`),
    else :class:`~robot_rl.teleop.sim_human.SimulatedHuman` (pick-cube, pick-colour, and the robot-server
    and ROS 2 sims of pick-cube, whose ``task_id`` is not a suite id)."""
    return TaskHuman(task_id, cfg) if task_id in PROGRESS else SimulatedHuman(cfg)
