"""Single-env speed of robot_rl/PandaPickCube-v0 (state only) against a bare ``mujoco.mj_step`` loop.

Both are reported in physics steps/s on the same model; the ratio is the cost of the controller (IK per
control step, PD + gravity compensation per physics step), action checks and observation building.
Run: ``python benchmarks/bench_sim.py [--seconds 4]`` (about 20 s).
"""

from __future__ import annotations

import argparse
import time

import mujoco
import numpy as np

from robot_rl.config import EnvConfig
from robot_rl.sim import make_env

SECONDS = 4.0  # timed seconds per row (--seconds)


def bare_mj_step(env, seconds: float) -> float:
    """Physics steps/s of ``mj_step`` alone on the env's model, arm held by constant torques."""
    m, d = env.unwrapped.model, mujoco.MjData(env.unwrapped.model)
    env.reset(seed=0)
    d.qpos[:] = env.unwrapped.data.qpos
    mujoco.mj_forward(m, d)
    d.ctrl[:7] = d.qfrc_bias[:7]
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(500):
            mujoco.mj_step(m, d)
        n += 500
    return n / (time.perf_counter() - start)


def env_steps(env, seconds: float, seed: int = 0) -> float:
    """Control steps/s with uniformly random actions, resetting on episode end."""
    rng = np.random.default_rng(seed)
    low, high = env.action_space.low, env.action_space.high
    env.reset(seed=seed)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(rng.uniform(low, high).astype(np.float32))
        n += 1
        if terminated or truncated:
            env.reset()
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=SECONDS, help="timed seconds per row")
    seconds = parser.parse_args().seconds
    cfg = EnvConfig()
    env = make_env(cfg)
    substeps = env.unwrapped.n_substeps
    bare = bare_mj_step(env, seconds)
    print(f"PandaPickCube-v0, state only, control {cfg.control_hz:g} Hz, physics {cfg.physics_hz:g} Hz")
    print(f"bare mj_step loop              : {bare:9.0f} physics steps/s")
    for every in (1, 2):
        e = make_env(EnvConfig(kwargs={"torque_every": every}))
        ctrl = env_steps(e, seconds)
        print(
            f"env (torques every {every} phys step): {ctrl:9.1f} control steps/s = {ctrl * substeps:9.0f} "
            f"physics steps/s, overhead x{bare / (ctrl * substeps):.2f} vs bare"
        )
        e.close()
    env.close()


if __name__ == "__main__":
    main()
