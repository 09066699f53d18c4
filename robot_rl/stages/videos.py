"""MP4 rollouts for the report: a few evaluation episodes of each method, rendered offscreen."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gymnasium.wrappers import RenderCollection

from robot_rl.config import PipelineConfig
from robot_rl.data.lerobot.video import encode_video
from robot_rl.policies.factory import load_agent
from robot_rl.rollout import RecordedEpisode, Rollout
from robot_rl.run_dir import RunDir
from robot_rl.sim import make_env
from robot_rl.single_env import SingleEnvVector
from robot_rl.sources import AgentSource
from robot_rl.stages.envs import EVAL_SEED_OFFSET, action_bounds


def record_videos(cfg: PipelineConfig, run: RunDir, seed: int, methods=("bc", "offline")) -> list[Path]:
    """Render ``cfg.eval.num_videos`` evaluation episodes per method (same env seeds for each method)
    into ``run_dir/videos/<method>_ep<k>_<success|failure>.mp4``, each from the reset frame to the frame
    after its last step (:class:`~robot_rl.rollout.Rollout` on one env whose frames a
    ``RenderCollection`` keeps). Existing videos are kept."""
    if cfg.eval.num_videos <= 0:
        return []
    run.videos.mkdir(parents=True, exist_ok=True)
    existing = sorted(run.videos.glob("*.mp4"))
    if existing:
        return existing
    env = SingleEnvVector(RenderCollection(make_env(cfg.env, render_mode="rgb_array")))
    out: list[Path] = []
    seeds = [EVAL_SEED_OFFSET + k for k in range(cfg.eval.num_videos)]
    try:
        low, high = action_bounds(env.single_action_space)
        for method in methods:
            agent, header = load_agent(run.checkpoint(method, seed), cfg.device, evaluate=True, seed=seed)
            obs_keys = header.obs_keys
            p = cfg.policy
            source = AgentSource(
                agent, obs_keys, low, high, cfg.device, p.execution, p.ensemble_decay, seed=seed
            )

            def save(ep: RecordedEpisode, method: str = method) -> None:
                k = ep.env_seed - EVAL_SEED_OFFSET
                path = run.videos / f"{method}_ep{k}_{'success' if ep.success else 'failure'}.mp4"
                encode_video(path, np.stack(env.env.render()), fps=round(cfg.env.control_hz))
                out.append(path)

            Rollout(env, source).run(seeds, save)
    finally:
        env.close()
    return out
