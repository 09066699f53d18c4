"""A UFACTORY xArm 7 control box emulated on loopback TCP, with the arm and an xArm Gripper in MuJoCo.

The real ``xarm-python-sdk`` (``xarm.wrapper.XArmAPI``) connects to it as to a control box, so its
sockets, framing, connect-time queries and report parsing run unchanged. The protocol is implemented here
from the packet formats ``xarm-python-sdk`` 1.18.4 speaks (``xarm/core/wrapper/uxbus_cmd*.py``,
``xarm/core/comm/``, ``xarm/x3/base.py``), without importing the SDK:

- **Command socket** (the SDK's ``TCP_CONTROL_PORT``, 502 on a control box): Modbus-TCP-like frames
  ``transaction u16, protocol u16 (2, or 3 "with heartbeat"), length u16, register u8, params`` (integers
  big-endian, floats little-endian fp32); each answer echoes transaction, protocol and register, then a
  status byte (0x40 controller error, 0x20 warning, 0x10 not ready to move, 0x08 invalid) and the data.
  Registers served: version (1), serial numbers (2), system control (10), motion enable (11), set/get
  state (12, 13), command count (14), error/warning codes (15), clean error/warning (16, 17), set mode
  (19), servo-mode joint and Cartesian setpoints (29, 30), TCP offset (35), TCP pose (41), joint states
  (42), reduced mode (50), the safety boundary (52, ``set_reduced_tcp_boundary``), fence mode (59),
  tool Modbus timeout (123), the tool RS-485 Modbus-RTU agent (124, the xArm Gripper at slave id 8:
  enable, mode, speed, target and current position, error code, version) and tool GPIO registers (127,
  128: the RS-485 baud rate). Any other register is answered with the invalid flag (the SDK returns code
  10) and recorded in :attr:`XArmControllerEmulator.unknown_registers`. SDK heartbeats (protocol 1) are
  ignored.
- **Report socket** (the SDK's rich report, port 30002): a 284-byte report every :data:`REPORT_PERIOD_S`
  (state and mode, joints (rad), TCP pose (mm, rad), torques, brake/enable bits, error/warning codes,
  model, TCP/joint limits, servo codes, temperatures, speeds), the layout ``XArmAPI`` parses.

Ports. ``XArmAPI`` takes a host, not ports: it connects to ``XCONF.SocketConf.TCP_CONTROL_PORT`` and
``TCP_REPORT_RICH_PORT`` of that host, and picks its report parser by the literal report port number
(30002). So each emulator takes its own loopback address (``127.x.y.z``, Linux routes all of 127/8 to
``lo``) with the report socket on 30002 there and the command socket on an ephemeral port, and the one
change a client needs is ``XCONF.SocketConf.TCP_CONTROL_PORT = emulator.control_port`` (502 needs
privileges); :attr:`XArmControllerEmulator.sdk_overrides` names it.

Controller behaviour (UFACTORY's SDK documentation and servo-mode guide):

- servo mode (mode 1) executes only the latest setpoint. A setpoint farther than
  :data:`SERVO_STEP_MAX_M` (10 mm, TCP) from the controller's last executed setpoint is **not executed**
  (the answer is still code 0: the guide says only that the motion is not executed); so is one sent
  outside mode 1 or with joints beyond their limits, and one sent in a stopped state (that answer carries
  the not-ready flag: the SDK returns code 9). Every setpoint lands in
  :attr:`XArmControllerEmulator.servo_log` with its time, TCP step and whether it ran, so tests check the
  rate (UFACTORY asks for 100-250 Hz) and the steps;
- ``set_mode`` takes effect at the next ``set_state(0)``; ``set_state(4)`` (``emergency_stop``) stops the
  arm where it is and drops the servo target until ``set_state(0)``; an injected controller error
  (:meth:`XArmControllerEmulator.inject_error`) stops it the same way and flags every answer, until
  ``clean_error`` and ``set_state(0)``;
- the safety boundary (the SDK's ``set_reduced_tcp_boundary``, ``[x_max, x_min, y_max, y_min, z_max,
  z_min]`` mm, enforced while fence mode is on, ``set_fence_mode``): the controller stops the arm with error
  C35, "Safety Boundary Limit" (the SDK's controller error table: "The xArm reaches the safety boundary"),
  when a servo setpoint's TCP is beyond it (the setpoint is not executed) or when the measured TCP reaches
  it, checked every physics step as the controller's own loop does; the error stays until
  ``clean_error``, and the arm must be brought back inside (manual mode on a real arm);
- when the client's link drops, the controller keeps its last target, as a real one does (the SDK's
  protocol-3 heartbeat only keeps the client's own link alive; no controller-side watchdog is documented
  to stop the arm).

Not emulated: motion modes other than servo (0, 2, 4-7: joint/Cartesian moves, velocity control, online
planning), payloads, the 503 and real-time (30003) sockets, collision detection, reduced mode's speed and
joint limits (the switch is only stored), the Lite 6 gripper. Physics advances in real time, lazily
(before each answer and report). Linux only (the 127.x.y.z addresses).
"""

