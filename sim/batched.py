"""Batched env API: N envs of one task stepped as one, with per-env auto-reset, seeds and chunked stepping.

Arrays (numpy, on the CPU; every backend here is a CPU backend):

- observations: a dict with the single env's LeRobot keys (``observation.state`` (N, 22) float32,
  ``observation.environment_state`` (N, E) float32 (E = 7 for pick-cube; the task's size),
  ``observation.images.<cam>`` (N, H, W, 3) uint8);
- actions: float (N, d) for :meth:`BatchedEnv.step`, (N, h, d) for :meth:`BatchedEnv.step_chunk`, in the
  single env's action units and bounds (checked for every env before anything is stepped; nothing is
  clipped);
- ``step`` returns ``(obs, reward (N,) float32, terminated (N,) bool, truncated (N,) bool, info)``.

Auto-reset (gymnasium's "same step" mode): when env ``i`` terminates or truncates, it is reset at once
and ``obs[i]`` is already the first observation of its next episode. The last observation of the finished
episode is ``info["final_observation"][key][i]``, valid where ``info["_final"][i]`` is True (rows where it is
False hold the step's observation and mean nothing). ``reward``, ``terminated``, ``truncated``,
``info["is_success"]`` and ``info["sim_unstable"]`` (both (N,) bool) describe the step just taken, i.e.
the finished episode's last step. The next episode of env ``i`` draws its initial state from env ``i``'s
own random stream, so ``reset(seed=[s_0, ..., s_{N-1}])`` makes every later episode of env ``i``
reproducible from ``s_i`` alone, whatever the other envs do.

Chunked stepping (:meth:`BatchedEnv.step_chunk`) executes an (N, h, d) chunk; env ``i`` stops at its
episode's end (the rest of its chunk is not executed) and is reset after the chunk (:class:`ChunkResult`).

Backends (:func:`robot_rl.sim.batched_factory.make_batched_env`, ``env.backend``): ``gym_vector``
(gymnasium's vector env: one worker process per env, any gymnasium id), ``mujoco_cpu`` (the built-in
Panda tasks only: N MuJoCo simulations in this process, stepped in a thread pool; see
:mod:`robot_rl.sim.batched_mujoco`) and ``maniskill`` (ManiSkill3's own tasks on SAPIEN's PhysX CPU
backend, cameras rendered by SAPIEN; see :mod:`robot_rl.sim.batched_maniskill`).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces


@dataclass
class ChunkResult:
    """What :meth:`BatchedEnv.step_chunk` returns for an (N, h, d) chunk.

    Attributes:
        obs: dict of (N, ...) arrays: the observation after the chunk; for an env whose episode ended in
            the chunk, the first observation of its next episode.
        reward: float32 (N, h) per-step rewards; 0 where ``valid`` is False.
        terminated, truncated, is_success, sim_unstable: bool (N, h) per step; False where not ``valid``.
        valid: bool (N, h): step t of env i was executed (a prefix of each row).
        final_observation: dict of (N, ...) arrays: the last observation of the episode that ended in the
            chunk, meaningful where ``final`` is True.
        final: bool (N,): env i's episode ended (terminated or truncated) within the chunk.
    """

    obs: dict[str, np.ndarray]
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    is_success: np.ndarray
    sim_unstable: np.ndarray
    valid: np.ndarray
    final_observation: dict[str, np.ndarray]
    final: np.ndarray

    @property
    def steps(self) -> np.ndarray:
        """int (N,): control steps executed per env."""
        return self.valid.sum(axis=1)


def seed_list(seed: int | list[int | None] | None, num_envs: int) -> list[int | None]:
    """Per-env seeds: an int ``s`` gives ``s, s+1, ..., s+N-1`` (gymnasium's convention), a list is used
    as is (``None`` entries continue that env's stream), ``None`` gives ``[None] * N``.

    Raises:
        ValueError: a list whose length is not ``num_envs``.
    """
    if seed is None:
        return [None] * num_envs
    if isinstance(seed, int | np.integer):
        return [int(seed) + i for i in range(num_envs)]
    seeds = list(seed)
    if len(seeds) != num_envs:
        raise ValueError(f"reset(seed=...) needs {num_envs} seeds (one per env), got {len(seeds)}")
    return [None if s is None else int(s) for s in seeds]


def check_actions(actions: Any, space: spaces.Box, leading: tuple[int, ...]) -> np.ndarray:
    """Validate batched actions against the single env's Box ``space``; return them as float64.

    ``leading`` is (N,) for :meth:`BatchedEnv.step` or (N, h) for :meth:`BatchedEnv.step_chunk`; the
    array must have shape ``leading + space.shape``. Bounds are checked with the single env's 1e-6
    tolerance (:func:`robot_rl.sim.panda_pick_cube.check_action`).

    Raises:
        ValueError: wrong shape, NaN/inf, or an entry outside the bounds (names env, step and entry).
    """
    a = np.asarray(actions, dtype=np.float64)
    want = tuple(leading) + tuple(space.shape)
    if a.shape != want:
        raise ValueError(
            f"actions must have shape {want} (envs{', steps' * (len(leading) - 1)}, dims), got {a.shape}"
        )
    bad = ~np.isfinite(a)
    if bad.any():
        idx = [int(x) for x in np.argwhere(bad)[0]]
        raise ValueError(f"actions{idx[:-1]} contains NaN or inf: {a[tuple(idx[:-1])].tolist()}")
    out = (a < space.low - 1e-6) | (a > space.high + 1e-6)
    if out.any():
        idx = tuple(int(x) for x in np.argwhere(out)[0])
        j = idx[-1]
        raise ValueError(
            f"actions{list(idx[:-1])}[{j}] = {a[idx]:.6g} is outside its bounds "
            f"[{space.low[j]:.6g}, {space.high[j]:.6g}]"
        )
    return a


class BatchedEnv(abc.ABC):
    """N envs of one task stepped as one; see the module docstring for shapes and auto-reset.

    Subclasses implement :meth:`reset`, :meth:`_step_active` and :meth:`_reset_envs`; the auto-reset,
    action checks and chunking live here so every backend has the same semantics.

    Attributes:
        num_envs: N.
        single_observation_space: ``gymnasium.spaces.Dict`` of one env.
        single_action_space: ``gymnasium.spaces.Box`` of one env (d,).
        task: the language instruction.
    """

    num_envs: int
    single_observation_space: spaces.Dict
    single_action_space: spaces.Box
    task: str

    @abc.abstractmethod
    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset envs (all, or those where ``options["reset_mask"]`` (N,) bool is True) with per-env seeds
        (:func:`seed_list`); returns ``(obs, info)`` with ``info["is_success"]`` (N,) False. Rows of envs
        not reset hold their current observation."""

    @abc.abstractmethod
    def _step_active(
        self, actions: np.ndarray, active: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Step the envs where ``active`` (N,) bool, without auto-reset. Returns obs (N, ...), reward,
        terminated, truncated (N,) and info with ``is_success``, ``sim_unstable`` (N,); rows of inactive
        envs are meaningless (a backend may step them with an idle action)."""

    @abc.abstractmethod
    def _reset_envs(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        """Reset the envs where ``mask`` (N,) bool, each from its own random stream; returns obs (N, ...)
        whose masked rows are the new first observations."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release workers, threads and renderers."""

    def __enter__(self) -> BatchedEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def step(self, actions: np.ndarray):
        """One control step of every env, with auto-reset; see the module docstring.

        Args:
            actions: (N, d) in the single env's action units.

        Raises:
            ValueError: bad shape, NaN/inf or out-of-bounds actions (nothing is stepped).
        """
        a = check_actions(actions, self.single_action_space, (self.num_envs,))
        active = np.ones(self.num_envs, dtype=bool)
        obs, reward, terminated, truncated, raw = self._step_active(a, active)
        done = terminated | truncated
        final_obs = {k: v.copy() for k, v in obs.items()}
        if done.any():
            fresh = self._reset_envs(done)
            for k in obs:
                obs[k][done] = fresh[k][done]
        info = {
            "is_success": raw["is_success"],
            "sim_unstable": raw["sim_unstable"],
            "final_observation": final_obs,
            "_final": done,
        }
        return obs, reward.astype(np.float32), terminated, truncated, info

    def step_chunk(self, actions: np.ndarray) -> ChunkResult:
        """Execute an (N, h, d) action chunk; env i stops at its episode's end and is reset after the chunk.

        Raises:
            ValueError: bad shape (must be 3-D with N rows and the action size), NaN/inf or out-of-bounds
                actions anywhere in the chunk (nothing is stepped).
        """
        a = np.asarray(actions)
        if a.ndim != 3 or a.shape[0] != self.num_envs:
            raise ValueError(f"chunk must have shape ({self.num_envs}, h, d), got {a.shape}")
        n, h = a.shape[:2]
        a = check_actions(a, self.single_action_space, (n, h))
        reward = np.zeros((n, h), dtype=np.float32)
        flags = {
            k: np.zeros((n, h), dtype=bool) for k in ("terminated", "truncated", "is_success", "sim_unstable")
        }
        valid = np.zeros((n, h), dtype=bool)
        active = np.ones(n, dtype=bool)
        final = np.zeros(n, dtype=bool)
        obs: dict[str, np.ndarray] = {}
        final_obs: dict[str, np.ndarray] = {}
        for t in range(h):
            step_obs, r, te, tr, raw = self._step_active(a[:, t], active)
            if not obs:
                obs = {k: v.copy() for k, v in step_obs.items()}
                final_obs = {k: v.copy() for k, v in step_obs.items()}
            for k, v in step_obs.items():
                obs[k][active] = v[active]
            valid[:, t] = active
            reward[active, t] = r[active]
            for name, value in (("terminated", te), ("truncated", tr)):
                flags[name][active, t] = value[active]
            for name in ("is_success", "sim_unstable"):
                flags[name][active, t] = raw[name][active]
            done = active & (te | tr)
            for k, v in step_obs.items():
                final_obs[k][done] = v[done]
            final |= done
            active &= ~done
            if not active.any():
                break
        if final.any():
            fresh = self._reset_envs(final)
            for k in obs:
                obs[k][final] = fresh[k][final]
        return ChunkResult(obs, reward, valid=valid, final_observation=final_obs, final=final, **flags)
