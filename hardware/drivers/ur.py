"""``URRobot``: a Universal Robots arm (e-Series or CB3, 6 joints) through ``ur_rtde`` (extra ``ur``:
``RTDEReceiveInterface`` for state, ``RTDEControlInterface`` for commands, which uploads its control
script to the controller on connect). The controller must be in remote control with RTDE enabled.

Units. ``ur_rtde`` is SI already: joints in rad and rad/s; the TCP pose is ``[x, y, z, rx, ry, rz]`` in m
and a rotation vector (axis times angle, rad) in the base frame; speeds in m/s and rad/s. The driver only
turns the rotation vector into the interface's quaternion (w, x, y, z) and back (:func:`pose_to_si`,
:func:`si_to_pose`).

Modes (each streamed once per control period ``dt = 1/control_hz``):
    - ``joint_position`` (6,) rad -> ``servoJ(q, 0, 0, dt, LOOKAHEAD_S, GAIN)``;
    - ``joint_velocity`` (6,) rad/s -> ``speedJ(qd, JOINT_ACC, dt)``;
    - ``ee_delta`` (3,)/(6,) -> ``servoL(target, 0, 0, dt, LOOKAHEAD_S, GAIN)`` with the target pose moved
      by the delta (m; rotation vector in rad), orientation kept for a (3,) delta;
    - ``ee_velocity`` (6,) m/s, rad/s -> ``speedL(xd, LINEAR_ACC, dt)``.
Switching between the servo and speed families stops the previous one first (``servoStop``/``speedStop``).

Limits (:func:`ur_limits`, UR5e datasheet): joints +-2 pi rad, speed pi rad/s (180 deg/s) per joint (UR10e
and UR16e base and shoulder: 2.09 rad/s, so tighten the safety layer there), acceleration 40 rad/s^2
(``ur_rtde``'s range), reach 0.85 m as the workspace box. Joint targets outside the joint limits and joint
speeds beyond the speed limits are refused (``CommandRejected``) before anything is sent.

Gripper: none. RTDE carries no gripper; a command with a gripper target is refused (a Robotiq gripper on
its URCap socket is not driven here), and the state's gripper reads 0. ``RobotEnv`` knows (``ur`` is in
:data:`~robot_rl.hardware.factory.GRIPPERLESS_DRIVERS`): its action and state have no gripper entry and its
commands, the home motion's included, carry no gripper target.

Kinematics: ``env.robot.ur_model`` (default ``ur5e``) picks UR's published D-H table
(:mod:`~robot_rl.hardware.drivers.dh_kinematics`); with the TCP offset set on the pendant, measured from
the first reading, it is the driver's :meth:`URRobot.forward_kinematics`, so the safety layer keeps joint
commands in the workspace box. Every reading is checked against it: a TCP more than 2 cm off the model (a
wrong ``ur_model``) is a ``RobotFault``.

Faults: a protective or emergency stop makes :meth:`URRobot.command` raise ``RobotFault``; the state's
``extra["protective_stop"]`` shows it.

Untested on a real UR here (no controller in CI): the tests cover construction, the pose conversion on a
trace, the limit checks and the connection error against a closed port on localhost, the D-H tables
against UR's closed-form zero pose, and a ``RobotEnv`` episode (home motion, joint and ``ee_delta`` steps)
and the safety layer's box on joint commands against a fake of ur_rtde's interfaces (a UR5e by its table)
that checks each servo call against ur_rtde's documented ranges
(tests/hardware/drivers/test_driver_day_one.py).
"""

from __future__ import annotations

import math
import time

import numpy as np

from robot_rl.config import RobotConfig
from robot_rl.hardware.drivers.arm_common import (
    apply_ee_delta,
    check_joint_speeds,
    check_joint_targets,
    controller_host,
    quat_from_rotvec,
    rotvec_from_quat,
)
from robot_rl.hardware.drivers.dh_kinematics import UR_MODELS, MeasuredTcp
from robot_rl.hardware.errors import CommandRejected, RobotConnectionError, RobotFault
from robot_rl.hardware.robot import Command, CommandMode, Robot, RobotLimits, RobotState, check_command
from robot_rl.hardware.sdk import import_sdk

