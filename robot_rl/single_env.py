"""One gymnasium env seen as the N = 1 vector env :class:`robot_rl.rollout.Rollout` drives.

A robot (:class:`~robot_rl.hardware.robot_env.RobotEnv`) is one env, and a rendered or teleoperated episode
runs on one env in this process; this view gives it the DISABLED-autoreset vector interface without a
gymnasium vector env around it (which would step it once more after its episode ends and batch its info
with masks), so the env sees exactly the resets and steps a hand-written loop would send.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def _one(value: Any) -> np.ndarray:
    """``value`` as a (1,) object array (any type, e.g. a string, None or a dict)."""
    out = np.empty(1, dtype=object)
    out[0] = value
    return out


def _batched_info(info: dict[str, Any]) -> dict[str, np.ndarray]:
    """Each value of a single env's info as a (1,) array."""
    return {k: _one(v) for k, v in info.items()}


class SingleEnvVector:
    """``env`` as a vector env of ``num_envs`` = 1 with autoreset disabled.

    ``reset(seed=[s] or s, options=...)`` resets the env with seed ``s`` (``options["reset_mask"]``, if
    given, must select it); ``step(actions (1, d))`` steps it with ``actions[0]``. Observations come back
    as (1, ...) arrays, reward float64 (1,) (the env's value), terminated/truncated bool (1,) and every info
    value as a (1,) object array (``info["task"]``: the episode's instruction, as a vector env's). The view
    owns ``env`` and closes it; ``env`` stays reachable as :attr:`env`.
    """

    num_envs = 1

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.single_observation_space = env.observation_space
        self.single_action_space = env.action_space
        self.metadata = dict(getattr(env, "metadata", {}))

    def reset(self, *, seed=None, options: dict[str, Any] | None = None):
        """Reset the env; ``seed``: an int, None or a one-element list. Returns ``(obs (1, ...), info)``.

        Raises:
            ValueError: ``options["reset_mask"]`` does not select the env."""
        mask = (options or {}).get("reset_mask")
        if mask is not None and not bool(np.asarray(mask, dtype=bool).reshape(-1)[0]):
            raise ValueError("SingleEnvVector.reset: the reset_mask selects no env")
        if isinstance(seed, list | tuple):
            seed = seed[0]
        opts = {k: v for k, v in (options or {}).items() if k != "reset_mask"} or None
        obs, info = self.env.reset(seed=seed, options=opts)
        return {k: np.asarray(v)[None] for k, v in obs.items()}, _batched_info(info)

    def step(self, actions: np.ndarray):
        """Step the env with ``actions[0]``; returns the vector env's 5-tuple of (1, ...) arrays."""
        obs, reward, terminated, truncated, info = self.env.step(np.asarray(actions)[0])
        return (
            {k: np.asarray(v)[None] for k, v in obs.items()},
            np.array([reward], np.float64),
            np.array([bool(terminated)]),
            np.array([bool(truncated)]),
            _batched_info(info),
        )

    def takeover(self) -> np.ndarray:
        """(1,) bool: whether a human decides the env's next step (the env's ``takeover()``, e.g.
        :class:`robot_rl.runtime.intervention.InterventionWrapper`'s; False for an env without one)."""
        takeover = getattr(self.env, "takeover", None)
        return np.array([bool(takeover()) if takeover is not None else False])

    def get_attr(self, name: str) -> list[Any]:
        """``[getattr(env.unwrapped, name)]`` (e.g. ``task``), as a vector env's ``get_attr``."""
        return [getattr(self.env.unwrapped, name)]

    def close(self) -> None:
        self.env.close()
