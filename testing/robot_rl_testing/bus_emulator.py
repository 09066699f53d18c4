"""A Feetech STS3215 servo bus emulated on a pseudo-terminal, with an SO-101-like arm simulated in MuJoCo.

The emulator opens a pty pair (``os.openpty``) and serves the master side from a thread; the driver under
test opens the slave path (:attr:`FeetechBusEmulator.port`) as it would ``/dev/ttyACM0``, so its serial
framing and the vendor SDK are exercised byte for byte. The protocol is implemented here from Feetech's
packet format (not with the SDK): instruction packets ``FF FF id len instr params... checksum`` with
``checksum = ~(id + len + instr + sum(params)) & 0xFF``; status packets ``FF FF id len error params...
checksum``. Instructions: ping (1), read (2), write (3), sync read (0x82), sync write (0x83). An
instruction packet with a bad checksum is dropped unanswered, as a servo does.

Each servo has a 256-byte control table (STS3215 addresses, see :mod:`robot_rl.hardware.drivers.feetech`)
backing one joint of a 6-joint arm (the SO-101 chain of :mod:`robot_rl.hardware.drivers.so101_model`
with its URDF masses) driven by MuJoCo position actuators. A servo with torque on drives its joint to
Goal_Position (clamped to its position-limit registers); with torque off the joint stays where a hand
put it (:meth:`FeetechBusEmulator.move_by_hand`), as the SO-101's stiff gear train does. Present_Position
and Present_Velocity are read from MuJoCo: ``ticks = zero_ticks + direction * q * 4096 / (2 pi)``.

Physics advances in real time, lazily (before each answer, by the wall-clock time since the last
advance), or only by :meth:`FeetechBusEmulator.step` with ``realtime=False``.

Faults are injected per servo (:class:`ServoFault`): silence (a dead or missing servo: timeouts), corrupt
checksums, error flags in the status byte, late answers.
"""

from __future__ import annotations

import math
import os
import select
import threading
import time
import tty
from dataclasses import dataclass, field

import mujoco
import numpy as np

from robot_rl.hardware.drivers import so101_model as so101
from robot_rl.hardware.drivers.so101 import Calibration, JointCalibration

PING, READ, WRITE, SYNC_READ, SYNC_WRITE = 0x01, 0x02, 0x03, 0x82, 0x83
BROADCAST_ID = 0xFE
STS3215_MODEL = 777
ADDR_MODEL, ADDR_ID, ADDR_MIN_LIMIT, ADDR_MAX_LIMIT = 3, 5, 9, 11
ADDR_TORQUE, ADDR_GOAL, ADDR_PRESENT_POS, ADDR_PRESENT_VEL = 40, 42, 56, 58
ADDR_VOLTAGE, ADDR_TEMPERATURE, ADDR_MOVING = 62, 63, 66
READ_ONLY_FROM = 56
"""Writes at or above this address (the Present_* registers) are ignored."""
TICKS_PER_RAD = 4096 / (2 * math.pi)
KP = 50.0
"""Position actuator stiffness (N m/rad)."""
MAX_TORQUE = 2.9
"""Actuator torque limit (N m): an STS3215 stalls near 30 kg cm at 12 V."""


@dataclass
class ServoFault:
    """Faults injected into one servo's answers.

    ``silent``: no status packets (a dead servo, broken cable or missing id: the driver times out);
    ``bad_checksum``: every status packet's checksum is wrong; ``error_flags``: this value in the status
    packets' error byte (1 voltage, 2 angle sensor, 4 overheat, 8 overcurrent, 32 overload);
    ``delay_s``: each answer comes this late (s), past the driver's timeout when large.
    """

    silent: bool = False
    bad_checksum: bool = False
    error_flags: int = 0
    delay_s: float = 0.0


def checksum(body: bytes | list[int]) -> int:
    """Feetech checksum of a packet's ``id, len, instr/error, params...`` bytes."""
    return ~sum(body) & 0xFF


