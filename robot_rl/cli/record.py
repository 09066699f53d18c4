"""``robot-rl record``: teleoperated demonstrations on the robot of ``env.robot`` (or the simulator) into
the run's LeRobot v3.0 dataset (robot_rl.recording); a rerun resumes it. The edge: it builds the env and the
teleop device (:func:`make_teleop`) and hands them to :func:`robot_rl.recording.record`."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from robot_rl.config import ConfigError, PipelineConfig, RobotConfig
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.recording import TELEOPS, record
from robot_rl.run_dir import RunDir
from robot_rl.runtime.intervention import DeviceError, InterventionDevice
from robot_rl.sim import make_env, robot_type
from robot_rl.stages.envs import action_bounds, dataset_features
from robot_rl.teleop import make_device
from robot_rl.threads import set_threads

ROS2_INTERVENTION_PREFIX = "/robot_rl/intervention"
"""Where ``--teleop ros2`` reads the operator: ``intervention_node``'s default topic prefix."""
ROS2_INTERVENTION_TIMEOUT_S = 0.5
"""``--teleop ros2``: largest age (s) of the operator's ``active``/``twist`` messages that still drive."""


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


def make_teleop(
    name: str, cfg, action_low: np.ndarray, action_high: np.ndarray, follower_limits=None
) -> InterventionDevice:
    """The teleop device ``name`` for an env with action box ``[action_low, action_high]``.

    ``keyboard``/``gamepad``/``spacemouse``/``sim_human``: :func:`robot_rl.teleop.make_device` with
    ``cfg.intervention`` (its ``scale``); they drive end-effector deltas (``env.robot.action=ee_delta``).
    ``leader``: :class:`robot_rl.teleop.leader.LeaderArm`, the SO-101 at ``env.robot.leader_port`` with
    ``env.robot.leader_calibration`` (status timeout ``env.robot.bus_timeout_s``), mapped joint to joint
    onto the follower (``env.robot.action=joint_position``), its targets clipped to ``follower_limits``
    (the follower's :class:`~robot_rl.hardware.robot.RobotLimits`). ``ros2``: the operator on ROS 2,
    ``intervention_node``'s topics under :data:`ROS2_INTERVENTION_PREFIX` (``twist``, ``active``,
    ``gripper``, ``label``; a Joy pad through ``intervention_node``, or any node publishing them) as
    :class:`~robot_rl.hardware.ros2.intervention_device.RosInterventionDevice`, on the ROS 2 arm's node
    (``env.robot.driver=ros2``).

    Raises:
        ValueError: unknown ``name``.
        ConfigError: the device does not fit ``env.robot.action``, ``leader`` without
            ``env.robot.leader_port``/``leader_calibration``, or ``ros2`` without ``env.robot.driver=ros2``
            (names the key).
        DeviceError: the device or its package is missing (names it and the fix).
    """
    if name not in TELEOPS:
        raise ValueError(f"--teleop must be one of {', '.join(TELEOPS)}; got {name!r}")
    mode = cfg.env.robot.action if cfg.env.robot is not None else "ee_delta"
    if name == "leader":
        if mode != "joint_position":
            raise ConfigError(
                f"--teleop leader drives the follower's joints, but env.robot.action={mode}; set "
                "env.robot.action=joint_position (the action is then the joint targets)"
            )
        missing = [k for k in ("leader_port", "leader_calibration") if not getattr(cfg.env.robot, k)]
        if missing:
            raise ConfigError(
                f"--teleop leader: set env.robot.{missing[0]} (the leader SO-101's serial port and its "
                "calibration file)"
            )
        try:
            from robot_rl.teleop.leader import LeaderArm
        except ImportError as err:
            raise DeviceError(
                "--teleop leader: the leader-arm teleop (robot_rl.teleop.leader.LeaderArm) is not in this "
                f"installation ({err}); use keyboard, gamepad or spacemouse"
            ) from err
        robot = cfg.env.robot
        leader = RobotConfig(driver="so101", port=robot.leader_port, calibration=robot.leader_calibration)
        return LeaderArm.from_config(leader, follower_limits, robot.bus_timeout_s or None)
    if mode != "ee_delta":
        raise ConfigError(
            f"--teleop {name} drives end-effector deltas, but env.robot.action={mode} takes joint targets; "
            "use --teleop leader or env.robot.action=ee_delta"
        )
    if name == "ros2":
        if cfg.env.robot is None or cfg.env.robot.driver != "ros2":
            raise ConfigError(
                "--teleop ros2 reads the operator from ROS 2 topics on the arm's ROS 2 domain; set "
                "env.robot.driver=ros2 (and env.robot.ros2)"
            )
        try:  # the ros extra (cyclonedds, ROS 2 messages), seconds to load: only for --teleop ros2
            from robot_rl.hardware.ros2.intervention_device import RosInterventionDevice
        except ImportError as err:
            raise DeviceError(
                f"--teleop ros2: the ROS 2 transport is not in this installation ({err}); "
                "pip install -e '.[ros]' (or '.[rclpy]')"
            ) from err
        return RosInterventionDevice(
            cfg.env.robot.ros2,
            ROS2_INTERVENTION_PREFIX,
            action_low,
            action_high,
            cfg.intervention.scale,
            ROS2_INTERVENTION_TIMEOUT_S,
        )
    return make_device(replace(cfg.intervention, device=name), action_low, action_high, task_id=cfg.env.id)


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
