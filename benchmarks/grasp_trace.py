"""How a policy approaches the cube: per evaluation episode of a cube task (pick-cube, place-in-bin,
push-to-target; ``observation.environment_state[0:3]`` is the cube's centre), the lowest height the
pinch site reaches (m, world z), its horizontal offset from the cube there (m), the first step the gripper
is more than half closed, and the highest the cube got (m). Used to read why a policy fails a task
(benchmarks/README.md, "One policy for four suite tasks": CO-RFT's place-in-bin and push-to-target).

The episodes are those of ``robot-rl eval`` for the same training seed (env seeds from
``EVAL_SEED_OFFSET``, sampling seeded per episode), run one at a time on the single env::

    python benchmarks/grasp_trace.py runs/mt20p/vla/checkpoints/offline_seed0 \
        --env-id robot_rl/PandaPlaceInBin-v0 --seed 0 --episodes 10 --cameras front --image-size 32 \
        --environment-state-size 10 --max-episode-steps 100
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from robot_rl import keys
from robot_rl.config import EnvConfig
from robot_rl.policies.factory import load_agent
from robot_rl.sim import make_env
from robot_rl.sources import AgentSource
from robot_rl.stages.envs import EVAL_SEED_OFFSET

PINCH = slice(14, 17)  # observation.state: pinch-site position (m, world)
GRIPPER = 21  # observation.state: gripper closure (0 open, 1 closed)


def trace(env, source: AgentSource, obs_keys: list[str], env_seed: int, max_steps: int) -> dict:
    """One episode from ``env_seed``; returns its success and the approach figures (module docstring)."""
    obs, info = env.reset(seed=env_seed)
    source.reset(0, env_seed)
    queue: list[np.ndarray] = []
    pinch_z, offset, closure, cube_z = [], [], [], []
    success = False
    for _ in range(max_steps):
        if not queue:
            batch = {k: obs[k][None] for k in obs_keys}
            batch[keys.TASK] = np.array([info.get("task", "")], dtype=object)
            queue = list(source(batch, np.array([0]))[0])
        obs, _, terminated, truncated, step_info = env.step(queue.pop(0))
        state, cube = obs[keys.STATE], obs[keys.ENV_STATE][:3]
        pinch_z.append(state[PINCH][2])
        offset.append(np.linalg.norm(state[PINCH][:2] - cube[:2]))
        closure.append(state[GRIPPER])
        cube_z.append(cube[2])
        success = bool(step_info.get("is_success", False))
        if terminated or truncated:
            break
    low = int(np.argmin(pinch_z))
    closed = np.flatnonzero(np.asarray(closure) > 0.5)
    return {
        "success": success,
        "steps": len(pinch_z),
        "min_pinch_z_m": round(float(pinch_z[low]), 3),
        "offset_there_m": round(float(offset[low]), 3),
        "first_closed_step": int(closed[0]) if closed.size else -1,
        "max_cube_z_m": round(float(max(cube_z)), 3),
    }


def trace_parser(doc: str, episodes: int, max_episode_steps: int) -> argparse.ArgumentParser:
    """The arguments every trace script takes: a checkpoint, the task env and how it renders, episodes."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--env-id", required=True)
    p.add_argument("--episodes", type=int, default=episodes)
    p.add_argument("--cameras", nargs="*", default=[])
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--environment-state-size", type=int, default=0)
    p.add_argument("--max-episode-steps", type=int, default=max_episode_steps)
    return p


def open_trace(args: argparse.Namespace) -> tuple:
    """(agent in eval mode, its observation keys, the single env) for :func:`trace_parser`'s arguments,
    on one torch thread."""
    torch.set_num_threads(1)
    agent, header = load_agent(args.checkpoint)
    agent.eval()
    env = make_env(
        EnvConfig(
            id=args.env_id,
            cameras=args.cameras,
            image_size=args.image_size,
            environment_state_size=args.environment_state_size,
            max_episode_steps=args.max_episode_steps,
        )
    )
    return agent, list(header.config["obs_keys"]), env


def main() -> None:
    p = trace_parser(__doc__, episodes=10, max_episode_steps=60)
    p.add_argument("--seed", type=int, default=0, help="the training seed (its eval's sampling noise)")
    args = p.parse_args()
    agent, obs_keys, env = open_trace(args)
    low, high = env.action_space.low, env.action_space.high
    source = AgentSource(agent, obs_keys, low, high, num_envs=1, seed=args.seed)
    rows = [
        trace(env, source, obs_keys, EVAL_SEED_OFFSET + i, args.max_episode_steps)
        for i in range(args.episodes)
    ]
    env.close()
    for i, row in enumerate(rows):
        print(i, row)
    print(
        f"success {np.mean([r['success'] for r in rows]):.2f}, "
        f"min pinch z {np.mean([r['min_pinch_z_m'] for r in rows]):.3f} m (range "
        f"{min(r['min_pinch_z_m'] for r in rows):.3f}-{max(r['min_pinch_z_m'] for r in rows):.3f}), "
        f"offset there {np.mean([r['offset_there_m'] for r in rows]):.3f} m, "
        f"cube lifted > 5 cm {np.mean([r['max_cube_z_m'] > 0.07 for r in rows]):.2f}"
    )


if __name__ == "__main__":
    main()
