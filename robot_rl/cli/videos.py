"""MP4 rollouts for the report: a few evaluation episodes of each method, rendered offscreen."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.cli.envs import EVAL_SEED_OFFSET, action_bounds
from robot_rl.config import PipelineConfig
from robot_rl.data.lerobot.video import encode_video
from robot_rl.run_dir import RunDir
from robot_rl.sources import AgentSource
from robot_rl.training.loop import load_agent


def record_videos(cfg: PipelineConfig, run: RunDir, seed: int, methods=("bc", "offline")) -> list[Path]:
    """Render ``cfg.eval.num_videos`` evaluation episodes per method (same env seeds for each method)
    into ``run_dir/videos/<method>_ep<k>_<success|failure>.mp4``. Existing videos are kept."""
    from robot_rl.sim import make_env

    if cfg.eval.num_videos <= 0:
        return []
    run.videos.mkdir(parents=True, exist_ok=True)
    existing = sorted(run.videos.glob("*.mp4"))
    if existing:
        return existing
    env = make_env(cfg.env, render_mode="rgb_array")
    out = []
    try:
        low, high = action_bounds(env.action_space)
        for method in methods:
            agent, obs_keys = load_agent(run.checkpoint(method, seed), cfg.device, seed=seed)
            p = cfg.policy
            source = AgentSource(
                agent, obs_keys, low, high, cfg.device, p.execution, p.ensemble_decay, seed=seed
            )
            for k in range(cfg.eval.num_videos):
                source.reset(0, EVAL_SEED_OFFSET + k)
                frames, success = _episode(env, source, EVAL_SEED_OFFSET + k)
                path = run.videos / f"{method}_ep{k}_{'success' if success else 'failure'}.mp4"
                encode_video(path, np.stack(frames), fps=round(cfg.env.control_hz))
                out.append(path)
    finally:
        env.close()
    return out


def _episode(env, source: AgentSource, env_seed: int) -> tuple[list[np.ndarray], bool]:
    obs, info = env.reset(seed=env_seed)
    task = {keys.TASK: np.array([info["task"]], dtype=object)} if "task" in info else {}
    frames, success, done = [env.render()], False, False
    while not done:
        chunk = source({**{k: v[None] for k, v in obs.items()}, **task}, np.zeros(1, dtype=int))[0]
        for action in chunk:
            obs, _, terminated, truncated, info = env.step(action)
            frames.append(env.render())
            success = success or bool(info.get("is_success", False))
            done = terminated or truncated
            if done:
                break
    return frames, success
