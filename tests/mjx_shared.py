"""What the ``env.backend=mjx`` tests share so each MJX program compiles once per test session: one N, one
horizon per task, and :func:`compiled`, which compiles a task's programs under a file lock beside JAX's
persistent compile cache, so two xdist workers (and the processes the tests start: the bench script, the
online actor) do not compile the same program side by side; the ones after the first load it from the
cache (seconds instead of about 90 s on a 2-core CPU)."""

from __future__ import annotations

import fcntl
from pathlib import Path

import numpy as np

from robot_rl.config import EnvConfig

N = 2
"""Envs per batch in every MJX test (the jitted programs are per N)."""
PICK = "robot_rl/PandaPickCube-v0"
STACK = "robot_rl/PandaStack-v0"
PUSH = "robot_rl/PandaPushToTarget-v0"
PLACE = "robot_rl/PandaPlaceInBin-v0"
HORIZON = {PICK: EnvConfig().max_episode_steps, STACK: 100, PUSH: 100, PLACE: 100}
"""``env.max_episode_steps`` per task (a compile-time constant of the step): pick-cube keeps the default
(60), which ``benchmarks/bench_mjx.py --env`` and the online-actor test use as well."""


def mjx_cfg(task: str, **kw) -> EnvConfig:
    """The MJX config of ``task`` every test uses (its :data:`HORIZON`, the actuator controller)."""
    return EnvConfig(
        id=task, backend="mjx", kwargs={"controller": "actuator"}, max_episode_steps=HORIZON[task], **kw
    )


def compiled(task: str) -> None:
    """Compile ``task``'s reset, step and partial-reset programs at N = :data:`N` into JAX's persistent
    cache, under an exclusive lock on a file named after the task in the cache folder: the first taker
    compiles, the others wait and then load them from the cache (or find them in their process's own)."""
    from robot_rl.sim.batched_factory import make_batched_env
    from robot_rl.sim.mjx_physics import configure_xla

    configure_xla()
    import jax

    folder = Path(jax.config.jax_compilation_cache_dir)
    folder.mkdir(parents=True, exist_ok=True)
    name = task.replace("/", "_") + f"_n{N}_h{HORIZON[task]}"
    with open(folder / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            env = make_batched_env(mjx_cfg(task), N)
            env.reset(seed=0)
            env.step(np.zeros((N, *env.single_action_space.shape), np.float32))
            env.reset(options={"reset_mask": np.arange(N) == 0})
            env.close()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
