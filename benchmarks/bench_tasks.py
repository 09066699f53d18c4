"""Scripted-expert success rate of every task of the suite (issue 19), as ``robot-rl collect`` records it.

Runs the rollout loop of ``collect`` (same env seeds ``0..N-1`` for ``collect.seed=0``, same per-episode
expert seeding) with the tasks' config horizons, in one process (``SyncVectorEnv``, 1 env), without writing
a dataset; prints a markdown table of success rate, mean episode length (control steps) and wall time.

    OMP_NUM_THREADS=1 python benchmarks/bench_tasks.py --episodes 50 --noise 0 0.3
    OMP_NUM_THREADS=1 python benchmarks/bench_tasks.py -- --env.kwargs.controller=actuator  # config overrides
    OMP_NUM_THREADS=1 python benchmarks/bench_tasks.py --tasks PickCube-v1 PushCube-v1 StackCube-v1
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from robot_rl.config import load_config
from robot_rl.rollout import rollout
from robot_rl.sim.expert_source import ExpertSource
from robot_rl.stages.envs import make_rollout_vec_env

CONFIGS = {
    "robot_rl/PandaPickCube-v0": "configs/panda_pick_cube.yaml",
    "robot_rl/PandaPickColour-v0": "configs/panda_pick_colour.yaml",
    "robot_rl/PandaPlaceInBin-v0": "configs/panda_place_in_bin.yaml",
    "robot_rl/PandaStack-v0": "configs/panda_stack.yaml",
    "robot_rl/PandaPushToTarget-v0": "configs/panda_push_to_target.yaml",
    "robot_rl/PandaOpenDrawer-v0": "configs/panda_open_drawer.yaml",
    # ManiSkill3's own tasks with a scripted expert (env.backend=maniskill; the horizon is ManiSkill's)
    "PickCube-v1": "configs/maniskill_pick_cube.yaml",
    "PushCube-v1": "configs/maniskill_push_cube.yaml",
    "StackCube-v1": "configs/maniskill_stack_cube.yaml",
}
SUITE = [t for t in CONFIGS if t.startswith("robot_rl/")]


def expert_rate(
    config: str, episodes: int, noise: float, overrides: tuple[str, ...] = ()
) -> tuple[float, float, float]:
    """(success rate, mean episode length in control steps, wall time s) of ``episodes`` expert demos of
    ``config`` plus ``overrides`` (command-line style), on env seeds ``0..episodes-1``."""
    cfg = load_config(config, [f"--collect.expert_noise={noise}", "--env.num_envs=1", *overrides])
    vec = make_rollout_vec_env(cfg.env, 1)
    done = []
    start = time.time()
    try:
        source = ExpertSource(1, noise, seed=0, task_id=cfg.env.id)
        rollout(vec, source, list(range(episodes)), done.append)
    finally:
        vec.close()
    return (
        float(np.mean([e.success for e in done])),
        float(np.mean([e.steps for e in done])),
        time.time() - start,
    )


def maniskill_horizon(task: str) -> int:
    """ManiSkill's own episode horizon of ``task`` (control steps; the maniskill backend truncates there)."""
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401  (registers ManiSkill's ids)

    return gym.spec(task).max_episode_steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.3])
    p.add_argument("--tasks", nargs="+", default=SUITE, choices=list(CONFIGS), help="default: the suite")
    p.add_argument("overrides", nargs="*", help="config overrides for every task, after --")
    args = p.parse_args()
    print("| task | horizon | " + " | ".join(f"noise {n}: success (mean steps)" for n in args.noise) + " |")
    print("|---|---|" + "---|" * len(args.noise))
    for task in args.tasks:
        config, cells = CONFIGS[task], []
        for noise in args.noise:
            rate, steps, _ = expert_rate(config, args.episodes, noise, tuple(args.overrides))
            cells.append(f"{rate:.2f} ({steps:.0f})")
        cfg = load_config(config, [])
        horizon = maniskill_horizon(task) if cfg.env.backend == "maniskill" else cfg.env.max_episode_steps
        print(f"| `{task}` | {horizon} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
