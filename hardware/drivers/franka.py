"""``FrankaRobot``: a Franka Panda or FR3 (7 joints) through ``franky`` (extra ``franka``:
``franky-control``, which bundles libfranka and talks FCI to the controller; FCI must be enabled in Desk
and the host needs a real-time kernel for ``RealtimeConfig.Enforce``, franky's default, which
``env.robot.franka_realtime: ignore`` turns off for a host without one: libfranka then runs at normal
priority and may miss its 1 kHz deadlines, which the arm answers with communication-constraint reflexes).

Units: franky is SI (joints rad, rad/s; poses m with quaternions in **(x, y, z, w)** order, converted here
to the interface's (w, x, y, z); gripper width in m, turned into closure ``1 - width / max_width``).

Modes (each starts an asynchronous franky motion; a new motion of the same kind takes over seamlessly,
a change of kind stops the running one first, as franky requires):
    - ``ee_delta`` (3,)/(6,): **Cartesian impedance**, as HIL-SERL runs the Franka: one
      ``CartesianImpedanceTrackingMotion`` (translational stiffness :data:`TRANSLATIONAL_STIFFNESS`
      N/m, rotational :data:`ROTATIONAL_STIFFNESS` Nm/rad, critically damped; HIL-SERL's values) whose
      reference pose moves by each delta (m; rotation vector rad), so contact stays compliant;
    - ``joint_position`` (7,) rad: a ``JointMotion`` to the target (franky's time-optimal planner);
    - ``joint_velocity`` (7,) rad/s and ``ee_velocity`` (6,) m/s, rad/s: ``JointVelocityMotion`` /
      ``CartesianVelocityMotion`` held for two control periods, so the arm stops when commands stop.

Limits (:func:`franka_limits`, Franka's Panda datasheet): joint ranges ``Q_LOW``..``Q_HIGH`` rad, speeds
2.175/2.61 rad/s, accelerations 15/7.5/10/12.5/15/20/20 rad/s^2, workspace box +-0.855 m (reach). Joint
targets outside the ranges and speeds beyond the limits are refused (``CommandRejected``). franky's
``relative_dynamics_factor`` (default :data:`DYNAMICS_FACTOR`) scales its planner's speed.

Gripper (the Franka Hand): a closure of :data:`GRASP_CLOSURE` or more starts one force-controlled
``grasp_async`` (width 0, ``env.robot.grasp_force_n`` N, speed :data:`GRIPPER_SPEED`, any object narrower
than the open hand counts as grasped), kept while the closure stays there; a lower closure moves the fingers
to ``(1 - closure) * max_width`` with ``move_async``. A gripper command is sent only when the target
changes, so the one in progress is not restarted every control period.

Kinematics: Franka's published D-H table (the Panda's and FR3's;
:mod:`~robot_rl.hardware.drivers.dh_kinematics`, checked against the MuJoCo Panda) plus the end-effector
frame set in Desk, measured from the first reading, is :meth:`FrankaRobot.forward_kinematics`, so the
safety layer keeps joint commands in the workspace box; a reading more than 2 cm off it is a ``RobotFault``.

Faults: franky's ``ControlException``/``CommandException`` (reflex, joint limit, collision) become
``RobotFault``; call ``robot.recover_from_errors()`` only after a human checked the arm.

Untested on a real Franka here (no controller in CI): the tests cover construction, building each franky
motion, the pose conversion on a recorded trace, the limit checks and the connection error against a
closed port on localhost; the realtime setting and the gripper's grasp/move calls run against fakes of
``franky.Robot`` and ``franky.Gripper`` that check each call against the Franka Hand's datasheet.
"""

from __future__ import annotations

import time

import numpy as np

from robot_rl.config import RobotConfig
from robot_rl.hardware.drivers.arm_common import (
    apply_ee_delta,
    check_joint_speeds,
    check_joint_targets,
    controller_host,
)
from robot_rl.hardware.drivers.dh_kinematics import FRANKA, MeasuredTcp
from robot_rl.hardware.errors import CommandRejected, RobotConnectionError, RobotFault
from robot_rl.hardware.robot import Command, CommandMode, Robot, RobotLimits, RobotState, check_command
from robot_rl.hardware.sdk import import_sdk
from robot_rl.hardware.sim_robot import JOINT_ACC_MAX, JOINT_VEL_MAX

