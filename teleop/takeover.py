"""Human take-over as an env wrapper: the device is polled inside ``step`` and wins over the proposed action.

The HIL-SERL shape (its intervention wrapper reports ``is_intervention`` in the step's info): the rollout
engine (:class:`robot_rl.rollout.Rollout`) proposes an action, this wrapper polls the device with the
current observation (DESIGN.md §4: a human intervention always wins, within one control step) and

- a human action replaces it, clipped to the action box, reported as ``info["is_intervention"] = True``
  with the executed ``info["intervention_action"]`` (the engine drops the rest of the chunk and records
  the step with ``complementary_info.is_intervention``, ALGORITHMS.md §5);
- a label (``success``/``failure``) or an e-stop executes nothing: the env is not stepped, the episode is
  reported truncated with ``info["not_executed"]``, and ``info["human_label"]`` / ``info["estop"]``.

``reset`` starts the device's episode (:func:`robot_rl.runtime.intervention.start_episode`) with the seed
and the episode's instruction (the env's reset ``info["task"]``, else ``task``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.rollout import HUMAN_ACTION, HUMAN_LABEL, INTERVENED, NOT_EXECUTED
from robot_rl.runtime.intervention import DeviceError, InterventionDevice, start_episode

ESTOP = "estop"
"""Step-info key: the device latched an e-stop; nothing was executed."""


class InterventionWrapper(gym.Wrapper):
    """``env`` with ``device`` able to take over every step (module docstring).

    Args:
        env: one env with a Box action space (d,).
        device: the :class:`~robot_rl.runtime.intervention.InterventionDevice`; the wrapper does not close it.
        task: the instruction when the env's reset info has none.
        announce: called with a non-empty instruction after each reset, before the device's episode starts
            (an operator must know which cube pick-colour asks for).

    Raises (from ``step``):
        DeviceError: the device failed, or sent a NaN/inf action (not executed).
    """

    def __init__(
        self,
        env: gym.Env,
        device: InterventionDevice,
        task: str = "",
        announce: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(env)
        self.device, self.task, self.announce = device, task, announce
        self.low = env.action_space.low.astype(np.float32)
        self.high = env.action_space.high.astype(np.float32)
        self._obs: Any = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        task = str(info.get("task", self.task))
        if self.announce is not None and info.get("task"):
            self.announce(info["task"])
        start_episode(self.device, seed, task)
        self._obs = obs
        return obs, info

    def step(self, action: np.ndarray):
        human = self.device.poll(self._obs)
        if human.stop or human.label is not None:
            info = {NOT_EXECUTED: True, HUMAN_LABEL: None if human.stop else human.label, ESTOP: human.stop}
            return self._obs, 0.0, False, True, info
        intervened = human.action is not None
        if intervened:
            action = np.clip(np.asarray(human.action, np.float32), self.low, self.high)
            if not np.isfinite(action).all():
                raise DeviceError("the intervention device sent a NaN/inf action; it was not executed")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._obs = obs
        info = {**info, INTERVENED: intervened}
        if intervened:
            info[HUMAN_ACTION] = action
        return obs, reward, terminated, truncated, info