from __future__ import annotations

import math
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass

import mujoco
import numpy as np

from robot_rl.hardware.drivers import xarm_model as model
from robot_rl.hardware.drivers.arm_common import rpy_from_quat
from robot_rl.hardware.drivers.so101_model import matrix_to_quat, rpy_matrix

REPORT_PORT = 30002
"""The SDK's rich report port (``XCONF.SocketConf.TCP_REPORT_RICH_PORT``), served on each emulator's own
loopback address."""
REPORT_PERIOD_S = 0.02
"""Seconds between reports."""
REPORT_SIZE = 284
"""Bytes per rich report (through the joint and TCP speeds)."""
SERVO_STEP_MAX_M = 0.010
"""Largest TCP distance (m) between servo-mode setpoints that the controller executes (UFACTORY)."""
VERSION = "7,7,XI1300000000,AC1300000000,v2.4.0"
"""``get_version`` answer: axis, device type, arm and control-box serial numbers, firmware."""
HOME = np.array([0.0, -0.2, 0.0, 0.8, 0.0, 1.0, 0.0])
"""Initial joint angles (rad): the flange near (0.40, 0, 0.35) m, pointing down, gripper above the table."""
GRIPPER_OPEN_PULSES = 850
"""xArm Gripper position fully open (pulses); 0 is closed."""
FINGER_TRAVEL_M = 0.0425
"""Each finger's travel (m) from closed to fully open (the xArm Gripper opens 85 mm)."""
GRIPPER_ID, RS485_HOST_ID, BAUD_REGISTER, BAUD_2M_INDEX = 8, 9, 0x0A0B, 11
KP, KV, ARMATURE = 10000.0, 100.0, 0.5
"""Joint position servo gains (N m/rad, N m s/rad) and reflected rotor inertia (kg m^2)."""
REG_VERSION, REG_SN, REG_SYSTEM, REG_MOTION_EN, REG_SET_STATE, REG_GET_STATE = 1, 2, 10, 11, 12, 13
REG_CMDNUM, REG_ERROR, REG_CLEAN_ERR, REG_CLEAN_WARN, REG_SET_MODE = 14, 15, 16, 17, 19
REG_SERVOJ, REG_SERVO_CART, REG_TCP_OFFSET, REG_TCP_POSE, REG_JOINT_POS = 29, 30, 35, 41, 42
REG_TGPIO_TIMEOUT, REG_RS485_RTU, REG_TGPIO_W16, REG_TGPIO_R16 = 123, 124, 127, 128
REG_REDUCED_MODE, REG_LIMIT_XYZ, REG_FENSE_ON = 50, 52, 59
FLAG_ERROR, FLAG_WARN, FLAG_NOT_READY, FLAG_INVALID = 0x40, 0x20, 0x10, 0x08
ERROR_SAFETY_BOUNDARY = 35
"""Controller error C35, "Safety Boundary Limit" (xarm-python-sdk's ``x_code``): the TCP reached the
safety boundary in fence mode."""
STATE_MOVING, STATE_IDLE, STATE_PAUSED, STATE_STOPPED = 1, 2, 3, 4


