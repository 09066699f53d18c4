"""collect, eval and robot_rl.rollout honour ``env.backend``: on ``mujoco_cpu`` (the in-process batched env
behind robot_rl.sim.batched_rollout.RolloutView) they give the same episodes, in the same order, as on the
default ``gym_vector`` (gymnasium's vector env), frames, images, instructions and success included."""

from __future__ import annotations

import json
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from robot_rl import keys
from robot_rl.config import ConfigError, EnvConfig, PipelineConfig, RobotConfig
from robot_rl.rollout import RecordedEpisode, rollout
from robot_rl.sim import make_vector_env
from robot_rl.sim.expert_source import ExpertSource
from robot_rl.sim.render import RendererError, select_backend
from robot_rl.stages.collect import collect
from robot_rl.stages.envs import make_rollout_vec_env
from robot_rl.stages.evaluate import evaluate
from robot_rl.stages.train import train

COLOUR = "robot_rl/PandaPickColour-v0"


def _episodes(cfg: EnvConfig, seeds: list[int]) -> list[RecordedEpisode]:
    """gym_vector: one env in this process (the worker processes' episodes, without spawning any)."""
    if cfg.backend == "gym_vector":
        vec = make_vector_env(cfg, 1, autoreset_mode=AutoresetMode.DISABLED)
    else:
        vec = make_rollout_vec_env(cfg)
        assert not isinstance(vec, gym.vector.VectorEnv)
    episodes: list[RecordedEpisode] = []
    try:
        rollout(vec, ExpertSource(vec.num_envs, 0.3, seed=3, task_id=cfg.id), seeds, episodes.append)
    finally:
        vec.close()
    return episodes


def test_rollout_on_mujoco_cpu_gives_the_gym_vector_episodes_with_images():
    """Seeds of different lengths (success ends some early), one more seed than envs (an env idles at the
    end), a camera, per-episode instructions: every frame is bit-identical across backends (mujoco_cpu
    with 2 envs, gym_vector with 1: an episode depends on its seed only)."""
    try:
        select_backend()
    except RendererError as err:
        pytest.skip(f"no offscreen GL backend on this machine: {err}")
    cfg = EnvConfig(id=COLOUR, num_envs=2, max_episode_steps=25, cameras=["front"], image_size=32)
    seeds = [5, 6, 7]
    ref = _episodes(cfg, seeds)
    got = _episodes(replace(cfg, backend="mujoco_cpu"), seeds)
    assert sorted(e.env_seed for e in got) == seeds
    assert len({e.task for e in ref}) > 1
    for a, b in zip(ref, sorted(got, key=lambda e: e.env_seed), strict=True):
        assert (a.task, a.success, a.steps, a.success_step) == (b.task, b.success, b.steps, b.success_step)
        assert a.episode_return == b.episode_return
        assert set(a.frames) == set(b.frames) and keys.image_key("front") in a.frames
        for k, v in a.frames.items():
            np.testing.assert_array_equal(v, b.frames[k], err_msg=k)


def _run(tmp_path, name: str, backend: str) -> PipelineConfig:
    """One env each (gym_vector then runs in this process, no workers to spawn)."""
    cfg = PipelineConfig(run_dir=str(tmp_path / name))
    cfg.env = EnvConfig(id=COLOUR, num_envs=1, max_episode_steps=30, backend=backend)
    cfg.collect.num_episodes, cfg.collect.expert_noise = 4, 0.3
    cfg.bc.steps, cfg.bc.batch_size = 30, 16
    cfg.policy.hidden_dims = [32, 32]
    cfg.eval.episodes_per_seed = 3
    return cfg


def test_collect_and_eval_on_mujoco_cpu_match_gym_vector(tmp_path):
    """The dataset collect writes and eval's per-episode results (eval on mujoco_cpu with 2 envs: results
    depend on the env seeds only) are the same on both backends."""
    ref, new = _run(tmp_path, "gym", "gym_vector"), _run(tmp_path, "mj", "mujoco_cpu")
    for cfg in (ref, new):
        collect(cfg)
    ref_data, new_data = tmp_path / "gym" / "dataset", tmp_path / "mj" / "dataset"
    for path in sorted(ref_data.rglob("*.parquet")) + sorted(ref_data.rglob("tasks*")):
        rel = path.relative_to(ref_data)
        assert path.read_bytes() == (new_data / rel).read_bytes(), rel
    train(ref, "bc", 0)
    # Evaluate the same checkpoint on both backends.
    new_ckpt = tmp_path / "mj" / "checkpoints"
    new_ckpt.parent.mkdir(exist_ok=True)
    (tmp_path / "gym" / "checkpoints").rename(new_ckpt)
    new_out = evaluate(replace(new, env=replace(new.env, num_envs=2)), "bc", 0)
    new_ckpt.rename(tmp_path / "gym" / "checkpoints")
    ref_out = evaluate(ref, "bc", 0)
    assert [e["env_seed"] for e in new_out["episodes"]] == [1_000_000, 1_000_001, 1_000_002]
    assert json.dumps(new_out["episodes"]) == json.dumps(ref_out["episodes"])
    assert new_out["summary"] == ref_out["summary"]


def test_mujoco_cpu_rollout_refuses_a_robot_as_a_config_error():
    with pytest.raises(
        ConfigError, match=r"env.backend=mujoco_cpu runs the built-in simulated tasks.*gym_vector"
    ):
        make_rollout_vec_env(EnvConfig(backend="mujoco_cpu", robot=RobotConfig(driver="sim")))
