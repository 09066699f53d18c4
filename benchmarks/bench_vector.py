"""Vector-env throughput of robot_rl/PandaPickCube-v0 (state only, random actions) vs number of workers.

1 worker is a ``SyncVectorEnv`` in this process; 2 and 4 are ``AsyncVectorEnv(context="spawn")``. An
``AsyncVectorEnv`` with a single worker is measured too: against the in-process env it isolates the
per-step cost of gymnasium's pipes and info batching in the main process.
Same-run baseline: the machine's own parallel ceiling, measured as the summed ``mj_step`` rate of k
independent processes running a bare physics loop vs one such process (on a shared or throttled machine
this is far below k). Run: ``python benchmarks/bench_vector.py [--seconds 6] [--workers 2 4]`` (about 60 s).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import mujoco
import numpy as np

from robot_rl.config import EnvConfig
from robot_rl.sim import make_vector_env
from robot_rl.sim.assets import load_model

SECONDS = 6.0  # timed seconds per vector-env row (--seconds); half that per ceiling row


def throughput(num_envs: int, seconds: float, single_async: bool = False) -> float:
    """Env steps/s summed over all sub-envs (startup excluded); ``single_async``: one spawned worker."""
    venv = make_vector_env(EnvConfig(), num_envs=num_envs, asynchronous=True if single_async else None)
    try:
        rng = np.random.default_rng(0)
        low, high = venv.single_action_space.low, venv.single_action_space.high
        venv.reset(seed=0)
        for _ in range(5):  # warm up workers
            venv.step(rng.uniform(low, high, (num_envs, 4)).astype(np.float32))
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            venv.step(rng.uniform(low, high, (num_envs, 4)).astype(np.float32))
            n += num_envs
        return n / (time.perf_counter() - start)
    finally:
        venv.close()


def _bare_worker(seconds: float, queue) -> None:
    m = load_model()
    d = mujoco.MjData(m)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        mujoco.mj_step(m, d, 100)
        n += 100
    queue.put(n / (time.perf_counter() - start))


def parallel_ceiling(processes: int, seconds: float) -> float:
    """Summed bare ``mj_step`` physics steps/s of ``processes`` independent spawned processes."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_bare_worker, args=(seconds, queue)) for _ in range(processes)]
    for p in procs:
        p.start()
    rates = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=SECONDS, help="timed seconds per vector-env row")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4], help="spawned workers per row")
    args = parser.parse_args()
    seconds = args.seconds
    print(f"cpu cores: {os.cpu_count()}")
    one = parallel_ceiling(1, seconds / 2)
    for k in (1, *args.workers):
        rate = one if k == 1 else parallel_ceiling(k, seconds / 2)
        print(f"bare mj_step, {k} independent processes: {rate:9.0f} physics steps/s  x{rate / one:.2f}")
    base = throughput(1, seconds)
    print(f"vector env, in-process  : {base:8.1f} env steps/s  x1.00")
    rate = throughput(1, seconds, single_async=True)
    print(f"vector env, 1 worker    : {rate:8.1f} env steps/s  x{rate / base:.2f} (IPC cost alone)")
    for workers in args.workers:
        rate = throughput(workers, seconds)
        print(f"vector env, {workers} workers   : {rate:8.1f} env steps/s  x{rate / base:.2f} vs in-process")


if __name__ == "__main__":
    main()