@dataclass(frozen=True)
class ServoSetpoint:
    """One servo-mode setpoint as the controller saw it.

    ``t``: arrival (``time.monotonic()``, s); ``joints``: the target (7,) rad (after IK for Cartesian
    ones; None when IK failed); ``step_m``: TCP distance from the last executed setpoint (m);
    ``executed``: whether the arm went there; ``reason``: why not (``"step"``, ``"mode"``, ``"stopped"``,
    ``"limits"``, ``"boundary"``, ``"ik"``, ``"tool_coord"``), empty when executed.
    """

    t: float
    joints: np.ndarray | None
    step_m: float
    executed: bool
    reason: str = ""


def arm_mjcf() -> str:
    """MJCF of the xArm 7 (the :mod:`~robot_rl.hardware.drivers.xarm_model` chain: D-H frames, UFACTORY's
    link masses and centres of mass, approximate inertias, gravity compensated as the controller does),
    position-actuated joints, an xArm Gripper (two 42.5 mm sliding fingers on the flange) and a table
    plane at the base (z = 0) that the fingers collide with."""

    def vec(v) -> str:
        return " ".join(f"{x:.9g}" for x in v)

    def body(i: int, inner: str) -> str:
        pos, rot = model.joint_origin(i)
        lo, hi = model.JOINT_LOW[i], model.JOINT_HIGH[i]
        com = model.LINK_COM[i]
        return (
            f'<body name="link{i + 1}" pos="{vec(pos)}" quat="{vec(matrix_to_quat(rot))}" gravcomp="1">'
            f'<joint name="joint{i + 1}" range="{lo} {hi}"/>'
            f'<inertial pos="{vec(com)}" mass="{model.LINK_MASS[i]}" diaginertia="0.01 0.01 0.005"/>'
            f'<geom type="sphere" size="0.04" pos="{vec(com)}"/>{inner}</body>'
        )

    fingers = "".join(
        f'<body name="finger_{side}" pos="0 0 0.15" gravcomp="1">'
        f'<joint name="finger_{side}" type="slide" axis="0 {sign} 0" range="0 {FINGER_TRAVEL_M}"/>'
        f'<geom type="box" size="0.01 0.005 0.025" pos="0 {sign * 0.005} 0" mass="0.05" '
        f'contype="2" conaffinity="0"/></body>'
        for side, sign in (("left", 1), ("right", -1))
    )
    gripper = (
        '<body name="gripper" gravcomp="1"><site name="flange"/>'
        '<geom type="cylinder" size="0.04 0.05" pos="0 0 0.05" mass="0.7"/>'
        f"{fingers}</body>"
    )
    chain = body(6, gripper)
    for i in range(5, -1, -1):
        chain = body(i, chain)
    actuators = "".join(
        f'<position name="joint{i}" joint="joint{i}" kp="{KP}" kv="{KV}"/>' for i in range(1, 8)
    ) + "".join(
        f'<position name="finger_{s}" joint="finger_{s}" kp="500" kv="20"/>' for s in ("left", "right")
    )
    return (
        '<mujoco model="xarm7_controller_emulator"><compiler angle="radian"/>'
        '<option timestep="0.002" integrator="implicitfast"/>'
        f'<default><joint type="hinge" axis="0 0 1" armature="{ARMATURE}" damping="1" limited="true"/>'
        '<geom contype="0" conaffinity="0"/></default>'
        '<worldbody><geom name="table" type="plane" size="1 1 0.01" contype="0" conaffinity="2"/>'
        f"{chain}</worldbody><actuator>{actuators}</actuator></mujoco>"
    )