RTDE_WATCHDOG_HZ = 1.0
"""ur_rtde's robot-side watchdog (``setWatchdog``): the controller stops the control script, and so the
arm, when no command reached it for 1 / this many s (this process killed, hung or cut off). The safety
layer's own watchdog holds at the control rate after ``watchdog_ms`` (500 ms) without a command, so a live
process keeps it fed."""
LOOKAHEAD_S = 0.1
"""``servoJ``/``servoL`` lookahead time (s; ur_rtde range 0.03-0.2): larger smooths, smaller tracks."""
GAIN = 300.0
"""``servoJ``/``servoL`` proportional gain (ur_rtde range 100-2000)."""
JOINT_ACC = 1.0
"""``speedJ`` acceleration (rad/s^2)."""
LINEAR_ACC = 0.5
"""``speedL`` acceleration (m/s^2)."""
REACH_M = 0.85
"""UR5e reach (m): the workspace box is +-REACH_M around the base."""


def ur_limits(control_hz: float) -> RobotLimits:
    """The UR5e's limits (see the module docstring) at ``control_hz``."""
    return RobotLimits(
        joint_low=np.full(6, -2 * math.pi),
        joint_high=np.full(6, 2 * math.pi),
        joint_vel_max=np.full(6, math.pi),
        joint_acc_max=np.full(6, 40.0),
        ee_low=np.full(3, -REACH_M),
        ee_high=np.full(3, REACH_M),
        ee_step_max=0.05,
        control_hz=float(control_hz),
        joint_names=("base", "shoulder", "elbow", "wrist1", "wrist2", "wrist3"),
    )