Q_LOW = np.array([-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973])
"""Panda joint lower limits (rad)."""
Q_HIGH = np.array([2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973])
"""Panda joint upper limits (rad)."""
TRANSLATIONAL_STIFFNESS = 2000.0
"""Cartesian impedance translational stiffness (N/m), HIL-SERL's Franka controller setting."""
ROTATIONAL_STIFFNESS = 150.0
"""Cartesian impedance rotational stiffness (Nm/rad), HIL-SERL's setting."""
DYNAMICS_FACTOR = 0.1
"""franky ``relative_dynamics_factor``: fraction of the robot's velocity/acceleration/jerk limits used."""
GRIPPER_SPEED = 0.1
"""Gripper opening/closing speed (m/s), the Franka Hand's top speed (50 mm/s per finger)."""
GRASP_CLOSURE = 0.5
"""A gripper closure (in [0, 1]) at or above this grasps with force instead of moving to a width."""
GRASP_FORCE_MAX_N = 70.0
"""The Franka Hand's continuous grasping force (N, datasheet; 140 N peak)."""
WIDTH_TOLERANCE_M = 0.001
"""A new move target nearer than this (m) to the last one is not re-sent."""
REACH_M = 0.855
"""Panda reach (m): the workspace box is +-REACH_M around the base."""


def franka_limits(control_hz: float) -> RobotLimits:
    """The Panda's limits (see the module docstring) at ``control_hz``."""
    return RobotLimits(
        joint_low=Q_LOW.copy(),
        joint_high=Q_HIGH.copy(),
        joint_vel_max=JOINT_VEL_MAX.copy(),
        joint_acc_max=JOINT_ACC_MAX.copy(),
        ee_low=np.full(3, -REACH_M),
        ee_high=np.full(3, REACH_M),
        ee_step_max=0.05,
        control_hz=float(control_hz),
        joint_names=tuple(f"panda_joint{i}" for i in range(1, 8)),
    )


def quat_to_si(quat_xyzw: np.ndarray) -> np.ndarray:
    """franky quaternion (x, y, z, w) -> the interface's (w, x, y, z)."""
    q = np.asarray(quat_xyzw, dtype=np.float64)
    return np.array([q[3], q[0], q[1], q[2]])


def si_to_quat(quat_wxyz: np.ndarray) -> np.ndarray:
    """The interface's (w, x, y, z) -> franky's (x, y, z, w)."""
    q = np.asarray(quat_wxyz, dtype=np.float64)
    return np.array([q[1], q[2], q[3], q[0]])


def make_motion(franky, mode: CommandMode, value: np.ndarray, control_hz: float, target=None):
    """The franky motion for one command (no robot needed, so tests build each one).

    ``target``: for ``ee_delta``, the new reference pose (position (3,) m, quaternion (w, x, y, z)); the
    returned impedance motion starts there and later deltas move it with ``set_reference``.
    """
    hold = franky.Duration(int(round(2000.0 / control_hz)))  # ms
    if mode == CommandMode.JOINT_POSITION:
        return franky.JointMotion(franky.JointState(value), return_when_finished=False)
    if mode == CommandMode.JOINT_VELOCITY:
        return franky.JointVelocityMotion(value, duration=hold)
    if mode == CommandMode.EE_VELOCITY:
        twist = franky.Twist(value[:3], value[3:])
        return franky.CartesianVelocityMotion(franky.RobotVelocity(twist), duration=hold)
    motion = franky.CartesianImpedanceTrackingMotion(
        translational_stiffness=TRANSLATIONAL_STIFFNESS, rotational_stiffness=ROTATIONAL_STIFFNESS
    )
    motion.set_reference(franky.CartesianReference(franky.Affine(target[0], si_to_quat(target[1]))))
    return motion


