"""Bring your own environment end to end: a user records demos for gymnasium's Reacher-v5 (through the
adapter) into the run's dataset, then `train` and `eval` run on it exactly as on the built-in task."""

from __future__ import annotations

import numpy as np
from random_source import RandomSource

from robot_rl.config import load_config
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.rollout import RecordedEpisode, rollout
from robot_rl.run_dir import RunDir
from robot_rl.stages.envs import dataset_features, make_rollout_vec_env
from robot_rl.stages.evaluate import evaluate
from robot_rl.stages.train import train


def test_train_and_eval_on_a_foreign_env_dataset(tmp_path):
    overrides = [
        f"--run_dir={tmp_path}",
        "--env.id=Reacher-v5",
        "--env.adapter={observation: {observation.state: ['']}, task: reach the target}",
        "--env.kwargs={max_episode_steps: 20}",
        "--env.num_envs=1",
        "--seeds=[0]",
        "--bc.steps=30",
        "--offline.steps=10",
        "--offline.best_of_n=2",
        "--eval.episodes_per_seed=3",
    ]
    cfg = load_config(None, overrides)
    run = RunDir(cfg.run_dir)
    vec = make_rollout_vec_env(cfg.env)
    try:
        features = dataset_features(vec.single_observation_space, vec.single_action_space)
        with LeRobotWriter(run.dataset, fps=50, features=features) as writer:

            def record(ep: RecordedEpisode) -> None:
                writer.add_episode(ep.frames, task=vec.get_attr("task")[0], source="demo")

            space = vec.single_action_space
            rollout(vec, RandomSource(space.low, space.high), list(range(4)), record)
    finally:
        vec.close()

    for algo in ("bc", "offline"):
        train(cfg, algo, seed=0)
        result = evaluate(cfg, algo, seed=0)
        assert result["summary"]["num_episodes"] == 3
        assert [e["steps"] for e in result["episodes"]] == [20, 20, 20]  # Reacher never terminates early
        assert all(np.isfinite(e["episode_return"]) and e["episode_return"] < 0 for e in result["episodes"])