def _frame(trans: int, prot: int, register: int, flags: int, data: bytes) -> bytes:
    return struct.pack(">HHHBB", trans, prot, len(data) + 2, register, flags) + data


def _floats(values) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


class XArmControllerEmulator:
    """An emulated xArm 7 control box with an xArm Gripper; use as a context manager (starts and stops
    the servers).

    Args:
        home: initial joint angles (7,) rad; default :data:`HOME`.
        gripper_pulses: initial gripper opening (pulses, 0 closed .. 850 open).

    Raises:
        OSError: no free loopback address/port to listen on (from :meth:`start`).
    """

    def __init__(self, home: np.ndarray | None = None, gripper_pulses: int = GRIPPER_OPEN_PULSES) -> None:
        self.model = mujoco.MjModel.from_xml_string(arm_mjcf())
        self.data = mujoco.MjData(self.model)
        q0 = HOME if home is None else np.asarray(home, dtype=np.float64)
        opening = gripper_pulses / GRIPPER_OPEN_PULSES * FINGER_TRAVEL_M
        self.data.qpos[:] = np.concatenate([q0, [opening, opening]])
        self.data.ctrl[:] = self.data.qpos
        mujoco.mj_forward(self.model, self.data)
        self._flange = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, "flange")
        self.host = ""
        self.control_port = 0
        self.state, self.mode, self.error_code, self.warn_code = STATE_STOPPED, 0, 0, 0
        self.enabled = False
        self.servo_log: list[ServoSetpoint] = []
        """Every servo-mode setpoint received, in order."""
        self.unknown_registers: set[int] = set()
        """Registers asked for that the emulator does not serve."""
        self.gripper = {"enabled": 0, "mode": 0, "speed": 0, "target": int(gripper_pulses)}
        self.tcp_offset = np.eye(4)
        """The TCP in the flange frame (4x4, m), set by the SDK's ``set_tcp_offset``; identity at boot."""
        self._tcp_offset_sdk = [0.0] * 6
        self.tcp_boundary: tuple[np.ndarray, np.ndarray] | None = None
        """The safety boundary's (low, high) TCP corners (3,) m each, set by ``set_reduced_tcp_boundary``."""
        self.fence_mode = False
        """Whether the safety boundary is enforced (``set_fence_mode``)."""
        self.reduced_mode = False
        self._pending_mode = 0
        self._servo_q = q0.copy()
        self._last_setpoint_t = -math.inf
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listeners: list[socket.socket] = []
        self._clients: list[socket.socket] = []
        self._last = time.monotonic()

    # --- lifecycle ------------------------------------------------------------------------------------

    @property
    def sdk_overrides(self) -> dict[str, int]:
        """``XCONF.SocketConf`` attributes a client sets before ``XArmAPI(emulator.host)``."""
        return {"TCP_CONTROL_PORT": self.control_port}

    def start(self) -> XArmControllerEmulator:
        """Listen on a free loopback address (report on :data:`REPORT_PORT`, commands on an ephemeral
        port) and serve from daemon threads.

        Raises:
            OSError: no free address after 50 tries.
        """
        draw = random.SystemRandom()  # not the global generator: tests seed it alike in every worker
        for _ in range(50):
            host = f"127.{draw.randint(1, 254)}.{draw.randint(0, 255)}.{draw.randint(1, 254)}"
            try:
                report = self._listen(host, REPORT_PORT)
            except OSError:
                continue
            control = self._listen(host, 0)
            self.host, self.control_port = host, control.getsockname()[1]
            self._listeners = [control, report]
            break
        else:
            raise OSError(f"xarm emulator: no free loopback address with port {REPORT_PORT}")
        self._last = time.monotonic()
        self._spawn(self._accept, control, self._serve_commands)
        self._spawn(self._accept, report, self._serve_reports)
        return self

    def stop(self) -> None:
        """Close every socket and stop serving (a connected SDK then sees its link drop)."""
        self._stop.set()
        for sock in self._listeners + self._clients:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in self._threads:
            thread.join(timeout=2.0)
        self._threads, self._listeners, self._clients = [], [], []

    def __enter__(self) -> XArmControllerEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @staticmethod
    def _listen(host: str, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        sock.listen(4)
        sock.settimeout(0.2)
        return sock

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, name="xarm-emulator", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket, serve) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._clients.append(conn)
            self._spawn(serve, conn)

    # --- the simulated arm ----------------------------------------------------------------------------

    def joint_positions(self) -> np.ndarray:
        """MuJoCo joint angles (rad), float64 (7,)."""
        with self._lock:
            self._advance()
            return self.data.qpos[:7].copy()

    def flange_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """MuJoCo flange pose: (position (3,) m, unit quaternion (w, x, y, z)), base frame."""
        with self._lock:
            self._advance()
            rot = self.data.site_xmat[self._flange].reshape(3, 3)
            return self.data.site_xpos[self._flange].copy(), matrix_to_quat(rot)

    def gripper_pulses(self) -> float:
        """The gripper's measured opening (pulses, 0 closed .. 850 open)."""
        with self._lock:
            self._advance()
            return self._gripper_pulses()

    def inject_error(self, code: int) -> None:
        """A controller error ``code`` (e.g. 22, self-collision): the arm stops (state 4), every answer
        carries the error flag and the report the code, until ``clean_error``."""
        with self._lock:
            self._advance()
            self.error_code = int(code)
            self._halt()

    def _gripper_pulses(self) -> float:
        return float(np.mean(self.data.qpos[7:9]) / FINGER_TRAVEL_M * GRIPPER_OPEN_PULSES)

    def _advance(self) -> None:
        now = time.monotonic()
        n = int((now - self._last) / self.model.opt.timestep)
        self._last += n * self.model.opt.timestep
        n = min(n, int(1.0 / self.model.opt.timestep))  # at most 1 s of catch-up
        if n > 0:
            if self.gripper["enabled"]:
                self.data.ctrl[7:9] = self.gripper["target"] / GRIPPER_OPEN_PULSES * FINGER_TRAVEL_M
            if not self.fence_mode or self.tcp_boundary is None:
                mujoco.mj_step(self.model, self.data, nstep=n)
                return
            for _ in range(n):  # the boundary is checked every control cycle, as the controller does
                mujoco.mj_step(self.model, self.data)
                if not self.error_code and self._beyond_boundary(self.data.qpos[:7]):
                    self.error_code = ERROR_SAFETY_BOUNDARY
                    self._halt()

    def _beyond_boundary(self, q: np.ndarray) -> bool:
        """Whether fence mode is on and the TCP at joints ``q`` (7,) rad is outside the safety boundary."""
        if not self.fence_mode or self.tcp_boundary is None:
            return False
        tcp = (model.joint_frames(q)[-1] @ self.tcp_offset)[:3, 3]
        low, high = self.tcp_boundary
        return bool(np.any(tcp < low) or np.any(tcp > high))

    def _halt(self) -> None:
        """Stop where the arm is: hold the measured joints, drop the servo target."""
        self.state = STATE_STOPPED
        self._servo_q = self.data.qpos[:7].copy()
        self.data.ctrl[:7] = self._servo_q

    def _tcp_pose(self) -> list[float]:
        """The TCP pose (flange and :attr:`tcp_offset`) in the SDK's units: ``[x, y, z]`` mm, ``[roll,
        pitch, yaw]`` rad."""
        tcp = model.joint_frames(self.data.qpos[:7])[-1] @ self.tcp_offset
        return [*(tcp[:3, 3] * 1000.0), *rpy_from_quat(matrix_to_quat(tcp[:3, :3]))]

    def _current_state(self) -> int:
        if self.state in (STATE_MOVING, STATE_IDLE):
            recent = time.monotonic() - self._last_setpoint_t < 0.1
            moving = recent or float(np.max(np.abs(self.data.qvel[:7]))) > 1e-3
            return STATE_MOVING if moving else STATE_IDLE
        return self.state

    # --- servo mode -----------------------------------------------------------------------------------

    def _servo(self, target: np.ndarray | None, reason: str = "") -> None:
        """Run or drop one servo-mode setpoint (joints rad), as the controller does; log it."""
        now = time.monotonic()
        step = math.inf
        if target is not None:
            step = float(
                np.linalg.norm(
                    model.forward_kinematics(target)[0] - model.forward_kinematics(self._servo_q)[0]
                )
            )
        if not reason:
            if self.mode != 1:
                reason = "mode"
            elif self.state not in (STATE_MOVING, STATE_IDLE) or self.error_code or not self.enabled:
                reason = "stopped"
            elif np.any(target < model.JOINT_LOW) or np.any(target > model.JOINT_HIGH):
                reason = "limits"
            elif self._beyond_boundary(target):
                reason = "boundary"
            elif step > SERVO_STEP_MAX_M:
                reason = "step"
        self.servo_log.append(ServoSetpoint(now, target, step, not reason, reason))
        if reason == "boundary":  # C35: the controller stops
            self.error_code = ERROR_SAFETY_BOUNDARY
            self._halt()
        if reason:
            return
        self._servo_q = target.copy()
        self.data.ctrl[:7] = target
        self._last_setpoint_t = now
        self.state = STATE_MOVING

    def _servo_cartesian(self, values: tuple[float, ...]) -> None:
        pose, tool_coord = values[:6], values[8]
        if tool_coord:
            self._servo(None, "tool_coord")
            return
        tcp = np.eye(4)
        tcp[:3, :3], tcp[:3, 3] = rpy_matrix((pose[3], pose[4], pose[5])), np.asarray(pose[:3]) / 1000.0
        flange = tcp @ np.linalg.inv(self.tcp_offset)
        q = model.inverse_kinematics(flange[:3, 3], flange[:3, :3], self._servo_q)
        self._servo(q, "" if q is not None else "ik")

    # --- the command socket ---------------------------------------------------------------------------

    def _serve_commands(self, conn: socket.socket) -> None:
        buf = b""
        conn.settimeout(0.2)
        while not self._stop.is_set():
            try:
                chunk = conn.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return  # the client left: the controller keeps its last target
            buf += chunk
            while len(buf) >= 6 and len(buf) >= 6 + struct.unpack(">H", buf[4:6])[0]:
                n = 6 + struct.unpack(">H", buf[4:6])[0]
                frame, buf = buf[:n], buf[n:]
                answer = self._answer(frame)
                if answer:
                    try:
                        conn.sendall(answer)
                    except OSError:
                        return

    def _answer(self, frame: bytes) -> bytes:
        trans, prot, _length = struct.unpack(">HHH", frame[:6])
        if len(frame) < 7 or prot not in (2, 3):
            return b""  # heartbeats (protocol 1); standard Modbus TCP (0) is not served
        register, params = frame[6], frame[7:]
        with self._lock:
            self._advance()
            flags, data = self._handle(register, params)
            if self.error_code:
                flags |= FLAG_ERROR
            if self.warn_code:
                flags |= FLAG_WARN
            if self.state not in (STATE_MOVING, STATE_IDLE) or not self.enabled:
                flags |= FLAG_NOT_READY
        return _frame(trans, prot, register, flags, data)

    def _handle(self, register: int, p: bytes) -> tuple[int, bytes]:
        """(extra status flags, answer data) of one command."""
        if register == REG_VERSION:
            return 0, VERSION.encode().ljust(40, b"\0")
        if register == REG_SN:
            serials = VERSION.split(",")[2:4]
            return 0, (serials[0] + "\0" + serials[1] + "\0").encode().ljust(40, b"\0")
        if register in (REG_SYSTEM, REG_TGPIO_TIMEOUT, REG_TGPIO_W16):
            return 0, b""
        if register == REG_MOTION_EN and len(p) >= 2:
            self.enabled = bool(p[1])
            if not self.enabled:
                self._halt()
            return 0, b""
        if register == REG_SET_STATE and p:
            self._set_state(p[0])
            return 0, b""
        if register == REG_GET_STATE:
            return 0, bytes([self._current_state()])
        if register == REG_CMDNUM:
            return 0, struct.pack(">H", 0)
        if register == REG_ERROR:
            return 0, bytes([self.error_code, self.warn_code])
        if register == REG_CLEAN_ERR:
            self.error_code = 0
            return 0, b""
        if register == REG_CLEAN_WARN:
            self.warn_code = 0
            return 0, b""
        if register == REG_SET_MODE and p:
            self._pending_mode = p[0]
            return 0, b""
        if register == REG_SERVOJ and len(p) >= 40:
            self._servo(np.array(struct.unpack("<7f", p[:28]), dtype=np.float64))
            return 0, b""
        if register == REG_SERVO_CART and len(p) >= 36:
            self._servo_cartesian(struct.unpack("<9f", p[:36]))
            return 0, b""
        if register == REG_TCP_OFFSET and len(p) >= 24:
            offset = struct.unpack("<6f", p[:24])
            self._tcp_offset_sdk = list(offset)
            self.tcp_offset[:3, :3] = rpy_matrix((offset[3], offset[4], offset[5]))
            self.tcp_offset[:3, 3] = np.asarray(offset[:3]) / 1000.0
            return 0, b""
        if register == REG_LIMIT_XYZ and len(p) >= 24:
            limits = np.array(struct.unpack("<6i", p[:24]), dtype=np.float64) / 1000.0  # x_max, x_min, ...
            self.tcp_boundary = (limits[1::2].copy(), limits[0::2].copy())
            return 0, b""
        if register == REG_FENSE_ON and p:
            self.fence_mode = bool(p[0])
            return 0, b""
        if register == REG_REDUCED_MODE and p:
            self.reduced_mode = bool(p[0])
            return 0, b""
        if register == REG_TCP_POSE:
            return 0, _floats(self._tcp_pose())
        if register == REG_JOINT_POS:
            num = (p[0] & 0x0F) if p else 1
            fields = [self.data.qpos[:7], self.data.qvel[:7], self.data.actuator_force[:7]][: max(num, 1)]
            return 0, _floats(np.concatenate(fields))
        if register == REG_TGPIO_R16 and len(p) >= 3:
            addr = struct.unpack(">H", p[1:3])[0]
            return 0, struct.pack(">i", BAUD_2M_INDEX if addr == BAUD_REGISTER else 0)
        if register == REG_RS485_RTU and len(p) >= 3:
            return self._gripper_modbus(p)
        self.unknown_registers.add(register)
        return FLAG_INVALID, b""

    def _set_state(self, value: int) -> None:
        if value == 0:
            if self.enabled and not self.error_code:
                self.mode = self._pending_mode
                self._servo_q = self.data.ctrl[:7].copy()
                self.state = STATE_IDLE
        elif value == STATE_PAUSED and self.state in (STATE_MOVING, STATE_IDLE):
            self.state = STATE_PAUSED
        elif value == STATE_STOPPED:
            self._halt()

    def _gripper_modbus(self, p: bytes) -> tuple[int, bytes]:
        """The tool RS-485 agent: ``host id, slave id, Modbus-RTU function, ...``; the xArm Gripper's
        registers at slave :data:`GRIPPER_ID` (others do not answer: invalid)."""
        host, slave, func = p[0], p[1], p[2]
        if slave != GRIPPER_ID or len(p) < 7:
            return FLAG_INVALID, b""
        addr, count = struct.unpack(">HH", p[3:7])
        head = bytes([host, slave, func])
        if func == 0x10:
            regs = struct.unpack(f">{count}H", p[8 : 8 + 2 * count])
            self._gripper_write(addr, regs)
            return 0, head + p[3:7]
        if func == 0x03:
            regs = [self._gripper_read(addr + k) for k in range(count)]
            return 0, head + bytes([2 * count]) + struct.pack(f">{count}H", *regs)
        return FLAG_INVALID, b""

    def _gripper_write(self, addr: int, regs: tuple[int, ...]) -> None:
        names = {0x0100: "enabled", 0x0101: "mode", 0x0303: "speed"}
        if addr in names:
            self.gripper[names[addr]] = regs[0]
        elif addr == 0x0700 and len(regs) == 2:
            pulses = struct.unpack(">i", struct.pack(">HH", *regs))[0]
            self.gripper["target"] = int(np.clip(pulses, 0, GRIPPER_OPEN_PULSES))

    def _gripper_read(self, addr: int) -> int:
        pulses = struct.pack(">i", int(round(self._gripper_pulses())))
        table = {
            0x0100: self.gripper["enabled"],
            0x0101: self.gripper["mode"],
            0x0303: self.gripper["speed"],
            0x0702: struct.unpack(">H", pulses[:2])[0],
            0x0703: struct.unpack(">H", pulses[2:])[0],
            0x0801: 3,
            0x0802: 4,
            0x0803: 3,
        }
        return table.get(addr, 0)

    # --- the report socket ----------------------------------------------------------------------------

    def _serve_reports(self, conn: socket.socket) -> None:
        while not self._stop.wait(REPORT_PERIOD_S):
            with self._lock:
                self._advance()
                report = self._report()
            try:
                conn.sendall(report)
            except OSError:
                return

    def _report(self) -> bytes:
        """One rich report (:data:`REPORT_SIZE` bytes), the layout ``XArmAPI`` parses from port 30002."""
        enabled = 0x7F if self.enabled else 0
        speeds = [float(np.linalg.norm(self._tcp_speed())), *self.data.qvel[:7]]
        body = b"".join(
            [
                struct.pack(">I", REPORT_SIZE),
                bytes([(self.mode << 4) | self._current_state()]),
                struct.pack(">H", 0),
                _floats(self.data.qpos[:7]),
                _floats(self._tcp_pose()),
                _floats(self.data.actuator_force[:7]),
                bytes([enabled, enabled, self.error_code, self.warn_code]),
                _floats(self._tcp_offset_sdk + [0.0] * 4),  # TCP offset (mm, rad), TCP load
                bytes([3, 3]),  # collision and teach sensitivity
                _floats([0.0, 0.0, -1.0]),  # gravity direction
                bytes([model.DEVICE_TYPE, model.AXIS, 0, 0, 0, 0]),
                VERSION.encode()[:30].ljust(30, b"\0"),
                _floats([1000.0, 1.0, 50000.0, 0.1, 1000.0]),  # TCP jerk, acc min/max, speed min/max
                _floats([20.0, 0.01, 20.0, 0.0001, math.pi]),  # joint jerk, acc min/max, speed min/max
                _floats([2.3, 2.7]),  # rotation jerk, max rotation acceleration
                bytes(16),  # servo status and error codes
                bytes([30] * 7),  # temperatures (deg C)
                _floats(speeds),
            ]
        )
        return body

    def _tcp_speed(self) -> np.ndarray:
        """The flange's linear speed (mm/s, (3,))."""
        jac = np.zeros((3, self.model.nv))
        mujoco.mj_jacSite(self.model, self.data, jac, None, self._flange)
        return jac @ self.data.qvel * 1000.0