class FrankaRobot(Robot):
    """A Franka arm at ``host`` with its Franka Hand.

    Args:
        host: the controller's FCI IP or hostname.
        control_hz: the rate commands are sent at (Hz).
        dynamics_factor: franky ``relative_dynamics_factor`` in (0, 1].
        realtime: ``"enforce"`` (franky's default: refuse to run without a real-time kernel) or
            ``"ignore"``; franky's ``RealtimeConfig``.
        grasp_force: grasping force (N) in (0, :data:`GRASP_FORCE_MAX_N`].

    Raises:
        ValueError: ``realtime`` or ``grasp_force`` out of range (naming the config key).
        MissingExtraError: from :meth:`connect` when franky is not installed (``robot-rl[franka]``).
    """

    name = "franka"
    modes = (
        CommandMode.EE_DELTA,
        CommandMode.JOINT_POSITION,
        CommandMode.JOINT_VELOCITY,
        CommandMode.EE_VELOCITY,
    )

    def __init__(
        self,
        host: str,
        control_hz: float = 10.0,
        dynamics_factor: float = DYNAMICS_FACTOR,
        realtime: str = "enforce",
        grasp_force: float = 20.0,
    ) -> None:
        if realtime not in ("enforce", "ignore"):
            raise ValueError(f"env.robot.franka_realtime={realtime!r}: must be 'enforce' or 'ignore'")
        if not 0.0 < grasp_force <= GRASP_FORCE_MAX_N:
            raise ValueError(
                f"env.robot.grasp_force_n={grasp_force}: must be in (0, {GRASP_FORCE_MAX_N:g}] N "
                "(the Franka Hand's continuous force)"
            )
        self.host = host
        self.name = f"franka@{host}"
        self.dynamics_factor = dynamics_factor
        self.realtime = realtime
        self.grasp_force = float(grasp_force)
        self._grip_target: float | str | None = None  # the hand's last target: a width (m) or "grasp"
        self._limits = franka_limits(control_hz)
        self._kinematics = MeasuredTcp(FRANKA)
        self._franky = None
        self._robot = None
        self._gripper = None
        self._mode: CommandMode | None = None
        self._impedance = None
        self._target: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def from_config(cls, cfg: RobotConfig, control_hz: float = 10.0) -> FrankaRobot:
        """The Franka at ``env.robot.address`` (``driver: franka``) with ``env.robot.franka_realtime`` and
        ``env.robot.grasp_force_n``. Raises ValueError for a bad address or either key out of range."""
        host = controller_host(cfg.address, "franka")
        return cls(host, control_hz, realtime=cfg.franka_realtime, grasp_force=cfg.grasp_force_n)

    @property
    def limits(self) -> RobotLimits:
        return self._limits

    @property
    def is_connected(self) -> bool:
        return self._robot is not None

    def connect(self) -> None:
        """Connect to the arm and its gripper over FCI.

        Raises:
            MissingExtraError: franky missing.
            RobotConnectionError: the controller cannot be reached or FCI is off (names the host).
        """
        if self._robot is not None:
            return
        franky = self._franky = import_sdk("franky", "franka", "env.robot.driver=franka")
        try:
            realtime = {"enforce": franky.RealtimeConfig.Enforce, "ignore": franky.RealtimeConfig.Ignore}
            robot = franky.Robot(self.host, realtime_config=realtime[self.realtime])
            robot.relative_dynamics_factor = self.dynamics_factor
            self._gripper = franky.Gripper(self.host)
        except franky.Exception as err:
            raise RobotConnectionError(
                f"{self.name}: cannot connect to the Franka at {self.host}: {err}"
            ) from err
        self._robot, self._mode, self._impedance, self._target = robot, None, None, None
        self._grip_target = None
        self._kinematics.forget()

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray:
        """The end-effector position (3,) float64 m (base frame) at ``joint_pos`` (7,) rad: Franka's
        published D-H table for the Panda and FR3 plus the end-effector frame set in Desk, measured from
        the first reading after connect (:mod:`~robot_rl.hardware.drivers.dh_kinematics`).

        Raises:
            RobotConnectionError: not connected.
            RobotFault: the model does not fit the arm (the flange would be over 0.4 m from the TCP)."""
        return self._kinematics(joint_pos, self.read, self.name)

    vendor_stop = True

    def emergency_stop(self) -> None:
        """franky's ``Robot.stop``: every running motion is stopped by libfranka (the arm holds under its
        internal controller); the next command starts a new motion.

        Raises:
            RobotConnectionError: not connected.
        """
        robot = self._require()
        robot.stop()
        self._mode, self._impedance, self._target = None, None, None

    def disconnect(self) -> None:
        """Stop every motion (the arm holds under its internal controller); safe to call twice."""
        if self._robot is not None:
            self._robot.stop()
        self._robot = self._gripper = self._impedance = None

    def _require(self):
        if self._robot is None:
            raise RobotConnectionError(f"{self.name}: not connected (call connect() first)")
        return self._robot

    def read(self) -> RobotState:
        """Joint positions (rad) and velocities (rad/s), end-effector pose, gripper closure.

        Raises:
            RobotConnectionError: not connected.
            RobotFault: the end effector is off the kinematic model (:meth:`MeasuredTcp.check`)."""
        robot = self._require()
        joints = robot.current_joint_state
        pose = robot.current_cartesian_state.pose.end_effector_pose
        state = RobotState(
            joint_pos=np.asarray(joints.position, dtype=np.float64),
            joint_vel=np.asarray(joints.velocity, dtype=np.float64),
            ee_pos=np.asarray(pose.translation, dtype=np.float64),
            ee_quat=quat_to_si(pose.quaternion),
            gripper=float(np.clip(1.0 - self._gripper.width / self._gripper.max_width, 0.0, 1.0)),
            timestamp=time.monotonic(),
        )
        self._kinematics.check(state, self.name)
        return state

    def command(self, cmd: Command) -> None:
        """Start (or update) the franky motion of ``cmd`` (see the module docstring).

        Raises:
            RobotConnectionError: not connected.
            CommandRejected: bad mode/shape/values, targets outside the joint limits or speeds beyond them.
            RobotFault: franky reports a control or command error (reflex, collision, limit).
        """
        robot = self._require()
        value = check_command(cmd, self.modes, 7, self.name)
        if cmd.mode == CommandMode.JOINT_POSITION:
            check_joint_targets(value, self._limits, self.name)
        elif cmd.mode == CommandMode.JOINT_VELOCITY:
            check_joint_speeds(value, self._limits, self.name)
        franky = self._franky
        try:
            if self._mode is not None and self._mode != cmd.mode:
                robot.stop()
                self._impedance = self._target = None
            self._mode = cmd.mode
            if cmd.mode == CommandMode.EE_DELTA:
                self._move_impedance(robot, value)
            else:
                robot.move(make_motion(franky, cmd.mode, value, self._limits.control_hz), asynchronous=True)
            if cmd.gripper is not None:
                self._command_gripper(cmd.gripper)
        except (franky.ControlException, franky.CommandException) as err:
            raise RobotFault(f"{self.name}: {type(err).__name__}: {err}") from err
        except franky.InvalidOperationException as err:
            raise CommandRejected(f"{self.name}: {err}") from err

    def _command_gripper(self, closure: float) -> None:
        """Grasp with force at a closure of :data:`GRASP_CLOSURE` or more, else move to the width; nothing
        is sent while the target stays the same."""
        hand = self._gripper
        if closure >= GRASP_CLOSURE:
            if self._grip_target != "grasp":
                hand.grasp_async(0.0, GRIPPER_SPEED, self.grasp_force, epsilon_outer=hand.max_width)
                self._grip_target = "grasp"
            return
        width = (1.0 - closure) * hand.max_width
        last = self._grip_target
        if not isinstance(last, float) or abs(width - last) > WIDTH_TOLERANCE_M:
            hand.move_async(width, GRIPPER_SPEED)
            self._grip_target = width

    def _move_impedance(self, robot, delta: np.ndarray) -> None:
        franky = self._franky
        if self._target is None:
            pose = robot.current_cartesian_state.pose.end_effector_pose
            self._target = (np.asarray(pose.translation, dtype=np.float64), quat_to_si(pose.quaternion))
        self._target = apply_ee_delta(*self._target, delta)
        if self._impedance is None:
            self._impedance = make_motion(
                franky, CommandMode.EE_DELTA, delta, self._limits.control_hz, self._target
            )
            robot.move(self._impedance, asynchronous=True)
        else:
            pos, quat = self._target
            self._impedance.set_reference(franky.CartesianReference(franky.Affine(pos, si_to_quat(quat))))
