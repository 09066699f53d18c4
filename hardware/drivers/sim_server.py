"""Clients of the MuJoCo-backed robot server (:mod:`robot_rl.hardware.sim_server`): ``SimServerRobot``
(``env.robot.driver: sim_server``) and ``SimServerCamera`` (camera ``driver: sim``).

Both speak the server's msgpack protocol over a ZeroMQ DEALER socket. Every request carries an id and only
the reply with that id is taken, so a dropped request or a late reply never wedges the link: the request
times out (:class:`RobotTimeoutError`) and the next one works. A socket monitor tells a server that is down
or went away (:class:`RobotConnectionError`, at once when the connection drops mid-request) from one that is
up but did not answer in time (:class:`RobotTimeoutError`). Units are those of :mod:`robot_rl.hardware.robot`.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

from robot_rl.config import CameraConfig, ConfigError, RobotConfig
from robot_rl.hardware import wire
from robot_rl.hardware.camera import Camera, Frame
from robot_rl.hardware.errors import (
    CameraError,
    CommandRejected,
    HardwareError,
    RobotConnectionError,
    RobotTimeoutError,
)
from robot_rl.hardware.robot import Command, CommandMode, Robot, RobotLimits, RobotState, check_command
from robot_rl.hardware.sim_robot import LinkCollisions, PinchKinematics, tracking_time_s
from robot_rl.hardware.sim_server import PROTOCOL
from robot_rl.security import ClientKeys, check_address, load_client_keys, secure_client_socket
from robot_rl.sim.assets import load_model
from robot_rl.sim.controller import KD, KP
from robot_rl.transport import ProtocolError

DEFAULT_TIMEOUT_S = 1.0
FK_TOLERANCE_M = 1e-6
"""Largest disagreement (m) allowed between this host's forward kinematics and the server's reference
poses (round-off across MuJoCo builds is far below it; a different arm model is far above)."""


class SimServerLink:
    """One DEALER socket to a sim server, one request at a time (thread-safe).

    Args:
        address: the server's endpoint, e.g. ``tcp://127.0.0.1:5570``.
        keys: CURVE client keys; required for a non-loopback address.

    Raises:
        ConfigError: a non-loopback address without keys.
        RobotConnectionError: ``address`` is not a ZeroMQ endpoint (names it).
    """

    def __init__(self, address: str, keys: ClientKeys | None = None) -> None:
        check_address(address, keys, "env.robot.address", bind=False, keys_setting="env.robot.keys")
        self.address = address
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._connected = False
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)  # queue nothing while there is no connection
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        if keys is not None:
            secure_client_socket(sock, keys)
        self._monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        try:
            sock.connect(address)
        except zmq.ZMQError as err:
            self._monitor.close()
            sock.close()
            raise RobotConnectionError(
                f"sim server address {address!r} is not a ZeroMQ endpoint like tcp://127.0.0.1:5570: {err}"
            ) from err
        self._sock: zmq.Socket | None = sock

    def _events(self, timeout_ms: int = 0) -> bool:
        """Apply queued monitor events (waiting up to ``timeout_ms`` for the first); True if the
        connection dropped among them."""
        dropped = False
        while self._monitor.poll(timeout_ms):
            event = recv_monitor_message(self._monitor)["event"]
            self._connected = event == zmq.EVENT_CONNECTED
            dropped |= event == zmq.EVENT_DISCONNECTED
            timeout_ms = 0
        return dropped

    def request(self, op: str, timeout_s: float, **fields: Any) -> dict[str, Any]:
        """One round trip of ``op`` with ``fields``; the reply's fields.

        Raises:
            RobotConnectionError: no connection to the server within ``timeout_s`` (down, unreachable, or
                the CURVE handshake failed) or it dropped while waiting; names the address.
            RobotTimeoutError: connected, but no reply within ``timeout_s`` (a dropped request).
            CommandRejected: the server refused a command.
            HardwareError: any other server-side error, with its message.
        """
        with self._lock:
            if self._sock is None:
                raise RobotConnectionError(f"sim server {self.address}: link closed")
            deadline = time.monotonic() + timeout_s
            self._events()
            while not self._connected:
                left_ms = int(1000 * (deadline - time.monotonic()))
                if left_ms <= 0:
                    raise RobotConnectionError(
                        f"no connection to the sim server at {self.address} within {timeout_s:g} s (is "
                        f"`robot-rl hardware sim-server --address {self.address}` running?)"
                    )
                self._events(left_ms)
            request_id = next(self._ids)
            frame = wire.pack({"op": op, "id": request_id, "protocol": PROTOCOL, **fields})
            self._sock.setsockopt(zmq.SNDTIMEO, max(1, int(1000 * (deadline - time.monotonic()))))
            try:
                self._sock.send(frame)
            except zmq.Again as err:
                raise RobotConnectionError(
                    f"no connection to the sim server at {self.address} within {timeout_s:g} s"
                ) from err
            poller = zmq.Poller()
            poller.register(self._sock, zmq.POLLIN)
            poller.register(self._monitor, zmq.POLLIN)
            while True:
                left_ms = int(1000 * (deadline - time.monotonic()))
                ready = dict(poller.poll(left_ms)) if left_ms > 0 else {}
                if not ready:
                    raise RobotTimeoutError(
                        f"sim server {self.address} did not answer {op!r} within {timeout_s:g} s"
                    )
                if self._monitor in ready and self._events():
                    raise RobotConnectionError(
                        f"lost the connection to the sim server at {self.address} during {op!r}"
                    )
                if self._sock in ready:
                    reply = self._sock.recv_multipart()
                    try:
                        message = wire.unpack(reply[-1])
                    except ProtocolError:
                        continue  # not a reply of this protocol: keep waiting for ours
                    if message.get("id") == request_id:
                        break  # anything else is a late reply to an earlier, timed-out request
        if not message.get("ok"):
            kind, error = message.get("type"), message.get("error")
            cls = CommandRejected if kind == "CommandRejected" else HardwareError
            raise cls(f"sim server {self.address}: {error} ({kind})")
        return message

    def close(self) -> None:
        """Close the socket; safe to call twice."""
        with self._lock:
            if self._sock is not None:
                self._sock.disable_monitor()
                self._monitor.close(linger=0)
                self._sock.close(linger=0)
                self._sock = None


def client_keys(cfg: RobotConfig) -> ClientKeys | None:
    """The CURVE client keys of ``env.robot.keys`` (client ``env.robot.client_key``), or None when unset.

    Raises:
        ConfigError: a key file is missing or damaged (names ``env.robot.keys``, the path and the fix).
    """
    if not cfg.keys:
        return None
    try:
        return load_client_keys(cfg.keys, cfg.client_key)
    except ConfigError as err:  # its messages name security.keys, the learner's setting
        raise ConfigError(str(err).replace("security.keys", "env.robot.keys", 1)) from err


def _array(value: Any, what: str, address: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise HardwareError(f"sim server {address}: {what} is not an array ({type(value).__name__})")
    return value


class SimServerRobot(Robot):
    """The sim server's Panda as a :class:`Robot` (modes, limits and joint names come from its ``hello``).

    Args:
        address: the server's ZeroMQ endpoint.
        timeout_s: longest wait (s) for each reply.
        keys: CURVE client keys for a server off loopback.

    ``read()`` timestamps a state with the midpoint of its round trip on this host's ``time.monotonic()``
    (the usual estimate when clocks are not shared); ``extra`` holds the server's ``environment_state``
    (7,) and ``lifted`` (1,) (see :class:`~robot_rl.hardware.sim_robot.MujocoRobot`).
    :meth:`forward_kinematics` and :meth:`link_clearance` run here, on this host's copy of the scene (no
    round trip), checked at connect against the server's reference poses.
    """

    simulated = True

    def __init__(self, address: str, timeout_s: float = DEFAULT_TIMEOUT_S, keys: ClientKeys | None = None):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.address, self.timeout_s, self.keys = address, float(timeout_s), keys
        self.name = f"sim_server {address}"
        self._link: SimServerLink | None = None
        self._limits: RobotLimits | None = None
        self._kinematics: PinchKinematics | None = None
        self._collisions: LinkCollisions | None = None
        self.info: dict[str, Any] = {}

    @classmethod
    def from_config(cls, cfg: RobotConfig, control_hz: float | None = None) -> SimServerRobot:
        """The client of the server at ``cfg.address`` with the CURVE keys of ``cfg.keys`` /
        ``cfg.client_key`` (:func:`client_keys`; required off loopback). ``control_hz`` is not sent: the
        server's rate (``limits.control_hz``) is the robot's.

        Raises:
            ConfigError: a key file is missing or damaged."""
        return cls(cfg.address, cfg.timeout_s, client_keys(cfg))

    @property
    def limits(self) -> RobotLimits:
        if self._limits is None:
            raise RobotConnectionError(f"{self.name}: not connected (call connect() first)")
        return self._limits

    @property
    def is_connected(self) -> bool:
        return self._link is not None

    def connect(self) -> None:
        """Open the link, read the server's ``hello`` (limits, modes, cameras) and check that this host's
        forward kinematics match the server's.

        Raises:
            RobotConnectionError: the server is down or unreachable, speaks another protocol, or simulates
                an arm whose kinematics differ from this host's copy of the scene (names the address).
        """
        if self._link is not None:
            return
        link = SimServerLink(self.address, self.keys)
        try:
            hello = link.request("hello", self.timeout_s)
            lim = hello["limits"]
            self._limits = RobotLimits(
                **{k: _array(lim[k], k, self.address).astype(np.float64) for k in _LIMIT_ARRAYS},
                ee_step_max=float(lim["ee_step_max"]),
                control_hz=float(hello["control_hz"]),
                joint_names=tuple(hello["joint_names"]),
            )
            self.modes = tuple(CommandMode(m) for m in hello["modes"])
            self._kinematics = _checked_kinematics(hello["kinematics"], self.address)
            self._collisions = LinkCollisions(self._kinematics.model)
        except (KeyError, TypeError, ValueError) as err:
            link.close()
            raise RobotConnectionError(
                f"{self.name}: the server's hello does not fit protocol {PROTOCOL}: {err!r}"
            ) from err
        except BaseException:
            link.close()
            raise
        self.info, self._link = hello, link

    def disconnect(self) -> None:
        """Hold (zero ``ee_delta``, best effort) and close the link; safe to call twice."""
        link, self._link = self._link, None
        if link is None:
            return
        try:
            zero = np.zeros(3)
            link.request("command", min(self.timeout_s, 0.5), mode="ee_delta", value=zero, gripper=None)
        except HardwareError:
            pass  # the server is gone: nothing to hold
        finally:
            link.close()

    def _request(self, op: str, **fields: Any) -> dict[str, Any]:
        if self._link is None:
            raise RobotConnectionError(f"{self.name}: not connected (call connect() first)")
        return self._link.request(op, self.timeout_s, **fields)

    def read(self) -> RobotState:
        """The server's latest :class:`RobotState` (class doc).

        Raises:
            RobotConnectionError / RobotTimeoutError: see :meth:`SimServerLink.request`.
        """
        sent = time.monotonic()
        reply = self._request("read")
        got = time.monotonic()
        try:
            extra = {k: _array(v, k, self.address) for k, v in reply["extra"].items()}
            return RobotState(
                joint_pos=_array(reply["joint_pos"], "joint_pos", self.address),
                joint_vel=_array(reply["joint_vel"], "joint_vel", self.address),
                ee_pos=_array(reply["ee_pos"], "ee_pos", self.address),
                ee_quat=_array(reply["ee_quat"], "ee_quat", self.address),
                gripper=float(reply["gripper"]),
                timestamp=0.5 * (sent + got),
                extra=extra,
            )
        except (KeyError, TypeError, AttributeError) as err:
            raise HardwareError(f"{self.name}: malformed read reply: {err!r}") from err

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray:
        """End-effector (pinch site) position (3,) float64 m at arm joints ``joint_pos`` (7,) rad, computed
        on this host from the same scene the server simulates (no request).

        Raises:
            RobotConnectionError: never connected (the scene is checked against the server at connect).
        """
        if self._kinematics is None:
            raise RobotConnectionError(f"{self.name}: not connected (call connect() first)")
        return self._kinematics(joint_pos)

    @property
    def tracking_time_s(self) -> float:
        """How long (s) the simulated arm's joint PD takes to close a tracking error: the slowest
        ``KD / KP`` of :mod:`robot_rl.sim.controller`'s default gains (the server's)."""
        return tracking_time_s(KP, KD)

    def link_clearance(self, joint_pos: np.ndarray) -> float | None:
        """The smallest gap (m) between an arm link and the table or another link at arm joints
        ``joint_pos`` (7,) rad, from this host's copy of the scene's collision model (no request; see
        :class:`~robot_rl.hardware.sim_robot.LinkCollisions`).

        Raises:
            RobotConnectionError: never connected.
        """
        if self._collisions is None:
            raise RobotConnectionError(f"{self.name}: not connected (call connect() first)")
        return self._collisions(joint_pos)

    def command(self, cmd: Command) -> None:
        """Send ``cmd``; returns once the server set it as the target (not once reached).

        Raises:
            CommandRejected: unsupported mode, wrong shape, non-finite value, gripper outside [0, 1]
                (checked here before sending, and by the server).
            RobotConnectionError / RobotTimeoutError: see :meth:`SimServerLink.request`.
        """
        num_joints = self.limits.num_joints  # raises when not connected (modes are known after hello)
        value = check_command(cmd, self.modes, num_joints, self.name)
        self._request("command", mode=str(cmd.mode), value=value, gripper=cmd.gripper)

    def reset_scene(self, seed: int | None = None) -> None:
        """Home the arm, open the gripper and re-place the cube (the "human reset" of the sim).

        Raises:
            HardwareError: ``seed`` outside [0, 2**32); RobotConnectionError / RobotTimeoutError as
                :meth:`read`.
        """
        self._request("reset_scene", seed=None if seed is None else int(seed))

    def set_tcp_boundary(self, low: np.ndarray, high: np.ndarray) -> bool:
        """Set the robot-side TCP boundary: the server's physics loop keeps the pinch in the box ``low``
        .. ``high`` ((3,) m each, base frame) every physics step, however late this client's commands come
        (:mod:`robot_rl.hardware.tcp_boundary`). The safety layer calls it at connect with its box. Returns
        True (the server enforces it).

        Raises:
            HardwareError: the server refused the box (not 3 finite values each, low not below high);
            RobotConnectionError / RobotTimeoutError as :meth:`read`.
        """
        self._request(
            "set_boundary", low=np.asarray(low, dtype=np.float64), high=np.asarray(high, dtype=np.float64)
        )
        return True

    def ping(self) -> dict[str, Any]:
        """The server's time (s, its monotonic clock) and counters (requests, errors, dropped,
        physics_steps, overruns, boundary_brakes, started)."""
        return self._request("ping")


def _checked_kinematics(reference: dict[str, Any], address: str) -> PinchKinematics:
    """This host's :class:`PinchKinematics` of the scene, after checking it against the server's reference
    poses (``joint_pos`` (k, 7) rad, ``ee_pos`` (k, 3) m).

    Raises:
        RobotConnectionError: the end effector lands more than :data:`FK_TOLERANCE_M` from the server's.
        KeyError / ValueError: malformed reference (the caller reports it as a protocol mismatch).
    """
    joint_pos = _array(reference["joint_pos"], "kinematics.joint_pos", address).astype(np.float64)
    ee_pos = _array(reference["ee_pos"], "kinematics.ee_pos", address).astype(np.float64)
    if joint_pos.ndim != 2 or ee_pos.shape != (len(joint_pos), 3) or len(joint_pos) == 0:
        raise ValueError(f"kinematics shapes {joint_pos.shape} and {ee_pos.shape} do not fit (k, n) / (k, 3)")
    kinematics = PinchKinematics(load_model())
    error = max(float(np.linalg.norm(kinematics(q) - ee)) for q, ee in zip(joint_pos, ee_pos, strict=True))
    if not error <= FK_TOLERANCE_M:
        raise RobotConnectionError(
            f"sim server {address}: this host's copy of the Panda scene puts the end effector "
            f"{1000 * error:.3g} mm from where the server's does at the same joints; install the server's "
            f"gym-hil and mujoco versions here (the safety layer needs matching forward kinematics to keep "
            f"joint commands in the workspace box)"
        )
    return kinematics


_LIMIT_ARRAYS = ("joint_low", "joint_high", "joint_vel_max", "joint_acc_max", "ee_low", "ee_high")


class SimServerCamera(Camera):
    """A sim camera (``front`` or ``wrist``) rendered by the sim server, as a :class:`Camera`.

    Args:
        name: the camera's name (for messages).
        address: the server's ZeroMQ endpoint.
        source: the server's camera name.
        size: side (pixels) of the square RGB frames; at most the server's ``max_image_size`` (128).
        keys: CURVE client keys for a server off loopback.

    ``Frame.timestamp`` is the midpoint of the render request's round trip (this host's monotonic clock).
    """

    def __init__(self, name: str, address: str, source: str, size: int, keys: ClientKeys | None = None):
        self.name, self.address, self.source, self.size, self.keys = name, address, source, int(size), keys
        self._link: SimServerLink | None = None

    @classmethod
    def from_config(cls, name: str, cfg: CameraConfig, robot: RobotConfig) -> SimServerCamera:
        """Camera ``cfg.source`` of the server at ``robot.address``, rendered at ``min(cfg.width,
        cfg.height)`` pixels square, capped at the server's largest render size when connecting (a
        device gives at most its own resolution; ``RobotEnv`` resizes frames to ``env.image_size``)."""
        return cls(name, robot.address, cfg.source, min(cfg.width, cfg.height), client_keys(robot))

    def _fail(self, err: Exception) -> CameraError:
        return CameraError(f"camera {self.name!r} (sim server {self.address}, {self.source!r}): {err}")

    def connect(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Open the link and check the camera exists on the server.

        Raises:
            CameraError: the server is down, or has no camera ``source`` (names the camera).
        """
        if self._link is not None:
            return
        try:
            link = SimServerLink(self.address, self.keys)
        except RobotConnectionError as err:
            raise self._fail(err) from err
        try:
            hello = link.request("hello", timeout_s)
            if self.source not in hello["cameras"]:
                raise ValueError(f"no such camera on the server; it has {hello['cameras']}")
            self.size = min(self.size, int(hello["max_image_size"]))
        except (HardwareError, KeyError, TypeError, ValueError) as err:
            link.close()
            raise self._fail(err) from err
        self._link = link

    def disconnect(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.close()

    def read(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> Frame:
        """A fresh render: uint8 (size, size, 3) RGB.

        Raises:
            CameraError: not connected, no frame within ``timeout_s``, the server is down, or a malformed
                reply (names the camera).
        """
        if self._link is None:
            raise self._fail(RuntimeError("not connected (call connect() first)"))
        sent = time.monotonic()
        try:
            reply = self._link.request("render", timeout_s, camera=self.source, size=self.size)
        except HardwareError as err:
            raise self._fail(err) from err
        image = reply.get("image")
        if not (
            isinstance(image, np.ndarray)
            and image.dtype == np.uint8
            and image.shape == (self.size, self.size, 3)
        ):
            raise self._fail(ValueError(f"malformed frame {getattr(image, 'shape', type(image).__name__)}"))
        return Frame(image=image, timestamp=0.5 * (sent + time.monotonic()))
