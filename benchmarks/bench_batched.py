"""Batched simulation throughput (issue 19): env steps/s of robot_rl/PandaPickCube-v0, state only, random
actions, for N = 1, 8, 64, all in one run so the ratios share the machine's load.

Rows: bare ``mj_step`` (physics steps/s of one ``MjData`` in one thread, and of N ``MjData`` in a thread
pool: the parallel ceiling this process can reach right now), shown also as env-step equivalents (/ the 50
substeps of a control step); the single env (``PandaPickCubeEnv.step``); gymnasium's vector env through
``make_vector_env`` (``SyncVectorEnv`` for N = 1, ``AsyncVectorEnv`` with one spawned worker per env
above; N above ``--async-max``, default 8, is skipped: 64 worker processes do not fit a shared 2-core
machine); and the ``mujoco_cpu`` batched backend (threads = CPU cores), with the arm's PD in numpy every
physics step (``env.kwargs.controller=numpy``, the default) and in MuJoCo's actuators (``actuator``: one
``mj_step`` call per control step). Ratios are against the single env with the numpy controller; the
``actuator`` rows also give the ratio against the single env with that controller.
``--camera 64`` renders a 64 px ``front`` camera in every env at every step (the ``mujoco_cpu`` backend
renders all envs on the calling thread with one GL context; ``AsyncVectorEnv`` renders in each worker).
Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_batched.py [--camera 64]`` (about 3-4 minutes).
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

import mujoco
import numpy as np

from robot_rl.config import EnvConfig
from robot_rl.sim import make_env, make_vector_env
from robot_rl.sim.assets import load_model
from robot_rl.sim.batched_factory import make_batched_env

SECONDS = 4.0  # timed seconds per row (--seconds)
SUBSTEPS = 50  # physics_hz / control_hz of the default EnvConfig


def timed(step, per_call: int, seconds: float) -> float:
    """Calls/s of ``step`` x ``per_call`` over at least ``seconds`` (and at least 3 calls)."""
    step()  # warm up
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds or n < 3:
        step()
        n += 1
    return n * per_call / (time.perf_counter() - start)


def bare(num: int, threads: int, seconds: float) -> float:
    """Physics steps/s summed over ``num`` MjData stepped 100 at a time in ``threads`` threads."""
    m = load_model()
    datas = [mujoco.MjData(m) for _ in range(num)]
    if threads == 1:
        return timed(lambda: [mujoco.mj_step(m, d, 100) for d in datas], 100 * num, seconds)
    with ThreadPoolExecutor(threads) as pool:
        return timed(lambda: list(pool.map(lambda d: mujoco.mj_step(m, d, 100), datas)), 100 * num, seconds)


def _cfg(controller: str, camera: int) -> EnvConfig:
    """Pick-cube with ``controller``; ``camera`` > 0 adds a ``front`` camera of that side (px)."""
    cameras = ["front"] if camera else []
    return EnvConfig(kwargs={"controller": controller}, cameras=cameras, image_size=camera or 64)


def single(controller: str, camera: int, seconds: float) -> float:
    return env_rate(make_env(_cfg(controller, camera)), seconds)


def env_rate(env, seconds: float) -> float:
    """Env steps/s of one gymnasium env (random actions, reset at each episode's end); closes it."""
    rng = np.random.default_rng(0)
    low, high = env.action_space.low, env.action_space.high
    env.reset(seed=0)

    def step():
        _, _, te, tr, _ = env.step(rng.uniform(low, high).astype(np.float32))
        if bool(te) or bool(tr):
            env.reset()

    try:
        return timed(step, 1, seconds)
    finally:
        env.close()


def vector(num: int, camera: int, seconds: float) -> float:
    venv = make_vector_env(_cfg("numpy", camera), num_envs=num)
    rng = np.random.default_rng(0)
    low, high = venv.single_action_space.low, venv.single_action_space.high
    venv.reset(seed=0)
    try:
        return timed(lambda: venv.step(rng.uniform(low, high, (num, 4)).astype(np.float32)), num, seconds)
    finally:
        venv.close()


def batched(num: int, controller: str, camera: int, seconds: float) -> float:
    return batched_rate(_cfg(controller, camera), num, "mujoco_cpu", seconds)


def batched_rate(cfg: EnvConfig, num: int, backend: str, seconds: float) -> float:
    """Env steps/s of ``num`` envs of ``cfg`` on the batched ``backend`` (random float32 actions)."""
    env = make_batched_env(cfg, num_envs=num, backend=backend)
    space = env.single_action_space
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    try:
        shape = (num, *space.shape)
        return timed(
            lambda: env.step(rng.uniform(space.low, space.high, shape).astype(np.float32)), num, seconds
        )
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--async-max", type=int, default=8)
    parser.add_argument("--camera", type=int, default=0, help="render a front camera of this side (px)")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="timed seconds per row")
    args = parser.parse_args()
    cam, sec = args.camera, args.seconds
    cores = os.cpu_count() or 1
    obs = f"one {cam} px camera" if cam else "state only"
    print(f"cpu cores: {cores}; load average at start: {os.getloadavg()[0]:.1f}; {obs}")
    b1 = bare(1, 1, sec)
    print(
        f"bare mj_step, 1 MjData, 1 thread       : {b1:9.0f} physics steps/s = "
        f"{b1 / SUBSTEPS:7.1f} env-step eq."
    )
    bt = bare(2 * cores, cores, sec)
    print(
        f"bare mj_step, {2 * cores} MjData, {cores} threads      : {bt:9.0f} physics steps/s = "
        f"{bt / SUBSTEPS:7.1f} env-step eq.  x{bt / b1:.2f} (parallel ceiling now)"
    )
    s = single("numpy", cam, sec)
    print(f"single env                             : {s:9.1f} env steps/s  x1.00")
    sa = single("actuator", cam, sec)
    print(f"single env, actuator controller        : {sa:9.1f} env steps/s  x{sa / s:.2f}")
    for n in args.sizes:
        if n <= args.async_max:
            v = vector(n, cam, sec)
            kind = "SyncVectorEnv " if n == 1 else "AsyncVectorEnv"
            print(f"gym {kind} N={n:<3}              : {v:9.1f} env steps/s  x{v / s:.2f}")
        else:
            print(f"gym AsyncVectorEnv N={n:<3}              : skipped (--async-max {args.async_max})")
        threads = min(n, cores)
        r = batched(n, "numpy", cam, sec)
        print(f"mujoco_cpu batched N={n:<3} ({threads} threads)  : {r:9.1f} env steps/s  x{r / s:.2f}")
        r = batched(n, "actuator", cam, sec)
        print(
            f"  the same, actuator controller        : {r:9.1f} env steps/s  x{r / s:.2f} "
            f"(x{r / sa:.2f} vs the single env, actuator)"
        )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
