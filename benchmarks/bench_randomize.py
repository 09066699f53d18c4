"""Scripted-expert success on pick-cube with and without ``env.randomize`` (issue 19): how much each group
of knobs costs a controller that was tuned on the nominal simulator (the cheap half of the sim-to-sim gap).

Runs the rollout loop of ``collect`` (env seeds ``0..N-1``, same per-episode expert seeding) with
``configs/panda_pick_cube.yaml`` plus each preset's overrides, in one process (1 env), without writing a
dataset; prints a markdown table of success rate, mean episode length (control steps) and wall time.

    OMP_NUM_THREADS=1 python benchmarks/bench_randomize.py --episodes 50 --noise 0 0.3
"""

from __future__ import annotations

import argparse

from bench_tasks import expert_rate  # the same rollout loop, one module beside this script

CONFIG = "configs/panda_pick_cube.yaml"
OBJECT = [
    "--env.randomize.object_mass_scale=[0.5,2.0]",
    "--env.randomize.object_friction_scale=[0.7,1.3]",
    "--env.randomize.object_size_scale=[0.9,1.1]",
    "--env.randomize.object_pos_jitter_m=[-0.02,0.02]",
    "--env.randomize.object_yaw_jitter_rad=[-0.5,0.5]",
]
ROBOT = [
    "--env.randomize.joint_damping_scale=[0.5,2.0]",
    "--env.randomize.armature_scale=[0.5,2.0]",
    "--env.randomize.actuator_kp_scale=[0.8,1.2]",
    "--env.randomize.actuator_kd_scale=[0.8,1.2]",
]
TIMING = [
    "--env.randomize.action_delay_steps=[0,2]",
    "--env.randomize.action_noise_std=[0.0,0.1]",
    "--env.randomize.obs_noise_std=[0.0,0.005]",
]
PRESETS = {"none": [], "object": OBJECT, "robot": ROBOT, "timing": TIMING, "all": OBJECT + ROBOT + TIMING}
"""Override lists per preset (state-only: the expert reads no images, so visual knobs are left out)."""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.3])
    p.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    args = p.parse_args()
    print(
        "| randomize | " + " | ".join(f"noise {n}: success (mean steps)" for n in args.noise) + " | wall s |"
    )
    print("|---|" + "---|" * len(args.noise) + "---|")
    for name in args.presets:
        cells, wall = [], 0.0
        for noise in args.noise:
            rate, steps, secs = expert_rate(CONFIG, args.episodes, noise, tuple(PRESETS[name]))
            cells.append(f"{rate:.2f} ({steps:.0f})")
            wall += secs
        print(f"| {name} | " + " | ".join(cells) + f" | {wall:.0f} |", flush=True)


if __name__ == "__main__":
    main()
