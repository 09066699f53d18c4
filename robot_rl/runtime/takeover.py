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
            self._next = _poll(self.device, self._obs)
        return _human_decides(self._next)

    def step(self, action: np.ndarray):
        self.takeover()
        human, self._next = self._next, None
        decided, skipped = _decide(human, self.low, self.high)
        if skipped is not None:
            return self._obs, 0.0, False, True, skipped
        intervened = decided is not None
        obs, reward, terminated, truncated, info = self.env.step(decided if intervened else action)
        self._obs = obs
        info = {**info, INTERVENED: intervened}
        if intervened:
            info[HUMAN_ACTION] = decided
        return obs, reward, terminated, truncated, info


class BatchInterventionWrapper:
    """The N envs of a DISABLED-autoreset vector env with ``device`` able to take over env 0 each step (the
    batched online actor's: one human per actor): :class:`InterventionWrapper`'s rules for env 0, the other
    envs step on.

    A human action replaces env 0's (clipped; ``info["is_intervention"]`` (N,) bool and
    ``info["intervention_action"]`` (N, d) float32 set in row 0). A label, an e-stop or a device failure ends
    env 0's episode without executing it (``end`` on the env; ``info["not_executed"]``,
    ``info["human_label"]``, ``info["estop"]``, ``info["device_error"]`` (N,) set in row 0) while the other
    envs take this control step; what follows (the actor holds every env on an e-stop) is the caller's.

    Args:
        vec_env: ``num_envs``, ``single_observation_space``, ``single_action_space`` (Box (d,)), ``reset``,
            ``step``, ``end(mask)`` and ``close`` as :class:`robot_rl.sim.batched_rollout.RolloutView`'s.
        device: the :class:`~robot_rl.runtime.intervention.InterventionDevice` of env 0; not closed here.
        task: env 0's instruction when the reset info has none.
    """

    def __init__(self, vec_env, device: InterventionDevice, task: str = "") -> None:
        self.env, self.device, self.task = vec_env, device, task
        self.num_envs = vec_env.num_envs
        self.single_observation_space = vec_env.single_observation_space
        self.single_action_space = vec_env.single_action_space
        self.metadata = dict(getattr(vec_env, "metadata", {}))
        self.low = self.single_action_space.low.astype(np.float32)
        self.high = self.single_action_space.high.astype(np.float32)
        self._first = np.arange(self.num_envs) == 0
        self._obs: dict[str, np.ndarray] = {}  # env 0's current observation, what the device sees
        self._live = False  # env 0 has an episode in flight
        self._next: HumanInput | DeviceError | None = None

    def reset(self, *, seed=None, options: dict[str, Any] | None = None):
        """Reset as the vector env; when env 0 is among the reset envs, its device episode starts with its
        seed and instruction (:func:`~robot_rl.runtime.intervention.start_episode`)."""
        obs, info = self.env.reset(seed=seed, options=options)
        mask = (options or {}).get("reset_mask")
        if mask is None or bool(np.asarray(mask)[0]):
            seed0 = seed[0] if isinstance(seed, list | tuple) else seed
            task = str(info["task"][0]) if "task" in info else self.task
            start_episode(self.device, seed0, task)
            self._obs, self._live, self._next = {k: v[0] for k, v in obs.items()}, True, None
        return obs, info

    def takeover(self) -> np.ndarray:
        """(N,) bool: True at env 0 when the human decides its next step (the device is polled once per
        step, with env 0's observation, while env 0 has an episode in flight)."""
        out = np.zeros(self.num_envs, bool)
        if not self._live:
            return out
        if self._next is None:
            self._next = _poll(self.device, self._obs)
        out[0] = _human_decides(self._next)
        return out

    def step(self, actions: np.ndarray):
        """Step every env, env 0 as its human decides (class docstring); returns the vector 5-tuple."""
        n, actions = self.num_envs, np.array(actions, dtype=np.float32)
        decided, skipped = None, None
        if self._live:
            self.takeover()
            human, self._next = self._next, None
            decided, skipped = _decide(human, self.low, self.high)
            if skipped is not None:
                self.end(self._first)
            elif decided is not None:
                actions[0] = decided
        obs, reward, terminated, truncated, info = self.env.step(actions)
        info = dict(info)
        info[INTERVENED] = self._first & (decided is not None)
        if decided is not None:
            info[HUMAN_ACTION] = np.zeros_like(actions)
            info[HUMAN_ACTION][0] = decided
        for key, value in (skipped or {}).items():
            info[key] = np.full(n, None, dtype=object)
            info[key][0] = value
        if terminated[0] or truncated[0]:
            self._live = False
        self._obs = {k: v[0] for k, v in obs.items()}
        return obs, reward, terminated, truncated, info

    def end(self, mask: np.ndarray) -> None:
        """Stop stepping the envs where ``mask``; env 0's device is not polled again until its reset."""
        self.env.end(mask)
        if bool(np.asarray(mask)[0]):
            self._live = False

    def get_attr(self, name: str) -> list[Any]:
        return self.env.get_attr(name)

    def close(self) -> None:
        self.env.close()


def _poll(device: InterventionDevice, obs: Any) -> HumanInput | DeviceError:
    """The device's input for the next step, or the :class:`DeviceError` it raised (a failed device is a
    decision too: the step is skipped and the episode ends, see :func:`_decide`)."""
    try:
        return device.poll(obs)
    except DeviceError as err:
        return err


def _human_decides(human: HumanInput | DeviceError) -> bool:
    """Whether ``human`` decides the step: an action, a label, an e-stop or a failed device."""
    return isinstance(human, DeviceError) or any(
        (human.action is not None, human.label is not None, human.stop)
    )


def _decide(
    human: HumanInput | DeviceError, low: np.ndarray, high: np.ndarray
) -> tuple[np.ndarray | None, dict[str, Any] | None]:
    """What the human decided for one step: (their action clipped to [low, high], None), (None, the info of
    a step that executes nothing: a label, an e-stop, a failed device or a NaN/inf action), or (None, None)
    where the policy acts."""
    if isinstance(human, DeviceError) or human.stop or human.label is not None:
        return None, _not_executed(human)
    if human.action is None:
        return None, None
    action = np.clip(np.asarray(human.action, np.float32), low, high)
    if not np.isfinite(action).all():
        error = DeviceError("the intervention device sent a NaN/inf action; it was not executed")
        return None, _not_executed(error)
    return action, None


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
