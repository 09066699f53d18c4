"""The SO-101 arm (six Feetech STS3215 servos on one serial bus) behind the
:class:`~robot_rl.hardware.robot.Robot` interface, and its calibration.

Joints (servo ids 1..6 on a stock arm): ``shoulder_pan``, ``shoulder_lift``, ``elbow_flex``, ``wrist_flex``,
``wrist_roll`` (the five arm joints of ``RobotState.joint_pos``, rad) and ``gripper`` (the moving jaw,
reported as ``RobotState.gripper`` in [0, 1], 0 open, 1 closed). Mode: ``joint_position`` (5,) rad plus an
optional gripper target. End-effector pose: forward kinematics of the SO-101 URDF
(:mod:`robot_rl.hardware.drivers.so101_model`), right when the calibration zero pose and directions match
the URDF's. Limits: each joint's calibrated range; speed 4.7 rad/s (STS3215 at 7.4 V: 0.222 s per 60 deg);
acceleration 39 rad/s² (the acceleration register's top value, 254 x 100 ticks/s²); workspace box: the
arm's reach around the shoulder. Servo settings: connecting a torqued arm writes LeRobot's SO follower
values (position mode, P 16, I 0, D 32 on every servo; the jaw's torque limit 50 %, protection current
1.6 A, overload torque 25 %), so a squeezing jaw holds instead of tripping its overload flag.

Calibration (one JSON file per arm, kept next to its robot config) maps servo ticks to joint angles:
``angle = direction * wrap(ticks - zero_ticks) * 2 pi / 4096`` with ``wrap`` to [-2048, 2048) ticks, so a
range may cross the encoder's 0/4095 seam. File format::

    {"robot": "so101",
     "joints": {"shoulder_pan": {"id": 1, "zero_ticks": 2048, "direction": 1,
                                 "range_min": 900, "range_max": 3200}, ...}}

``zero_ticks``: the reading in the zero pose (LeRobot's "middle of the range" pose, the URDF's zero);
``direction``: +1 if ticks grow with the URDF joint angle, else -1; ``range_min``/``range_max``: the
readings at the two ends of the joint's travel, ``range_min`` at the end with fewer ticks (counted from
``zero_ticks`` across the seam). The jaw's angle grows as it
opens (URDF), so the gripper is closed at its lower angle. :func:`calibrate` records a file while a person
moves the (limp) arm. The calibration is only applied in software; nothing is written to servo EEPROM.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from robot_rl.config import RobotConfig
from robot_rl.hardware.drivers import feetech
from robot_rl.hardware.drivers import so101_model as model
from robot_rl.hardware.errors import (
    CalibrationError,
    CommandRejected,
    RobotConnectionError,
    RobotFault,
    RobotTimeoutError,
)
from robot_rl.hardware.robot import Command, CommandMode, Robot, RobotLimits, RobotState, check_command

TICKS_PER_RAD = feetech.TICKS_PER_TURN / (2 * math.pi)
JOINT_VEL_MAX = 4.7
"""rad/s: STS3215 no-load speed at 7.4 V (0.222 s per 60 deg, Feetech datasheet)."""
JOINT_ACC_MAX = 254 * 100 / TICKS_PER_RAD
"""rad/s²: the top value of the acceleration register (254 x 100 ticks/s²), about 39 rad/s²."""
RANGE_MARGIN_TICKS = 100
"""At connect, a joint may read this far (ticks, about 9 deg) outside its calibrated range; further
means the file belongs to another arm or a horn was re-mounted."""
MIN_RANGE_TICKS = 200
""":func:`calibrate` refuses a joint that moved less than this (ticks, about 18 deg)."""
SCAN_IDS = range(1, 13)
"""Ids probed for servos the calibration does not list, when a listed one does not answer."""
SERVO_SETTINGS = (
    (feetech.OPERATING_MODE, 0),
    (feetech.P_COEFFICIENT, 16),
    (feetech.I_COEFFICIENT, 0),
    (feetech.D_COEFFICIENT, 32),
)
"""Written to every servo of a torqued arm at connect, as LeRobot's SO follower does: position mode, and
the position loop's P lowered from the factory 32 to 16 (less shaking), I 0, D 32."""
GRIPPER_SETTINGS = (
    (feetech.MAX_TORQUE_LIMIT, 500),
    (feetech.PROTECTION_CURRENT, 250),
    (feetech.OVERLOAD_TORQUE, 25),
)
"""Written to the jaw's servo at connect, LeRobot's values: torque capped at 50 % of stall, protection
current 250 x 6.5 mA = 1.6 A (about half the stall current), 25 % torque after an overload, so a jaw
squeezing an object holds it instead of burning out or tripping its overload flag."""


