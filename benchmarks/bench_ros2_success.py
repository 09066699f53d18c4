"""Pick success of one checkpoint over ROS 2 DDS vs in process, on the same env seeds (issue 17).

DDS: ``sim_robot_node`` (the MuJoCo Panda scene as a ROS 2 arm, in real time) and ``policy_node`` (the
checkpoint driving it through the robot bridge, ``RobotEnv`` and the safety layer) run as two processes
over cyclonedds on loopback at ``--control-hz``; ``policy_node`` reports each episode (seed, success,
steps) on its stdout. In process: the same checkpoint, the same rollout loop and chunk source
(``robot_rl.source_build.policy_source`` seeded with the first env seed, as ``policy_node`` seeds it) on the
built-in env. Both sides place the cube from the episode's env seed, so the episodes pair up by seed and
the difference is tested with the exact McNemar test (``robot_rl.eval.metrics``).

    OMP_NUM_THREADS=1 python benchmarks/bench_ros2_success.py --config configs/panda_pick_cube.yaml \
        --checkpoint runs/panda_pick_cube/checkpoints/bc_seed0 --episodes 50

Prints one row per path (success rate, Wilson 95% interval, mean steps) and the paired comparison, and writes
``--out`` (JSON) with every episode. The DDS side runs in wall-clock time: about 3-10 s per episode at 10 Hz.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from robot_rl.config import load_config
from robot_rl.eval.metrics import EpisodeResult, paired_comparison, wilson_interval
from robot_rl.rollout import rollout
from robot_rl.source_build import policy_source
from robot_rl.stages.envs import EVAL_SEED_OFFSET, make_rollout_vec_env

ROBOT_RL = [sys.executable, "-m", "robot_rl.cli.main"]


def in_process(config: str, checkpoint: str, seeds: list[int]) -> list[EpisodeResult]:
    """The checkpoint on the built-in env, one episode per seed, the policy seeded with ``seeds[0]``."""
    cfg = load_config(config, [])
    vec = make_rollout_vec_env(cfg.env)
    out: list[EpisodeResult] = []
    space = (vec.single_observation_space, vec.single_action_space)
    source, _ = policy_source(cfg, Path(checkpoint), seeds[0], space, vec.num_envs)
    try:
        rollout(
            vec,
            source,
            seeds,
            lambda ep: out.append(
                EpisodeResult(ep.env_seed, bool(ep.success), ep.episode_return, ep.steps, None)
            ),
        )
    finally:
        source.close()
        vec.close()
    return sorted(out, key=lambda e: e.env_seed)


def over_dds(
    config: str, checkpoint: str, seeds: list[int], control_hz: float, log: Path, sim_params: list[str]
) -> list[EpisodeResult]:
    """The checkpoint in ``policy_node`` driving ``sim_robot_node`` (extra ``name:=value`` parameters
    ``sim_params``), two processes over cyclonedds."""
    domain = random.Random(os.getpid()).randint(1, 101)  # <= 101: see bench_ros2.py
    flags = ["--ros-transport", "cyclonedds", f"--domain-id={domain}", "--dds-loopback"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with open(log, "wb") as sim_log:
        sim = subprocess.Popen(
            [*ROBOT_RL, "ros2", "sim_robot_node", *flags, f"control_hz:={control_hz}", *sim_params],
            stdout=sim_log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        policy = subprocess.Popen(
            [
                *ROBOT_RL,
                "ros2",
                "policy_node",
                *flags,
                f"config:={config}",
                f"checkpoint:={checkpoint}",
                f"episodes:={len(seeds)}",
                f"seed:={seeds[0]}",
            ],
            stdout=subprocess.PIPE,
            stderr=sim_log,
            env=env,
            start_new_session=True,
        )
        out: list[EpisodeResult] = []
        try:
            for line in policy.stdout:
                text = line.decode(errors="replace").strip()
                if text.startswith("episode "):
                    ep = json.loads(text[len("episode ") :])
                    out.append(
                        EpisodeResult(ep["seed"], ep["success"], float(ep["success"]), ep["steps"], None)
                    )
                    print(f"  dds episode {len(out)}/{len(seeds)}: {ep}", flush=True)
            if policy.wait() != 0:
                raise RuntimeError(f"policy_node exited with {policy.returncode}; see {log}")
        finally:
            for proc in (policy, sim):
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(10)
    return sorted(out, key=lambda e: e.env_seed)


def _row(name: str, eps: list[EpisodeResult], wall: float) -> str:
    k, n = sum(e.success for e in eps), len(eps)
    lo, hi = wilson_interval(k, n)
    steps = sum(e.steps for e in eps) / max(n, 1)
    return f"| {name} | {k / max(n, 1):.2f} | [{lo:.2f}, {hi:.2f}] | {steps:.1f} | {n} | {wall:.0f} |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/panda_pick_cube.yaml")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--first-seed", type=int, default=EVAL_SEED_OFFSET, help="default: eval's held-out seeds")
    p.add_argument("--control-hz", type=float, default=10.0)
    p.add_argument("--out", default="ros2_success.json")
    p.add_argument("--sim-param", action="append", default=[], help="sim_robot_node name:=value (repeatable)")
    p.add_argument("--skip-in-process", action="store_true", help="DDS side only (no paired comparison)")
    args = p.parse_args()
    seeds = [args.first_seed + i for i in range(args.episodes)]
    checkpoint = str(Path(args.checkpoint).resolve())
    start = time.time()
    local = [] if args.skip_in_process else in_process(args.config, checkpoint, seeds)
    local_wall, start = time.time() - start, time.time()
    log = Path(args.out).with_suffix(".log")
    dds = over_dds(args.config, checkpoint, seeds, args.control_hz, log, args.sim_param)
    dds_wall = time.time() - start
    pair = paired_comparison(local, dds) if local else {}
    print("| path | success | 95% CI | mean steps | episodes | wall (s) |\n|---|---|---|---|---|---|")
    if local:
        print(_row("in process", local, local_wall))
    print(_row(f"DDS (cyclonedds, {args.control_hz:g} Hz)", dds, dds_wall))
    if pair:
        print(
            f"paired: only in process {pair['only_a']}, only DDS {pair['only_b']}, "
            f"McNemar p = {pair['p_value']:.3f}"
        )
    Path(args.out).write_text(
        json.dumps(
            {
                "in_process": [e.__dict__ for e in local],
                "dds": [e.__dict__ for e in dds],
                "paired": pair,
                "control_hz": args.control_hz,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
