"""Record teleoperated demonstrations on a robot (``robot-rl record``) into a LeRobot v3.0 dataset.

A human drives the env (a :class:`~robot_rl.hardware.robot_env.RobotEnv`, or the simulator) with a teleop
device (keyboard, gamepad, SpaceMouse, a leader arm, or the simulated human for tests). Each control step
the device is polled with the current observation: its action is executed; while it gives none (the
operator is not pressing anything) the robot holds, gripper unchanged, and that step is recorded too. An
episode ends on the env's success or time limit, or on the operator's label (``success``/``failure``),
which then sets the last frame's ``next.success``/``next.done``/``next.reward`` as the online actor does.

Episodes go through the same :class:`~robot_rl.data.lerobot.writer.LeRobotWriter` as ``collect``, one
durable append per finished episode, so a crash or Ctrl-C loses only the episode in progress and a rerun
resumes the dataset (it records until the dataset holds ``num_episodes``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from robot_rl import keys
from robot_rl.runtime.intervention import DeviceError, InterventionDevice, start_episode

log = logging.getLogger(__name__)
RECORD_SEED_OFFSET = 3_000_000
"""Env seeds of recorded episodes (demos use 0.., evaluation 1,000,000.., online 2,000,000..); the sim-backed
robot places its cube from them, a real scene ignores them."""
TELEOPS = ("keyboard", "gamepad", "spacemouse", "leader", "sim_human", "ros2")
ROS2_INTERVENTION_PREFIX = "/robot_rl/intervention"
"""Where ``--teleop ros2`` reads the operator: ``intervention_node``'s default topic prefix."""
ROS2_INTERVENTION_TIMEOUT_S = 0.5
"""``--teleop ros2``: largest age (s) of the operator's ``active``/``twist`` messages that still drive."""


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
    from dataclasses import replace

    from robot_rl.config import ConfigError, RobotConfig

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
        from robot_rl.hardware.ros2.intervention_device import RosInterventionDevice

        return RosInterventionDevice(
            cfg.env.robot.ros2,
            ROS2_INTERVENTION_PREFIX,
            action_low,
            action_high,
            cfg.intervention.scale,
            ROS2_INTERVENTION_TIMEOUT_S,
        )
    from robot_rl.teleop import make_device

    return make_device(replace(cfg.intervention, device=name), action_low, action_high, task_id=cfg.env.id)


def record_episode(
    env, device: InterventionDevice, seed: int, announce: Callable[[str], None] | None = None
) -> tuple[dict[str, np.ndarray] | None, dict]:
    """One teleoperated episode of env seed ``seed``; ``announce`` gets the episode's instruction after
    the reset, before the operator drives (the operator of pick-colour must know which cube).

    Returns ``(frames, summary)``: frames map LeRobot keys to (T, ...) arrays (None when the operator
    ended it before any step); summary has ``success``, ``steps``, ``label`` (the operator's or None) and
    ``robot_error`` (the env's ``info["robot_error"]`` when a hardware error ended it, else None).

    Raises:
        DeviceError: the device failed (the episode so far is lost: it is not a clean demo).
    """
    obs, reset_info = env.reset(seed=seed)
    if announce is not None and reset_info.get("task"):
        announce(reset_info["task"])
    start_episode(device, seed, str(reset_info.get("task", "")))
    low, high = env.action_space.low, env.action_space.high
    hold = np.clip(np.zeros(low.shape, np.float32), low, high)
    has_gripper = getattr(env.unwrapped, "gripper", True)  # a RobotEnv without one (a UR) says so
    steps: list[dict[str, Any]] = []
    label, error = None, None
    while True:
        human = device.poll(obs)
        if human.label is not None:
            label = human.label
            if steps:
                good = label == "success"
                steps[-1][keys.SUCCESS] = steps[-1][keys.DONE] = good
                steps[-1][keys.REWARD] = np.float32(1.0 if good else 0.0)
            break
        if human.action is not None:
            action = np.clip(np.asarray(human.action, np.float32), low, high)
            if not np.isfinite(action).all():
                raise DeviceError("the teleop device sent a NaN/inf action; it was not executed")
            if has_gripper:
                hold[-1] = action[-1]  # the gripper stays where the operator left it
        else:
            action = hold.copy()
        next_obs, reward, terminated, truncated, info = env.step(action)
        step = {k: np.asarray(v) for k, v in obs.items()}
        step[keys.ACTION] = action
        step[keys.REWARD] = np.float32(reward)
        step[keys.DONE] = bool(terminated)
        step[keys.SUCCESS] = bool(info.get("is_success", False))
        step[keys.INTERVENTION] = False  # the human drives every step of a demo
        steps.append(step)
        obs = next_obs
        error = info.get("robot_error")
        if terminated or truncated:
            break
    summary = {
        "success": bool(steps) and bool(any(s[keys.SUCCESS] for s in steps)),
        "steps": len(steps),
        "label": label,
        "robot_error": error,
        "task": reset_info.get("task"),
    }
    if not steps:
        return None, summary
    return {k: np.stack([s[k] for s in steps]) for k in steps[0]}, summary


def record(
    env,
    device: InterventionDevice,
    writer,
    task: str,
    num_episodes: int,
    progress: Callable[[dict], None] | None = None,
    announce: Callable[[str], None] | None = None,
) -> dict:
    """Record until ``writer`` holds ``num_episodes`` episodes; each finished episode is written (and
    durable) before the next starts, under its own instruction when the env draws one per episode
    (:func:`record_episode`'s ``task``), else under ``task``. Returns ``{"recorded", "successes",
    "num_episodes"}`` of this run. ``progress`` gets each episode's summary after it; ``announce`` each
    episode's instruction before it (see :func:`record_episode`).

    Raises:
        HardwareError: the robot failed; the episode up to the failure is written first (truncated).
        DeviceError: the teleop device failed (the unfinished episode is dropped).
    """
    recorded = successes = 0
    while writer.num_episodes < num_episodes:
        index = writer.num_episodes
        frames, summary = record_episode(env, device, RECORD_SEED_OFFSET + index, announce)
        if frames is not None:
            writer.add_episode(frames, task=summary["task"] or task, source="demo")
            recorded += 1
            successes += int(summary["success"])
        summary["episode_index"] = index if frames is not None else None
        if progress is not None:
            progress(summary)
        if summary["robot_error"] is not None:
            env.reset(seed=RECORD_SEED_OFFSET + writer.num_episodes)  # raises the robot's error
    return {"recorded": recorded, "successes": successes, "num_episodes": writer.num_episodes}
