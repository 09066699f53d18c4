"""``XArmRobot``: a UFACTORY xArm 5/6/7 or Lite 6 through ``xarm-python-sdk`` (extra ``xarm``:
``xarm.wrapper.XArmAPI``, TCP to the control box).

Units. The SDK speaks **degrees and millimetres** by default: joints in deg and deg/s, the TCP pose as
``[x, y, z, roll, pitch, yaw]`` in mm and deg (fixed axes: R = Rz(yaw) Ry(pitch) Rx(roll)), linear speeds
in mm/s, the xArm Gripper in pulses (850 open, 0 closed). This driver always passes ``is_radian=False``
and converts at the boundary (:func:`joints_to_si`, :func:`pose_to_si`, :func:`gripper_to_si` and their
inverses), so everything above it is SI: rad, rad/s, m, m/s, quaternion (w, x, y, z), gripper in [0, 1].

Modes (the SDK's control modes, switched with ``set_mode`` + ``set_state(0)``):
    - ``joint_position`` (n,) rad -> mode 1 (servo), ``set_servo_angle_j`` (deg);
    - ``ee_delta`` (3,)/(6,) -> mode 1, ``set_servo_cartesian`` with the target pose moved by the delta
      (m and rotation vector rad, converted to mm and deg);
      in mode 1 each command only sets the target of a
      :class:`~robot_rl.hardware.drivers.servo_stream.ServoStreamer` thread, which sends setpoints at
      :data:`STREAM_HZ` (UFACTORY's servo-mode guide: 100-250 Hz, at most 10 mm apart, or the motion is
      not executed), each at most :data:`SERVO_JOINT_SPEED`, :data:`SERVO_LINEAR_SPEED` and
      :data:`SERVO_ANGULAR_SPEED` over one period from the last: the SDK marks servo mode's speed and
      acceleration arguments "reserved", so the caps are the stream's. A driver-side stream rather than
      modes 6/7 (the controller's online trajectory planning): servo mode runs the same on every xArm and
      Lite 6 and its rate and step rules are documented, so the stream's rate, step and speed are ours
      to set and to test, while the SDK's source gives modes 6/7 no rate, step or minimum firmware to
      hold to;
    - ``joint_velocity`` (n,) rad/s -> mode 4, ``vc_set_joint_velocity`` (deg/s) lasting two control
      periods, so the arm stops by itself when commands stop;
    - ``ee_velocity`` (6,) m/s, rad/s -> mode 5, ``vc_set_cartesian_velocity`` (mm/s, deg/s), same duration.

Limits: joint ranges from the SDK's own table (``XCONF.Robot.JOINT_LIMITS`` by axis count and device
type, read at connect), speed :data:`SERVO_JOINT_SPEED` per joint (the servo stream's cap; the arm's own
is pi rad/s) and 20 rad/s^2 (1145 deg/s^2, the SDK's maximum joint acceleration), workspace box +-0.7 m
(Lite 6: +-0.44 m) around the base, an ``ee_delta`` step of at most :data:`SERVO_LINEAR_SPEED` /
``control_hz`` (what the stream covers in one control period). Joint targets outside the range and speeds
beyond the limit are refused (``CommandRejected``) before anything is sent.

Robot-side boundary: :meth:`XArmRobot.set_tcp_boundary` (called by the safety layer at connect with its
box) sets the controller's safety boundary, :data:`BOUNDARY_MARGIN_M` outside the box
(``set_reduced_tcp_boundary``, ``[x_max, x_min, y_max, y_min, z_max, z_min]`` mm) and turns fence mode on
(``set_fence_mode``, firmware 1.2.11+): the controller then stops the arm with error C35 ("Safety Boundary
Limit") when the TCP reaches it, in its own real-time loop, however late this client is. It stays set on
the controller after disconnect.

Faults: a controller error (``has_error``) found at connect or after a command raises ``RobotFault`` with
the SDK's error code; clear it on the control box or in UFACTORY Studio (the driver never clears errors).

Kinematics: on an xArm 7 (device type 7) :meth:`XArmRobot.forward_kinematics` is UFACTORY's published
D-H chain (:data:`~robot_rl.hardware.drivers.xarm_model.XARM7`) plus the TCP offset set on the controller,
measured from the first reading after connect (:class:`~robot_rl.hardware.drivers.dh_kinematics.MeasuredTcp`,
as for UR and Franka), so the safety layer checks joint commands against the workspace box; a reading more
than 2 cm off the chain is a ``RobotFault``. Other models have none (``None``: the box is then kept from
the measured pose).

Untested on a real xArm here (no control box in CI). The real ``xarm-python-sdk`` runs against
:mod:`robot_rl_testing.xarm_emulator` (a protocol-level xArm 7 control box with the arm in MuJoCo):
connect, read, servo streaming, the gripper, ``emergency_stop`` and controller errors
(tests/hardware/drivers/test_xarm_emulator.py); the unit conversion, limit checks and servo stream are also
checked against a fake ``XArmAPI`` (tests/hardware/drivers/test_driver_day_one.py).
"""

