"""ManiSkill3 through the batched API (issue 19, ``env.backend=maniskill``): env steps/s of PickCube-v1, state
only, random actions, on SAPIEN's PhysX CPU backend with Mesa lavapipe as the Vulkan driver, all rows in
one run so the ratios share the machine's load.

Rows: a plain ManiSkill env (its own ``gym.make(num_envs=1)``, ``env.step``: the baseline); the ``maniskill``
batched backend at N = 1 and 8 (ratio: its overhead over the plain env); and, for scale, the built-in
``robot_rl/PandaPickCube-v0`` single env and ``mujoco_cpu`` at N = 8 (2 threads, actuator controller).
``--camera 64``: every row renders one 64 px camera at every step (ManiSkill's ``base_camera`` through SAPIEN
on lavapipe, ``obs_mode="state_dict+rgb"``; the built-in task's ``front`` camera through MuJoCo's EGL).
Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_maniskill.py [--camera 64]`` (about 1 minute).
"""

from __future__ import annotations

import argparse

from bench_batched import batched_rate, env_rate

from robot_rl.config import EnvConfig
from robot_rl.sim import make_env
from robot_rl.sim.batched_maniskill import DEFAULTS, use_venv_vulkan

SECONDS = 5.0  # timed seconds per row (--seconds)


def plain_maniskill(camera: int):
    """ManiSkill's own PickCube-v1 env (its gym.make, num_envs=1) with the backend's settings; ``camera`` >
    0 renders its ``base_camera`` at that side (px)."""
    use_venv_vulkan()
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401

    if not camera:
        return gym.make("PickCube-v1", num_envs=1, obs_mode="state_dict", **DEFAULTS)
    size = {"width": camera, "height": camera}
    return gym.make("PickCube-v1", num_envs=1, obs_mode="state_dict+rgb", sensor_configs=size, **DEFAULTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--camera", type=int, default=0, help="render one camera of this side (px)")
    parser.add_argument("--seconds", type=float, default=SECONDS, help="timed seconds per row")
    args = parser.parse_args()
    cam, sec = args.camera, args.seconds
    print(f"one {cam} px camera per env" if cam else "state only")
    base = env_rate(plain_maniskill(cam), sec)
    rows = [("plain ManiSkill env, PickCube-v1 (baseline)", base)]
    size = {"cameras": ["base_camera"], "image_size": cam} if cam else {}
    cfg = EnvConfig(id="PickCube-v1", **size)
    for n in (1, 8):
        rows.append((f"maniskill backend, N = {n}", batched_rate(cfg, n, "maniskill", sec)))
    size = {"cameras": ["front"], "image_size": cam} if cam else {}
    ours = EnvConfig(kwargs={"controller": "actuator"}, **size)
    rows.append(("built-in pick-cube single env (actuator)", env_rate(make_env(ours), sec)))
    rows.append(("mujoco_cpu, N = 8, 2 threads (actuator)", batched_rate(ours, 8, "mujoco_cpu", sec)))
    print(f"{'row':<46} {'env steps/s':>12} {'x plain ManiSkill':>18}")
    for name, rate in rows:
        print(f"{name:<46} {rate:>12.0f} {rate / base:>18.2f}")


if __name__ == "__main__":
    main()
