"""The ``Robot`` interface every arm driver implements (sim-backed, serial servos, UR, xArm, Franka).

Units are SI throughout: joint positions in rad (prismatic joints in m), velocities in rad/s, end-effector
positions in m (robot base frame), orientations as unit quaternions (w, x, y, z), times in s from
``time.monotonic()``. The gripper is normalised to [0, 1] (0 open, 1 closed) whatever the hardware unit.

A caller connects, reads a :class:`RobotState`, and sends :class:`Command` objects in one of the modes the
robot lists in ``modes``. The safety layer (:mod:`robot_rl.hardware.safety`) wraps any ``Robot`` and is
itself a ``Robot``; drivers do their own unit conversion but no policy-level clipping.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field

import numpy as np

from robot_rl.hardware.errors import CommandRejected


class CommandMode(enum.StrEnum):
    """How :attr:`Command.value` is read.

    - ``joint_position``: (n,) absolute joint targets (rad).
    - ``joint_velocity``: (n,) joint velocities (rad/s).
    - ``ee_delta``: (3,) end-effector position change (m, base frame) from the current target, gripper
      pointing down (the simulated task's ``[dx, dy, dz]``); (6,) adds a rotation vector change (rad).
    - ``ee_velocity``: (6,) Cartesian twist, linear (m/s) then angular (rad/s), base frame.
    """

    JOINT_POSITION = "joint_position"
    JOINT_VELOCITY = "joint_velocity"
    EE_DELTA = "ee_delta"
    EE_VELOCITY = "ee_velocity"


@dataclass(frozen=True)
class RobotState:
    """One reading of the robot.

    Attributes:
        joint_pos: float64 (n,) joint positions (rad).
        joint_vel: float64 (n,) joint velocities (rad/s).
        ee_pos: float64 (3,) end-effector position (m, base frame).
        ee_quat: float64 (4,) end-effector orientation, unit quaternion (w, x, y, z).
        gripper: gripper closure in [0, 1] (0 open, 1 closed).
        timestamp: capture time (s, ``time.monotonic()`` of the reading host).
        extra: named float arrays a robot adds (e.g. the sim-backed robot's ``environment_state``: the
            cube pose a motion-capture system would give on hardware, and ``is_success``).
    """

    joint_pos: np.ndarray
    joint_vel: np.ndarray
    ee_pos: np.ndarray
    ee_quat: np.ndarray
    gripper: float
    timestamp: float
    extra: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Command:
    """One command: ``value`` float64 in the units of ``mode`` (see :class:`CommandMode`), and an optional
    gripper target in [0, 1] (``None`` keeps the last one). ``timestamp`` (s, monotonic) is when the
    sender made it; the watchdog and latency figures use it."""

    mode: CommandMode
    value: np.ndarray
    gripper: float | None = None
    timestamp: float = 0.0


@dataclass(frozen=True)
class RobotLimits:
    """A robot's limits as data (the safety layer enforces them; drivers report them).

    Attributes:
        joint_low, joint_high: float64 (n,) position limits (rad).
        joint_vel_max: float64 (n,) speed limits (rad/s).
        joint_acc_max: float64 (n,) acceleration limits (rad/s²).
        ee_low, ee_high: float64 (3,) workspace box for the end effector (m, base frame).
        ee_step_max: largest end-effector move per control step (m).
        control_hz: the rate the robot expects commands at (Hz).
        joint_names: one name per joint, in order.
    """

    joint_low: np.ndarray
    joint_high: np.ndarray
    joint_vel_max: np.ndarray
    joint_acc_max: np.ndarray
    ee_low: np.ndarray
    ee_high: np.ndarray
    ee_step_max: float
    control_hz: float
    joint_names: tuple[str, ...]

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)


class Robot(abc.ABC):
    """An arm with a gripper. Use as a context manager (``with robot: ...``) to connect and disconnect.

    Implementations raise :class:`~robot_rl.hardware.errors.RobotConnectionError` when the link is down,
    :class:`~robot_rl.hardware.errors.RobotFault` when the robot reports a fault, and
    :class:`~robot_rl.hardware.errors.CommandRejected` for a command they cannot execute.
    """

    name: str = "robot"
    modes: tuple[CommandMode, ...] = ()
    simulated: bool = False
    """Whether the arm is simulated: the safety layer then defaults to its full speed and acceleration
    (``SafetyConfig.motion_scales``); real arms default to a quarter of them."""
    lockstep: bool = False
    """Whether the robot advances only when commanded (a simulated arm stepped by its client: one control
    period per command); False for a real-time robot, whose arm moves on between a reading and a command."""

    @property
    @abc.abstractmethod
    def limits(self) -> RobotLimits:
        """The robot's :class:`RobotLimits` (valid after :meth:`connect`)."""

    @property
    @abc.abstractmethod
    def is_connected(self) -> bool: ...

    @abc.abstractmethod
    def connect(self) -> None:
        """Open the link. Raises ``RobotConnectionError`` naming the port/address when it fails."""

    @abc.abstractmethod
    def disconnect(self) -> None:
        """Stop commanding (hold) and close the link; safe to call twice."""

    @abc.abstractmethod
    def read(self) -> RobotState:
        """The latest :class:`RobotState`."""

    @abc.abstractmethod
    def command(self, cmd: Command) -> None:
        """Send one command (non-blocking: returns once sent, not once reached)."""

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray | None:
        """End-effector position (3,) float64 m (base frame) at joint positions ``joint_pos`` (n,) rad, or
        ``None`` when the driver has no kinematic model (the default). The safety layer uses it to keep
        joint commands inside the workspace box; without it the box is enforced from the measured pose."""
        return None

    @property
    def tracking_time_s(self) -> float:
        """How long (s) the robot's controller takes to close a tracking error (e.g. the slowest ``KD / KP``
        of a joint PD): the safety layer judges an ``ee_delta`` target by where the arm gets at its present
        speed over it. 0 when the driver does not say (the default; the layer then uses one control
        period)."""
        return 0.0

    def link_clearance(self, joint_pos: np.ndarray) -> float | None:
        """The smallest gap (m) between an arm link and the table or another link at joint positions
        ``joint_pos`` (n,) rad (negative: they overlap), or ``None`` when the driver has no collision model
        (the default; the safety layer then does not check the links)."""
        return None

    def set_tcp_boundary(self, low: np.ndarray, high: np.ndarray) -> bool:
        """Hand the TCP box ``low`` .. ``high`` ((3,) m each, base frame) to the robot's own controller, which
        then keeps the end effector in it in its real-time loop (the safety layer calls this at connect;
        :mod:`robot_rl.hardware.tcp_boundary`). Returns whether the robot enforces it: ``False`` (the
        default) when the driver has no run-time call for one (UR and Franka: set it on the pendant or in
        Desk, docs/hardware.md). Implementations raise ``HardwareError`` subclasses when the controller
        refuses the box."""
        return False

    vendor_stop = False
    """True when :meth:`emergency_stop` stops the arm through the controller's own stop (the arm then
    stays stopped on the controller's side, and further commands are not needed to hold it)."""

    def emergency_stop(self) -> None:
        """Stop now for a latched e-stop: the controller's own stop where the driver has one
        (:attr:`vendor_stop`: ur_rtde's protective stop, xArm's ``emergency_stop``, franky's ``stop``),
        else :meth:`hold`. Raises what :meth:`hold` or the SDK call raises (``HardwareError``)."""
        self.hold()

    def hold(self) -> None:
        """Keep the current position: a zero ``ee_delta`` or the measured joint positions."""
        state = self.read()
        if CommandMode.JOINT_POSITION in self.modes:
            self.command(Command(CommandMode.JOINT_POSITION, state.joint_pos.copy()))
        else:
            self.command(Command(CommandMode.EE_DELTA, np.zeros(3)))

    def __enter__(self) -> Robot:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.disconnect()


def check_command(cmd: Command, modes: tuple[CommandMode, ...], num_joints: int, robot: str) -> np.ndarray:
    """Validate ``cmd`` against a robot's modes and joint count; return ``cmd.value`` as float64.

    Raises:
        CommandRejected: unsupported mode, wrong shape for the mode, non-finite value or gripper, or a
            gripper outside [0, 1]. The message names the robot.
    """
    if cmd.mode not in modes:
        raise CommandRejected(
            f"{robot}: mode {cmd.mode!s} not supported (supported: {[str(m) for m in modes]})"
        )
    value = np.asarray(cmd.value, dtype=np.float64)
    shapes = {
        CommandMode.JOINT_POSITION: [(num_joints,)],
        CommandMode.JOINT_VELOCITY: [(num_joints,)],
        CommandMode.EE_DELTA: [(3,), (6,)],
        CommandMode.EE_VELOCITY: [(6,)],
    }[cmd.mode]
    if value.shape not in shapes:
        raise CommandRejected(f"{robot}: {cmd.mode!s} command must have shape {shapes}, got {value.shape}")
    if not np.all(np.isfinite(value)):
        raise CommandRejected(f"{robot}: {cmd.mode!s} command has NaN or inf: {value.tolist()}")
    if cmd.gripper is not None and not (np.isfinite(cmd.gripper) and 0.0 <= cmd.gripper <= 1.0):
        raise CommandRejected(f"{robot}: gripper command must be in [0, 1], got {cmd.gripper}")
    return value
