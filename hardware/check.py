"""``robot-rl hardware check``: connect to the robot and cameras an ``env.robot`` config names, read and
print the state, the limits and each camera's frame size and rate, and move nothing unless asked (then a
small jog of the last joint, or of the end effector up, and back, which must be seen: a check that cannot
fail proves nothing)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from robot_rl.config import RobotConfig
from robot_rl.hardware.camera import Camera
from robot_rl.hardware.errors import RobotFault
from robot_rl.hardware.factory import make_cameras
from robot_rl.hardware.robot import Command, CommandMode, Robot
from robot_rl.hardware.safety import SafeRobot

JOG_RAD = 0.05
"""Joint jog size (rad) of ``--move``, applied to the last joint (a wrist: the least sweeping motion)."""
JOG_M = 0.01
"""End-effector jog (m, up) of ``--move`` for a robot without joint position control."""
JOG_S = 1.0
"""How long each half of the jog (out, back) streams its target (s)."""
MIN_MOVED = 0.5
"""Fraction of the jog the robot must be measured to move for ``--move`` to pass."""


def _fmt(values: np.ndarray, digits: int = 4) -> str:
    return "[" + ", ".join(f"{v:.{digits}f}" for v in np.asarray(values, dtype=np.float64)) + "]"


def check_camera(cam: Camera, seconds: float, timeout_s: float = 2.0) -> dict:
    """Open ``cam``, read frames for ``seconds`` and close it.

    Returns:
        ``{"frames", "width", "height", "fps"}``: frames read, frame size (px) and the measured rate (Hz,
        from the capture timestamps; 0 with fewer than 2 frames).

    Raises:
        CameraError: cannot open, or no new frame within ``timeout_s`` (names the camera).
    """
    with cam:
        frames = [cam.read(timeout_s)]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            frames.append(cam.read(timeout_s))
    span = frames[-1].timestamp - frames[0].timestamp
    height, width = frames[0].image.shape[:2]
    fps = (len(frames) - 1) / span if len(frames) > 1 and span > 0 else 0.0
    return {"frames": len(frames), "width": width, "height": height, "fps": fps}


def _paced(robot: Robot, commands: list[Command]) -> None:
    """Send ``commands`` one per control period (s = 1 / control_hz)."""
    period = 1.0 / robot.limits.control_hz
    next_tick = time.monotonic()
    for cmd in commands:
        robot.command(cmd)
        next_tick += period
        time.sleep(max(0.0, next_tick - time.monotonic()))


def jog(robot: Robot, seconds: float = JOG_S) -> dict:
    """Move a little and come back: the last joint by :data:`JOG_RAD` (towards the farther limit) in
    ``joint_position`` mode, else the end effector up by :data:`JOG_M` in ``ee_delta`` mode, each half
    streamed at the control rate for ``seconds``.

    Returns:
        ``{"mode", "moved", "returned_error"}``: the largest change measured at the far point (rad or m)
        and how far from the start the robot ended (rad or m).
    """
    start = robot.read()
    steps = max(1, int(round(seconds * robot.limits.control_hz)))
    if CommandMode.JOINT_POSITION in robot.modes:
        limits, q0 = robot.limits, start.joint_pos
        room_up, room_down = limits.joint_high[-1] - q0[-1], q0[-1] - limits.joint_low[-1]
        target = q0.copy()
        target[-1] += JOG_RAD if room_up >= room_down else -JOG_RAD
        _paced(robot, [Command(CommandMode.JOINT_POSITION, target)] * steps)
        moved = float(np.max(np.abs(robot.read().joint_pos - q0)))
        _paced(robot, [Command(CommandMode.JOINT_POSITION, q0)] * steps)
        back = float(np.max(np.abs(robot.read().joint_pos - q0)))
        return {"mode": str(CommandMode.JOINT_POSITION), "moved": moved, "returned_error": back}
    step = np.array([0.0, 0.0, JOG_M / steps])
    _paced(robot, [Command(CommandMode.EE_DELTA, step)] * steps)
    moved = float(np.linalg.norm(robot.read().ee_pos - start.ee_pos))
    _paced(robot, [Command(CommandMode.EE_DELTA, -step)] * steps)
    back = float(np.linalg.norm(robot.read().ee_pos - start.ee_pos))
    return {"mode": str(CommandMode.EE_DELTA), "moved": moved, "returned_error": back}


def check_hardware(
    cfg: RobotConfig, move: bool = False, camera_seconds: float = 1.0, out: Callable[[str], None] = print
) -> dict:
    """Build, connect and read the robot and cameras of ``cfg`` (``env.robot``), printing each through
    ``out``; jog only when ``move`` (see :func:`jog`). The robot is disconnected at the end either way.

    Returns:
        ``{"robot", "joint_pos", "cameras": {name: check_camera(...)}, "jog": dict | None}``.

    Raises:
        MissingExtraError: a driver's SDK is not installed (names the extra).
        RobotConnectionError, RobotFault, CameraError: from the devices, naming them.
        RobotFault: with ``move``, the end-effector pose is NaN (nothing to check the workspace with: no
            pose topic and no kinematic model), or the robot moved less than :data:`MIN_MOVED` of the jog.
    """
    robot = SafeRobot.from_config(cfg, moving=move)  # the jog of --move passes the safety layer too
    cameras = make_cameras(cfg)
    report: dict = {"robot": robot.name, "cameras": {}, "jog": None}
    with robot:
        state = robot.read()
        limits = robot.limits
        out(f"robot {robot.name} (driver {cfg.driver}): connected; modes {[str(m) for m in robot.modes]}")
        out(f"  control rate {limits.control_hz:g} Hz; {limits.num_joints} joints {list(limits.joint_names)}")
        out(f"  joint_pos (rad)  {_fmt(state.joint_pos)}")
        out(f"  joint_vel (rad/s) {_fmt(state.joint_vel)}")
        out(f"  joint_low (rad)  {_fmt(limits.joint_low)}")
        out(f"  joint_high (rad) {_fmt(limits.joint_high)}")
        out(f"  joint_vel_max (rad/s) {_fmt(limits.joint_vel_max, 3)}")
        out(f"  ee_pos (m) {_fmt(state.ee_pos)}  ee_quat (w,x,y,z) {_fmt(state.ee_quat)}")
        out(f"  gripper (0 open, 1 closed) {state.gripper:.3f}")
        out(f"  workspace box (m) {_fmt(limits.ee_low, 3)} .. {_fmt(limits.ee_high, 3)}")
        outside = (state.joint_pos < limits.joint_low) | (state.joint_pos > limits.joint_high)
        if np.any(outside):
            out(
                f"  WARNING: joints {[limits.joint_names[i] for i in np.flatnonzero(outside)]} outside limits"
            )
        report["joint_pos"] = state.joint_pos
        no_pose = not np.all(np.isfinite(state.ee_pos))
        if no_pose:
            out("  WARNING: the end-effector pose is NaN: no pose source (a pose topic or a kinematic model)")
        if move and no_pose:
            raise RobotFault(
                f"hardware check --move: {robot.name} reports a NaN end-effector pose, so the safety layer "
                "would brake every move; give it a pose (env.robot.ros2: ee_pose_topic or kinematics)"
            )
        for name, cam in cameras.items():
            info = check_camera(cam, camera_seconds)
            report["cameras"][name] = info
            out(
                f"camera {name} ({cfg.cameras[name].driver} {cfg.cameras[name].source}): "
                f"{info['width']}x{info['height']} px, {info['fps']:.1f} Hz over {info['frames']} frames"
            )
        if move:
            report["jog"] = jog(robot)
            j = report["jog"]
            out(f"jog ({j['mode']}): moved {j['moved']:.4f}, back within {j['returned_error']:.4f} of start")
            size = JOG_RAD if j["mode"] == str(CommandMode.JOINT_POSITION) else JOG_M
            if not j["moved"] >= MIN_MOVED * size:  # NaN fails too
                c = robot.counters
                raise RobotFault(
                    f"hardware check --move: {robot.name} did not move (measured {j['moved']:.4f} of a "
                    f"{size:g} jog; safety layer: {c.clipped} of {c.commands} commands clipped, "
                    f"{c.rejected} rejected); check the command topics and the controllers"
                )
        else:
            out("nothing moved (pass --move for a small jog and back)")
    return report
