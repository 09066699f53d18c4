"""``gym_vector`` backend of :class:`~robot_rl.sim.batched.BatchedEnv`: gymnasium's vector env (one worker
process per env when N > 1, :func:`robot_rl.sim.vector.make_vector_env`) behind the batched API.

The vector env runs with ``AutoresetMode.DISABLED``; this class resets finished envs itself (same step),
so the final observation is kept and each env is reset from its own random stream. Inside
:meth:`~robot_rl.sim.batched.BatchedEnv.step_chunk`, an env whose episode has ended steps the middle of
the action box until the chunk ends (gymnasium steps every sub-env together; the results are discarded)
and is then reset; an env that draws its randomness only at reset (the built-in task does) gives the same
next episode as if it had been reset at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from robot_rl.config import EnvConfig
from robot_rl.sim.batched import BatchedEnv, seed_list


class GymVectorBatchedEnv(BatchedEnv):
    """N copies of ``make_env(cfg)`` in a gymnasium vector env.

    Args:
        cfg: env config; any id :func:`robot_rl.sim.make_env` builds.
        num_envs: N.
        asynchronous: worker processes (``None``: when N > 1), as
            :func:`~robot_rl.sim.vector.make_vector_env`.

    Raises:
        ValueError: the env's action space is not a ``Box``; what ``make_vector_env`` raises.
    """

    def __init__(self, cfg: EnvConfig, num_envs: int, asynchronous: bool | None = None) -> None:
        from robot_rl.sim.vector import make_vector_env

        self.vec = make_vector_env(cfg, num_envs, AutoresetMode.DISABLED, asynchronous)
        if not isinstance(self.vec.single_action_space, spaces.Box):
            self.vec.close()
            raise ValueError(f"env {cfg.id}: the batched API needs a Box action space")
        self.num_envs = num_envs
        self.single_observation_space = self.vec.single_observation_space
        self.single_action_space = self.vec.single_action_space
        self.task = self.vec.get_attr("task")[0] if cfg.robot is None else ""
        space = self.single_action_space
        self._idle = ((space.low + space.high) / 2).astype(space.dtype)
        self._obs: dict[str, np.ndarray] | None = None

    def reset(self, *, seed=None, options: dict[str, Any] | None = None):
        seeds = seed_list(seed, self.num_envs)
        obs, _ = self.vec.reset(seed=seeds, options=options)
        obs = {k: np.array(v) for k, v in obs.items()}
        mask = (options or {}).get("reset_mask")
        if mask is not None and self._obs is not None:
            mask = np.asarray(mask, dtype=bool)
            for k in obs:
                obs[k][~mask] = self._obs[k][~mask]
        self._obs = {k: v.copy() for k, v in obs.items()}
        return obs, {"is_success": np.zeros(self.num_envs, dtype=bool)}

    def _step_active(self, actions: np.ndarray, active: np.ndarray):
        a = actions.astype(self.single_action_space.dtype)
        a[~active] = self._idle
        obs, reward, terminated, truncated, info = self.vec.step(a)
        obs = {k: np.array(v) for k, v in obs.items()}
        n = self.num_envs
        raw = {
            "is_success": _flag(info, "is_success", n),
            "sim_unstable": _flag(info, "sim_unstable", n),
        }
        self._obs = {k: v.copy() for k, v in obs.items()}
        return (
            obs,
            np.asarray(reward, np.float64),
            np.asarray(terminated, bool),
            np.asarray(truncated, bool),
            raw,
        )

    def _reset_envs(self, mask: np.ndarray):
        obs, _ = self.reset(seed=None, options={"reset_mask": mask})
        return obs

    def close(self) -> None:
        self.vec.close()


def _flag(info: dict[str, Any], key: str, n: int) -> np.ndarray:
    """Vector-env info ``key`` as bool (N,), False where a sub-env did not report it."""
    if key not in info:
        return np.zeros(n, dtype=bool)
    value = np.asarray(info[key], dtype=bool)
    present = np.asarray(info.get("_" + key, np.ones(n, bool)), dtype=bool)
    return value & present
