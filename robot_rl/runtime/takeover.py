"""Human take-over as an env wrapper: the device is polled each step and wins over the proposed action.

The HIL-SERL shape (its intervention wrapper reports ``is_intervention`` in the step's info): the rollout
engine (:class:`robot_rl.rollout.Rollout`) asks :meth:`InterventionWrapper.takeover` before it queries a
chunk (the device is polled then, with the current observation, so no chunk is queried for a step the
human decides), then steps; docs/design.md §4: a human intervention always wins, within one control step:

- a human action replaces the proposed one, clipped to the action box, reported as
  ``info["is_intervention"] = True`` with the executed ``info["intervention_action"]`` (the engine drops the
  rest of the chunk and records the step with ``complementary_info.is_intervention``, docs/algorithms.md §5);
- a label (``success``/``failure``), an e-stop or a device failure executes nothing: the env is not stepped,
  the episode is reported truncated with ``info["not_executed"]`` and ``info["human_label"]``,
  ``info["estop"]`` or ``info["device_error"]`` (the :class:`DeviceError`: the device failed, or sent a
  NaN/inf action); the caller decides what follows (the online actor keeps the episode and stops, a
  recording drops it).

``reset`` starts the device's episode (:func:`robot_rl.runtime.intervention.start_episode`) with the seed
and the episode's instruction (the env's reset ``info["task"]``, else ``task``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from robot_rl.rollout import HUMAN_ACTION, HUMAN_LABEL, INTERVENED, NOT_EXECUTED
from robot_rl.runtime.intervention import DeviceError, HumanInput, InterventionDevice, start_episode

ESTOP = "estop"
"""Step-info key: the device latched an e-stop; nothing was executed."""
DEVICE_ERROR = "device_error"
"""Step-info key: the :class:`DeviceError` that ended the episode; nothing was executed."""


class InterventionWrapper(gym.Wrapper):
    """``env`` with ``device`` able to take over every step (module docstring).

    Args:
        env: one env with a Box action space (d,).
        device: the :class:`~robot_rl.runtime.intervention.InterventionDevice`; the wrapper does not close it.
        task: the instruction when the env's reset info has none.
        announce: called with a non-empty instruction after each reset, before the device's episode starts
            (an operator must know which cube pick-colour asks for).
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
        self._next: HumanInput | DeviceError | None = None  # the polled input of the next step

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        task = str(info.get("task", self.task))
        if self.announce is not None and info.get("task"):
            self.announce(info["task"])
        start_episode(self.device, seed, task)
        self._obs, self._next = obs, None
        return obs, info

    def takeover(self) -> bool:
        """Poll the device for the next step (once; :meth:`step` uses that input) and say whether the human
        decides it: an action, a label, an e-stop or a failed device."""
        if self._next is None:
            try:
                self._next = self.device.poll(self._obs)
            except DeviceError as err:
                self._next = err
        human = self._next
        return (
            isinstance(human, DeviceError)
            or human.action is not None
            or human.label is not None
            or human.stop
        )

    def step(self, action: np.ndarray):
        self.takeover()
        human, self._next = self._next, None
        if isinstance(human, DeviceError) or human.stop or human.label is not None:
            return self._obs, 0.0, False, True, _not_executed(human)
        intervened = human.action is not None
        if intervened:
            action = np.clip(np.asarray(human.action, np.float32), self.low, self.high)
            if not np.isfinite(action).all():
                error = DeviceError("the intervention device sent a NaN/inf action; it was not executed")
                return self._obs, 0.0, False, True, _not_executed(error)
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._obs = obs
        info = {**info, INTERVENED: intervened}
        if intervened:
            info[HUMAN_ACTION] = action
        return obs, reward, terminated, truncated, info


def _not_executed(human: HumanInput | DeviceError) -> dict[str, Any]:
    """The info of a step that executed nothing: ended by ``human``'s label or e-stop, or a device error."""
    if isinstance(human, DeviceError):
        return {NOT_EXECUTED: True, HUMAN_LABEL: None, ESTOP: False, DEVICE_ERROR: human}
    return {
        NOT_EXECUTED: True,
        HUMAN_LABEL: None if human.stop else human.label,
        ESTOP: human.stop,
        DEVICE_ERROR: None,
    }
