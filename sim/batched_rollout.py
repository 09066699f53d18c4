"""A :class:`~robot_rl.sim.batched.BatchedEnv` seen as the vector env :func:`robot_rl.rollout.rollout` drives:
gymnasium's ``AutoresetMode.DISABLED`` contract, so the rollout resets each finished env with an exact seed.

:func:`robot_rl.rollout.rollout` runs one episode per entry of an exact seed list and hands sub-env ``i``
the next unused seed when its episode ends; which env gets which seed, and so the order in which episodes
finish (a dataset's episode order), depends on that. The batched API's same-step auto-reset draws the next
episode from the env's own stream instead, so this view steps the batched env without auto-reset (the
backend's ``_step_active``) and leaves the reset to the caller:

- ``step(actions (N, d))`` returns ``(obs, reward, terminated, truncated, info)`` with ``info["is_success"]``
  and ``info["sim_unstable"]`` (N,) bool; an env whose episode has ended is not stepped again until it is
  reset (its row repeats its last observation, reward 0, flags False), where gymnasium's vector env would
  step it on: the rollout ignores those rows;
- ``reset(seed=[...], options={"reset_mask": (N,) bool})`` resets the masked envs with their seeds and
  returns ``info["task"]`` (N,) object array of instructions with ``info["_task"]`` the mask, as the
  built-in tasks' reset info through a vector env;
- ``end(mask)`` stops stepping envs whose episode the caller ended (the online actor's step limit);
- ``num_envs``, ``single_observation_space``, ``single_action_space``, ``metadata`` (the batched env's, e.g.
  ManiSkill's ``render_fps``), ``get_attr("task")`` and ``close()``.

Episodes are those of the single env for the same seed and actions (the backends are bit-identical to it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_rl.sim.batched import BatchedEnv, check_actions


class RolloutView:
    """The DISABLED-autoreset vector-env interface over a batched env (module docstring).

    Args:
        env: a batched env whose ``tasks()`` gives each env's instruction (the ``mujoco_cpu`` backend);
            the view owns it and closes it.
    """

    def __init__(self, env: BatchedEnv) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space
        self.metadata = dict(getattr(env, "metadata", {}))
        self._ended = np.zeros(env.num_envs, dtype=bool)
        self._obs: dict[str, np.ndarray] = {}

    def reset(self, *, seed=None, options: dict[str, Any] | None = None):
        """Reset all envs, or those where ``options["reset_mask"]`` is True, with per-env seeds
        (:func:`robot_rl.sim.batched.seed_list`); returns ``(obs (N, ...), info)`` (module docstring)."""
        mask = (options or {}).get("reset_mask")
        mask = np.ones(self.num_envs, bool) if mask is None else np.asarray(mask, dtype=bool)
        obs, info = self.env.reset(seed=seed, options={"reset_mask": mask})
        self._ended[mask] = False
        self._obs = {k: v.copy() for k, v in obs.items()}
        info = dict(info)
        info["task"] = np.array(self.env.tasks(), dtype=object)
        info["_task"] = mask.copy()
        return obs, info

    def step(self, actions: np.ndarray):
        """One control step of every env not ended, without auto-reset; returns the vector env's 5-tuple.

        Raises:
            ValueError: bad shape, NaN/inf or out-of-bounds actions of an env that is stepped.
        """
        active = ~self._ended
        a = np.array(actions, dtype=np.float64)
        a[~active] = (self.single_action_space.low + self.single_action_space.high) / 2
        a = check_actions(a, self.single_action_space, (self.num_envs,))
        obs, reward, terminated, truncated, raw = self.env._step_active(a, active)
        for k in obs:
            obs[k][~active] = self._obs[k][~active]
        self._obs = {k: v.copy() for k, v in obs.items()}
        self._ended |= active & (terminated | truncated)
        reward = np.where(active, reward, 0.0).astype(np.float32)
        info = {"is_success": raw["is_success"] & active, "sim_unstable": raw["sim_unstable"] & active}
        return obs, reward, terminated & active, truncated & active, info

    def end(self, mask: np.ndarray) -> None:
        """Stop stepping the envs where ``mask`` (N,) bool is True until they are reset: episodes the
        caller ended itself (a step limit, a human label)."""
        self._ended |= np.asarray(mask, dtype=bool)

    def get_attr(self, name: str) -> list[Any]:
        """``get_attr("task")``: each env's current instruction (N strings), as a vector env's."""
        if name != "task":
            raise AttributeError(f"RolloutView.get_attr supports 'task' only, not {name!r}")
        return self.env.tasks()

    def close(self) -> None:
        self.env.close()