def pose_to_si(pose: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """UR TCP pose ``[x, y, z, rx, ry, rz]`` (m, rotation vector rad) -> (position (3,) m, quaternion
    (4,) (w, x, y, z))."""
    pose = np.asarray(pose, dtype=np.float64)
    return pose[:3].copy(), quat_from_rotvec(pose[3:])


def si_to_pose(pos: np.ndarray, quat: np.ndarray) -> np.ndarray:
    """(position (3,) m, quaternion (w, x, y, z)) -> UR TCP pose ``[x, y, z, rx, ry, rz]`` (6,)."""
    return np.concatenate([np.asarray(pos, dtype=np.float64), rotvec_from_quat(quat)])


class URRobot(Robot):
    """A UR arm at ``host``.

    Args:
        host: the controller's IP or hostname (RTDE uses port 30004).
        control_hz: the rate commands are streamed at (Hz); each servo/speed command lasts 1/control_hz s.

    Raises:
        MissingExtraError: from :meth:`connect` when ur_rtde is not installed (``robot-rl[ur]``).
    """

    name = "ur"
    modes = (
        CommandMode.JOINT_POSITION,
        CommandMode.JOINT_VELOCITY,
        CommandMode.EE_DELTA,
        CommandMode.EE_VELOCITY,
    )

    def __init__(self, host: str, control_hz: float = 10.0, model: str = "ur5e") -> None:
        if model not in UR_MODELS:
            raise ValueError(f"env.robot.ur_model={model!r}: must be one of {sorted(UR_MODELS)}")
        self.host = host
        self.name = f"ur@{host}"
        self._kinematics = MeasuredTcp(UR_MODELS[model])
        self._limits = ur_limits(control_hz)
        self._recv = None
        self._ctrl = None
        self._mode: CommandMode | None = None
        self._target: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def from_config(cls, cfg: RobotConfig, control_hz: float = 10.0) -> URRobot:
        """The UR at ``env.robot.address`` (``driver: ur``), a ``env.robot.ur_model``. Raises ValueError for a
        bad address or model."""
        return cls(controller_host(cfg.address, "ur"), control_hz, cfg.ur_model)

    @property
    def limits(self) -> RobotLimits:
        return self._limits

    @property
    def is_connected(self) -> bool:
        return self._recv is not None and self._ctrl is not None

    def connect(self) -> None:
        """Open the RTDE receive and control interfaces.

        Raises:
            MissingExtraError: ur_rtde missing.
            RobotConnectionError: the controller at ``host`` cannot be reached or refuses (names it).
        """
        if self.is_connected:
            return
        rtde_receive = import_sdk("rtde_receive", "ur", "env.robot.driver=ur")
        rtde_control = import_sdk("rtde_control", "ur", "env.robot.driver=ur")
        try:
            self._recv = rtde_receive.RTDEReceiveInterface(self.host)
            self._ctrl = rtde_control.RTDEControlInterface(self.host)
        except RuntimeError as err:
            self.disconnect()
            raise RobotConnectionError(
                f"{self.name}: cannot connect to the UR controller at {self.host} (RTDE port 30004): {err}"
            ) from err
        self._ctrl.setWatchdog(RTDE_WATCHDOG_HZ)
        self._mode, self._target = None, None
        self._kinematics.forget()

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray:
        """The TCP position (3,) float64 m (base frame) at ``joint_pos`` (6,) rad: the published D-H table
        of ``env.robot.ur_model`` plus the TCP offset set on the controller, measured from the first
        reading after connect (:mod:`~robot_rl.hardware.drivers.dh_kinematics`).

        Raises:
            RobotConnectionError: not connected (the TCP offset is read from the arm).
            RobotFault: the model does not fit the arm (the flange would be over 0.4 m from the TCP)."""
        return self._kinematics(joint_pos, self.read, self.name)

    vendor_stop = True

    def emergency_stop(self) -> None:
        """ur_rtde's ``triggerProtectiveStop``: the controller's safety system stops the arm and keeps it
        stopped until a human unlocks it on the teach pendant.

        Raises:
            RobotConnectionError: not connected. RobotFault: the controller did not take the stop.
        """
        self._require()
        if not self._ctrl.triggerProtectiveStop():
            raise RobotFault(f"{self.name}: the controller refused the protective stop")

    def disconnect(self) -> None:
        """Stop the control script (the arm holds) and close both interfaces; safe to call twice."""
        if self._ctrl is not None:
            self._ctrl.stopScript()
            self._ctrl.disconnect()
        if self._recv is not None:
            self._recv.disconnect()
        self._recv = self._ctrl = None

    def _require(self) -> None:
        if not self.is_connected:
            raise RobotConnectionError(f"{self.name}: not connected (call connect() first)")

    def read(self) -> RobotState:
        """Joint positions (rad) and speeds (rad/s), TCP pose, gripper 0 (none) and
        ``extra["protective_stop"]`` (1,): 1.0 during a protective or emergency stop.

        Raises:
            RobotConnectionError: not connected.
            RobotFault: the TCP is off the kinematic model (:meth:`MeasuredTcp.check`)."""
        self._require()
        pos, quat = pose_to_si(self._recv.getActualTCPPose())
        stopped = self._recv.isProtectiveStopped() or self._recv.isEmergencyStopped()
        state = RobotState(
            joint_pos=np.asarray(self._recv.getActualQ(), dtype=np.float64),
            joint_vel=np.asarray(self._recv.getActualQd(), dtype=np.float64),
            ee_pos=pos,
            ee_quat=quat,
            gripper=0.0,
            timestamp=time.monotonic(),
            extra={"protective_stop": np.array([float(stopped)])},
        )
        self._kinematics.check(state, self.name)
        return state

    def command(self, cmd: Command) -> None:
        """Stream one command (see the module docstring for the ur_rtde call of each mode).

        Raises:
            RobotConnectionError: not connected.
            CommandRejected: bad mode/shape/values, a gripper target, joint targets outside the limits or
                speeds beyond them, or the controller refusing the command.
            RobotFault: protective or emergency stop.
        """
        self._require()
        self._ctrl.kickWatchdog()
        value = check_command(cmd, self.modes, 6, self.name)
        if cmd.gripper is not None:
            raise CommandRejected(f"{self.name}: this driver has no gripper (RTDE carries none)")
        if self._recv.isProtectiveStopped() or self._recv.isEmergencyStopped():
            raise RobotFault(f"{self.name}: protective or emergency stop; reset it on the teach pendant")
        dt = 1.0 / self._limits.control_hz
        self._switch(cmd.mode)
        if cmd.mode == CommandMode.JOINT_POSITION:
            check_joint_targets(value, self._limits, self.name)
            ok = self._ctrl.servoJ(value.tolist(), 0.0, 0.0, dt, LOOKAHEAD_S, GAIN)
        elif cmd.mode == CommandMode.JOINT_VELOCITY:
            check_joint_speeds(value, self._limits, self.name)
            ok = self._ctrl.speedJ(value.tolist(), JOINT_ACC, dt)
        elif cmd.mode == CommandMode.EE_DELTA:
            if self._target is None:
                self._target = pose_to_si(self._recv.getActualTCPPose())
            self._target = apply_ee_delta(*self._target, value)
            ok = self._ctrl.servoL(si_to_pose(*self._target).tolist(), 0.0, 0.0, dt, LOOKAHEAD_S, GAIN)
        else:
            ok = self._ctrl.speedL(value.tolist(), LINEAR_ACC, dt)
        if not ok:
            raise CommandRejected(f"{self.name}: the controller refused {cmd.mode!s} {value.tolist()}")

    def _switch(self, mode: CommandMode) -> None:
        servo = (CommandMode.JOINT_POSITION, CommandMode.EE_DELTA)
        if self._mode is not None and (self._mode in servo) != (mode in servo):
            if self._mode in servo:
                self._ctrl.servoStop()
            else:
                self._ctrl.speedStop()
        if mode != CommandMode.EE_DELTA:
            self._target = None  # the next ee_delta starts from the measured pose
        self._mode = mode
