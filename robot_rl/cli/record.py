"""``robot-rl record``: teleoperated demonstrations on the robot of ``env.robot`` (or the simulator) into
the run's LeRobot v3.0 dataset (robot_rl.recording); a rerun resumes it."""

from __future__ import annotations

import argparse
from pathlib import Path

from robot_rl.config import ConfigError, PipelineConfig
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.recording import TELEOPS, make_teleop, record
from robot_rl.run_dir import RunDir
from robot_rl.sim import make_env, robot_type
from robot_rl.stages.envs import action_bounds, dataset_features
from robot_rl.threads import set_threads


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``record`` subcommand's own flags (the rest are config overrides)."""
    p.add_argument("--teleop", choices=TELEOPS, required=True, help="the device the operator drives with")
    p.add_argument(
        "--num_episodes", type=int, default=10, help="record until the dataset holds this many episodes"
    )
    p.add_argument("--dataset", default=None, help="dataset folder (default: <run_dir>/dataset)")


def run(args: argparse.Namespace, cfg: PipelineConfig, overrides: list[str]) -> None:
    """``robot-rl record``: :func:`record_demos`, then print its summary."""
    set_threads(cfg.threads, 1)
    print(record_demos(args, cfg))


def record_demos(args: argparse.Namespace, cfg: PipelineConfig) -> dict:
    """Build the env, the teleop device and the writer, then record (robot_rl.recording.record).

    Raises:
        ConfigError: ``--num_episodes`` < 1.
        OSError: the dataset folder is not writable (checked first; names the path).
        HardwareError, DeviceError: the robot or the device failed (finished episodes are kept).
    """
    if args.num_episodes < 1:
        raise ConfigError(f"--num_episodes={args.num_episodes}: must be >= 1")
    run = RunDir(cfg.run_dir)
    root = Path(args.dataset) if args.dataset else run.dataset
    run.check_writable()
    env = make_env(cfg.env)
    device = None
    try:
        low, high = action_bounds(env.action_space)
        follower = getattr(env.unwrapped, "robot", None)
        device = make_teleop(args.teleop, cfg, low, high, getattr(follower, "limits", None))
        names = getattr(env.unwrapped, "feature_names", None)
        features = dataset_features(env.observation_space, env.action_space, names)
        writer = LeRobotWriter(
            root, fps=round(cfg.env.control_hz), features=features, robot_type=robot_type(cfg.env)
        )
        task = getattr(env.unwrapped, "task", "")
        print(f"recording into {root}: {writer.num_episodes} of {args.num_episodes} episodes already there")

        def show(summary: dict) -> None:
            outcome = "success" if summary["success"] else "failure"
            why = f" (operator: {summary['label']})" if summary["label"] else ""
            why += f" (robot error: {summary['robot_error']})" if summary["robot_error"] else ""
            where = summary["episode_index"]
            print(f"episode {where}: {outcome}, {summary['steps']} steps{why}", flush=True)

        def announce(instruction: str) -> None:
            print(f"next episode: {instruction}", flush=True)

        result = record(env, device, writer, task, args.num_episodes, progress=show, announce=announce)
        writer.close()
    finally:
        if device is not None:
            device.close()
        env.close()
    return {**result, "dataset": str(root)}
