"""``sim_robot_node``: the simulated Panda pick-cube scene (:class:`~robot_rl.hardware.sim_robot.MujocoRobot`)
as a ROS 2 robot, in real time, so the whole ROS 2 path runs without hardware.

Publishes (``state_rate_hz``): ``/joint_states`` (sensor_msgs/JointState: ``joint1``..``joint7`` rad and
``gripper`` closure 0..1), ``/ee_pose`` (geometry_msgs/PoseStamped, pinch site in ``base_link``), and the
scene's extras ``<sim_prefix>/lifted`` (std_msgs/Bool) and ``<sim_prefix>/environment_state``
(std_msgs/Float64MultiArray: cube position m + quaternion w, x, y, z); at ``camera_rate_hz`` each camera of
``cameras`` as ``/camera/<name>/image_raw`` (sensor_msgs/Image rgb8, ``image_size`` square).

Subscribes, like a ros2_control arm with MoveIt Servo: ``/forward_position_controller/commands``
(std_msgs/Float64MultiArray, 7 joint targets rad, optionally the gripper closure 8th),
``/joint_trajectory_controller/joint_trajectory`` (trajectory_msgs/JointTrajectory; the last point is the
target), ``/servo_node/delta_twist_cmds`` (geometry_msgs/TwistStamped, m/s, applied while fresh),
``/gripper_controller/commands`` (Float64MultiArray [closure 0..1]) and ``<sim_prefix>/reset_scene``
(std_msgs/String ``"<seed>@<id>"``, :func:`~robot_rl.hardware.ros2.validate.reset_request`; answered, once
the scene is reset, on ``<sim_prefix>/scene_reset``: std_msgs/Header stamped at the reset, ``frame_id`` the
request, so a client can tell the first state published after it; the latest request re-sent is answered
again with the same stamp, without a second reset). Every command is checked
(:mod:`robot_rl.hardware.ros2.validate`); a bad one is logged with its reason and never reaches the robot.

Twists (``twist_mode``): ``step`` (default) moves the end-effector target at once by the twist times
1/``control_hz``, which is how the built-in simulator executes an ``ee_delta`` action, so a policy trained
there acts over ROS 2 as it does in process; ``servo`` integrates the twist continuously while it is fresh,
as MoveIt Servo drives a velocity-controlled arm (the target ramps over the control period instead of
jumping; measured: pick success 0.40 vs 0.58 in process for the same BC checkpoint and seeds, and 0.62 with
``step``, ``benchmarks/bench_ros2_success.py``). Watchdog (``servo``), as MoveIt Servo's
``incoming_command_timeout``: a twist is applied until ``command_timeout_s`` after its header stamp (its
receive time when unstamped), however late it arrives or the physics ticks, and then the arm halts where it
is measured (:meth:`~robot_rl.hardware.sim_robot.MujocoRobot.halt`), so it stops when the commanding node
dies; a stepped twist is applied once, and position targets are held by the joint controller anyway.

Stock mode (``mode:=stock``): only what a ros2_control + MoveIt Panda offers, so a client is tested as it
would run on a lab's arm (:mod:`robot_rl.hardware.ros2.stock_arm`). Publishes ``/joint_states`` with
``panda_joint1..7`` (rad) and ``panda_finger_joint1/2`` (m), and nothing else (no ``/ee_pose``, no scene
extras, no reset; cameras as configured). Takes a JointTrajectory of ``panda_joint1..7`` on
``trajectory_topic`` (a JointTrajectoryController), the fingers as a JointTrajectory on
``gripper_trajectory_topic`` (m; a trajectory controller on the finger joints, since
``control_msgs/GripperCommand`` is not installable here), and MoveIt Servo's TwistStamped on
``twist_topic`` with ``command_in_type: speed_units`` semantics (m/s, integrated while fresh, whatever
``twist_mode``) only after its start service ``servo_start_service`` (std_srvs/srv/Trigger) was called;
before that, twists are rejected. Services need the rclpy transport: on cyclonedds Servo cannot be started.
``use_sim_time`` stamps every message with the simulated time (s since the node started), as a simulator
publishing ``/clock`` does, in either mode.

Physics: the timer advances the scene by the elapsed wall time (whole physics steps, at most
:data:`robot_rl.hardware.sim_server.MAX_CATCH_UP_S` at once, as the robot server does); a tick more than
:data:`STALL_S` late is logged, since the scene's time then lags the stamps on what it publishes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import mujoco
import numpy as np

from robot_rl.deploy.ros2.cli import run_node
from robot_rl.hardware.errors import CommandRejected
from robot_rl.hardware.robot import Command, CommandMode, RobotState
from robot_rl.hardware.ros2 import msgs, stock_arm, validate
from robot_rl.hardware.ros2.node import Node, ServiceUnsupportedError
from robot_rl.hardware.sim_robot import MujocoRobot
from robot_rl.hardware.sim_server import MAX_CATCH_UP_S
from robot_rl.sim.panda_pick_cube import CAMERAS
from robot_rl.sim.render import OffscreenRenderer

JOINTS = [f"joint{i}" for i in range(1, 8)]
TWIST_MODES = ("step", "servo")
STALL_S = 0.5
"""A tick later than this (s) after the last is logged as a stall: the scene ran at most
:data:`~robot_rl.hardware.sim_server.MAX_CATCH_UP_S` of the gap, so its time fell behind the wall clock."""
MODES = ("sim", "stock")
TRIGGER = "std_srvs/srv/Trigger"
PARAMETERS: dict = {
    "mode": "sim",
    "use_sim_time": False,
    "control_hz": 10.0,
    "physics_hz": 500.0,
    "scene_seed": -1,
    "lift_height_m": 0.1,
    "stale_s": 0.5,
    "command_timeout_s": 0.5,
    "twist_mode": "step",
    "image_size": 96,
    "cameras": [],
    "camera_rate_hz": 10.0,
    "state_rate_hz": 50.0,
    "sim_prefix": "/robot_rl/sim",
    "joint_states_topic": "/joint_states",
    "ee_pose_topic": "/ee_pose",
    "position_topic": "/forward_position_controller/commands",
    "trajectory_topic": "/joint_trajectory_controller/joint_trajectory",
    "twist_topic": "/servo_node/delta_twist_cmds",
    "gripper_topic": "/gripper_controller/commands",
    "gripper_trajectory_topic": "/gripper_trajectory_controller/joint_trajectory",
    "servo_start_service": "/servo_node/start_servo",
}
"""The node's parameters and defaults (``mode`` sim|stock; ``use_sim_time``; ``control_hz``, ``physics_hz``
Hz; ``scene_seed`` -1: random; ``lift_height_m`` m; ``stale_s``, ``command_timeout_s`` s; ``twist_mode``
step|servo; ``image_size`` px; rates Hz; topics; ``servo_start_service`` in stock mode), declared all at
start-up; :mod:`robot_rl.deploy.ros2.registry` reads them from here."""


class SimRobotNode:
    """The node's state and callbacks on ``node`` (module doc); parameters are read from ``node``.

    Raises:
        ParameterError: a bad parameter. ValueError: an unknown mode, twist mode or camera, or bad rates.
    """

    def __init__(self, node: Node) -> None:
        self.node = node
        p = node.params(PARAMETERS)
        self.mode = p["mode"]
        if self.mode not in MODES:
            raise ValueError(f"sim_robot_node: mode={self.mode!r}; expected one of {MODES}")
        seed = p["scene_seed"]
        self.stale_s = p["stale_s"]
        self.command_timeout_s = p["command_timeout_s"]
        self.twist_mode = p["twist_mode"]
        if self.twist_mode not in TWIST_MODES:
            raise ValueError(f"sim_robot_node: twist_mode={self.twist_mode!r}; expected one of {TWIST_MODES}")
        self.image_size = p["image_size"]
        self.cameras = p["cameras"]
        for cam in self.cameras:
            if cam not in CAMERAS:
                raise ValueError(f"sim_robot_node: unknown camera {cam!r}; available: {sorted(CAMERAS)}")
        self._camera_ids = CAMERAS
        self.robot = MujocoRobot(
            p["control_hz"],
            p["physics_hz"],
            lockstep=False,
            lift_height_m=p["lift_height_m"],
            seed=None if seed < 0 else seed,
        )
        self.robot.connect()
        self.use_sim_time = p["use_sim_time"]
        self.rejected: dict[str, int] = {}
        self.commands = 0
        self.stalls = 0  # ticks that came more than STALL_S after the last
        self.servo_started = False
        self._joint_target = False  # the arm's last target came from joint positions (else the ee target)
        self._twist = np.zeros(6)
        self._twist_until = -np.inf  # monotonic s: the servo twist's stamp + command_timeout_s
        self._servo_moving = False  # a servo twist moved the target since the last halt
        self._sim_time = 0.0
        self._renderer = None
        if self.mode == "stock":
            self.twist_mode = "servo"  # MoveIt Servo integrates speed_units twists
            self._publish_state = self._stock_endpoints(p)
        else:
            self._publish_state = self._sim_endpoints(p)
        self.pub_images = {
            c: node.publisher(msgs.Image, f"/camera/{c}/image_raw", depth=2) for c in self.cameras
        }
        node.timer(1.0 / p["state_rate_hz"], self._tick)
        if self.cameras:  # the GL context now (probing the backend takes seconds), not in the loop
            self._renderer = OffscreenRenderer(self.robot.env.model)
            self._scratch = mujoco.MjData(self.robot.env.model)
            node.timer(1.0 / p["camera_rate_hz"], self._render)
        # the scene's clock starts now: setting up the endpoints and probing GL took 1-2 s, which the first
        # tick would otherwise log as a stall
        self._last = time.monotonic()

    def _sim_endpoints(self, p: dict) -> Callable[[RobotState, msgs.Header], None]:
        """The simulator's topics (module doc); returns the state publisher."""
        node, prefix = self.node, p["sim_prefix"]
        pub_joints = node.publisher(msgs.JointState, p["joint_states_topic"])
        pub_pose = node.publisher(msgs.PoseStamped, p["ee_pose_topic"])
        pub_lifted = node.publisher(msgs.Bool, f"{prefix}/lifted")
        pub_env = node.publisher(msgs.Float64MultiArray, f"{prefix}/environment_state")
        self.pub_reset = node.publisher(msgs.Header, f"{prefix}/scene_reset")
        self._last_reset: msgs.Header | None = None  # the answer to the latest reset request
        node.subscribe(msgs.Float64MultiArray, p["position_topic"], self._on_position)
        node.subscribe(msgs.JointTrajectory, p["trajectory_topic"], self._on_trajectory)
        node.subscribe(msgs.TwistStamped, p["twist_topic"], self._on_twist)
        node.subscribe(msgs.Float64MultiArray, p["gripper_topic"], self._on_gripper)
        node.subscribe(msgs.String, f"{prefix}/reset_scene", self._on_reset)

        def publish(state: RobotState, header: msgs.Header) -> None:
            pub_joints.publish(
                msgs.JointState(
                    header,
                    [*JOINTS, "gripper"],
                    [*state.joint_pos.tolist(), state.gripper],
                    [*state.joint_vel.tolist(), 0.0],
                    [],
                )
            )
            w, x, y, z = state.ee_quat.tolist()
            pose = msgs.Pose(msgs.Point(*state.ee_pos.tolist()), msgs.Quaternion(x, y, z, w))
            pub_pose.publish(msgs.PoseStamped(header, pose))
            pub_lifted.publish(msgs.Bool(bool(state.extra["lifted"][0] > 0.5)))
            pub_env.publish(msgs.Float64MultiArray(data=state.extra["environment_state"].tolist()))

        return publish

    def _stock_endpoints(self, p: dict) -> Callable[[RobotState, msgs.Header], None]:
        """A stock ros2_control + MoveIt arm's topics and Servo's start service (module doc); returns the
        state publisher."""
        node = self.node
        pub_joints = node.publisher(msgs.JointState, p["joint_states_topic"])
        node.subscribe(msgs.JointTrajectory, p["trajectory_topic"], self._on_trajectory)
        node.subscribe(msgs.JointTrajectory, p["gripper_trajectory_topic"], self._on_finger_trajectory)
        node.subscribe(msgs.TwistStamped, p["twist_topic"], self._on_twist)
        self.servo_service = p["servo_start_service"]
        try:
            node.service(TRIGGER, self.servo_service, self._on_start_servo)
        except ServiceUnsupportedError as err:
            node.log.warning("MoveIt Servo cannot be started, twists will be rejected: %s", err)
        return lambda state, header: pub_joints.publish(stock_arm.joint_state(state, header))

    # -- commands -------------------------------------------------------------------------------------
    def _guard(self, topic: str, fn) -> None:
        try:
            fn()
            self.commands += 1
        except validate.Rejected as err:
            self._reject(topic, err)

    def _reject(self, topic: str, err: Exception) -> None:
        self.rejected[topic] = self.rejected.get(topic, 0) + 1
        self.node.log.warning("rejected %s: %s", topic, err)

    def _apply(self, cmd: Command) -> None:
        try:
            self.robot.command(cmd)
        except CommandRejected as err:
            raise validate.Rejected(str(err)) from None
        self._joint_target = cmd.mode == CommandMode.JOINT_POSITION

    def _grip(self, closure: float) -> None:
        """Move the gripper to ``closure`` in [0, 1]; the arm keeps the target of its last command (a zero
        ee_delta after joint targets would re-solve them by IK, undoing the joint move)."""
        now = time.monotonic()
        if self._joint_target:
            cmd = Command(CommandMode.JOINT_POSITION, self.robot.env.controller.q_des.copy(), closure, now)
        else:
            cmd = Command(CommandMode.EE_DELTA, np.zeros(3), closure, now)
        self._apply(cmd)

    def _on_position(self, msg: msgs.Float64MultiArray) -> None:
        def go():
            q, grip = validate.positions(msg.data, JOINTS)
            self._apply(Command(CommandMode.JOINT_POSITION, q, grip, time.monotonic()))

        self._guard("position command", go)

    def _on_trajectory(self, msg: msgs.JointTrajectory) -> None:
        joints = stock_arm.ARM_JOINTS if self.mode == "stock" else JOINTS

        def go():
            validate.check_stamp(msg.header, self.node.now(), self.stale_s)
            if not msg.points:
                raise validate.Rejected("trajectory has no points")
            q, grip = validate.positions(msg.points[-1].positions, joints, list(msg.joint_names))
            self._apply(Command(CommandMode.JOINT_POSITION, q, grip, time.monotonic()))

        self._guard("trajectory command", go)

    def _on_finger_trajectory(self, msg: msgs.JointTrajectory) -> None:
        def go():
            validate.check_stamp(msg.header, self.node.now(), self.stale_s)
            self._grip(stock_arm.gripper_closure(msg))

        self._guard("gripper trajectory command", go)

    def _on_start_servo(self, _request: dict) -> dict:
        self.servo_started = True
        return {"success": True, "message": "servo started (command_in_type: speed_units)"}

    def _on_twist(self, msg: msgs.TwistStamped) -> None:
        def go():
            if self.mode == "stock" and not self.servo_started:
                raise validate.Rejected(f"MoveIt Servo is not started (call {self.servo_service})")
            twist = validate.twist(msg, self.node.now(), self.stale_s)
            if self.twist_mode == "step":
                delta = twist[:3] / self.robot.limits.control_hz
                self._apply(Command(CommandMode.EE_DELTA, delta, None, time.monotonic()))
            else:
                stamp = msgs.seconds(msg.header.stamp)
                age = max(0.0, self.node.now() - stamp) if stamp else 0.0
                self._twist, self._twist_until = twist, time.monotonic() - age + self.command_timeout_s

        self._guard("twist command", go)

    def _on_gripper(self, msg: msgs.Float64MultiArray) -> None:
        def go():
            if len(msg.data) != 1 or not (np.isfinite(msg.data[0]) and 0.0 <= msg.data[0] <= 1.0):
                raise validate.Rejected(f"gripper command must be one value in [0, 1], got {list(msg.data)}")
            self._grip(float(msg.data[0]))

        self._guard("gripper command", go)

    def _on_reset(self, msg: msgs.String) -> None:
        def go():
            text = msg.data.strip()
            seed, request_id = validate.reset_request(text)
            if request_id and self._last_reset is not None and self._last_reset.frame_id == text:
                self.pub_reset.publish(self._last_reset)  # a re-sent request: answered again, not reset twice
                return
            self.robot.reset_scene(seed)
            self._twist_until, self._servo_moving, self._joint_target = -np.inf, False, False
            self._last_reset = msgs.Header(self._stamp(), text)
            self.pub_reset.publish(self._last_reset)

        self._guard("reset_scene", go)

    # -- physics and publishing -----------------------------------------------------------------------
    def _tick(self) -> None:
        now = time.monotonic()
        gap = now - self._last
        if gap > STALL_S:
            self.stalls += 1
            self.node.log.warning(
                "the physics tick came %.2f s after the last (a stalled process or machine); the scene "
                "advances %.2f s of it, so its time now lags the wall clock",
                gap,
                MAX_CATCH_UP_S,
            )
        dt = min(gap, MAX_CATCH_UP_S)
        fresh = min(dt, min(now, self._twist_until) - self._last)  # of this tick, the twist's remaining life
        self._last = now
        if fresh > 0.0 and np.any(self._twist[:3]):
            self.robot.command(Command(CommandMode.EE_DELTA, self._twist[:3] * fresh, None, now))
            self._joint_target, self._servo_moving = False, True
        elif self._servo_moving and now > self._twist_until:
            self._servo_moving = False
            if not self._joint_target:  # a joint command since then holds its own target
                self.robot.halt()
        self.robot.advance(dt)
        self._sim_time += dt
        state = self.robot.read()
        self._publish_state(state, msgs.Header(self._stamp(), "base_link"))

    def _stamp(self) -> msgs.Time:
        """Now on the node's clock: the simulated time (``use_sim_time``) or the system clock."""
        return msgs.stamp(self._sim_time) if self.use_sim_time else msgs.stamp()

    def _render(self) -> None:
        mujoco.mj_copyData(self._scratch, self.robot.env.model, self.robot.env.data)
        header = msgs.Header(self._stamp(), "")
        s = self.image_size
        for cam, pub in self.pub_images.items():
            img = self._renderer.render(self._scratch, self._camera_ids[cam], s)
            header = msgs.Header(header.stamp, f"{cam}_camera")
            pub.publish(msgs.Image(header, s, s, "rgb8", 0, 3 * s, np.ascontiguousarray(img).tobytes()))

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
        self.node.close()


def main(argv: list[str] | None = None) -> int:
    """``robot-rl ros2 sim_robot_node [--ros-args -p name:=value ...]``; runs until SIGINT/SIGTERM."""
    return run_node("sim_robot_node", SimRobotNode, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