def status_packet(servo_id: int, error: int = 0, params: bytes = b"") -> bytes:
    """A status packet ``FF FF id len error params checksum``."""
    body = bytes([servo_id, len(params) + 2, error]) + bytes(params)
    return b"\xff\xff" + body + bytes([checksum(body)])


def arm_mjcf() -> str:
    """MJCF of the 6-joint arm: the SO-101 chain (URDF frames, masses and inertias), hinge joints with
    armature, damping and friction loss, and one position actuator per joint (``KP``, ``MAX_TORQUE``)."""
    inertials = (  # (mass kg, pos m, diag inertia kg m^2) per link, from so101_new_calib.urdf
        (0.100006, (-0.0307604, -1.66727e-05, -0.0252713), (8.3759e-05, 8.10403e-05, 2.39783e-05)),
        (0.103, (-0.0898471, -0.00838224, 0.0184089), (4.08002e-05, 0.000147318, 0.000142487)),
        (0.104, (-0.0980701, 0.00324376, 0.0182831), (2.87438e-05, 0.000159844, 0.00014529)),
        (0.079, (-0.000103312, -0.0386143, 0.0281156), (3.68263e-05, 2.5391e-05, 2.1e-05)),
        (0.087, (0.000213627, 0.000245138, -0.025187), (2.75087e-05, 4.33657e-05, 3.45059e-05)),
        (0.012, (-0.00157495, -0.0300244, 0.0192755), (6.61427e-06, 1.89032e-06, 5.28738e-06)),
    )

    def vec(v) -> str:
        return " ".join(f"{x:.9g}" for x in v)

    def body(i: int, inner: str) -> str:
        (xyz, rpy), (mass, com, inertia) = so101.JOINT_ORIGINS[i], inertials[i]
        name = so101.JOINT_NAMES[i]
        quat = so101.matrix_to_quat(so101.rpy_matrix(rpy))
        lo, hi = so101.JOINT_LOW[i], so101.JOINT_HIGH[i]
        return (
            f'<body name="{name}" pos="{vec(xyz)}" quat="{vec(quat)}">'
            f'<joint name="{name}" range="{lo} {hi}"/>'
            f'<inertial pos="{vec(com)}" mass="{mass}" diaginertia="{vec(inertia)}"/>'
            f'<geom type="sphere" size="0.015" pos="{vec(com)}"/>{inner}</body>'
        )

    ee_xyz, ee_rpy = so101.EE_ORIGIN
    ee = f'<site name="ee" pos="{vec(ee_xyz)}" quat="{vec(so101.matrix_to_quat(so101.rpy_matrix(ee_rpy)))}"/>'
    chain = body(4, ee + body(5, ""))
    for i in (3, 2, 1, 0):
        chain = body(i, chain)
    actuators = "".join(
        f'<position name="{n}" joint="{n}" kp="{KP}" forcelimited="true" '
        f'forcerange="-{MAX_TORQUE} {MAX_TORQUE}"/>'
        for n in so101.JOINT_NAMES
    )
    return (
        '<mujoco model="so101_bus_emulator"><compiler angle="radian"/>'
        '<option timestep="0.002" integrator="implicitfast"/>'
        '<default><joint type="hinge" axis="0 0 1" armature="0.01" damping="1.5" frictionloss="0.05" '
        'limited="true"/><geom contype="0" conaffinity="0"/></default>'
        f"<worldbody>{chain}</worldbody><actuator>{actuators}</actuator></mujoco>"
    )


@dataclass
class _Servo:
    joint: int
    zero_ticks: int
    direction: int
    table: bytearray = field(default_factory=lambda: bytearray(256))
    torque: bool = False
    goal_q: float = 0.0
    hand_q: float = 0.0