def wrap_ticks(delta: int) -> int:
    """A tick difference folded into [-2048, 2048)."""
    return (int(delta) + 2048) % 4096 - 2048


@dataclass(frozen=True)
class JointCalibration:
    """One joint's servo ``id``, ``zero_ticks`` (reading at angle 0), ``direction`` (+1/-1) and the raw
    readings ``range_min``/``range_max`` at the ends of its travel with fewer/more ticks (0..4095)."""

    id: int
    zero_ticks: int
    direction: int
    range_min: int
    range_max: int

    def angle(self, ticks: int) -> float:
        """Raw ticks -> joint angle (rad)."""
        return self.direction * wrap_ticks(ticks - self.zero_ticks) / TICKS_PER_RAD

    def angle_range(self) -> tuple[float, float]:
        """(low, high) joint angle (rad) of the calibrated travel."""
        a, b = self.angle(self.range_min), self.angle(self.range_max)
        return (min(a, b), max(a, b))

    def ticks(self, angle: float) -> int:
        """Joint angle (rad) -> raw ticks, the angle first clipped to the calibrated range."""
        low, high = self.angle_range()
        q = min(max(float(angle), low), high)
        return (self.zero_ticks + round(self.direction * q * TICKS_PER_RAD)) % feetech.TICKS_PER_TURN

    def delta_range(self) -> tuple[int, int]:
        """The travel as tick offsets from ``zero_ticks`` (unwrapped)."""
        return wrap_ticks(self.range_min - self.zero_ticks), wrap_ticks(self.range_max - self.zero_ticks)


