"""Vectorised CPU simulation: N env copies in one process (N = 1) or N spawned worker processes.

Autoreset mode is gymnasium's ``AutoresetMode.SAME_STEP``: when sub-env ``i`` terminates or truncates, the
returned observation for ``i`` is already the first observation of its next episode; the last observation
and info of the finished episode are in ``info["final_obs"]`` / ``info["final_info"]`` (masked by
``info["_final_obs"]``). Workers use the ``spawn`` start method (EGL contexts hang under ``fork``) and
start with one BLAS/OpenMP thread each (unless the caller set ``OPENBLAS_NUM_THREADS`` etc.): the IK's
small solves gain nothing from threads, and N workers x N BLAS threads oversubscribe the cores.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from functools import partial

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from robot_rl.config import EnvConfig
from robot_rl.sim.factory import make_env
from robot_rl.sim.gl_env import select_backend
from robot_rl.sim.tasks import TASKS

_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@contextlib.contextmanager
def _single_threaded_children() -> Iterator[None]:
    """Set the BLAS thread variables to 1 (where unset) while worker processes are spawned."""
    added = [k for k in _THREAD_VARS if k not in os.environ]
    os.environ.update({k: "1" for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _wrapped(cfg: EnvConfig, wrapper: Callable[[gym.Env], gym.Env]) -> gym.Env:
    return wrapper(make_env(cfg))


def make_vector_env(
    cfg: EnvConfig,
    num_envs: int | None = None,
    autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP,
    asynchronous: bool | None = None,
    wrapper: Callable[[gym.Env], gym.Env] | None = None,
) -> gym.vector.VectorEnv:
    """``num_envs`` (default ``cfg.num_envs``) copies of ``make_env(cfg)``.

    ``autoreset_mode`` defaults to SAME_STEP (module docstring); robot_rl.rollout uses DISABLED so it can
    reset each sub-env with an exact seed. ``wrapper`` (a picklable callable, e.g. a module-level
    ``gym.Wrapper`` subclass) wraps each sub-env inside its worker.

    Returns an ``AsyncVectorEnv(context="spawn")`` (one worker process per env) when ``asynchronous``, a
    ``SyncVectorEnv`` in this process otherwise; ``None`` (default) means asynchronous for more than one
    env. Observations are batched dicts (each value (N, ...)), actions (N, 4) for the built-in task.

    Raises:
        ValueError: ``num_envs`` < 1, or > 1 with a robot (``cfg.robot``).
        RendererError: cameras are requested and no offscreen GL backend works.
    """
    n = cfg.num_envs if num_envs is None else num_envs
    if n < 1:
        raise ValueError(f"num_envs must be >= 1, got {n}")
    if cfg.robot is not None and n != 1:
        raise ValueError(f"env.num_envs={n}: a robot (env.robot) is one env; set env.num_envs=1")
    if cfg.cameras and cfg.id in TASKS:
        select_backend()  # probe once here; workers inherit MUJOCO_GL instead of each probing
    fns = [partial(make_env, cfg) if wrapper is None else partial(_wrapped, cfg, wrapper) for _ in range(n)]
    if not (n > 1 if asynchronous is None else asynchronous):
        return SyncVectorEnv(fns, autoreset_mode=autoreset_mode)
    with _single_threaded_children():
        return AsyncVectorEnv(fns, context="spawn", autoreset_mode=autoreset_mode)