class FeetechBusEmulator:
    """An emulated SO-101 bus on a pty; use as a context manager (starts and stops the server thread).

    Args:
        ids: servo id of each joint of :data:`~robot_rl.hardware.drivers.so101_model.JOINT_NAMES` (6).
        zero_ticks: each servo's reading at joint angle 0 (ticks); default 2048 each.
        directions: +1 when ticks grow with the joint angle, -1 when they shrink; default +1 each.
        home: initial joint angles (rad, (6,)); default 0 (the calibration zero pose).
        realtime: advance the physics by wall-clock time before each answer; ``False``: only
            :meth:`step` advances it.

    Raises:
        ValueError: lengths other than 6, repeated ids, an id outside 0..252, a direction not +-1.
    """

    def __init__(
        self,
        ids: tuple[int, ...] = so101.DEFAULT_IDS,
        zero_ticks: tuple[int, ...] = (2048,) * 6,
        directions: tuple[int, ...] = (1,) * 6,
        home: np.ndarray | None = None,
        realtime: bool = True,
    ) -> None:
        if not (len(ids) == len(zero_ticks) == len(directions) == 6):
            raise ValueError("the emulated arm has 6 servos: ids, zero_ticks and directions need 6 entries")
        if len(set(ids)) != 6 or not all(0 <= i <= 252 for i in ids):
            raise ValueError(f"servo ids must be 6 distinct ids in 0..252, got {ids}")
        if any(d not in (1, -1) for d in directions):
            raise ValueError(f"directions must be +1 or -1, got {directions}")
        self.model = mujoco.MjModel.from_xml_string(arm_mjcf())
        self.data = mujoco.MjData(self.model)
        self.data.qpos[:] = np.zeros(6) if home is None else np.asarray(home, dtype=np.float64)
        mujoco.mj_forward(self.model, self.data)
        self.realtime = realtime
        self.ids = tuple(ids)
        self.faults: dict[int, ServoFault] = {}
        self.counts: dict[int, int] = {}
        """Instruction packets received, by instruction code (ping 1, read 2, ...)."""
        self.servos: dict[int, _Servo] = {}
        for j, (sid, zero, sign) in enumerate(zip(ids, zero_ticks, directions, strict=True)):
            servo = _Servo(j, int(zero), int(sign))
            t = servo.table
            t[ADDR_MODEL : ADDR_MODEL + 2] = STS3215_MODEL.to_bytes(2, "little")
            t[ADDR_ID] = sid
            t[ADDR_MAX_LIMIT : ADDR_MAX_LIMIT + 2] = (4095).to_bytes(2, "little")
            t[ADDR_VOLTAGE], t[ADDR_TEMPERATURE] = 74, 30
            servo.goal_q = servo.hand_q = float(self.data.qpos[j])
            t[ADDR_GOAL : ADDR_GOAL + 2] = self._ticks(servo, servo.goal_q).to_bytes(2, "little")
            self.servos[sid] = servo
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._master = self._slave = -1
        self._last = time.monotonic()
        self.port = ""

    # --- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> FeetechBusEmulator:
        """Open the pty and serve it from a daemon thread; :attr:`port` is then the slave's path."""
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        self.port = os.ttyname(self._slave)
        self._last = time.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, name="feetech-bus-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the pty (a driver still holding the port then sees its link drop)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        for fd in (self._master, self._slave):
            if fd >= 0:
                os.close(fd)
        self._master = self._slave = -1

    def __enter__(self) -> FeetechBusEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- the simulated arm ----------------------------------------------------------------------------

    def joint_positions(self) -> np.ndarray:
        """MuJoCo joint angles (rad), float64 (6,) in :data:`JOINT_NAMES` order."""
        with self._lock:
            self._advance()
            return self.data.qpos.copy()

    def ee_position(self) -> np.ndarray:
        """MuJoCo position (m) of the ``gripperframe`` site, float64 (3,)."""
        with self._lock:
            self._advance()
            return self.data.site_xpos[0].copy()

    def move_by_hand(self, q: np.ndarray) -> None:
        """A human puts the arm at angles ``q`` (rad, (6,)): joints whose servo has torque off stay there;
        joints with torque on are pushed back to their goal by the servo."""
        q = np.clip(np.asarray(q, dtype=np.float64), so101.JOINT_LOW, so101.JOINT_HIGH)
        with self._lock:
            self._advance()
            for servo in self.servos.values():
                servo.hand_q = float(q[servo.joint])
                if not servo.torque:
                    self.data.qpos[servo.joint] = q[servo.joint]
                    self.data.qvel[servo.joint] = 0.0
            mujoco.mj_forward(self.model, self.data)

    def step(self, seconds: float) -> None:
        """Advance the physics by ``seconds`` (whole MuJoCo steps)."""
        with self._lock:
            self._physics(int(round(seconds / self.model.opt.timestep)))

    def inject(self, servo_id: int, **fault) -> None:
        """Set the :class:`ServoFault` of ``servo_id`` (keyword fields, e.g. ``silent=True``)."""
        with self._lock:
            self.faults[servo_id] = ServoFault(**fault)

    def clear_faults(self) -> None:
        with self._lock:
            self.faults.clear()

    def calibration(self):
        """The :class:`~robot_rl.hardware.drivers.so101.Calibration` that matches this emulated arm exactly
        (its ids, zero ticks and directions; ranges: the URDF joint limits in ticks)."""
        joints = {}
        for sid, s in self.servos.items():
            d = sorted(
                round(s.direction * q * TICKS_PER_RAD)
                for q in (so101.JOINT_LOW[s.joint], so101.JOINT_HIGH[s.joint])
            )
            ends = ((s.zero_ticks + d[0]) % 4096, (s.zero_ticks + d[1]) % 4096)
            joints[so101.JOINT_NAMES[s.joint]] = JointCalibration(sid, s.zero_ticks, s.direction, *ends)
        return Calibration(joints)

    def _ticks(self, servo: _Servo, q: float) -> int:
        return int(round(servo.zero_ticks + servo.direction * q * TICKS_PER_RAD)) % 4096

    def _angle(self, servo: _Servo, ticks: int) -> float:
        return servo.direction * (ticks - servo.zero_ticks) / TICKS_PER_RAD

    def _advance(self) -> None:
        if not self.realtime:
            return
        now = time.monotonic()
        n = int((now - self._last) / self.model.opt.timestep)
        self._last += n * self.model.opt.timestep
        self._physics(min(n, int(1.0 / self.model.opt.timestep)))  # at most 1 s of catch-up

    def _physics(self, n: int) -> None:
        for servo in self.servos.values():
            self.data.ctrl[servo.joint] = servo.goal_q if servo.torque else servo.hand_q
        if n > 0:
            mujoco.mj_step(self.model, self.data, nstep=n)

    def _refresh(self, servo: _Servo) -> None:
        t, j = servo.table, servo.joint
        t[ADDR_PRESENT_POS : ADDR_PRESENT_POS + 2] = self._ticks(servo, self.data.qpos[j]).to_bytes(
            2, "little"
        )
        speed = int(round(servo.direction * self.data.qvel[j] * TICKS_PER_RAD))
        speed = min(abs(speed), 0x7FFF) | (0x8000 if speed < 0 else 0)
        t[ADDR_PRESENT_VEL : ADDR_PRESENT_VEL + 2] = speed.to_bytes(2, "little")
        t[ADDR_MOVING] = int(abs(self.data.qvel[j]) > 0.01)

    def _write(self, servo: _Servo, address: int, data: bytes) -> None:
        t = servo.table
        for k, b in enumerate(data):
            if address + k < READ_ONLY_FROM:
                t[address + k] = b
        if address <= ADDR_GOAL + 1 and address + len(data) > ADDR_GOAL:
            lo = int.from_bytes(t[ADDR_MIN_LIMIT : ADDR_MIN_LIMIT + 2], "little")
            hi = int.from_bytes(t[ADDR_MAX_LIMIT : ADDR_MAX_LIMIT + 2], "little")
            goal = min(max(int.from_bytes(t[ADDR_GOAL : ADDR_GOAL + 2], "little"), lo), hi)
            servo.goal_q = self._angle(servo, goal)
        if address <= ADDR_TORQUE < address + len(data):
            on = bool(t[ADDR_TORQUE])
            if servo.torque and not on:
                servo.hand_q = float(self.data.qpos[servo.joint])  # limp: stays where it is
            servo.torque = on

    # --- the bus --------------------------------------------------------------------------------------

    def _serve(self) -> None:
        buf = bytearray()
        while not self._stop.is_set():
            ready, _, _ = select.select([self._master], [], [], 0.05)
            if not ready:
                continue
            try:
                buf += os.read(self._master, 4096)
            except OSError:
                return
            while True:
                packet = _take_packet(buf)
                if packet is None:
                    break
                with self._lock:
                    self._advance()
                    answers = self._handle(packet)
                for delay, answer in answers:
                    if delay > 0:
                        time.sleep(delay)
                    os.write(self._master, answer)

    def _handle(self, packet: bytes) -> list[tuple[float, bytes]]:
        servo_id, instr, params = packet[2], packet[4], packet[5:-1]
        self.counts[instr] = self.counts.get(instr, 0) + 1
        if instr == SYNC_WRITE and servo_id == BROADCAST_ID and len(params) >= 2:
            address, size = params[0], params[1]
            for k in range(2, len(params) - size, size + 1):
                if params[k] in self.servos and not self._missing(params[k]):
                    self._write(self.servos[params[k]], address, params[k + 1 : k + 1 + size])
            return []
        if instr == SYNC_READ and servo_id == BROADCAST_ID and len(params) >= 2:
            address, size = params[0], params[1]
            return [a for sid in params[2:] for a in self._answer(sid, self._read(sid, address, size))]
        if servo_id not in self.servos or self._missing(servo_id):
            return []
        if instr == PING:
            return self._answer(servo_id, b"")
        if instr == READ and len(params) == 2:
            return self._answer(servo_id, self._read(servo_id, params[0], params[1]))
        if instr == WRITE and len(params) >= 1:
            self._write(self.servos[servo_id], params[0], params[1:])
            return self._answer(servo_id, b"")
        return []

    def _missing(self, servo_id: int) -> bool:
        return self.faults.get(servo_id, ServoFault()).silent

    def _read(self, servo_id: int, address: int, size: int) -> bytes | None:
        servo = self.servos.get(servo_id)
        if servo is None or self._missing(servo_id):
            return None
        self._refresh(servo)
        return bytes(servo.table[address : address + size])

    def _answer(self, servo_id: int, params: bytes | None) -> list[tuple[float, bytes]]:
        if params is None:
            return []
        fault = self.faults.get(servo_id, ServoFault())
        packet = bytearray(status_packet(servo_id, fault.error_flags, params))
        if fault.bad_checksum:
            packet[-1] ^= 0xFF
        return [(fault.delay_s, bytes(packet))]


def _take_packet(buf: bytearray) -> bytes | None:
    """Remove and return the next complete instruction packet with a valid checksum from ``buf``; bytes
    before a header and packets with a bad checksum are dropped. None when no complete packet is there."""
    while True:
        start = buf.find(b"\xff\xff")
        if start < 0:
            del buf[: max(len(buf) - 1, 0)]
            return None
        del buf[:start]
        if len(buf) >= 3 and buf[2] == 0xFF:  # FF FF FF ...: the real header starts one byte later
            del buf[0]
            continue
        if len(buf) < 4 or len(buf) < 4 + buf[3]:
            return None
        if buf[3] < 2:  # no room for an instruction and a checksum: not a packet
            del buf[:2]
            continue
        n = 4 + buf[3]
        packet = bytes(buf[:n])
        del buf[:n]
        if packet[-1] == checksum(packet[2:-1]):
            return packet