from __future__ import annotations

import time

import numpy as np

from robot_rl.config import RobotConfig
from robot_rl.hardware.drivers import xarm_model
from robot_rl.hardware.drivers.arm_common import (
    apply_ee_delta,
    check_joint_speeds,
    check_joint_targets,
    controller_host,
    quat_from_rpy,
    rpy_from_quat,
)
from robot_rl.hardware.drivers.dh_kinematics import MeasuredTcp
from robot_rl.hardware.drivers.servo_stream import ServoStreamer, joint_advance, pose_advance
from robot_rl.hardware.errors import CommandRejected, RobotConnectionError, RobotFault
from robot_rl.hardware.robot import Command, CommandMode, Robot, RobotLimits, RobotState, check_command
from robot_rl.hardware.sdk import import_sdk

GRIPPER_OPEN_PULSES = 850.0
"""xArm Gripper position when fully open (pulses); 0 is closed."""
LITE6_DEVICE_TYPE = 9
"""``XArmAPI.device_type`` of a Lite 6 (6 axes), whose gripper is open/close only, with no feedback."""
STREAM_HZ = 200.0
"""Servo-mode setpoints per second while moving (UFACTORY: 100-250 Hz)."""
SERVO_STEP_MAX_M = 0.010
"""UFACTORY's largest distance between servo-mode setpoints (m); a farther one is not executed."""
SERVO_JOINT_SPEED = 1.0
"""Joint speed cap of servo-mode motion (rad/s, 57 deg/s)."""
SERVO_LINEAR_SPEED = 0.25
"""TCP speed cap of servo-mode motion (m/s): 1.25 mm per setpoint at :data:`STREAM_HZ`."""
SERVO_ANGULAR_SPEED = 1.0
"""TCP rotation speed cap of servo-mode motion (rad/s)."""
MODE = {
    CommandMode.JOINT_POSITION: 1,
    CommandMode.EE_DELTA: 1,
    CommandMode.JOINT_VELOCITY: 4,
    CommandMode.EE_VELOCITY: 5,
}
"""The SDK control mode each command mode runs in."""
BOUNDARY_MARGIN_M = 0.005
"""The controller's safety boundary lies this far (m) outside the safety layer's box: the layer keeps
targets in the box, and the controller stops the arm (error C35) only when the measured TCP is more than
this beyond it, issue 35's bar (a boundary on the box itself would fault on a millimetre's overshoot)."""


def joints_to_si(deg: np.ndarray) -> np.ndarray:
    """Joint angles or speeds in deg (deg/s) -> rad (rad/s)."""
    return np.deg2rad(np.asarray(deg, dtype=np.float64))


def si_to_joints(rad: np.ndarray) -> np.ndarray:
    """Joint angles or speeds in rad (rad/s) -> deg (deg/s)."""
    return np.rad2deg(np.asarray(rad, dtype=np.float64))


