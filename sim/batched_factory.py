"""Build the batched env an ``EnvConfig`` describes on the backend ``env.backend`` names
(:mod:`robot_rl.sim.batched`)."""

from __future__ import annotations

from typing import Any, get_args

from robot_rl.config import Backend, EnvConfig
from robot_rl.sim.batched import BatchedEnv
from robot_rl.sim.batched_gym import GymVectorBatchedEnv
from robot_rl.sim.batched_maniskill import ManiSkillBatchedEnv
from robot_rl.sim.batched_mjx import MjxBatchedEnv
from robot_rl.sim.batched_mujoco import MujocoCpuBatchedEnv

BACKENDS: tuple[str, ...] = get_args(Backend)


def make_batched_env(
    cfg: EnvConfig, num_envs: int | None = None, backend: str | None = None, **kwargs: Any
) -> BatchedEnv:
    """Build the batched env ``cfg`` describes on ``backend`` (default ``cfg.backend``).

    Args:
        cfg: the env config (``id``, rates, cameras, ``kwargs`` as for :func:`robot_rl.sim.make_env`).
        num_envs: N (default ``cfg.num_envs``).
        backend: ``gym_vector``, ``mujoco_cpu``, ``maniskill`` (ManiSkill3's own tasks, e.g.
            ``PickCube-v1``) or ``mjx`` (built-in tasks in MJX on JAX's device,
            :mod:`robot_rl.sim.batched_mjx`).
        kwargs: backend options: ``asynchronous`` (gym_vector), ``num_threads`` (mujoco_cpu).

    Raises:
        ValueError: unknown backend, ``num_envs`` < 1, ``mujoco_cpu`` with a foreign id or a robot,
            ``maniskill`` with a built-in id, ``mjx`` with a task or setting it does not run, or invalid env
            settings.
        ImportError: the backend's packages are missing (names the pip install).
        RuntimeError: ``maniskill`` found no Vulkan driver.
    """
    name = cfg.backend if backend is None else backend
    n = cfg.num_envs if num_envs is None else num_envs
    if name not in BACKENDS:
        raise ValueError(f"env.backend={name!r}: must be one of {', '.join(BACKENDS)}")
    if n < 1:
        raise ValueError(f"num_envs must be >= 1, got {n}")
    if name == "gym_vector":
        return GymVectorBatchedEnv(cfg, n, **kwargs)
    if name == "maniskill":
        return ManiSkillBatchedEnv(cfg, n, **kwargs)
    if name == "mjx":
        return MjxBatchedEnv(cfg, n, **kwargs)
    return MujocoCpuBatchedEnv(cfg, n, **kwargs)
