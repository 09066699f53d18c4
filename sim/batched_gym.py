"""``gym_vector`` backend of :class:`~robot_rl.sim.batched.BatchedEnv`: gymnasium's vector env (one worker
process per env when N > 1, :func:`robot_rl.sim.vector.make_vector_env`) behind the batched API.

The vector env runs with ``AutoresetMode.DISABLED``; this class resets finished envs itself (same step),
so the final observation is kept and each env is reset from its own random stream. Gymnasium steps every
sub-env on every call and refuses to step a finished one, so each sub-env is wrapped in
:class:`HoldWrapper`: an all-NaN action holds it (no step; its last observation comes back), and episode
ends travel in ``info`` rather than the gymnasium flags. Inside
:meth:`~robot_rl.sim.batched.BatchedEnv.step_chunk` an env whose episode has ended is held until the chunk
ends and then reset, exactly as the ``mujoco_cpu`` backend does.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from robot_rl.config import EnvConfig
from robot_rl.sim.batched import BatchedEnv, seed_list
from robot_rl.sim.vector import make_vector_env

TERMINATED, TRUNCATED = "batched.terminated", "batched.truncated"


class HoldWrapper(gym.Wrapper):
    """Sub-env wrapper for the batched API: an all-NaN action holds the env (returns its last observation,
    reward 0, not stepped); the episode's end is reported as ``info["batched.terminated"]`` /
    ``info["batched.truncated"]`` with both gymnasium flags False, so the vector env never refuses a step.
    """

    def reset(self, **kwargs):
        self._last, info = self.env.reset(**kwargs)
        return self._last, info

    def step(self, action):
        if np.isnan(np.asarray(action, dtype=np.float64)).all():
            return self._last, 0.0, False, False, {}
        self._last, reward, terminated, truncated, info = self.env.step(action)
        return self._last, reward, False, False, {**info, TERMINATED: terminated, TRUNCATED: truncated}


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
        self.vec = make_vector_env(cfg, num_envs, AutoresetMode.DISABLED, asynchronous, wrapper=HoldWrapper)
        if not isinstance(self.vec.single_action_space, spaces.Box):
            self.vec.close()
            raise ValueError(f"env {cfg.id}: the batched API needs a Box action space")
        self.num_envs = num_envs
        self.single_observation_space = self.vec.single_observation_space
        self.single_action_space = self.vec.single_action_space
        self.task = self.vec.get_attr("task")[0] if cfg.robot is None else ""
        self._obs: dict[str, np.ndarray] | None = None

    def tasks(self) -> list[str]:
        """Each env's instruction for its current episode (N strings; the env's ``task`` attribute)."""
        return [str(t) for t in self.vec.get_attr("task")]

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
        a[~active] = np.nan  # HoldWrapper: not stepped
        obs, reward, _, _, info = self.vec.step(a)
        obs = {k: np.array(v) for k, v in obs.items()}
        n = self.num_envs
        flags = {k: _flag(info, k, n) for k in ("is_success", "sim_unstable", TERMINATED, TRUNCATED)}
        raw = {"is_success": flags["is_success"], "sim_unstable": flags["sim_unstable"]}
        self._obs = {k: v.copy() for k, v in obs.items()}
        terminated, truncated = flags[TERMINATED] & active, flags[TRUNCATED] & active
        return obs, np.asarray(reward, np.float64), terminated, truncated, raw

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
