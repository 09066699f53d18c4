"""The ``collect`` stage: scripted demonstrations into the run's LeRobot v3.0 dataset, or the entry of a
given dataset (``data.path``) in its place."""

from __future__ import annotations

import time

import numpy as np

from robot_rl import keys
from robot_rl.config import ConfigError, PipelineConfig
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.progress import progress
from robot_rl.rollout import RecordedEpisode, rollout
from robot_rl.run_dir import RunDir
from robot_rl.sim import TASKS, resolve_control_hz, robot_type
from robot_rl.sim.expert_source import ExpertSource
from robot_rl.sim.tasks import MANISKILL_EXPERTS, has_expert
from robot_rl.stages.envs import DEMO_SEED_STRIDE, dataset_features, make_rollout_vec_env


def collect(cfg: PipelineConfig) -> dict:
    """Record ``cfg.collect.num_episodes`` scripted demos as a LeRobot v3.0 dataset in ``run_dir/dataset``.

    Episodes already written by a killed run are kept; collection continues with the remaining seeds.

    Raises:
        ConfigError: ``cfg.env.id`` has no scripted expert (the built-in tasks and the ManiSkill tasks
            of ``robot_rl.sim.tasks.MANISKILL_EXPERTS`` have one), or
            ``env.robot.action`` is not ``ee_delta`` (the expert's actions).
        OSError: the run dir is not writable (checked first) or the disk fills up (names the path).
    """
    run = RunDir(cfg.run_dir)
    if run.is_done("collect"):
        return run.result("collect")
    if not has_expert(cfg.env.id):
        raise ConfigError(
            f"env.id={cfg.env.id!r}: collect has scripted experts only for {', '.join(TASKS)} and "
            f"ManiSkill's {', '.join(MANISKILL_EXPERTS)} (env.backend=maniskill). Record "
            f"your own demos as a LeRobot v3.0 dataset in {run.dataset} (robot_rl.data.LeRobotWriter), then "
            "run train"
        )
    if cfg.env.robot is not None and cfg.env.robot.action != "ee_delta":
        raise ConfigError(
            f"env.robot.action={cfg.env.robot.action}: collect's scripted expert sends end-effector deltas "
            "(env.robot.action=ee_delta); record joint-target demos with robot-rl record --teleop leader"
        )
    run.check_writable()
    start = time.time()
    vec = make_rollout_vec_env(cfg.env)
    try:
        hz = resolve_control_hz(cfg, vec).env.control_hz  # a ManiSkill task's own rate
        features = dataset_features(vec.single_observation_space, vec.single_action_space)
        writer = LeRobotWriter(run.dataset, fps=round(hz), features=features, robot_type=robot_type(cfg.env))
        task = vec.get_attr("task")[0]
        done = writer.num_episodes
        base = cfg.collect.seed * DEMO_SEED_STRIDE
        seeds = list(range(base + done, base + cfg.collect.num_episodes))
        successes = []

        def on_episode(ep: RecordedEpisode) -> None:
            writer.add_episode(ep.frames, task=ep.task or task, source="demo")
            successes.append(ep.success)

        source = ExpertSource(
            vec.num_envs, cfg.collect.expert_noise, seed=cfg.collect.seed, task_id=cfg.env.id
        )
        with progress(total=len(seeds), desc="collect demos", unit="ep") as bar:
            rollout(vec, source, seeds, on_episode, progress=bar.update)
        writer.close()
    finally:
        vec.close()
    result = {
        "num_episodes": cfg.collect.num_episodes,
        "expert_noise": cfg.collect.expert_noise,
        "demo_success_rate": dataset_success_rate(run.dataset),
        "wall_time_s": time.time() - start,
    }
    run.mark_done("collect", result)
    return result


def dataset_success_rate(root) -> float | None:
    """Fraction of the dataset's episodes with a ``next.success`` frame; None without that column."""
    table = LeRobotDataset(root).load_tabular()
    if keys.SUCCESS not in table:
        return None
    success = np.asarray(table[keys.SUCCESS]).reshape(-1).astype(bool)
    episodes = np.asarray(table[keys.EPISODE_INDEX]).reshape(-1)
    return float(np.mean([success[episodes == e].any() for e in np.unique(episodes)]))


def given_dataset(cfg: PipelineConfig) -> dict:
    """The pipeline's dataset entry when ``data.path`` names the training data: nothing is collected."""
    dataset = LeRobotDataset(cfg.data.path)
    return {
        "path": cfg.data.path,
        "num_episodes": dataset.num_episodes,
        "fps": dataset.fps,
        "demo_success_rate": dataset_success_rate(cfg.data.path),
        "wall_time_s": 0.0,
    }
