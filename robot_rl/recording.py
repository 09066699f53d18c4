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

import numpy as np

from robot_rl import keys
from robot_rl.config import ConfigError, RobotConfig
from robot_rl.rollout import RecordedEpisode, Rollout
from robot_rl.runtime.intervention import DeviceError, InterventionDevice
from robot_rl.runtime.takeover import DEVICE_ERROR, InterventionWrapper
from robot_rl.single_env import SingleEnvVector

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


class _HoldSource:
    """The chunk source of a demo: h = 1 chunks of the hold action, which the device's action replaces
    whenever the operator drives (:class:`~robot_rl.runtime.takeover.InterventionWrapper`). Hold: zero
    motion, the gripper (the last dimension, when the env has one) where the operator last left it."""

    def __init__(self, low: np.ndarray, high: np.ndarray, has_gripper: bool) -> None:
        self.low, self.high, self.has_gripper = low, high, has_gripper
        self.hold = np.zeros(low.shape, np.float32)

    def reset(self, env_id: int, env_seed: int) -> None:
        self.hold = np.clip(np.zeros(self.low.shape, np.float32), self.low, self.high)

    def executed(self, env_id: int, action: np.ndarray) -> None:
        if self.has_gripper:
            self.hold[-1] = action[-1]  # the gripper stays where the operator left it

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        return np.tile(self.hold, (len(env_ids), 1, 1))


def _demo_env(env, device: InterventionDevice, announce: Callable[[str], None] | None):
    """``env`` driven by ``device`` as the one env a :class:`~robot_rl.rollout.Rollout` steps, with the
    hold source; the caller keeps ``env`` (and closes it)."""
    vec = SingleEnvVector(InterventionWrapper(env, device, announce=announce))
    low, high = env.action_space.low, env.action_space.high
    has_gripper = getattr(env.unwrapped, "gripper", True)  # a RobotEnv without one (a UR) says so
    return vec, _HoldSource(low, high, has_gripper)


def _summary(ep: RecordedEpisode) -> dict:
    return {
        "success": ep.success,
        "steps": ep.steps,
        "label": ep.label,
        "robot_error": ep.final_info.get("robot_error"),
        "task": ep.task or None,
    }


def _demo(vec, source: _HoldSource, seed: int) -> RecordedEpisode:
    """The episode of env seed ``seed``; every step is the operator's (``is_intervention`` False)."""
    done: list[RecordedEpisode] = []
    Rollout(vec, source).run([seed], done.append)
    ep = done[0]
    if ep.final_info.get(DEVICE_ERROR) is not None:
        raise ep.final_info[DEVICE_ERROR]  # the episode so far is not a clean demo
    if ep.steps:
        ep.frames[keys.INTERVENTION][:] = False  # the human drives every step of a demo
    return ep


def record_episode(
    env, device: InterventionDevice, seed: int, announce: Callable[[str], None] | None = None
) -> tuple[dict[str, np.ndarray] | None, dict]:
    """One teleoperated episode of env seed ``seed`` (:class:`~robot_rl.rollout.Rollout` on ``env`` with the
    device taking over every step it drives); ``announce`` gets the episode's instruction after the
    reset, before the operator drives (the operator of pick-colour must know which cube).

    Returns ``(frames, summary)``: frames map LeRobot keys to (T, ...) arrays (None when the operator
    ended it before any step); summary has ``success``, ``steps``, ``label`` (the operator's or None),
    ``robot_error`` (the env's ``info["robot_error"]`` when a hardware error ended it, else None) and
    ``task`` (the env's instruction, or None).

    Raises:
        DeviceError: the device failed (the episode so far is lost: it is not a clean demo).
    """
    ep = _demo(*_demo_env(env, device, announce), seed)
    return (ep.frames if ep.steps else None), _summary(ep)


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
    vec, source = _demo_env(env, device, announce)
    while writer.num_episodes < num_episodes:
        index = writer.num_episodes
        ep = _demo(vec, source, RECORD_SEED_OFFSET + index)
        summary = _summary(ep)
        if ep.steps:
            writer.add_episode(ep.frames, task=ep.task or task, source="demo")
            recorded += 1
            successes += int(ep.success)
        summary["episode_index"] = index if ep.steps else None
        if progress is not None:
            progress(summary)
        if summary["robot_error"] is not None:
            env.reset(seed=RECORD_SEED_OFFSET + writer.num_episodes)  # raises the robot's error
    return {"recorded": recorded, "successes": successes, "num_episodes": writer.num_episodes}