def pose_to_si(pose: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """xArm pose ``[x, y, z, roll, pitch, yaw]`` (mm, deg) -> (position (3,) m, quaternion (w, x, y, z))."""
    pose = np.asarray(pose, dtype=np.float64)
    return pose[:3] / 1000.0, quat_from_rpy(np.deg2rad(pose[3:6]))


def si_to_pose(pos: np.ndarray, quat: np.ndarray) -> np.ndarray:
    """(position (3,) m, quaternion (w, x, y, z)) -> xArm pose ``[x, y, z, roll, pitch, yaw]`` (mm, deg)."""
    return np.concatenate([np.asarray(pos, dtype=np.float64) * 1000.0, np.rad2deg(rpy_from_quat(quat))])


def twist_to_xarm(twist: np.ndarray) -> np.ndarray:
    """Cartesian twist (6,) (m/s, rad/s) -> xArm ``[vx, vy, vz, wx, wy, wz]`` (mm/s, deg/s)."""
    twist = np.asarray(twist, dtype=np.float64)
    return np.concatenate([twist[:3] * 1000.0, np.rad2deg(twist[3:])])


def gripper_to_si(pulses: float) -> float:
    """xArm Gripper position (pulses, 850 open .. 0 closed) -> closure in [0, 1] (0 open, 1 closed)."""
    return float(np.clip(1.0 - pulses / GRIPPER_OPEN_PULSES, 0.0, 1.0))


def si_to_gripper(closure: float) -> float:
    """Closure in [0, 1] -> xArm Gripper position (pulses)."""
    return (1.0 - float(closure)) * GRIPPER_OPEN_PULSES


def xarm_limits(axis: int, device_type: int, control_hz: float) -> RobotLimits:
    """The limits of the arm with ``axis`` joints and SDK ``device_type`` (see the module docstring).

    Raises:
        MissingExtraError: xarm-python-sdk is not installed.
        RobotConnectionError: a model the SDK's joint-limit table does not list.
    """
    xconf = import_sdk("xarm.core.config.x_config", "xarm", "env.robot.driver=xarm").XCONF
    table = xconf.Robot.JOINT_LIMITS.get(axis, {})
    if device_type not in table:
        raise RobotConnectionError(
            f"xarm: no joint limits for axis={axis} device_type={device_type} in the SDK's table "
            f"(known: {[(a, sorted(t)) for a, t in xconf.Robot.JOINT_LIMITS.items()]})"
        )
    ranges = np.asarray(table[device_type], dtype=np.float64)
    reach = 0.44 if device_type == LITE6_DEVICE_TYPE else 0.7
    return RobotLimits(
        joint_low=ranges[:, 0].copy(),
        joint_high=ranges[:, 1].copy(),
        joint_vel_max=np.full(axis, SERVO_JOINT_SPEED),
        joint_acc_max=np.full(axis, 20.0),
        ee_low=np.full(3, -reach),
        ee_high=np.full(3, reach),
        ee_step_max=SERVO_LINEAR_SPEED / float(control_hz),
        control_hz=float(control_hz),
        joint_names=tuple(f"J{i}" for i in range(1, axis + 1)),
    )


class XArmRobot(Robot):
    """An xArm or Lite 6 at ``host``.

    Args:
        host: the control box's IP or hostname.
        control_hz: the rate commands are streamed at (Hz).
        model: ``(axis, device_type)`` to know the limits before connecting (tests, planning); by default
            read from the arm at connect, which also checks a given model against the arm.

    Raises:
        MissingExtraError: xarm-python-sdk missing (from :meth:`connect`, or here when ``model`` is given).
    """

    name = "xarm"
    modes = (
        CommandMode.JOINT_POSITION,
        CommandMode.JOINT_VELOCITY,
        CommandMode.EE_DELTA,
        CommandMode.EE_VELOCITY,
    )

    def __init__(self, host: str, control_hz: float = 10.0, model: tuple[int, int] | None = None) -> None:
        self.host = host
        self.name = f"xarm@{host}"
        self.control_hz = float(control_hz)
        self.model = model
        self._limits = xarm_limits(*model, control_hz) if model is not None else None
        self._arm = None
        self._mode: int | None = None
        self._target: tuple[np.ndarray, np.ndarray] | None = None
        self._gripper = 0.0
        self._stream: ServoStreamer | None = None
        self._stream_mode: CommandMode | None = None
        self._kinematics: MeasuredTcp | None = None

    @classmethod
    def from_config(cls, cfg: RobotConfig, control_hz: float = 10.0) -> XArmRobot:
        """The xArm at ``env.robot.address`` (``driver: xarm``). Raises ValueError for a bad address."""
        return cls(controller_host(cfg.address, "xarm"), control_hz)

    @property
    def limits(self) -> RobotLimits:
        if self._limits is None:
            raise RobotConnectionError(f"{self.name}: limits are read from the arm: connect() first")
        return self._limits

    @property
    def is_connected(self) -> bool:
        return self._arm is not None

    @property
    def is_lite6(self) -> bool:
        return self.model is not None and self.model == (6, LITE6_DEVICE_TYPE)

    def connect(self) -> None:
        """Connect, read the model and its limits, enable motion in servo mode and the gripper.

        Raises:
            MissingExtraError: xarm-python-sdk missing.
            RobotConnectionError: the control box cannot be reached (names it), or its model differs from
                the one given.
            RobotFault: the controller reports an error.
        """
        if self._arm is not None:
            return
        wrapper = import_sdk("xarm.wrapper", "xarm", "env.robot.driver=xarm")
        try:
            arm = wrapper.XArmAPI(self.host, is_radian=False)
        except Exception as err:  # the SDK raises a bare Exception("connect socket failed")
            raise RobotConnectionError(
                f"{self.name}: cannot connect to the xArm control box at {self.host}: {err}"
            ) from err
        if not arm.connected:
            raise RobotConnectionError(f"{self.name}: the xArm control box at {self.host} did not answer")
        found = (int(arm.axis), int(arm.device_type))
        if self.model is not None and found != self.model:
            arm.disconnect()
            raise RobotConnectionError(f"{self.name}: expected model {self.model}, the arm reports {found}")
        self.model, self._limits, self._arm = found, xarm_limits(*found, self.control_hz), arm
        if arm.has_error:
            code = arm.error_code
            self.disconnect()
            raise RobotFault(f"{self.name}: controller error code {code}; clear it on the control box")
        self._kinematics = MeasuredTcp(xarm_model.XARM7) if found == xarm_model.MODEL else None
        arm.motion_enable(enable=True)
        if not self.is_lite6:
            arm.set_gripper_mode(0)
            arm.set_gripper_enable(True)
        self._mode, self._target = None, None
        self._switch(CommandMode.JOINT_POSITION)

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray | None:
        """TCP position (3,) float64 m in the base frame at joints ``joint_pos`` (7,) rad on an xArm 7:
        UFACTORY's published chain plus the TCP offset measured from the first reading after
        :meth:`connect`; ``None`` on other models (and before the first connect). The safety layer uses it
        to keep joint commands in the workspace box.

        Raises:
            RobotConnectionError: not connected (the offset is still to be measured).
            RobotFault: the chain does not fit the arm (the flange would be over 0.4 m from the TCP).
            ValueError: ``joint_pos`` is not (7,).
        """
        if self._kinematics is None:
            return None
        return self._kinematics(joint_pos, self.read, self.name)

    vendor_stop = True

    def emergency_stop(self) -> None:
        """Stop streaming, then the SDK's ``emergency_stop`` (the controller stops the motion at once and
        drops the motion queue); the next command re-enters servo mode.

        Raises:
            RobotConnectionError: not connected.
        """
        arm = self._require()
        self._stop_stream()
        arm.emergency_stop()
        self._mode, self._target = None, None

    def set_tcp_boundary(self, low: np.ndarray, high: np.ndarray) -> bool:
        """Set the controller's safety boundary to the box ``low`` .. ``high`` ((3,) m each, base frame,
        the TCP) grown by :data:`BOUNDARY_MARGIN_M` (rounded outward to whole mm, the SDK's unit) and turn
        fence mode on (module doc). Returns True (the controller enforces it).

        Raises:
            RobotConnectionError: not connected.
            RobotFault: the TCP is outside that boundary now (the controller would stop at once with error
                C35: move the arm inside first, in manual mode), or the controller reports an error.
            CommandRejected: the SDK refused a call (its code).
        """
        arm = self._require()
        lo_mm = np.floor(1000.0 * (np.asarray(low, dtype=np.float64) - BOUNDARY_MARGIN_M)).astype(int)
        hi_mm = np.ceil(1000.0 * (np.asarray(high, dtype=np.float64) + BOUNDARY_MARGIN_M)).astype(int)
        pos, _ = self._measured_pose()
        if np.any(1000.0 * pos < lo_mm) or np.any(1000.0 * pos > hi_mm):
            raise RobotFault(
                f"{self.name}: the TCP at {np.round(pos, 4).tolist()} m is outside the safety boundary "
                f"{(lo_mm / 1000).tolist()}..{(hi_mm / 1000).tolist()} m (env.robot.safety.workspace_low/"
                f"high + {BOUNDARY_MARGIN_M} m); move it inside first"
            )
        boundary = [int(v) for pair in zip(hi_mm, lo_mm, strict=True) for v in pair]
        self._check(arm.set_reduced_tcp_boundary(boundary), "set_reduced_tcp_boundary")
        code = arm.set_fence_mode(True)  # xarm-python-sdk 1.18 returns [code] here
        self._check(code[0] if isinstance(code, list | tuple) else code, "set_fence_mode(True)")
        return True

    def disconnect(self) -> None:
        """Stop streaming (mode 0, the arm holds) and close the link; safe to call twice."""
        self._stop_stream()
        if self._arm is not None:
            self._arm.set_mode(0)
            self._arm.set_state(0)
            self._arm.disconnect()
            self._arm = None
        if self._kinematics is not None:
            self._kinematics.forget()  # the TCP offset may change before the next connect

    def _require(self):
        if self._arm is None:
            raise RobotConnectionError(f"{self.name}: not connected (call connect() first)")
        return self._arm

    def _check(self, code: int, what: str) -> None:
        if self._arm.has_error or code == 1:  # SDK code 1: a controller error is not cleared
            error = self._arm.error_code
            if not error:  # the answer's error flag came before the report: ask the controller
                error = self._arm.get_err_warn_code()[1][0]
            raise RobotFault(f"{self.name}: controller error code {error} after {what}")
        if code != 0:
            raise CommandRejected(f"{self.name}: {what} returned SDK code {code}")

    def read(self) -> RobotState:
        """Joint positions (rad) and speeds (rad/s), TCP pose, gripper closure (Lite 6: the last command).

        Raises:
            RobotConnectionError: not connected. RobotFault / CommandRejected: the SDK reports an error.
            RobotFault: on an xArm 7, the TCP is off the kinematic chain (:meth:`MeasuredTcp.check`).
        """
        arm = self._require()
        code, (pos_deg, vel_deg, _effort) = arm.get_joint_states(is_radian=False)
        self._check(code, "get_joint_states")
        code, pose = arm.get_position(is_radian=False)
        self._check(code, "get_position")
        if not self.is_lite6:
            code, pulses = arm.get_gripper_position()
            self._check(code, "get_gripper_position")
            self._gripper = gripper_to_si(pulses)
        ee_pos, ee_quat = pose_to_si(pose)
        n = self.limits.num_joints
        state = RobotState(
            joint_pos=joints_to_si(pos_deg[:n]),
            joint_vel=joints_to_si(vel_deg[:n]),
            ee_pos=ee_pos,
            ee_quat=ee_quat,
            gripper=self._gripper,
            timestamp=time.monotonic(),
        )
        if self._kinematics is not None:
            self._kinematics.check(state, self.name)
        return state

    def command(self, cmd: Command) -> None:
        """Send one command, converted to the SDK's units (see the module docstring).

        Raises:
            RobotConnectionError: not connected.
            CommandRejected: bad mode/shape/values, targets outside the joint limits or speeds beyond them,
                or an SDK code other than 0 (a servo-mode setpoint's included: it stopped the stream).
            RobotFault: the controller reports an error (also when found by the servo stream).
        """
        arm = self._require()
        limits = self.limits
        value = check_command(cmd, self.modes, limits.num_joints, self.name)
        duration = 2.0 / self.control_hz
        if cmd.mode == CommandMode.JOINT_POSITION:
            check_joint_targets(value, limits, self.name)
        elif cmd.mode == CommandMode.JOINT_VELOCITY:
            check_joint_speeds(value, limits, self.name)
        self._switch(cmd.mode)
        code = 0
        if cmd.mode == CommandMode.JOINT_POSITION:
            self._streamer(cmd.mode).set_target(value)
        elif cmd.mode == CommandMode.EE_DELTA:
            if self._target is None:
                self._target = self._measured_pose()
            self._target = apply_ee_delta(*self._target, value)
            self._streamer(cmd.mode).set_target(np.concatenate(self._target))
        elif cmd.mode == CommandMode.JOINT_VELOCITY:
            code = arm.vc_set_joint_velocity(si_to_joints(value).tolist(), is_radian=False, duration=duration)
        else:
            code = arm.vc_set_cartesian_velocity(
                twist_to_xarm(value).tolist(), is_radian=False, duration=duration
            )
        self._check(code, f"{cmd.mode!s} command")
        if cmd.gripper is not None:
            self._command_gripper(arm, cmd.gripper)

    def _measured_pose(self) -> tuple[np.ndarray, np.ndarray]:
        code, pose = self._arm.get_position(is_radian=False)
        self._check(code, "get_position")
        return pose_to_si(pose)

    def _streamer(self, mode: CommandMode) -> ServoStreamer:
        """The servo stream of ``mode`` (joint or pose setpoints), started from the measured joints or
        pose when the mode changed."""
        if self._stream is not None and self._stream_mode == mode:
            return self._stream
        self._stop_stream()
        dt = 1.0 / STREAM_HZ
        if mode == CommandMode.JOINT_POSITION:
            code, (pos_deg, _vel, _effort) = self._arm.get_joint_states(is_radian=False)
            self._check(code, "get_joint_states")
            start = joints_to_si(pos_deg[: self.limits.num_joints])
            advance = joint_advance(SERVO_JOINT_SPEED * dt)
            send = self._send_joints
        else:
            start = np.concatenate(self._measured_pose())
            advance = pose_advance(min(SERVO_LINEAR_SPEED * dt, SERVO_STEP_MAX_M), SERVO_ANGULAR_SPEED * dt)
            send = self._send_pose
        self._stream = ServoStreamer(self.name, start, advance, send, STREAM_HZ)
        self._stream_mode = mode
        return self._stream

    def _send_joints(self, q: np.ndarray) -> None:
        self._check(
            self._arm.set_servo_angle_j(si_to_joints(q).tolist(), is_radian=False), "set_servo_angle_j"
        )

    def _send_pose(self, pose: np.ndarray) -> None:
        mvpose = si_to_pose(pose[:3], pose[3:]).tolist()
        self._check(self._arm.set_servo_cartesian(mvpose, is_radian=False), "set_servo_cartesian")

    def _stop_stream(self) -> None:
        if self._stream is not None:
            self._stream.stop()
        self._stream, self._stream_mode = None, None

    def _command_gripper(self, arm, closure: float) -> None:
        if self.is_lite6:
            code = arm.close_lite6_gripper() if closure >= 0.5 else arm.open_lite6_gripper()
        else:
            code = arm.set_gripper_position(si_to_gripper(closure), wait=False)
        self._check(code, "gripper command")
        self._gripper = float(closure) if self.is_lite6 else self._gripper

    def _switch(self, mode: CommandMode) -> None:
        if mode != CommandMode.EE_DELTA:
            self._target = None  # the next ee_delta starts from the measured pose
        if self._mode != MODE[mode]:
            self._stop_stream()
            self._check(self._arm.set_mode(MODE[mode]), f"set_mode({MODE[mode]})")
            self._check(self._arm.set_state(0), "set_state(0)")
            self._mode = MODE[mode]