@dataclass(frozen=True)
class Calibration:
    """An SO-101's calibration: :class:`JointCalibration` per joint name of ``JOINT_NAMES`` (in order)."""

    joints: dict[str, JointCalibration]

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(j.id for j in self.joints.values())

    def save(self, path: str | Path) -> None:
        """Write the JSON file (module docstring format)."""
        doc = {"robot": "so101", "joints": {name: asdict(j) for name, j in self.joints.items()}}
        Path(path).write_text(json.dumps(doc, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read and check a calibration file.

        Raises:
            CalibrationError: the file is missing or not JSON, is not an ``so101`` calibration, its joint
                names differ from the SO-101's (missing/extra names listed), an entry lacks or adds a key,
                a value is not an int, ids repeat or leave 0..252, a direction is not +-1, ticks leave
                0..4095, or ``zero_ticks`` lies outside the range. The message names the file and key.
        """
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError as e:
            raise CalibrationError(
                f"calibration file {str(path)!r} not found; record one with "
                "robot_rl.hardware.drivers.so101.calibrate (see README, 'Running on a real robot')"
            ) from e
        except (OSError, ValueError) as e:
            raise CalibrationError(f"calibration file {str(path)!r} is not readable JSON: {e}") from e
        if (
            not isinstance(doc, dict)
            or doc.get("robot") != "so101"
            or not isinstance(doc.get("joints"), dict)
        ):
            raise CalibrationError(
                f"calibration file {str(path)!r}: expected {{'robot': 'so101', 'joints': {{...}}}}"
            )
        names = list(doc["joints"])
        if names != list(model.JOINT_NAMES):
            missing = [n for n in model.JOINT_NAMES if n not in names]
            extra = [n for n in names if n not in model.JOINT_NAMES]
            raise CalibrationError(
                f"calibration file {str(path)!r}: joints {names} do not match the SO-101's "
                f"{list(model.JOINT_NAMES)} (missing {missing}, unknown {extra}; order matters)"
            )
        fields = list(JointCalibration.__dataclass_fields__)
        joints = {}
        for name, entry in doc["joints"].items():
            key = f"joints.{name}"
            if not isinstance(entry, dict) or sorted(entry) != sorted(fields):
                raise CalibrationError(
                    f"calibration file {str(path)!r}: {key} must have exactly the keys {fields}"
                )
            bad = [k for k in fields if not isinstance(entry[k], int) or isinstance(entry[k], bool)]
            if bad:
                raise CalibrationError(f"calibration file {str(path)!r}: {key}.{bad[0]} must be an integer")
            j = JointCalibration(**entry)
            problem = _joint_problem(j)
            if problem:
                raise CalibrationError(f"calibration file {str(path)!r}: {key}: {problem}")
            joints[name] = j
        ids = [j.id for j in joints.values()]
        if len(set(ids)) != len(ids):
            raise CalibrationError(f"calibration file {str(path)!r}: servo ids repeat: {ids}")
        return cls(joints)


def _joint_problem(j: JointCalibration) -> str | None:
    if not 0 <= j.id <= 252:
        return f"id {j.id} outside 0..252"
    if j.direction not in (1, -1):
        return f"direction {j.direction} must be 1 or -1"
    for k in ("zero_ticks", "range_min", "range_max"):
        if not 0 <= getattr(j, k) < feetech.TICKS_PER_TURN:
            return f"{k}={getattr(j, k)} outside 0..4095"
    lo, hi = j.delta_range()
    if not lo <= 0 <= hi or hi - lo < 1:
        return (
            f"zero_ticks={j.zero_ticks} must lie inside range_min..range_max ({j.range_min}..{j.range_max})"
        )
    return None


class SO101Robot(Robot):
    """An SO-101 arm on a Feetech bus (module docstring: joints, units, limits, calibration).

    Args:
        port: serial device of the arm's bus adapter.
        calibration: path of its calibration JSON file (read here).
        control_hz: the rate commands are expected at (Hz); LeRobot records the SO-101 at 30.
        baudrate: bus speed (bit/s).
        torque: ``True``: connect enables torque holding the present pose; ``False`` (a leader arm):
            the servos are made limp and :meth:`command` is refused.
        name: prefix of error messages.
        timeout_s: status-packet timeout (s); ``None``: the SDK's 34 ms (:class:`FeetechBus`).

    Raises:
        CalibrationError: the calibration file is missing or malformed (names the file).
    """

    modes = (CommandMode.JOINT_POSITION,)

    def __init__(
        self,
        port: str,
        calibration: str | Path,
        control_hz: float = 30.0,
        baudrate: int = feetech.DEFAULT_BAUDRATE,
        torque: bool = True,
        name: str = "so101",
        timeout_s: float | None = None,
    ) -> None:
        self.name = name
        self.calibration_path = str(calibration)
        self.calibration = Calibration.load(calibration)
        self.torque = torque
        self.bus = feetech.FeetechBus(port, baudrate, name=name, timeout_s=timeout_s)
        cal = list(self.calibration.joints.values())
        self._arm, self._jaw = cal[:5], cal[5]
        ranges = np.array([j.angle_range() for j in self._arm])
        reach = model.REACH_M
        lift = model.JOINT_ORIGINS[0][0][2] - model.JOINT_ORIGINS[1][0][2]  # shoulder-lift axis height (m)
        self._limits = RobotLimits(
            joint_low=ranges[:, 0],
            joint_high=ranges[:, 1],
            joint_vel_max=np.full(5, JOINT_VEL_MAX),
            joint_acc_max=np.full(5, JOINT_ACC_MAX),
            ee_low=np.array([-reach, -reach, lift - reach]),
            ee_high=np.array([reach, reach, lift + reach]),
            ee_step_max=JOINT_VEL_MAX * reach / control_hz,
            control_hz=float(control_hz),
            joint_names=model.ARM_JOINTS,
        )
        self._gripper_ticks: int | None = None

    @classmethod
    def from_config(cls, cfg: RobotConfig, control_hz: float = 30.0) -> SO101Robot:
        """The arm of ``env.robot`` (``driver: so101``): ``cfg.port``, ``cfg.calibration`` and
        ``cfg.bus_timeout_s`` (0: the SDK's status timeout).

        Raises:
            ValueError: ``env.robot.port`` or ``env.robot.calibration`` is empty.
            CalibrationError: the calibration file is missing or malformed.
        """
        for key in ("port", "calibration"):
            if not getattr(cfg, key):
                raise ValueError(f"env.robot.{key} is required for env.robot.driver=so101")
        timeout_s = cfg.bus_timeout_s or None
        return cls(cfg.port, cfg.calibration, control_hz=control_hz, timeout_s=timeout_s)

    @property
    def limits(self) -> RobotLimits:
        return self._limits

    @property
    def is_connected(self) -> bool:
        return self.bus.is_open

    def connect(self) -> None:
        """Open the bus, find every calibrated servo, set the servo gains and the jaw's torque, current and
        overload limits (:data:`SERVO_SETTINGS`, :data:`GRIPPER_SETTINGS`; torque off meanwhile), check the
        arm against the calibration, then enable torque holding the present pose (or, with
        ``torque=False``, make the arm limp and write nothing else).

        Raises:
            RobotConnectionError: the port is missing or busy (names the port).
            RobotTimeoutError: a calibrated servo does not answer (names the id).
            RobotFault: a servo reports an error or a corrupt packet (names the id and flag), or is not an
                STS3215.
            CalibrationError: the bus holds servos the file does not list, or a joint reads outside its
                calibrated range (names the file).
        """
        if self.bus.is_open:
            return
        self.bus.open()
        try:
            self._check_servos()
            if self.torque:
                self._configure_servos()
            ticks = self._read_ticks()
            self._check_ranges(ticks)
            ids = self.calibration.ids
            if self.torque:
                self.bus.sync_write(feetech.GOAL_POSITION, dict(zip(ids, ticks, strict=True)))
                self._gripper_ticks = ticks[5]
            self.bus.set_torque(ids, self.torque)
        except BaseException:
            self.bus.close()
            raise

    def _check_servos(self) -> None:
        missing: list[RobotTimeoutError] = []
        for name, j in self.calibration.joints.items():
            try:
                found = self.bus.ping(j.id)
            except RobotTimeoutError as e:
                missing.append(e)
                continue
            if found != feetech.STS3215_MODEL:
                raise RobotFault(
                    f"{self.name}: servo {j.id} ({name}) on {self.bus.port!r} is model {found}, "
                    f"not an STS3215 ({feetech.STS3215_MODEL})"
                )
        if not missing:
            return
        stray = next((i for i in SCAN_IDS if i not in self.calibration.ids and self._answers(i)), None)
        if stray is not None:
            raise CalibrationError(
                f"calibration file {self.calibration_path!r} does not match the arm on {self.bus.port!r}: it "
                f"lists servo ids {list(self.calibration.ids)}, but servo {stray}, which it does not list, "
                "answers (recalibrate, or set the servo ids)"
            )
        raise missing[0]

    def _configure_servos(self) -> None:
        """Torque off, then :data:`SERVO_SETTINGS` on every servo and :data:`GRIPPER_SETTINGS` on the jaw's,
        each write acknowledged (the arm may sag for the few ms this takes, as with LeRobot)."""
        ids = self.calibration.ids
        self.bus.set_torque(ids, False)
        for servo_id in ids:
            for reg, value in SERVO_SETTINGS:
                self.bus.write(servo_id, reg, value)
        for reg, value in GRIPPER_SETTINGS:
            self.bus.write(self._jaw.id, reg, value)

    def _answers(self, servo_id: int) -> bool:
        try:
            self.bus.ping(servo_id)
        except RobotTimeoutError:
            return False
        return True

    def _check_ranges(self, ticks: list[int]) -> None:
        for (name, j), t in zip(self.calibration.joints.items(), ticks, strict=True):
            lo, hi = j.delta_range()
            d = wrap_ticks(t - j.zero_ticks)
            if not lo - RANGE_MARGIN_TICKS <= d <= hi + RANGE_MARGIN_TICKS:
                raise CalibrationError(
                    f"calibration file {self.calibration_path!r} does not match the arm on "
                    f"{self.bus.port!r}: {name} (servo {j.id}) reads {t} ticks, outside its calibrated range "
                    f"{j.range_min}..{j.range_max} (another arm's file, or a re-mounted horn: recalibrate)"
                )

    def _read_ticks(self) -> list[int]:
        ids = self.calibration.ids
        return [v for v in self.bus.sync_read_words(feetech.PRESENT_POSITION, ids).values()]

    def disconnect(self) -> None:
        """Close the bus. The servos keep their last goal with torque on (an SO-101 without torque falls);
        call :meth:`release` first to make it limp. Safe to call twice."""
        self.bus.close()

    def release(self) -> None:
        """Disable torque on every servo (the arm goes limp: support it first)."""
        self.bus.set_torque(self.calibration.ids, False)

    def read(self) -> RobotState:
        """One sync read of position and speed of all six servos, converted with the calibration.

        Raises:
            RobotConnectionError: not connected or link lost; RobotTimeoutError: a servo did not answer
            (names the id); RobotFault: checksum error or servo error flags (names the id and flag).
        """
        raw = self.bus.sync_read(feetech.PRESENT_POSITION, self.calibration.ids, size=4)
        stamp = time.monotonic()
        cal = list(self.calibration.joints.values())
        pos = np.empty(6)
        vel = np.empty(6)
        for k, (j, data) in enumerate(zip(cal, raw.values(), strict=True)):
            ticks = data[0] | data[1] << 8
            speed = feetech.decode_sign_magnitude(data[2] | data[3] << 8, feetech.VELOCITY_SIGN_BIT)
            pos[k] = j.angle(ticks)
            vel[k] = j.direction * speed / TICKS_PER_RAD
        ee_pos, ee_quat = model.forward_kinematics(pos[:5])
        return RobotState(
            joint_pos=pos[:5],
            joint_vel=vel[:5],
            ee_pos=ee_pos,
            ee_quat=ee_quat,
            gripper=self._closure(pos[5]),
            timestamp=stamp,
            extra={"gripper_angle": pos[5:]},
        )

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray:
        """``gripperframe`` position (3,) float64 m in the arm's base frame at the five arm joints
        ``joint_pos`` (5,) rad (URDF zero and axes, as :meth:`read` reports them): the numpy chain of
        :func:`so101_model.forward_kinematics`, no bus traffic. The safety layer uses it to keep joint
        commands inside the workspace box.

        Raises:
            ValueError: ``joint_pos`` is not (5,).
        """
        return model.forward_kinematics(joint_pos)[0]

    def _closure(self, angle: float) -> float:
        low, high = self._jaw.angle_range()
        return float(np.clip((high - angle) / (high - low), 0.0, 1.0))

    def command(self, cmd: Command) -> None:
        """Sync-write the goal positions of all six servos: the five arm joints (rad, clipped to the
        calibrated ranges) and the gripper (closure in [0, 1]; ``None`` keeps the last target).

        Raises:
            CommandRejected: wrong mode/shape, non-finite values, gripper outside [0, 1], or a leader arm
                (``torque=False``).
            RobotConnectionError: not connected or link lost.
        """
        value = check_command(cmd, self.modes, 5, self.name)
        if not self.torque:
            raise CommandRejected(f"{self.name}: a leader arm (torque off) takes no commands")
        if not self.bus.is_open:
            raise RobotConnectionError(f"{self.name}: not connected (call connect() first)")
        if cmd.gripper is not None:
            low, high = self._jaw.angle_range()
            self._gripper_ticks = self._jaw.ticks(high - cmd.gripper * (high - low))
        ticks = [j.ticks(q) for j, q in zip(self._arm, value, strict=True)] + [self._gripper_ticks]
        self.bus.sync_write(feetech.GOAL_POSITION, dict(zip(self.calibration.ids, ticks, strict=True)))


def calibrate(
    port: str,
    path: str | Path,
    *,
    ids: tuple[int, ...] = model.DEFAULT_IDS,
    directions: tuple[int, ...] = (1,) * 6,
    wait_for_zero_pose: Callable[[], object] | None = None,
    keep_recording: Callable[[], bool] | None = None,
    poll_s: float = 0.02,
    baudrate: int = feetech.DEFAULT_BAUDRATE,
    timeout_s: float | None = None,
) -> Calibration:
    """Record an SO-101 calibration and write it to ``path``.

    The servos are made limp; a person puts the arm in the zero pose (LeRobot's "middle of the range":
    the URDF's zero) and confirms (``wait_for_zero_pose``, default: press Enter), then moves every joint
    through its whole travel while positions are sampled every ``poll_s`` s until ``keep_recording``
    returns False (default: until Enter is pressed). Directions cannot be seen from the motion and are
    taken from ``directions`` (+1 on a stock arm). ``baudrate`` and ``timeout_s`` are the bus's
    (:class:`~robot_rl.hardware.drivers.feetech.FeetechBus`).

    Returns:
        The :class:`Calibration` written.

    Raises:
        RobotConnectionError / RobotTimeoutError / RobotFault: like :meth:`SO101Robot.connect`.
        CalibrationError: a joint moved less than ``MIN_RANGE_TICKS`` (names the joint and the file).
        ValueError: ``ids`` or ``directions`` do not have one entry per joint.
    """
    if len(ids) != 6 or len(directions) != 6:
        raise ValueError("calibrate needs 6 servo ids and 6 directions, one per SO-101 joint")
    if wait_for_zero_pose is None:
        wait_for_zero_pose = lambda: input("Put the arm in its zero (middle) pose, then press Enter: ")  # noqa: E731
    if keep_recording is None:
        keep_recording = _until_enter("Move every joint through its full range, then press Enter: ")
    with feetech.FeetechBus(port, baudrate, name="so101 calibration", timeout_s=timeout_s) as bus:
        for servo_id in ids:
            bus.ping(servo_id)
        bus.set_torque(ids, False)
        wait_for_zero_pose()
        zero = list(bus.sync_read_words(feetech.PRESENT_POSITION, ids).values())
        lo, hi = [0] * 6, [0] * 6
        while keep_recording():
            ticks = bus.sync_read_words(feetech.PRESENT_POSITION, ids).values()
            for k, t in enumerate(ticks):
                d = wrap_ticks(t - zero[k])
                lo[k], hi[k] = min(lo[k], d), max(hi[k], d)
            time.sleep(poll_s)
    joints = {}
    for k, name in enumerate(model.JOINT_NAMES):
        if hi[k] - lo[k] < MIN_RANGE_TICKS:
            raise CalibrationError(
                f"calibration for {str(path)!r}: {name} (servo {ids[k]}) moved only {hi[k] - lo[k]} "
                "ticks; move every joint through its full travel (at least {MIN_RANGE_TICKS} ticks)"
            )
        joints[name] = JointCalibration(
            ids[k], zero[k], directions[k], (zero[k] + lo[k]) % 4096, (zero[k] + hi[k]) % 4096
        )
    cal = Calibration(joints)
    cal.save(path)
    return cal


def _until_enter(prompt: str) -> Callable[[], bool]:
    done = threading.Event()
    threading.Thread(target=lambda: (input(prompt), done.set()), daemon=True).start()
    return lambda: not done.is_set()
