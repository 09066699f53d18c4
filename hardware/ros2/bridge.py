"""``robot_bridge``: a :class:`~robot_rl.hardware.robot.Robot` and :class:`~robot_rl.hardware.camera.Camera`
backed by ROS 2 topics (``env.robot.driver: ros2``, camera ``driver: ros2``), so ``RobotEnv`` and every
stage on it (online, eval, record) run on any ROS 2 arm: a ros2_control arm with a forward position or
JointTrajectoryController, MoveIt Servo for end-effector moves, or ``sim_robot_node``.

Reads ``joint_states_topic`` (sensor_msgs/JointState; the gripper is its ``gripper_joint`` entry),
``ee_pose_topic`` (geometry_msgs/PoseStamped) or, on a stock arm without one, the pose from the measured
joints (``kinematics``, :mod:`robot_rl.hardware.ros2.kinematics`, which the safety layer then uses too),
camera topics (sensor_msgs/Image), and on the simulator its extras (``sim_prefix``). Commands:
``joint_position`` as Float64MultiArray (``joint_command: position``) or a one-point JointTrajectory
1/control_hz ahead (``trajectory``); ``ee_delta`` (3,) m as a TwistStamped of ``delta * control_hz`` m/s on
``twist_topic`` (``ee_command: twist``, MoveIt Servo's delta_twist_cmds, started at connect through
``servo_start_service``), or as joint targets by inverse kinematics on the joint interface (``ik``);
``ee_velocity`` (6,) as that twist directly; the gripper on ``gripper_topic`` as a closure or a
JointTrajectory of its joint (``gripper_command``). Every incoming message is checked
(:mod:`robot_rl.hardware.ros2.validate`, stamps by :class:`~robot_rl.hardware.ros2.validate.Freshness`):
a bad one is logged with its reason (``rejected <topic>: ...``), counted in :attr:`RosRobot.rejected` and
never used. The safety layer wraps this robot like any other (``RobotEnv.from_config`` does it). Without
``sim_prefix`` there is no scene reset (:attr:`RosRobot.reset_scene` is None), so ``env.robot.reset: auto``
is the home motion and a human reset.

One node (a DDS participant, or an rclpy node) per process and ``env.robot.ros2`` transport is shared by
the robot and its cameras and spun in a background thread.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from robot_rl.config import CameraConfig, RobotConfig, Ros2Config
from robot_rl.hardware.camera import Camera, Frame
from robot_rl.hardware.errors import (
    CameraError,
    CommandRejected,
    RobotConnectionError,
    RobotTimeoutError,
)
from robot_rl.hardware.robot import Command, CommandMode, Robot, RobotLimits, RobotState, check_command
from robot_rl.hardware.ros2 import msgs, validate
from robot_rl.hardware.ros2.node import Node, NodeArgs, ServiceError, ServiceUnsupportedError
from robot_rl.hardware.ros2.transport import make_node

log = logging.getLogger("robot_rl.ros2.robot_bridge")
IK_MAX_LAG_M = 0.06
"""``ee_command: ik``: the end-effector target stays within this distance (m, per axis) of the measured
pose (anti wind-up while the arm is blocked; the simulator's ``MAX_LAG_M``)."""
RESET_RESEND_S = 0.5
"""A scene-reset request not yet answered is sent again after this long (s)."""


class SpinningNode:
    """A node spun by a daemon thread; subscriptions and publishers made under its lock.

    Args:
        cfg: ``env.robot.ros2`` (transport, domain, loopback).
    """

    def __init__(self, cfg: Ros2Config) -> None:
        domain = cfg.domain_id if cfg.domain_id >= 0 else int(os.environ.get("ROS_DOMAIN_ID", "0") or 0)
        self.node: Node = make_node("robot_bridge", NodeArgs({}, cfg.transport, domain, cfg.loopback))
        self.lock = threading.Lock()
        self.users = 0
        self.rejected: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="ros2-bridge", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            with self.lock:
                self.node.spin_once(0.02)
            time.sleep(0.0005)  # let subscribe/publish take the lock

    def subscribe(self, msg_type: type, topic: str, on_msg, check) -> None:
        """Subscribe; ``on_msg(check(msg))`` for each message ``check`` accepts; a :class:`Rejected`
        one is logged and counted under ``topic``."""

        def callback(msg: Any) -> None:
            try:
                value = check(msg)
            except validate.Rejected as err:
                self.rejected[topic] = self.rejected.get(topic, 0) + 1
                self.node.log.warning("rejected %s: %s", topic, err)
                return
            on_msg(value)

        with self.lock:
            self.node.subscribe(msg_type, topic, callback)

    def publisher(self, msg_type: type, topic: str):
        with self.lock:
            return self.node.publisher(msg_type, topic)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.node.close()


_nodes: dict[tuple, SpinningNode] = {}
_nodes_lock = threading.Lock()


def acquire(cfg: Ros2Config) -> SpinningNode:
    """The process's shared :class:`SpinningNode` for ``cfg``'s transport/domain (refcounted)."""
    key = (cfg.transport, cfg.domain_id, cfg.loopback)
    with _nodes_lock:
        if key not in _nodes:
            _nodes[key] = SpinningNode(cfg)
        _nodes[key].users += 1
        return _nodes[key]


def release(cfg: Ros2Config) -> None:
    """Drop one user of the shared node; the last one closes it."""
    key = (cfg.transport, cfg.domain_id, cfg.loopback)
    with _nodes_lock:
        shared = _nodes.get(key)
        if shared is not None:
            shared.users -= 1
            if shared.users <= 0:
                del _nodes[key]
                shared.close()


def _until(done: Callable[[], bool], deadline: float, poll_s: float = 0.002) -> bool:
    """Poll ``done`` (set by subscription callbacks on the spinning thread) every ``poll_s`` s until it is
    true or ``time.monotonic()`` passes ``deadline``; returns ``done()``."""
    while not done() and time.monotonic() < deadline:
        time.sleep(poll_s)
    return done()


class RosRobot(Robot):
    """A ROS 2 arm over topics (module doc).

    Args:
        cfg: ``env.robot.ros2``.
        control_hz: the rate commands are sent at (Hz); sets a trajectory point's time and the twist scale.
        timeout_s: the largest age (s) of the latest joint state in :meth:`read`; :meth:`connect` waits
            ``cfg.connect_wait_s`` for the first one.
    """

    name = "ros2"

    def __init__(self, cfg: Ros2Config, control_hz: float = 10.0, timeout_s: float = 1.0) -> None:
        self.cfg = cfg
        self.control_hz = control_hz
        self.timeout_s = timeout_s
        modes = []
        if cfg.joint_command != "none":
            modes.append(CommandMode.JOINT_POSITION)
        if cfg.ee_command == "ik":
            modes.append(CommandMode.EE_DELTA)
        elif cfg.twist_topic:
            modes += [CommandMode.EE_DELTA, CommandMode.EE_VELOCITY]
        self.modes = tuple(modes)
        self.kinematics = None
        """:class:`~robot_rl.hardware.ros2.kinematics.ArmKinematics` of ``cfg.kinematics``, or None."""
        if cfg.kinematics != "none":
            # loads MuJoCo and the arm model: only for a bridge with kinematics
            from robot_rl.hardware.ros2.kinematics import ArmKinematics

            self.kinematics = ArmKinematics(cfg.kinematics)
        self._fresh = validate.Freshness(cfg.stale_s, cfg.clock_skew_s, cfg.use_sim_time, log)
        self._ee_target: np.ndarray | None = None  # ee_command ik: the target the last ee_delta set (m)
        f = np.asarray
        self._limits = RobotLimits(
            f(cfg.joint_low, float),
            f(cfg.joint_high, float),
            f(cfg.joint_vel_max, float),
            f(cfg.joint_acc_max, float),
            f(cfg.ee_low, float),
            f(cfg.ee_high, float),
            float(cfg.ee_step_max),
            float(control_hz),
            tuple(cfg.joint_names),
        )
        self._shared: SpinningNode | None = None
        self._joints: tuple[np.ndarray, np.ndarray, float] | None = None  # pos, vel, gripper
        self._joint_time = 0.0  # receipt (monotonic s) of the latest joint state
        self._joint_stamp = 0.0  # its header stamp (s since the epoch)
        self._extra_time: dict[str, float] = {}  # receipt (monotonic s) of each extra
        self._reset_ack: tuple[str, float] | None = None  # (request, stamp s) of the last scene_reset
        self._pose = (np.full(3, np.nan), np.array([1.0, 0, 0, 0]))
        self._pose_time = 0.0  # receipt (monotonic s) of the latest pose on ee_pose_topic
        self._extra: dict[str, np.ndarray] = {}
        self._pubs: dict[str, Any] = {}

    @classmethod
    def from_config(cls, cfg: RobotConfig, control_hz: float = 10.0) -> RosRobot:
        """The bridge of ``env.robot`` (``ros2`` section; ``timeout_s``)."""
        return cls(cfg.ros2, control_hz, cfg.timeout_s)

    @property
    def limits(self) -> RobotLimits:
        return self._limits

    @property
    def is_connected(self) -> bool:
        return self._shared is not None

    @property
    def rejected(self) -> dict[str, int]:
        """Rejected incoming messages by topic (shared with the cameras of the same node)."""
        return {} if self._shared is None else dict(self._shared.rejected)

    # -- callbacks ------------------------------------------------------------------------------------
    def _on_joints(self, value: tuple[np.ndarray, np.ndarray, float, float]) -> None:
        *joints, stamp = value
        self._joints, self._joint_stamp, self._joint_time = tuple(joints), stamp, time.monotonic()

    def _check_joints(self, msg: msgs.JointState) -> tuple[np.ndarray, np.ndarray, float, float]:
        cfg = self.cfg
        self._fresh.check(cfg.joint_states_topic, msg.header, time.time())
        pos, vel = validate.joint_state(msg, cfg.joint_names, time.time(), math.inf)  # stamp checked above
        grip = 0.0
        if cfg.gripper_joint in msg.name:
            value = msg.position[list(msg.name).index(cfg.gripper_joint)]
            grip = float(np.clip((value - cfg.gripper_open) / (cfg.gripper_closed - cfg.gripper_open), 0, 1))
        return pos, vel, grip, msgs.seconds(msg.header.stamp)

    def _on_extra(self, key: str, value: np.ndarray) -> None:
        self._extra[key], self._extra_time[key] = value, time.monotonic()

    def _on_pose(self, pose: tuple[np.ndarray, np.ndarray]) -> None:
        self._pose, self._pose_time = pose, time.monotonic()

    def _check_pose(self, msg: msgs.PoseStamped) -> tuple[np.ndarray, np.ndarray]:
        self._fresh.check(self.cfg.ee_pose_topic, msg.header, time.time())
        p, q = msg.pose.position, msg.pose.orientation
        pos, quat = np.array([p.x, p.y, p.z]), np.array([q.w, q.x, q.y, q.z])
        if not (np.all(np.isfinite(pos)) and np.all(np.isfinite(quat))):
            raise validate.Rejected(f"pose has NaN or inf: {pos.tolist()} {quat.tolist()}")
        return pos, quat

    def connect(self) -> None:
        """Subscribe, wait up to ``cfg.connect_wait_s`` for a valid joint state and (with ``ee_pose_topic``)
        a valid pose (a launch file starts the robot's driver and its consumers together, in no order), then
        start MoveIt Servo (``servo_start_service``).

        Raises:
            RobotConnectionError: no valid joint state on ``joint_states_topic`` or pose on
                ``ee_pose_topic`` within ``connect_wait_s``; Servo's start service missing, failing, or
                asked of the cyclonedds transport (services need rclpy).
        """
        if self._shared is not None:
            return
        cfg = self.cfg
        shared = self._shared = acquire(cfg)
        shared.subscribe(msgs.JointState, cfg.joint_states_topic, self._on_joints, self._check_joints)
        if cfg.ee_pose_topic:
            shared.subscribe(msgs.PoseStamped, cfg.ee_pose_topic, self._on_pose, self._check_pose)
        if cfg.sim_prefix:
            shared.subscribe(
                msgs.Bool,
                f"{cfg.sim_prefix}/lifted",
                lambda v: self._on_extra("lifted", v),
                lambda m: np.array([float(m.data)]),
            )
            shared.subscribe(
                msgs.Float64MultiArray,
                f"{cfg.sim_prefix}/environment_state",
                lambda v: self._on_extra("environment_state", v),
                lambda m: np.asarray(m.data, dtype=np.float64),
            )
            shared.subscribe(
                msgs.Header,
                f"{cfg.sim_prefix}/scene_reset",
                lambda v: setattr(self, "_reset_ack", v),
                lambda m: (m.frame_id, msgs.seconds(m.stamp)),
            )
            self._pubs["reset"] = shared.publisher(msgs.String, f"{cfg.sim_prefix}/reset_scene")
        if cfg.joint_command == "position":
            self._pubs["joint"] = shared.publisher(msgs.Float64MultiArray, cfg.position_topic)
        elif cfg.joint_command == "trajectory":
            self._pubs["joint"] = shared.publisher(msgs.JointTrajectory, cfg.trajectory_topic)
        if CommandMode.EE_VELOCITY in self.modes:  # ee_command twist on twist_topic
            self._pubs["twist"] = shared.publisher(msgs.TwistStamped, cfg.twist_topic)
        if cfg.gripper_topic:
            kind = msgs.JointTrajectory if cfg.gripper_command == "trajectory" else msgs.Float64MultiArray
            self._pubs["gripper"] = shared.publisher(kind, cfg.gripper_topic)
        self._ee_target = None
        deadline = time.monotonic() + cfg.connect_wait_s
        waits = [(lambda: self._joints is not None, f"sensor_msgs/JointState on {cfg.joint_states_topic}")]
        if cfg.ee_pose_topic:
            waits.append((lambda: self._pose_time > 0, f"geometry_msgs/PoseStamped on {cfg.ee_pose_topic}"))
        for done, what in waits:
            if not _until(done, deadline):
                self.disconnect()
                hint = ""
                if what.startswith("geometry_msgs"):
                    hint = " (a stock arm publishes none: set ee_pose_topic: '' and kinematics, e.g. panda)"
                raise RobotConnectionError(
                    f"ros2: no valid {what} within {cfg.connect_wait_s} s (env.robot.ros2.connect_wait_s; "
                    f"transport {cfg.transport}, domain {cfg.domain_id}){hint}; is the robot running?"
                )
        if cfg.servo_start_service:
            self._start_servo(max(0.1, deadline - time.monotonic()))
        # the simulator's extras arrive on their own topics: the first read must already hold them
        extras = ("lifted", "environment_state") if cfg.sim_prefix else ()
        _until(lambda: all(k in self._extra for k in extras), deadline)

    def _start_servo(self, timeout_s: float) -> None:
        """Call MoveIt Servo's start service (std_srvs/srv/Trigger) within ``timeout_s`` (s).

        Raises:
            RobotConnectionError: no such service, no reply, ``success`` false, or no services on this
                transport (the robot is disconnected first).
        """
        name = self.cfg.servo_start_service
        try:
            reply = self._shared.node.call("std_srvs/srv/Trigger", name, {}, timeout_s)
        except (ServiceError, ServiceUnsupportedError) as err:
            self.disconnect()
            raise RobotConnectionError(
                f"ros2: MoveIt Servo not started (servo_start_service): {err}"
            ) from None
        if not reply.get("success"):
            self.disconnect()
            raise RobotConnectionError(
                f"ros2: {name} refused to start MoveIt Servo: {reply.get('message')!r}"
            )

    def disconnect(self) -> None:
        if self._shared is not None:
            self._shared = None
            self._pubs.clear()
            release(self.cfg)

    def read(self) -> RobotState:
        """The latest valid state.

        Raises:
            RobotConnectionError: not connected.
            RobotTimeoutError: the latest valid joint state is older than ``timeout_s``.
        """
        if self._shared is None:
            raise RobotConnectionError("ros2: not connected (call connect() first)")
        age = time.monotonic() - self._joint_time
        if self._joints is None or age > self.timeout_s:
            raise RobotTimeoutError(
                f"ros2: no valid joint state on {self.cfg.joint_states_topic} for {age:.2f} s"
            )
        pos, vel, grip = self._joints
        ee_pos, ee_quat = self._pose
        if not self.cfg.ee_pose_topic and self.kinematics is not None:
            ee_pos, ee_quat = self.kinematics.pose(pos)
        return RobotState(
            pos.copy(),
            vel.copy(),
            ee_pos.copy(),
            ee_quat.copy(),
            grip,
            self._joint_time,
            {k: v.copy() for k, v in self._extra.items()},
        )

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray | None:
        """End-effector position (3,) m at ``joint_pos`` (n,) rad by ``cfg.kinematics``; None without."""
        return None if self.kinematics is None else self.kinematics.pose(joint_pos)[0]

    def _trajectory(self, names: list[str], positions: list[float]) -> msgs.JointTrajectory:
        """A one-point trajectory reaching ``positions`` 1/control_hz from now (stamp zero: start now)."""
        point = msgs.JointTrajectoryPoint(positions, time_from_start=msgs.duration(1.0 / self.control_hz))
        return msgs.JointTrajectory(msgs.Header(msgs.Time(), ""), names, [point])

    def _send_joints(self, q: np.ndarray) -> None:
        if self.cfg.joint_command == "position":
            self._pubs["joint"].publish(msgs.Float64MultiArray(data=q.tolist()))
        else:
            self._pubs["joint"].publish(self._trajectory(list(self.cfg.joint_names), q.tolist()))

    def _ik_targets(self, delta: np.ndarray) -> np.ndarray:
        """Joint targets (n,) rad moving the end-effector target by ``delta`` (3,) m (``ee_command: ik``):
        the target accumulates over ee_delta commands (restarting at the measured pose after any other
        command), kept in the ``ee_low``/``ee_high`` box and within :data:`IK_MAX_LAG_M` of the measured pose.

        Raises:
            CommandRejected: a rotation in ``delta`` (IK keeps the gripper pointing down).
        """
        if delta.size == 6 and np.any(delta[3:]):
            raise CommandRejected(
                "ros2: ee_command=ik keeps the gripper pointing down; rotation deltas need MoveIt Servo "
                "(env.robot.ros2.ee_command: twist)"
            )
        q = self.read().joint_pos
        pinch = self.kinematics.pose(q)[0]
        target = pinch if self._ee_target is None else self._ee_target
        target = np.clip(target + delta[:3], self._limits.ee_low, self._limits.ee_high)
        self._ee_target = np.clip(target, pinch - IK_MAX_LAG_M, pinch + IK_MAX_LAG_M)
        return self.kinematics.solve(q, self._ee_target)

    def command(self, cmd: Command) -> None:
        """Publish ``cmd`` on the topic of its mode (module doc).

        Raises:
            RobotConnectionError: not connected. CommandRejected: as :func:`check_command`, or a rotation
                delta with ``ee_command: ik``. RobotTimeoutError: ``ee_command: ik`` without a fresh state.
        """
        if self._shared is None:
            raise RobotConnectionError("ros2: not connected (call connect() first)")
        value = check_command(cmd, self.modes, self._limits.num_joints, self.name)
        header = msgs.Header(msgs.stamp(), self.cfg.twist_frame)
        if cmd.mode == CommandMode.JOINT_POSITION:
            self._ee_target = None
            self._send_joints(value)
        elif self.cfg.ee_command == "ik":
            self._send_joints(self._ik_targets(value))
        else:
            twist = value * self.control_hz if cmd.mode == CommandMode.EE_DELTA else value
            twist = np.concatenate([twist, np.zeros(6 - twist.size)])
            self._pubs["twist"].publish(
                msgs.TwistStamped(header, msgs.Twist(msgs.Vector3(*twist[:3]), msgs.Vector3(*twist[3:])))
            )
        if cmd.gripper is not None and "gripper" in self._pubs:
            self._send_gripper(float(cmd.gripper))

    def _send_gripper(self, closure: float) -> None:
        """``closure`` in [0, 1] as ``gripper_command`` says (module doc)."""
        cfg = self.cfg
        if cfg.gripper_command == "closure":
            self._pubs["gripper"].publish(msgs.Float64MultiArray(data=[closure]))
        else:
            position = cfg.gripper_open + closure * (cfg.gripper_closed - cfg.gripper_open)
            self._pubs["gripper"].publish(self._trajectory([cfg.gripper_joint], [position]))

    def hold(self) -> None:
        """Zero twist (MoveIt Servo stops) and, with a joint interface, the measured joint positions."""
        if "twist" in self._pubs:
            self.command(Command(CommandMode.EE_VELOCITY, np.zeros(6)))
        if CommandMode.JOINT_POSITION in self.modes:
            self.command(Command(CommandMode.JOINT_POSITION, self.read().joint_pos.copy()))

    @property
    def reset_scene(self) -> Callable[[int | None], None] | None:
        """``reset_scene(seed)`` of ``sim_robot_node`` (:meth:`_reset_scene`), or None without ``sim_prefix``:
        a real arm has no scene reset, so ``env.robot.reset: auto`` asks a human after the home motion."""
        return self._reset_scene if self.cfg.sim_prefix else None

    def _reset_scene(self, seed: int | None = None) -> None:
        """Ask ``sim_robot_node`` to re-place the cube (``<sim_prefix>/reset_scene``) and wait, up to
        ``cfg.reset_wait_s``, for its answer on ``<sim_prefix>/scene_reset`` and then for a joint state
        stamped after it and the extras received after that joint state: the next :meth:`read` shows the
        new scene, not the previous episode's end (which the first action chunk would otherwise be
        computed from).

        Raises:
            RobotConnectionError: not connected.
            RobotTimeoutError: no answer, or no state after it, within ``reset_wait_s`` (names the topic).
        """
        if "reset" not in self._pubs:
            raise RobotConnectionError("ros2: reset_scene: not connected (call connect() first)")
        request = f"{'' if seed is None else seed}@{uuid.uuid4().hex[:16]}"
        prefix = self.cfg.sim_prefix
        self._reset_ack, self._ee_target = None, None
        deadline = time.monotonic() + self.cfg.reset_wait_s

        def wait(done, what: str) -> None:
            if not _until(done, deadline):
                raise RobotTimeoutError(
                    f"ros2: reset_scene {request!r}: no {what} within {self.cfg.reset_wait_s} s "
                    "(env.robot.ros2.reset_wait_s); is sim_robot_node running?"
                )

        # a request sent before discovery matched the node's reader is lost (volatile QoS): the joint
        # states can already flow node -> bridge while bridge -> node is still unmatched; and a reader
        # drops data from a writer it has not discovered yet even once this writer has matched it (Cyclone
        # DDS), so the request is re-sent until answered (the node answers a repeat without resetting again)
        reset = self._pubs["reset"]
        wait(lambda: reset.subscription_count() > 0, f"subscriber on {prefix}/reset_scene")

        def answered() -> bool:
            return self._reset_ack is not None and self._reset_ack[0] == request

        while not answered() and time.monotonic() < deadline:
            reset.publish(msgs.String(request))
            _until(answered, min(deadline, time.monotonic() + RESET_RESEND_S))
        wait(answered, f"answer on {prefix}/scene_reset")
        stamp = self._reset_ack[1]
        wait(
            lambda: self._joint_stamp >= stamp,
            f"joint state on {self.cfg.joint_states_topic} after the reset",
        )
        after = self._joint_time
        extras = ("lifted", "environment_state")
        wait(
            lambda: all(self._extra_time.get(k, -1.0) >= after for k in extras),
            f"{prefix}/environment_state after the reset",
        )


class RosCamera(Camera):
    """A ``sensor_msgs/Image`` topic (``source``) as a :class:`Camera`; frames other than ``width`` x
    ``height`` rgb8/bgr8, or stale, are rejected (logged, counted) and never returned."""

    def __init__(self, name: str, topic: str, width: int, height: int, ros2: Ros2Config) -> None:
        self.name, self.topic, self.width, self.height, self.ros2 = name, topic, width, height, ros2
        self._shared: SpinningNode | None = None
        self._frame: Frame | None = None
        self._new = threading.Event()
        self._fresh = validate.Freshness(ros2.stale_s, ros2.clock_skew_s, ros2.use_sim_time, log)

    @classmethod
    def from_config(cls, name: str, cfg: CameraConfig, robot: RobotConfig) -> RosCamera:
        """Camera ``name`` on topic ``cfg.source`` over ``robot.ros2``'s transport."""
        return cls(name, cfg.source, cfg.width, cfg.height, robot.ros2)

    def _check(self, msg: msgs.Image) -> np.ndarray:
        self._fresh.check(self.topic, msg.header, time.time())
        return validate.image(msg, self.width, self.height, time.time(), math.inf)  # stamp checked above

    def _on_image(self, image: np.ndarray) -> None:
        self._frame = Frame(image, time.monotonic())
        self._new.set()

    def connect(self) -> None:
        if self._shared is None:
            self._shared = acquire(self.ros2)
            self._shared.subscribe(msgs.Image, self.topic, self._on_image, self._check)

    def disconnect(self) -> None:
        if self._shared is not None:
            self._shared = None
            release(self.ros2)

    def read(self, timeout_s: float = 1.0) -> Frame:
        """The next valid frame after the last one returned.

        Raises:
            CameraError: not connected, or no valid frame within ``timeout_s``.
        """
        if self._shared is None:
            raise CameraError(f"camera {self.name}: not connected")
        if not self._new.wait(timeout_s):
            raise CameraError(
                f"camera {self.name}: no valid sensor_msgs/Image on {self.topic} in {timeout_s} s"
            )
        self._new.clear()
        return self._frame
