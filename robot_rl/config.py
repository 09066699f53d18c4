"""Typed experiment configs: dataclasses loaded from YAML with ``--a.b=value`` overrides (draccus).

An unknown key, in a YAML file or on the command line, is an error that names the key. Each section owns
its checks (:mod:`robot_rl.config_checks` walks them at load): a choice key is typed with one of the
``Literal`` types below, a numeric key carries its range (:func:`~robot_rl.config_checks.bounded`), and the
section's ``validate(at)`` returns the problems of its cross-field rules, each naming its dotted key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

import draccus
import yaml

from robot_rl.algos.registry import offline_methods
from robot_rl.config_checks import (
    REAL_ROBOT_MAX_SCALE,
    VENDOR_ARMS,
    address_problem,
    boolean_number_problems,
    bounded,
    controller_host_problem,
    problems,
    real_robot_problems,
    register_choice_decoders,
)

# The choices of the config's keys. A module acting on a key reads its values from here with
# typing.get_args (robot_rl.algos.critic.AGGREGATIONS = get_args(CriticAgg)), so there is one list.
RenderFlip = Literal["none", "horizontal", "vertical", "both"]
RenderRotate = Literal[0, 90, 180, 270]
CameraDriver = Literal["opencv", "realsense", "video", "sim", "ros2"]
EstopSignal = Literal["", "SIGUSR1", "SIGINT"]
Ros2Transport = Literal["auto", "rclpy", "cyclonedds"]
Ros2JointCommand = Literal["position", "trajectory", "none"]
Ros2Kinematics = Literal["none", "panda"]
Ros2EeCommand = Literal["twist", "ik"]
Ros2GripperCommand = Literal["closure", "trajectory"]
RobotDriver = Literal["sim", "sim_server", "so101", "ur", "xarm", "franka", "ros2"]
RobotSuccess = Literal["lifted", "operator", "critic"]
RobotReset = Literal["auto", "scene", "human", "none"]
Realtime = Literal["auto", "always", "never"]  # not on/off: YAML reads those as booleans
ActionMode = Literal["ee_delta", "joint_position"]
GripperMode = Literal["auto", "none"]
FrankaRealtime = Literal["enforce", "ignore"]
URModel = Literal["ur3e", "ur5e", "ur10e", "ur16e", "ur20", "ur3", "ur5", "ur10"]
Backend = Literal["gym_vector", "mujoco_cpu", "maniskill", "mjx"]
VLABackbone = Literal["vlm", "small"]
VLADtype = Literal["float32", "bfloat16"]
PolicyKind = Literal["flow", "vla"]
Normalization = Literal["mean_std", "quantile"]
Execution = Literal["open_loop", "temporal_ensemble"]
CriticAgg = Literal["mean", "min", "min_random2"]
RewardNorm = Literal["max", "scale", "none"]
TerminalChunks = Literal["drop", "keep"]
SuccessValue = Literal["r_max", "r_success", "zero"]
Extraction = Literal["bc_anchored", "actor"]
LearnerDtype = Literal["auto", "float32", "bfloat16"]
EvalSplit = Literal["validation", "test"]
DataReward = Literal["dataset", "episode_end"]
FrameCache = Literal["auto", "memory", "zarr", "none"]
RewardModelKind = Literal["compact", "vlm"]
NegativeRule = Literal["scale", "mix"]
RewardMode = Literal["success", "shaped", "critic"]
InterventionDeviceName = Literal["none", "sim_human", "keyboard", "gamepad", "spacemouse", "gui"]
OnlineMethod = Literal["qc", "qc_fql", "sac", "hg_dagger"]
Runtime = Literal["local", "ray"]
PPOMethod = Literal["flow_noise", "flow_sde"]
ChainLogprob = Literal["mean", "sum"]

ROS2_KINEMATICS: tuple[str, ...] = get_args(Ros2Kinematics)
"""``env.robot.ros2.kinematics``: no model, or the project's MuJoCo Panda
(:mod:`robot_rl.hardware.ros2.kinematics`)."""
ROS2_KINEMATIC_JOINTS = {"panda": 7}
"""Arm joints of each kinematic model (``joint_names`` must list as many)."""


def offline_method_problems(at: str, method: str) -> list[str]:
    """``["<at>method='x': must be one of qc, qc_fql, ..."]`` when ``method`` is not one of the algorithm
    registry's offline methods (:func:`robot_rl.algos.registry.offline_methods`: an algorithm registered
    with ``offline=True`` is a valid ``offline.method``, no edit here), else []."""
    choices = offline_methods()
    if isinstance(method, str) and method in choices:
        return []
    return [f"{at}method={method!r}: must be one of {', '.join(choices)}"]


def success_value_problems(at: str, mode: str, reward_norm: str, gamma: float) -> list[str]:
    """``success_value``'s rule against the discount (issue 38; the value is
    :func:`robot_rl.algos.targets.success_values`): with ``gamma = 1`` the absorbing value r'/(1 - gamma)
    is infinite, so only a zero absorbing reward is allowed there: ``zero``, or ``r_max`` under
    ``reward_norm=max`` (r' = 0). Problems named under ``at``."""
    if (
        isinstance(gamma, int | float)
        and gamma >= 1.0
        and mode != "zero"
        and not (mode == "r_max" and reward_norm == "max")
    ):
        return [
            f"{at}success_value={mode!r} with {at}gamma={gamma}: the absorbing value r/(1 - gamma) is "
            "infinite; use success_value=zero, or r_max with reward_norm=max (r' = 0)"
        ]
    return []


def _ensemble_problems(at: str, critic_agg: str, num_critics: int) -> list[str]:
    """``critic_agg=min_random2`` (REDQ's min of 2 random critics) needs at least 2 critics."""
    if critic_agg == "min_random2" and isinstance(num_critics, int) and num_critics < 2:
        return [f"{at}num_critics={num_critics}: critic_agg=min_random2 needs >= 2 critics"]
    return []


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the file and the key."""


@dataclass
class AdapterConfig:
    """Declarative mapping from a foreign gymnasium env onto robot_rl's LeRobot keys.

    ``observation`` maps our key (e.g. ``observation.state``) to the foreign observation key, or to a list
    of keys that are flattened and concatenated in order. An empty string key ``""`` means the foreign
    observation is a plain array. The action space is the foreign env's, unchanged. ``task`` is the
    language instruction recorded with every episode; ``success_key`` is the ``info`` key read as success
    (``""``: the env reports no success; otherwise a warning is given when an episode ends without the key
    ever appearing in ``info``).

    ``fps`` (Hz): the env's control rate, used for ``cycle_time_s`` and video/dataset frame rates; 0 takes
    the env's ``metadata["render_fps"]`` (an env without it needs ``fps``). ``env.control_hz`` is the
    built-in task's rate and is not used for a foreign env.

    ``render_camera``: our image key (``observation.images.<cam>``) filled with ``env.render()`` (the env is
    made with ``render_mode="rgb_array"``), for an env whose camera is not in its observation dict;
    ``render_flip`` (``none``, ``horizontal``, ``vertical`` or ``both``) and ``render_rotate`` (degrees
    counter-clockwise: 0, 90, 180 or 270) are applied to each frame, rotation first, as the camera appears
    in the dataset.
    """

    observation: dict[str, list[str]] = field(default_factory=dict)
    task: str = ""
    success_key: str = "is_success"
    fps: float = bounded(0.0, ge=0)
    render_camera: str = ""
    render_flip: RenderFlip = "none"
    render_rotate: RenderRotate = 0

    def validate(self, at: str = "env.adapter.") -> list[str]:
        """Problems of the cross-field rules (the walker of :mod:`robot_rl.config_checks` checks the rest),
        each naming its key under ``at``: ``render_camera`` is an image key not also mapped in
        ``observation``."""
        out = []
        cam = self.render_camera
        if cam and not cam.startswith("observation.images."):
            out.append(f"{at}render_camera={cam!r}: must be an image key observation.images.<camera>")
        if cam and cam in (self.observation or {}):
            out.append(f"{at}render_camera={cam!r}: also mapped in {at}observation; map it once")
        return out


@dataclass
class CameraConfig:
    """One camera of a real (or sim-backed) robot, read by a :class:`robot_rl.hardware.camera.Camera`.

    ``driver``: ``opencv`` (``source`` is a device index or path such as ``/dev/video0``), ``ros2``
    (``source`` is a sensor_msgs/Image topic; frames of another size than ``width``x``height`` are
    rejected), ``realsense``
    (``source`` is the serial number, empty for the first found), ``video`` (``source`` is a recorded video
    file, for tests) or ``sim`` (the sim-backed robot's render of camera ``source``). ``width``/``height``
    (pixels) and ``fps`` (Hz) are requested from the device; frames are resized to ``env.image_size``.
    ``depth``: also stream depth (m) aligned to the colour frame (``realsense`` only).
    """

    driver: CameraDriver = "opencv"
    source: str = "0"
    width: int = bounded(640, ge=1)
    height: int = bounded(480, ge=1)
    fps: float = bounded(30.0, gt=0)
    depth: bool = False


@dataclass
class SafetyConfig:
    """The safety layer between every policy or human and a robot (``env.robot.safety``; enforced by
    :class:`robot_rl.hardware.safety.SafeRobot`).

    ``joint_margin_rad``: kept inside the robot's joint limits (rad). ``workspace_low``/``workspace_high``:
    the end-effector box (m, base frame, 3 values each; empty: the robot's own box; a given box is
    intersected with the robot's; required for a vendor arm: ``so101``, ``ur``, ``xarm``, ``franka``, whose
    own boxes are reach cubes). ``ee_step_scale``, ``velocity_scale``, ``acceleration_scale``: fractions of
    the robot's per-step end-effector move, joint speed and joint acceleration limits; the two scales
    default to 0, which means :data:`REAL_ROBOT_MAX_SCALE` (0.25) on a real robot and 1.0 on a simulated
    one (:meth:`motion_scales`). A vendor arm is refused a scale above 0.25; a ``ros2`` arm may be a
    simulator, so it may be given up to 1.0 explicitly.
    ``max_tracking_error_rad``: a joint further than this behind its target (blocked, in contact) has the
    target restarted from the measured pose (rad; 0 disables). ``link_clearance_m``: the smallest gap (m,
    0 to 0.1) a target keeps between arm links and between a link and the table, on a robot with a
    collision model: room for the arm's tracking error. ``ee_switch_room_periods``: a switch from
    ``joint_position`` to ``ee_delta`` is refused while a joint is closer to its limit than this many control
    periods at full speed (0 to 10; the Cartesian controller's IK has no room there). ``watchdog_ms``:
    hold when no fresh command came for this long (ms; 0 disables). ``estop_signal``: a signal that latches
    the e-stop (``SIGUSR1``, ``SIGINT``, or empty for none). ``estop_key``: a key name (``esc``, ``e``, ...)
    that latches it from a global keyboard listener (needs the ``teleop`` extra and an X display; empty for
    none). ``fault_log``: JSON Lines file of clipped and rejected commands, holds and e-stops (empty: none).
    """

    joint_margin_rad: float = bounded(0.0, ge=0)
    workspace_low: list[float] = bounded(factory=list)
    workspace_high: list[float] = bounded(factory=list)
    ee_step_scale: float = bounded(1.0, gt=0, le=1)
    velocity_scale: float = bounded(0.0, ge=0, le=1)
    acceleration_scale: float = bounded(0.0, ge=0, le=1)
    max_tracking_error_rad: float = bounded(0.3, ge=0)
    link_clearance_m: float = bounded(0.01, ge=0, le=0.1)
    ee_switch_room_periods: float = bounded(1.0, ge=0, le=10)
    watchdog_ms: float = bounded(500.0, ge=0)
    estop_signal: EstopSignal = "SIGUSR1"
    estop_key: str = ""
    fault_log: str = ""

    def motion_scales(self, simulated: bool) -> tuple[float, float]:
        """(velocity scale, acceleration scale) as fractions of the robot's limits: a value of 0 becomes
        1.0 for a ``simulated`` robot and :data:`REAL_ROBOT_MAX_SCALE` for a real one."""
        auto = 1.0 if simulated else REAL_ROBOT_MAX_SCALE
        return self.velocity_scale or auto, self.acceleration_scale or auto

    def validate(self, at: str = "env.robot.safety.") -> list[str]:
        """Problems of the workspace box (empty or 3 values per side, low below high per axis), each naming
        its key under ``at``."""
        out = []
        low, high = self.workspace_low, self.workspace_high
        for key, box in (("workspace_low", low), ("workspace_high", high)):
            if len(box) not in (0, 3):
                out.append(f"{at}{key}={box!r}: must be empty (the robot's box) or 3 values (m)")
        if len(low) == 3 and len(high) == 3 and not all(lo < hi for lo, hi in zip(low, high, strict=True)):
            out.append(f"{at}workspace_low={low!r}: must be below workspace_high={high!r} per axis")
        return out


@dataclass
class Ros2Config:
    """A ROS 2 arm behind ``env.robot.driver: ros2`` (``env.robot.ros2``; ``robot_rl.hardware.ros2.bridge``).

    Transport: ``transport`` ``auto`` (rclpy when importable, else cyclonedds), ``rclpy`` or ``cyclonedds``;
    ``domain_id`` (-1: ``ROS_DOMAIN_ID``, else 0); ``loopback`` keeps cyclonedds on 127.0.0.1 (tests).
    Arm: ``joint_names`` in order and their limits (rad, rad/s, rad/s²), the end-effector box ``ee_low``/
    ``ee_high`` (m, base frame) and ``ee_step_max`` (m per step); the defaults are the simulated Panda of
    ``sim_robot_node``: set them from your URDF. Topics: ``joint_states_topic`` (sensor_msgs/JointState),
    ``ee_pose_topic`` (geometry_msgs/PoseStamped of the end effector, base frame), ``joint_command``
    ``position`` (std_msgs/Float64MultiArray on ``position_topic``, a forward position controller),
    ``trajectory`` (trajectory_msgs/JointTrajectory on ``trajectory_topic``, a JointTrajectoryController,
    one point 1/control_hz ahead) or ``none``; ``twist_topic`` (geometry_msgs/TwistStamped, MoveIt Servo's
    delta_twist_cmds; empty: no end-effector commands), stamped in ``twist_frame``; ``gripper_topic``
    (Float64MultiArray [closure in 0..1]; empty: none); ``sim_prefix``: topics of ``sim_robot_node``'s extras
    (``<prefix>/lifted`` Bool, ``<prefix>/environment_state`` Float64MultiArray, ``<prefix>/reset_scene``
    String, answered on ``<prefix>/scene_reset`` Header; empty on a real arm: no scene reset, so
    ``env.robot.reset: auto`` is the home motion plus a human reset). ``connect_wait_s``: how long
    connecting waits for the first joint state and the first pose (s; a launch file starts the driver and
    its consumers together, in no order). ``reset_wait_s``: how long a scene reset waits for the
    simulator's answer and its first state after the reset (s), so an episode never starts from the
    previous scene's observation.

    A stock arm (ros2_control + MoveIt, no pose topic): ``kinematics`` ``panda`` computes the end-effector
    pose from the measured joints with the project's own MuJoCo Panda (its ``pinch`` site; joints in
    ``joint_names`` order; :mod:`robot_rl.hardware.ros2.kinematics`), which also gives the safety layer its
    forward kinematics; ``none``: the pose comes from ``ee_pose_topic`` only (one of the two is needed).
    ``ee_command``: how ``ee_delta`` is sent: ``twist`` (MoveIt Servo on ``twist_topic``) or ``ik`` (joint
    targets by inverse kinematics on the joint interface; needs ``kinematics``). ``servo_start_service``:
    MoveIt Servo's start service (std_srvs/srv/Trigger, e.g. ``/servo_node/start_servo`` on Humble), called
    at connect (rclpy transport only); empty: none. The gripper: ``gripper_joint`` is its entry in the
    joint states, at ``gripper_open`` when open and ``gripper_closed`` when closed (m or rad; e.g.
    ``panda_finger_joint1`` 0.04 to 0.0), read as a closure in [0, 1]; ``gripper_command`` ``closure``
    (Float64MultiArray [closure] on ``gripper_topic``) or ``trajectory`` (a JointTrajectory of
    ``gripper_joint`` in its own unit on ``gripper_topic``, a trajectory controller on the fingers).

    Clocks: a message whose header stamp is more than ``stale_s`` (s) from this host's clock is rejected.
    When a topic's first stamp is more than ``clock_skew_s`` (s, at most ``stale_s``) off this host's
    clock, the clocks are taken as unsynchronised: that first offset is subtracted from every later stamp
    of the topic (freshness judged by receive time) and a warning is logged once. ``use_sim_time``: the
    robot stamps with a simulated clock; every topic is judged that way, without the warning.
    """

    transport: Ros2Transport = "auto"
    domain_id: int = bounded(-1, ge=-1, le=232)
    loopback: bool = False
    joint_names: list[str] = field(default_factory=lambda: [f"joint{i}" for i in range(1, 8)])
    joint_low: list[float] = bounded(
        factory=lambda: [-2.8473, -1.7128, -2.8473, -3.0218, -2.8473, 0.0325, -2.8473]
    )
    joint_high: list[float] = bounded(
        factory=lambda: [2.8473, 1.7128, 2.8473, -0.1198, 2.8473, 3.7025, 2.8473]
    )
    joint_vel_max: list[float] = bounded(factory=lambda: [2.175] * 4 + [2.61] * 3)
    joint_acc_max: list[float] = bounded(factory=lambda: [15.0, 7.5, 10.0, 12.5, 15.0, 20.0, 20.0])
    ee_low: list[float] = bounded(factory=lambda: [0.25, -0.3, 0.005])
    ee_high: list[float] = bounded(factory=lambda: [0.7, 0.3, 0.45])
    ee_step_max: float = bounded(0.03, gt=0)
    joint_states_topic: str = "/joint_states"
    ee_pose_topic: str = "/ee_pose"
    joint_command: Ros2JointCommand = "position"
    position_topic: str = "/forward_position_controller/commands"
    trajectory_topic: str = "/joint_trajectory_controller/joint_trajectory"
    twist_topic: str = "/servo_node/delta_twist_cmds"
    twist_frame: str = "base_link"
    gripper_topic: str = "/gripper_controller/commands"
    sim_prefix: str = ""
    stale_s: float = bounded(0.5, gt=0)
    connect_wait_s: float = bounded(30.0, gt=0)
    reset_wait_s: float = bounded(5.0, gt=0)
    kinematics: Ros2Kinematics = "none"
    ee_command: Ros2EeCommand = "twist"
    servo_start_service: str = ""
    gripper_joint: str = "gripper"
    gripper_open: float = bounded(0.0)
    gripper_closed: float = bounded(1.0)
    gripper_command: Ros2GripperCommand = "closure"
    clock_skew_s: float = bounded(0.1, gt=0)
    use_sim_time: bool = False

    def validate(self, at: str = "env.robot.ros2.") -> list[str]:
        """Problems of the cross-field rules, each naming its key under ``at``: one limit per joint name, a
        3-value end-effector box, absolute topic names, a pose source, IK's needs, the gripper joint and
        the clocks."""
        out = []
        n = len(self.joint_names)
        if n == 0 or len(set(self.joint_names)) != n:
            out.append(f"{at}joint_names={self.joint_names}: must be non-empty and unique")
        for key in ("joint_low", "joint_high", "joint_vel_max", "joint_acc_max"):
            if len(getattr(self, key)) != n:
                out.append(f"{at}{key}: needs {n} values (one per joint_names), got {getattr(self, key)}")
        for key in ("ee_low", "ee_high"):
            if len(getattr(self, key)) != 3:
                out.append(f"{at}{key}: needs 3 values (m), got {getattr(self, key)}")
        topics = ["joint_states_topic", "ee_pose_topic", "position_topic", "trajectory_topic", "twist_topic"]
        for key in [*topics, "gripper_topic", "sim_prefix", "servo_start_service"]:
            value = getattr(self, key)
            if value and (not value.startswith("/") or value.endswith("/")):
                out.append(f"{at}{key}={value!r}: must be an absolute ROS name such as /joint_states")
        if not self.ee_pose_topic and self.kinematics == "none":
            out.append(
                f"{at[:-1]}: no end-effector pose (ee_pose_topic empty and kinematics none): set "
                "ee_pose_topic to a PoseStamped topic or kinematics to panda (the pose from the joints)"
            )
        wanted = ROS2_KINEMATIC_JOINTS.get(self.kinematics)
        if wanted is not None and n != wanted:
            out.append(
                f"{at}kinematics={self.kinematics}: needs {wanted} joint_names, got {self.joint_names}"
            )
        if self.ee_command == "ik" and (self.kinematics == "none" or self.joint_command == "none"):
            out.append(f"{at}ee_command=ik: needs kinematics (e.g. panda) and a joint_command (trajectory)")
        if self.servo_start_service and self.transport == "cyclonedds":
            out.append(
                f"{at}servo_start_service: calling a ROS 2 service needs transport rclpy (or auto with "
                "rclpy installed); the cyclonedds transport has no services"
            )
        if self.gripper_open == self.gripper_closed:
            out.append(f"{at}gripper_open, gripper_closed: both {self.gripper_open}; they must differ")
        if not self.gripper_joint:
            out.append(f"{at}gripper_joint: must name the gripper's joint (e.g. panda_finger_joint1)")
        if self.clock_skew_s > self.stale_s:
            out.append(
                f"{at}clock_skew_s={self.clock_skew_s} must be at most stale_s={self.stale_s} (s): "
                "stamps further off are judged by receive time"
            )
        return out


@dataclass
class RobotConfig:
    """A robot behind :class:`robot_rl.hardware.robot_env.RobotEnv` (``env.robot``); the env then has the
    simulated task's observation and action keys, so every stage runs on it unchanged.

    ``driver``: ``sim`` (the MuJoCo Panda in process), ``sim_server`` (the MuJoCo-backed robot server at
    ``address``), ``so101`` (Feetech bus on serial ``port``), ``ur``, ``xarm``, ``franka`` (controller at
    ``address``), ``ros2`` (any ROS 2 arm over topics, :class:`Ros2Config` in ``ros2``). ``calibration``:
    per-robot calibration file. ``cameras`` maps each camera name of
    ``env.cameras`` to its device. ``timeout_s``: longest wait (s) for a networked robot's reply.
    ``safety``: the safety layer's limits and triggers (:class:`SafetyConfig`).

    ``action``: what the env's ``action`` is: ``ee_delta`` (the simulated task's ``[dx, dy, dz, grip]``)
    or ``joint_position`` (target joint positions in rad plus the gripper closure in [0, 1], bounded by the
    robot's joint limits; ``observation.state`` is then the joint positions plus the gripper, as in
    LeRobot's SO-101 datasets; what a leader arm drives). ``leader_port`` / ``leader_calibration``: the
    SO-101 leader arm of ``robot-rl record --teleop leader`` (its serial port and calibration file).
    ``gripper``: ``auto`` (the driver's gripper: every driver has one but ``ur``, whose RTDE link carries
    none) or ``none`` (no gripper: the action and ``observation.state`` lose their gripper entry and
    commands carry no gripper target; an arm without a hand). ``franka_realtime``: franky's
    ``RealtimeConfig`` for ``driver: franka``: ``enforce`` (franky's default: the host must run a
    real-time kernel) or ``ignore`` (run without one, at the risk of missed 1 kHz deadlines and the arm's
    communication reflexes). ``grasp_force_n``: the force (N, at most 70: the
    Franka Hand's continuous force) a Franka grasps with when the gripper command closes it. ``ur_model``:
    which UR the ``ur`` driver drives (``ur3e``, ``ur5e``, ``ur10e``, ``ur16e``, ``ur20``, CB3 ``ur3``,
    ``ur5``, ``ur10``): its published D-H table is the forward kinematics that keeps joint commands in
    the workspace box.
    ``keys`` / ``client_key``: for ``sim_server``, a folder made by ``robot-rl keys`` (ZeroMQ CURVE; it
    may be the ``security.keys`` folder) and this client's name in it (``<client_key>.key_secret`` plus
    the server's ``server.key``); needed when ``address`` is not loopback, and for a server started with
    ``--keys``. ``bus_timeout_s``: a Feetech bus's status-packet timeout (s) for the SO-101 and its
    leader (0: the vendor SDK's 34 ms; raise it for slow USB hubs or a loaded host).

    ``success``: what ends an episode as a success: ``lifted`` (the robot's ``lifted`` reading held for
    ``env.success_hold_steps``; the sim-backed robot has it), ``operator`` (only a human's label from the
    teleop or intervention device) or ``critic`` (the done head of the progress critic at
    ``success_critic`` reaching ``success_threshold`` for ``env.success_hold_steps`` steps).
    ``reset``: after the home motion, ``scene`` (the sim-backed robot re-places the cube), ``human`` (wait
    for Enter on the terminal while a person resets the scene), ``none``, or ``auto`` (``scene`` when the
    robot can, else ``human``). ``home_joints``: home posture (rad, one per joint; empty = the posture read
    at connect), reached by joint-position moves of at most ``home_speed`` rad/s, within
    ``home_tolerance`` rad and ``home_timeout_s`` s. ``realtime``: keep ``env.control_hz`` by sleeping to
    each deadline (``always``), never sleep (``never``), or ``auto`` (sleep unless the robot is the in-process
    lock-step simulator).
    """

    driver: RobotDriver = "sim_server"
    address: str = "tcp://127.0.0.1:5570"
    timeout_s: float = bounded(1.0, gt=0)
    port: str = ""
    calibration: str = ""
    cameras: dict[str, CameraConfig] = field(default_factory=dict)
    success: RobotSuccess = "lifted"
    success_critic: str = ""
    success_threshold: float = bounded(0.5, ge=0, le=1)
    reset: RobotReset = "auto"
    home_joints: list[float] = bounded(factory=list)
    home_speed: float = bounded(0.5, gt=0)
    home_tolerance: float = bounded(0.05, gt=0)
    home_timeout_s: float = bounded(20.0, gt=0)
    realtime: Realtime = "auto"
    action: ActionMode = "ee_delta"
    leader_port: str = ""
    leader_calibration: str = ""
    bus_timeout_s: float = bounded(0.0, ge=0)
    gripper: GripperMode = "auto"
    franka_realtime: FrankaRealtime = "enforce"
    grasp_force_n: float = bounded(20.0, gt=0, le=70)
    ur_model: URModel = "ur5e"
    keys: str = ""
    client_key: str = "robot"
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    ros2: Ros2Config = field(default_factory=Ros2Config)

    def validate(self, at: str = "env.robot.") -> list[str]:
        """Problems of the cross-field rules, each naming its key under ``at``: the critic success rule
        needs its checkpoint, a vendor arm's speed scales
        (:func:`~robot_rl.config_checks.real_robot_problems`), an SO-101's port and calibration, and the
        driver's address form."""
        out = []
        if self.success == "critic" and not self.success_critic:
            out.append(f"{at}success=critic: set {at}success_critic to a progress critic checkpoint")
        out += real_robot_problems(self, moving=False)
        if self.driver == "so101":
            out += [
                f"{at}{key}: required for {at}driver=so101 ({what})"
                for key, what in (
                    ("port", "the arm's serial port"),
                    ("calibration", "its calibration JSON file"),
                )
                if not getattr(self, key)
            ]
        if self.driver == "sim_server":
            reason = address_problem(self.address)
            if reason is not None:
                out.append(f"{at}address={self.address!r}: {reason}")
        if self.driver in VENDOR_ARMS:
            reason = controller_host_problem(self.address)
            if reason is not None:
                out.append(f"{at}address={self.address!r}: driver {self.driver} {reason}")
        return out


@dataclass
class RandomizeConfig:
    """Sim-to-real randomisation of the built-in tasks (``env.randomize``, :mod:`robot_rl.sim.randomize`).

    Every key is a range ``[low, high]`` drawn uniformly once per episode from the episode's reset seed
    (its own generator: the task's other draws are unchanged), or ``[]`` (the default): off. With every key
    off the env is bit-identical to one without this section. "Objects" are the task's free bodies (cubes).

    - ``object_mass_scale``: factor on the objects' mass and inertia (unitless, > 0).
    - ``object_friction_scale``: factor on the objects' geom friction (sliding, torsional, rolling; > 0).
    - ``object_size_scale``: factor on the objects' geom sizes and offsets (> 0; a cube resting on the floor
      stays resting on it; success heights stay the nominal ones).
    - ``object_pos_jitter_m``: offset added to each object's initial x and y (m, each axis drawn).
    - ``object_yaw_jitter_rad``: rotation added to each object's initial yaw about world z (rad).
    - ``joint_damping_scale``: factor on the robot's joint damping (arm and gripper dofs; > 0).
    - ``armature_scale``: factor on the robot's joint armature (rotor inertia; > 0).
    - ``actuator_kp_scale``: factor on the arm controller's joint stiffness Kp and the gripper actuator's kp.
    - ``actuator_kd_scale``: factor on the arm controller's joint damping Kd and the gripper actuator's kv.
    - ``action_delay_steps``: control latency k (whole control steps, >= 0): the command applied is the
      action given k steps earlier; the first k steps apply the initial command (hold, gripper open).
    - ``action_noise_std``: std of Gaussian noise on the applied action, in normalised units (a fraction of
      the action box's half-width per dimension), clipped to the box; drawn every step.
    - ``obs_noise_std``: std of Gaussian noise added to ``observation.state`` (its units: rad, rad/s, m);
      drawn every step; the physics is unaffected.
    - ``camera_pos_jitter_m``: offset added to each camera's position (m, each axis drawn).
    - ``camera_rot_jitter_rad``: rotation of each camera (rad; rotation vector, each axis drawn).
    - ``camera_fovy_jitter_deg``: offset added to each camera's vertical field of view (deg).
    - ``light_pos_jitter_m``: offset added to each light's position (m, each axis drawn).
    - ``light_diffuse_scale``: factor on each light's diffuse colour (>= 0).
    - ``rgba_jitter``: offset added to each geom's and material's r, g, b (each channel drawn; clipped to
      [0, 1]); it tints textured materials.
    """

    object_mass_scale: list[float] = bounded(factory=list, gt=0)
    object_friction_scale: list[float] = bounded(factory=list, gt=0)
    object_size_scale: list[float] = bounded(factory=list, gt=0)
    object_pos_jitter_m: list[float] = bounded(factory=list)
    object_yaw_jitter_rad: list[float] = bounded(factory=list)
    joint_damping_scale: list[float] = bounded(factory=list, gt=0)
    armature_scale: list[float] = bounded(factory=list, gt=0)
    actuator_kp_scale: list[float] = bounded(factory=list, gt=0)
    actuator_kd_scale: list[float] = bounded(factory=list, gt=0)
    action_delay_steps: list[int] = bounded(factory=list, ge=0)
    action_noise_std: list[float] = bounded(factory=list, ge=0)
    obs_noise_std: list[float] = bounded(factory=list, ge=0)
    camera_pos_jitter_m: list[float] = bounded(factory=list)
    camera_rot_jitter_rad: list[float] = bounded(factory=list)
    camera_fovy_jitter_deg: list[float] = bounded(factory=list)
    light_pos_jitter_m: list[float] = bounded(factory=list)
    light_diffuse_scale: list[float] = bounded(factory=list, ge=0)
    rgba_jitter: list[float] = bounded(factory=list)

    def any_set(self) -> bool:
        """Whether any knob is set (a non-empty range); with none set the env is not randomised."""
        return any(getattr(self, f.name) for f in fields(self))

    def validate(self, at: str = "env.randomize.") -> list[str]:
        """Problems of the ranges' shape, each naming its key under ``at``: ``[]`` or ``[low, high]`` with
        ``low <= high``."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            if len(value) not in (0, 2):
                out.append(f"{at}{f.name}={value!r}: must be [] (off) or a range [low, high]")
            elif value and not value[0] <= value[1]:
                out.append(f"{at}{f.name}={value!r}: low must be <= high")
        return out


@dataclass
class EnvConfig:
    """Which environment runs and how.

    ``id`` is a gymnasium id; the built-in task is ``robot_rl/PandaPickCube-v0``. Any other registered id
    works through ``adapter``. ``module`` is imported first so third-party ids get registered. ``kwargs``
    are passed to the env constructor (``gym.make`` for a foreign id), with their YAML types. ``robot``
    (default none: the simulator) runs the task on a robot instead (:class:`RobotConfig`). ``backend`` picks
    the batched simulator of :func:`robot_rl.sim.batched_factory.make_batched_env`: ``gym_vector``
    (gymnasium's vector env, any id), ``mujoco_cpu`` (the built-in task, in-process threads) or ``maniskill``
    (ManiSkill3's own tasks such as ``PickCube-v1`` on SAPIEN's PhysX CPU backend; ``cameras`` are then
    ManiSkill's sensor names, e.g. ``base_camera``); collect,
    eval, pipeline and ``ppo`` roll out on it (:func:`robot_rl.stages.envs.make_rollout_vec_env`); an online
    actor with ``online.envs_per_actor`` > 1 requires ``mujoco_cpu``. ``robot_type`` is the robot model that
    ``collect`` and ``record`` write into the dataset's ``info.json`` (LeRobot's ``robot_type``); empty:
    ``panda`` for the built-in task and the simulated robot drivers, the driver's name for a real robot
    (``so101``, ``ur``, ...), the env id for a foreign env. The task suite's ids
    (``robot_rl.sim.tasks.TASKS``: ``robot_rl/PandaPickColour-v0``, ``PandaPlaceInBin-v0``, ``PandaStack-v0``,
    ``PandaPushToTarget-v0``, ``PandaOpenDrawer-v0``) are built-in tasks too: scripted experts for
    ``collect``, ``mujoco_cpu``. ``randomize`` (:class:`RandomizeConfig`, default all off) randomises the
    built-in tasks' dynamics, timing and visuals per episode (sim-to-real); foreign envs and robots ignore it.
    ``spawn_region``: ``[x_lo, x_hi, y_lo, y_hi]`` (m, world) the built-in task draws its objects' xy from;
    empty: the task's own region (``PandaTaskEnv.spawn_default``). Collect in one region and evaluate in a
    disjoint one (``robot-rl eval --env.spawn_region=... --eval.name=heldout_pos``) for held-out object
    positions; a foreign env or a robot refuses it.
    ``environment_state_size``: pad the built-in task's ``observation.environment_state`` with trailing
    zeros to this many numbers (0: the task's own, 4 to 21), so that the suite's datasets merge as they are
    and one policy reads every task's object state (Meta-World's fixed-size observation); collect, train
    and evaluate with the same value. ``tasks``: a multi-task batch on ``env.backend=mujoco_cpu`` (suite
    ids; env i of N runs ``tasks[i % len(tasks)]`` with its own instruction, success rule and reward, all
    with this config's rates and ``max_episode_steps``), for one language-conditioned policy trained online
    on several tasks at once (``robot-rl ppo``, as RLinf's multi-task runs; ``robot-rl online`` with
    ``online.envs_per_actor`` >= the task count, a human on one task per actor). Its observations hold
    ``observation.environment_state`` only when every task's has the same size (set
    ``environment_state_size``); otherwise they leave it out, as a policy trained on
    ``robot-rl dataset merge ... --drop observation.environment_state`` expects. Empty (default): every env
    runs ``id``. Collect and evaluate per task (``--env.id``); those commands refuse it.
    """

    id: str = "robot_rl/PandaPickCube-v0"
    robot_type: str = ""
    module: str = ""
    adapter: AdapterConfig | None = None
    cameras: list[str] = field(default_factory=list)
    image_size: int = bounded(64, ge=1)
    control_hz: float = bounded(10.0, gt=0)
    physics_hz: float = bounded(500.0, gt=0)
    max_episode_steps: int = bounded(60, ge=1)
    success_hold_steps: int = bounded(3, ge=1)
    lift_height_m: float = bounded(0.1, gt=0)
    num_envs: int = bounded(2, ge=1)
    backend: Backend = "gym_vector"
    kwargs: dict[str, Any] = field(default_factory=dict)
    robot: RobotConfig | None = None
    randomize: RandomizeConfig = field(default_factory=RandomizeConfig)
    spawn_region: list[float] = bounded(factory=list)
    environment_state_size: int = bounded(0, ge=0)
    tasks: list[str] = field(default_factory=list)

    def validate(self, at: str = "env.") -> list[str]:
        """Problems of the cross-field rules, each naming its key under ``at``: ``spawn_region``'s shape;
        what a robot refuses (the simulator's knobs, more than one env, a camera without a device); a
        multi-task batch on ``mujoco_cpu`` in the simulator only (which ids are suite tasks is checked when
        the envs are built, :class:`robot_rl.sim.batched_mujoco.MujocoCpuBatchedEnv`)."""
        out = []
        region = self.spawn_region
        if region and (len(region) != 4 or region[0] > region[1] or region[2] > region[3]):
            out.append(
                f"{at}spawn_region={region!r}: must be [] or [x_lo, x_hi, y_lo, y_hi] (m) with lo <= hi"
            )
        if self.tasks and self.backend != "mujoco_cpu":
            out.append(
                f"{at}tasks={list(self.tasks)}: a multi-task batch needs {at}backend=mujoco_cpu, "
                f"not {at}backend={self.backend!r}"
            )
        if self.robot is None:
            return out
        simulator_only = {
            "spawn_region": (self.spawn_region, "places the simulator's objects only"),
            "environment_state_size": (self.environment_state_size, "pads the simulator's object state only"),
            "randomize": (
                any(getattr(self.randomize, f.name) for f in fields(RandomizeConfig)),
                "randomises the simulator only",
            ),
            "tasks": (self.tasks, "a multi-task batch runs in the simulator"),
        }
        for key, (value, what) in simulator_only.items():
            if value:
                out.append(f"{at}{key}: {what}; unset it with {at}robot")
        if self.num_envs != 1:
            out.append(f"{at}num_envs={self.num_envs}: a robot ({at}robot) is one env; set {at}num_envs=1")
        missing = [c for c in self.cameras if c not in self.robot.cameras]
        if missing:
            out.append(
                f"{at}cameras={self.cameras!r}: {at}robot.cameras has no device for {missing} "
                f"(add {at}robot.cameras.<name>.driver/source)"
            )
        return out


@dataclass
class CollectConfig:
    """Scripted-expert demonstrations. ``expert_noise`` is the suboptimality knob (action noise std in
    normalised units; it also widens grasp-offset errors so some demos fail)."""

    num_episodes: int = bounded(200, ge=1)
    expert_noise: float = bounded(0.3, ge=0)
    seed: int = bounded(0, ge=0)


@dataclass
class VLAConfig:
    """The VLA policy (``policy.kind=vla``, :mod:`robot_rl.policies.vla`): a Hugging Face image-text-to-text
    VLM backbone with a flow-matching action expert.

    ``vlm``: the backbone's hub id or local folder (loaded offline, never downloaded; ``hf download <id>``
    first). ``freeze_vision``: keep the vision encoder frozen. ``lora_rank``: > 0 trains peft LoRA adapters
    on the language model's attention projections (its base weights frozen); 0 fine-tunes the language
    model unless ``train_expert_only``, which freezes the whole backbone (only the expert and projections
    train). ``dtype``: the backbone's ``float32`` or ``bfloat16`` (the expert is float32).
    ``expert_layers``/``expert_width``: the action expert's transformer depth and width (a multiple of 32;
    heads of 32 dims). ``max_text_tokens``: longest instruction in tokens; a longer one is an error.
    ``image_size``: every camera image is resized to image_size x image_size before the VLM's processor
    (0 = as recorded). ``instruction``: the instruction used when an observation has no ``task`` (training
    fills it from a single-task dataset; set it to prompt a policy with another wording).
    ``compile``: run the expert's flow steps at sampling time through ``torch.compile`` (inference only:
    eval, serving, actors; each new batch shape compiles once, 10-20 s on a CPU; measured on CPU it helps at
    batch 1 and not at batch 8, benchmarks/README.md); an evaluation's ``--policy.vla.compile`` is set on
    the loaded checkpoint.
    ``backbone``: ``vlm`` (the VLM above) or ``small``: a from-scratch backbone that learns on a CPU (the
    frozen offline MiniLM sentence embedding of the instruction plus a small CNN per camera; needs the
    ``critic`` extra; ``vlm``, ``freeze_vision``, ``lora_rank``, ``train_expert_only`` and ``dtype`` do
    not apply).
    """

    backbone: VLABackbone = "vlm"
    vlm: str = ""
    freeze_vision: bool = True
    lora_rank: int = bounded(0, ge=0)
    train_expert_only: bool = False
    dtype: VLADtype = "float32"
    expert_layers: int = bounded(4, ge=1)
    expert_width: int = bounded(256, ge=1)
    max_text_tokens: int = bounded(48, ge=1)
    image_size: int = bounded(0, ge=0)
    instruction: str = ""
    compile: bool = False

    def validate(self, at: str = "policy.vla.") -> list[str]:
        """``expert_width`` must be a multiple of 32 (heads of 32 dims); named under ``at``."""
        if isinstance(self.expert_width, int) and self.expert_width % 32:
            return [f"{at}expert_width={self.expert_width}: must be a multiple of 32"]
        return []


@dataclass
class PolicyConfig:
    """Flow-matching action-chunk policy (docs/algorithms.md §2).

    ``horizon`` is the chunk length h; ``flow_steps`` the Euler steps K. ``hidden_dims`` size the velocity
    MLP; ``image_features`` the per-camera CNN output. ``normalization`` picks ``mean_std`` or
    ``quantile`` (q01/q99 scaled to [-1, 1]) for actions. ``tasks`` is the instruction vocabulary the
    policy is conditioned on; training fills it from the dataset when it holds more than one task.
    ``action_reference``: empty for absolute actions; else an observation key whose first d values (the
    action's dimension; all of them for ``observation.state``, a[t−1] for ``observation.prev_action``)
    at the chunk's first frame are subtracted from every action of the chunk before normalisation
    and added back when acting (relative actions): ``observation.state`` is openpi's delta actions,
    ``observation.prev_action`` (with ``data.prev_action``) predicts the change from the last command.
    ``action_reference_velocity``: with ``action_reference: observation.prev_action`` and
    ``data.prev_action_steps`` >= 2, chunk step i is predicted as its change from the constant-velocity
    extrapolation a[t−1] + (i + 1)(a[t−1] − a[t−2]) instead of from a[t−1] (a residual on "keep moving").
    ``action_low``/``action_high``: the action box (robot units, one value per action dimension) that
    policies act inside; actions are clipped to its normalised image, never to [-1, 1] (the demos'
    q01..q99), so RL can act beyond the demos' range. Empty: training fills them from the env's action
    space when it trains on the run's own dataset, else the dataset's min/max are used. Set them to your
    robot's limits.
    ``kind``: ``flow`` (the state/CNN flow policy above) or ``vla`` (a VLM backbone with a flow action
    expert, configured by ``vla``: :class:`VLAConfig`).
    """

    kind: PolicyKind = "flow"
    vla: VLAConfig = field(default_factory=VLAConfig)
    horizon: int = bounded(5, ge=1)
    flow_steps: int = bounded(10, ge=1)
    hidden_dims: list[int] = bounded(factory=lambda: [256, 256, 256], ge=1)
    image_features: int = bounded(64, ge=1)
    normalization: Normalization = "quantile"
    execution: Execution = "open_loop"
    ensemble_decay: float = bounded(0.1, ge=0)
    tasks: list[str] = field(default_factory=list)
    action_reference: str = ""
    action_reference_velocity: bool = False
    action_low: list[float] = bounded(factory=list)
    action_high: list[float] = bounded(factory=list)

    def validate(self, at: str = "policy.") -> list[str]:
        """``kind=vla`` with the ``vlm`` backbone needs ``vla.vlm``; named under ``at``."""
        if self.kind == "vla" and self.vla.backbone == "vlm" and not self.vla.vlm:
            return [f"{at}vla.vlm is empty: {at}kind=vla needs a VLM hub id or local folder"]
        return []


@dataclass
class BCConfig:
    """Flow behaviour cloning. ``act_noise`` scales the initial noise x_0 ~ N(0, I) of the flow ODE when the
    agent acts: 1 samples the learned chunk distribution; 0 starts every chunk at the prior's mode, one
    deterministic chunk per observation (smooth when the flow has not learned to remove the noise, as on a
    few demos; it gives up the multimodality of the demos).
    """

    steps: int = bounded(5000, ge=1)
    batch_size: int = bounded(256, ge=1)
    lr: float = bounded(3e-4, gt=0)
    act_noise: float = bounded(1.0, ge=0)


@dataclass
class OfflineRLConfig:
    """Chunked offline RL (docs/algorithms.md §3-4, §6-7). ``method`` is ``qc`` (best-of-N), ``qc_fql``,
    ``corft``
    (CO-RFT: per-prefix critic and TD3+BC actor, its own keys in :class:`CORFTConfig`; it uses every key
    here except ``best_of_n`` and ``fql_alpha``) or ``recap`` (advantage-conditioned flow policy, §7,
    hyper-parameters in :class:`RecapConfig`).

    ``critic_agg`` is ``mean``, ``min`` or ``min_random2`` (RLPD: min over a random pair).
    ``reward_norm``: how per-step rewards r are mapped before the critic sees them, with
    ``[r_min, r_max] = reward_range``: ``max`` (the default) ``(r - r_max) / (r_max - r_min)``, in [-1, 0],
    so every step costs until termination and a terminal state is worth at least as much as any step (QC's
    and OGBench's -1/0 sparse convention; with positive dense rewards and termination on success, raw
    rewards make a long failed episode worth more than an early success); ``scale``
    ``r / (r_max - r_min)`` (keeps the sign); ``none`` (raw rewards). Both rescalings keep Q within
    ``1 / (1 - gamma)`` whatever the dataset's reward scale. ``reward_range``: ``[r_min, r_max]``; empty
    means the training dataset's ``next.reward`` minimum and maximum, filled in when training starts and
    saved in the checkpoint config (the online learner uses the checkpoint's values, so offline and online
    updates see the same rewards).
    ``terminal_chunks``: ``drop`` (QC's code) leaves chunks that end in a true termination before their
    h-th step out of the critic loss; ``keep`` trains them on their exact partial-sum target (mask 0);
    measured no better on the sim task (benchmarks/README.md), so ``drop`` is the default.
    ``fql_alpha``: QC-FQL distillation weight, paired with ``normalize_q_loss: true`` (the Q term divided
    by mean |Q|, FQL's normalisation, under which FQL tunes alpha in about 0.03-10). 10 was the best of
    {0.3, 1, 3, 10, 100} on the sim task when QC-FQL acted with its one-step actor (0.3 left the data's
    support, 100 behaved like BC); re-chosen on validation seeds under the anchored extraction, every
    alpha in {1, 3, 10, 100} scored 39-40/50 and 10 was kept (benchmarks/README.md).
    ``critic_on_trunk``: whether QC's and QC-FQL's critic (and QC-FQL's one-step policy) read the VLA's own
    trunk (:class:`robot_rl.policies.vla.trunk.VLATrunkFeatures`: the VLM pass and the expert's prefix,
    pooled, stop-gradient), as CO-RFT's always do, instead of an encoder of their own. Unset (null, the
    default): the trunk with ``policy.kind=vla``, an own encoder otherwise. On the VLA the own encoder's
    critic learned a bias that best-of-N turned into a policy (QC-FQL pick-cube, validation seeds: 6/50
    against BC's 29/50; with the trunk 32/50; benchmarks/README.md, "The offline-RL bar"). ``true`` with
    another policy kind or with ``recap`` (its value has its own) is a config error; checkpoints written
    before the unset default keep the ``false`` they stored.
    ``learner_dtype``: the dtype of QC's and QC-FQL's matrix products in training (``auto``, ``float32``,
    ``bfloat16``; :mod:`robot_rl.algos.precision`): parameters, optimiser state and losses stay float32;
    ``auto`` is bfloat16 where the hardware multiplies it natively, else float32 (benchmarks/README.md).
    ``target_flow_steps``: Euler steps of the N flow samples that QC's critic target picks A' from (0: the
    policy's ``flow_steps``; acting always uses ``flow_steps``). 5 was chosen on validation seeds: pick-cube
    offline QC succeeded on 42/50 episodes with 5 and with 10 (benchmarks/README.md, learner section).
    ``target_best_of_n``: how many flow samples that target picks A' from (0: ``best_of_n``, QC's rule;
    acting always uses ``best_of_n``). Fewer samples make each update cheaper and the target less
    optimistic: the max over N samples of the online critic shrinks towards the policy's mean value as N
    falls (N = 1 is a SARSA-like target under the behaviour flow). Off by default: N = 4 and N = 2 lost
    successes on pick-cube's validation seeds (benchmarks/README.md, learner section).
    ``target_reuse``: how many consecutive updates each batch of QC serves (k; 1 is QC's rule): the
    training loops (offline and the online learner) draw a new batch every k updates, and QC's target picks
    A' among its N samples on the first and keeps that pick for the other k - 1, the target critic
    re-scoring it every update (:class:`robot_rl.algos.qc.TargetPicks`). Each update then costs about a
    k-th of the target's sampling; the picks are up to k - 1 updates old, a run of ``steps`` updates sees
    ``steps / k`` distinct batches, and a resumed run draws a new pick at its first step. ``offline.steps``
    still counts updates. 3 was chosen on validation seeds (pick-cube ``--quick``, two training seeds, 100
    episodes: 79/100 against 74/100 for k = 1; QC's learner at 0.10x flow BC's updates/s only from k = 3;
    benchmarks/README.md, learner section). Other methods ignore it.
    ``success_value``: the value after a termination that is a success (``next.success``; every
    ``next.done`` without that column), an absorbing state earning a reward r_a at every later step, so the
    TD target gains ``γ^{j+1} · r'_a / (1 − γ)`` for a success at chunk step j (r' the mapped reward of
    ``reward_norm``; :func:`robot_rl.algos.targets.success_tail`; issue 38). ``r_max`` (the default): r_a is
    ``reward_range``'s r_max, so a success is worth at least hovering anywhere forever (a success bonus
    above any dense return; under ``reward_norm=max`` r'_a = 0, the value it had before); ``r_success``: the
    success frame's own reward (what staying there would earn); ``zero``: nothing after a termination (the
    target before issue 38). Anything but ``zero`` with ``gamma = 1`` needs r'_a = 0 (``r_max`` with
    ``reward_norm=max``). ``extraction``: how QC-FQL and CO-RFT act: ``bc_anchored`` (the default) takes
    the best of ``best_of_n`` behaviour-flow samples under the critic, so the acted chunk is always a
    sample of the BC-trained flow (QC's extraction, the issue's "critic only chooses among BC samples"
    guard, needing no environment); ``actor``: the one-step policy μ_ω's chunk (before issue 38). QC and
    RECAP always act from the behaviour flow. An inference knob: ``robot-rl eval`` may switch it.
    """

    method: str = "qc"
    steps: int = bounded(5000, ge=1)
    batch_size: int = bounded(256, ge=1)
    lr: float = bounded(3e-4, gt=0)
    gamma: float = bounded(0.99, gt=0, le=1)
    tau: float = bounded(0.005, gt=0, le=1)
    num_critics: int = bounded(2, ge=1)
    critic_agg: CriticAgg = "mean"
    critic_hidden_dims: list[int] = bounded(factory=lambda: [512, 512, 512, 512], ge=1)
    best_of_n: int = bounded(8, ge=1)
    fql_alpha: float = bounded(10.0, ge=0)
    normalize_q_loss: bool = True
    reward_norm: RewardNorm = "max"
    reward_range: list[float] = bounded(factory=list)
    terminal_chunks: TerminalChunks = "drop"
    critic_on_trunk: bool | None = None
    learner_dtype: LearnerDtype = "auto"
    target_flow_steps: int = bounded(5, ge=0)
    target_best_of_n: int = bounded(0, ge=0)
    target_reuse: int = bounded(3, ge=1)
    success_value: SuccessValue = "r_max"
    extraction: Extraction = "bc_anchored"

    def validate(self, at: str = "offline.") -> list[str]:
        """``method`` is a registered offline method (:func:`offline_method_problems`);
        ``critic_agg=min_random2`` needs at least 2 critics; ``success_value`` suits ``gamma``
        (:func:`success_value_problems`); named under ``at``."""
        return (
            offline_method_problems(at, self.method)
            + _ensemble_problems(at, self.critic_agg, self.num_critics)
            + success_value_problems(at, self.success_value, self.reward_norm, self.gamma)
        )


@dataclass
class RecapConfig:
    """RECAP, advantage-conditioned flow policies (docs/algorithms.md §7; ``offline.method=recap``;
    :mod:`robot_rl.algos.recap`). ``offline.steps``/``batch_size`` set its policy budget; ``lr`` here is
    the policy's Adam rate (``offline.lr`` is not used by RECAP).

    ``c_fail``: the cost in steps of a failed episode's last step (the others cost 1; a successful end 0);
    above the longest episode every failure is worth less than every success. Returns are normalised per
    task to [-1, 0] (divided by the task's largest return magnitude). ``value_bins``: support points of
    the distributional value on [-1, 0] (201 in the paper); ``value_steps`` Adam steps of cross-entropy at
    ``value_lr`` on batches of ``value_batch_size`` frames, MLP ``value_hidden_dims``. ``lookahead``: N of
    the advantage ``Σ_{i<N} r̃_{t+i} + V(o_{t+N}) - V(o_t)``. ``positive_fraction``: the top share of
    each task's advantages labelled positive. ``drop_prob``: probability that a training row's indicator
    is replaced by "unconditioned". ``cfg_beta``: classifier-free guidance weight β >= 1 at inference
    (1 = plain positive conditioning; 1.5 our default, not tuned).
    """

    c_fail: float = bounded(100.0, ge=0)
    value_bins: int = bounded(201, ge=2)
    value_steps: int = bounded(1000, ge=1)
    value_lr: float = bounded(3e-4, gt=0)
    value_batch_size: int = bounded(256, ge=1)
    value_hidden_dims: list[int] = bounded(factory=lambda: [256, 256], ge=1)
    lookahead: int = bounded(10, ge=1)
    positive_fraction: float = bounded(0.3, gt=0, lt=1)
    drop_prob: float = bounded(0.1, ge=0, lt=1)
    cfg_beta: float = bounded(1.5, ge=1)
    lr: float = bounded(3e-4, gt=0)


@dataclass
class CORFTConfig:
    """CO-RFT (docs/algorithms.md §6, :mod:`robot_rl.algos.corft`; ``offline.method=corft``), on top of the
    ``offline`` keys. ``lambda_bc``: weight λ of the actor's ``‖π(s) − A_D‖²`` term next to the Q term
    normalised by mean |Q|. Default 2: on pick-cube (one seed, 500 steps, 50 eval episodes) TD3+BC's own
    value 0.4 never succeeded (0.00), 2 gave 0.92 and 10 gave 0.74 against BC's 0.48 — the best of three
    values looked at on the same episodes, not a sweep (benchmarks/README.md). ``cal_ql_alpha``: weight of
    the Cal-QL calibration term in the critic loss; 0 (the default) turns it off. Both [unverified]
    readings of the paper."""

    lambda_bc: float = bounded(2.0, ge=0)
    cal_ql_alpha: float = bounded(0.0, ge=0)


@dataclass
class EvalConfig:
    """Evaluation: ``episodes_per_seed`` episodes for each training seed, on env seeds disjoint from the
    demonstration seeds and shared by every method so the comparison is paired.

    ``name``: names a variant of the evaluation (letters, digits, ``_``, ``-``): its results go to
    ``eval/<algo>_seed<s>_<name>.json`` (stage ``eval_<algo>_seed<s>_<name>``), so a paraphrase or
    held-out-position evaluation neither overwrites nor is skipped for the default one (empty: the default).
    ``paraphrases``: instruction -> list of paraphrases (unseen wordings); each episode whose env
    instruction is a key is given ``paraphrases[instruction][env_seed % n]`` instead (an episode's wording
    is a function of its env seed), an instruction without an entry is an error; empty: the env's own
    instructions. The eval JSON records each episode's ``task`` (the env's instruction) and
    ``instruction`` (what the policy read) and the success per task and per instruction
    (:mod:`robot_rl.eval.instructions`). ``split``: which env seeds the episodes run on
    (:mod:`robot_rl.eval.splits`): ``test`` (the default; from 1,000,000: what a table reports, looked at
    once) or ``validation`` (from 1,500,000: the only seeds any setting may be chosen on; filed apart, as
    ``eval/<algo>_seed<s>[_<name>]_validation.json``). The eval JSON and report say which.
    """

    episodes_per_seed: int = bounded(50, ge=1)
    num_videos: int = bounded(2, ge=0)
    video_camera: str = "front"
    name: str = ""
    paraphrases: dict[str, list[str]] = field(default_factory=dict)
    split: EvalSplit = "test"

    def validate(self, at: str = "eval.") -> list[str]:
        """Problems of ``name`` (it names a file) and ``paraphrases`` (each instruction maps to a non-empty
        list of non-empty texts), each naming its key under ``at``."""
        out = []
        if not re.fullmatch(r"[A-Za-z0-9_-]*", self.name):
            out.append(f"{at}name={self.name!r}: only letters, digits, _ and - (it names a file)")
        for task, wordings in self.paraphrases.items():
            if not wordings or not all(isinstance(w, str) and w.strip() for w in wordings):
                out.append(f"{at}paraphrases[{task!r}]={wordings!r}: must be a list of non-empty texts")
        return out


@dataclass
class DataConfig:
    """The dataset training reads (any LeRobot v2.1/v3.0 dataset on local disk) and how it is loaded.

    ``path``: dataset root; empty means the run's own dataset (``<run_dir>/dataset``, written by collect).
    ``cameras``: camera names to use (``cam_high`` for ``observation.images.cam_high``); empty = all.
    ``images``: False trains on the vector features only, ignoring every camera (a state policy on a
    dataset whose video serves a progress critic).
    ``image_size``: training resolution [H, W] of every camera (area-scaled while decoding); empty = native.
    ``horizon_s``: chunk duration in seconds; when > 0 it sets the horizon h = horizon_s * fps, which
    must be a whole number of frames (else a ConfigError).
    ``val_episodes``: held-out episode indices for the validation loss and open-loop action error.
    ``val_every``: gradient steps between validation passes; ``val_max_frames`` caps the frames scored.
    ``reward``: ``dataset`` reads ``next.reward``/``next.done``; ``episode_end`` gives reward 1 and done at
    each episode's last frame (demo-only datasets whose episodes all succeed, such as teleoperated demos).
    ``frame_cache``: ``memory`` decodes every frame into RAM once, ``zarr`` decodes once into a zarr cache
    in ``cache_dir`` (default ``<run_dir>/frame_cache``) reused by later runs, ``none`` decodes the sampled
    frames from video at every step, ``auto`` picks memory below ``memory_limit_gb`` of decoded frames and
    zarr above. ``num_workers``: DataLoader processes for the zarr and video paths (0 = in process).
    ``prev_action``: add the observation ``observation.prev_action``, the action executed at the previous
    frame, so the policy is conditioned on the last command sent; ``robot-rl eval``, the online actor and
    the policy server's client feed it the same way (``robot_rl.sources.PrevActionSource``).
    ``prev_action_start``: its value at an episode's first frame, where no action was executed yet:
    ``zeros`` (delta actions: no motion) or an observation key of the action's shape read at that frame
    (``observation.state`` for absolute joint commands: the held position), in training and at run time
    alike (:mod:`robot_rl.data.prev_action`).
    ``prev_action_steps``: k >= 1, how many past commands ``observation.prev_action`` reads: a[t−1], then
    the k − 1 changes before it, a[t−1] − a[t−2], ..., flattened to (k·d,) (commands before the episode's
    first step: the start value); k = 2 lets the policy see the last change of command. A relative-action
    policy (``policy.action_reference: observation.prev_action``) takes a[t−1], its first d values.
    ``decode_threads``: threads per process decoding the sampled video frames of a batch in parallel
    (``frame_cache=none``); 0 = the CPUs this process may use divided among the DataLoader workers, at
    most 4.
    ``features``: extra numeric dataset columns fed to the policy as inputs, next to every
    ``observation.*`` vector (e.g. ``[gripper_force]``); ``train`` prints which columns it uses and ignores.
    """

    path: str = ""
    cameras: list[str] = field(default_factory=list)
    images: bool = True
    image_size: list[int] = bounded(factory=list, ge=8)
    horizon_s: float = bounded(0.0, ge=0)
    val_episodes: list[int] = bounded(factory=list, ge=0)
    val_every: int = bounded(250, ge=1)
    val_max_frames: int = bounded(2048, ge=1)
    reward: DataReward = "dataset"
    frame_cache: FrameCache = "auto"
    cache_dir: str = ""
    memory_limit_gb: float = bounded(4.0, ge=0)
    num_workers: int = bounded(2, ge=0)
    prev_action: bool = False
    prev_action_start: str = "zeros"
    prev_action_steps: int = bounded(1, ge=1)
    decode_threads: int = bounded(0, ge=0)
    features: list[str] = field(default_factory=list)

    def validate(self, at: str = "data.") -> list[str]:
        """``image_size`` is ``[]`` or ``[H, W]``; named under ``at``."""
        if self.image_size and len(self.image_size) != 2:
            return [f"{at}image_size={self.image_size!r}: must be [] or [H, W]"]
        return []


@dataclass
class RewardModelConfig:
    """The progress critic, a reward model (docs/algorithms.md §9; section ``reward_model``, ``robot-rl
    critic``):
    what it is, what it reads, and how it is trained. Not the Q-critic of offline and online RL
    (``offline.critic_*``, ``sac.critic_*``).

    ``kind``: ``compact`` (small CNN + MiniLM task embedding, CPU-fast) or ``vlm`` (a Hugging Face
    vision-language model with a progress/done head, LoRA-tunable). ``model``: for ``vlm`` the model id or
    local path; for ``compact`` the sentence-transformers text model (empty = the bundled offline MiniLM).
    ``checkpoint``: a trained critic directory to load (for label, eval, serve and rewards); empty for
    training = ``<run_dir>/critic``. ``cameras``/``image_size``: the images it scores (H = W = image_size);
    ``use_state`` also feeds ``observation.state``. Training: ``steps`` gradient steps of ``batch_size``
    pairs; pair kinds by share (the rest are ordered pairs of successful demos, half of them reversed):
    ``mismatch_frac`` (wrong task text: delta 0, done 0), ``stagnation_frac`` (a frame with itself or a
    neighbour: delta ~0) and ``failed_frac`` (pairs of frames of failed episodes from ``failed_from`` x their
    length on, 0 = the whole episode: delta 0, done 0). ``success_max_steps`` > 0 keeps only successful demos
    that succeed within that many frames for time-progress labels: a slow demo (retries, hesitation)
    breaks the constant-rate assumption of time labels and teaches that a failed attempt is progress.
    ``rule``: the VLAC negative-delta rule used to rebuild progress curves (``scale`` or ``mix``).
    ``lora_rank``: LoRA rank for ``vlm`` fine-tuning (0 = train the head only).
    Serving (``robot-rl critic serve``): ``serve_max_pairs`` pairs per request at most (a bigger one is
    refused at once; ``RemoteCritic`` splits its calls to fit), ``serve_max_message_mb`` MiB per message
    frame at most (``zmq.MAXMSGSIZE``: a peer sending more is disconnected before the frame is buffered).
    """

    kind: RewardModelKind = "compact"
    model: str = ""
    checkpoint: str = ""
    cameras: list[str] = field(default_factory=lambda: ["front"])
    image_size: int = bounded(64, ge=1)
    use_state: bool = False
    steps: int = bounded(3000, ge=1)
    batch_size: int = bounded(64, ge=1)
    lr: float = bounded(3e-4, gt=0)
    mismatch_frac: float = bounded(0.15, ge=0, le=1)
    stagnation_frac: float = bounded(0.1, ge=0, le=1)
    failed_frac: float = bounded(0.3, ge=0, le=1)
    failed_from: float = bounded(0.0, ge=0, lt=1)
    success_max_steps: int = bounded(0, ge=0)
    rule: NegativeRule = "scale"
    lora_rank: int = bounded(8, ge=0)
    seed: int = bounded(0, ge=0)
    serve_max_pairs: int = bounded(1024, ge=1)
    serve_max_message_mb: float = bounded(64.0, gt=0)

    def validate(self, at: str = "reward_model.") -> list[str]:
        """The pair shares ``mismatch_frac + stagnation_frac + failed_frac`` sum to at most 1; named under
        ``at``."""
        fracs = (self.mismatch_frac, self.stagnation_frac, self.failed_frac)
        if all(isinstance(f, int | float) and 0 <= f <= 1 for f in fracs) and sum(fracs) > 1:
            return [f"{at}mismatch_frac + stagnation_frac + failed_frac = {sum(fracs):g}: must be <= 1"]
        return []


@dataclass
class RewardConfig:
    """Where the learner's reward comes from.

    ``mode``: ``success`` (the env's sparse success signal, the default), ``shaped`` (success plus
    potential-based shaping ``scale * (gamma * Phi(s') - Phi(s))`` with Phi the critic's progress, which
    leaves the optimal policy unchanged; Ng et al. 1999, Robo-Dopamine) or ``critic`` (no success signal:
    the shaping term plus ``scale`` when the done head fires). The shaping gamma is the learner's own
    discount (``offline.gamma``, or ``sac.gamma`` online with SAC), never a separate key: any other value
    would pay a reward for hovering near the goal (``robot_rl.rewards.shaping``). ``done_threshold``: done
    probability that ends an episode when ``critic_done`` is set.
    """

    mode: RewardMode = "success"
    scale: float = bounded(1.0, gt=0)
    critic_done: bool = False
    done_threshold: float = bounded(0.9, ge=0, le=1)


@dataclass
class SACConfig:
    """The HIL-SERL online recipe as a baseline (docs/algorithms.md §5; Luo et al. 2024, Ball et al. 2023):
    Gaussian tanh SAC on single-step actions (chunk h = 1), a LayerNorm critic ensemble of
    ``num_critics`` aggregated by ``critic_agg``, discount ``gamma``, temperature initialised to
    ``init_temperature`` and tuned towards ``target_entropy`` (0 = the default -|A|/2).
    ``critic_only_updates`` extra critic-only updates run before each full update (HIL-SERL: 1), each on
    its own freshly drawn batch of ``online.batch_size`` chunks. ``backup_entropy``: subtract
    ``alpha * log pi(a'|s')`` from the bootstrapped value in the critic target (textbook SAC); the released
    HIL-SERL configs set it false, so the target is ``r + gamma * mask * agg_k Qbar_k(s', a')``."""

    lr: float = bounded(3e-4, gt=0)
    gamma: float = bounded(0.97, gt=0, le=1)
    tau: float = bounded(0.005, gt=0, le=1)
    num_critics: int = bounded(2, ge=1)
    critic_agg: CriticAgg = "min"
    critic_hidden_dims: list[int] = bounded(factory=lambda: [256, 256], ge=1)
    actor_hidden_dims: list[int] = bounded(factory=lambda: [256, 256], ge=1)
    init_temperature: float = bounded(0.01, gt=0)
    target_entropy: float = bounded(0.0)
    critic_only_updates: int = bounded(1, ge=0)
    backup_entropy: bool = False

    def validate(self, at: str = "sac.") -> list[str]:
        """``critic_agg=min_random2`` needs at least 2 critics; named under ``at``."""
        return _ensemble_problems(at, self.critic_agg, self.num_critics)


@dataclass
class InterventionConfig:
    """Who can take over from the policy in the actor (docs/algorithms.md §5; docs/design.md §4).

    ``device``: ``none``, ``sim_human`` (the scripted simulated human of the suite task ``env.id``:
    ``robot_rl.teleop.sim_human`` for the pick tasks, ``robot_rl.teleop.task_human`` for the others),
    ``keyboard``, ``gamepad`` or ``spacemouse`` (optional extra ``teleop``); see ``robot_rl.teleop``. The
    pick tasks' simulated human takes over when the policy stalls (the pinch site stays within
    ``stall_distance_m`` (m) over ``stall_steps`` control steps while the cube is not lifted) or drifts
    (the pinch-to-cube distance grows more than ``drift_distance_m`` (m) beyond its smallest value so
    far), drives with the clean scripted expert for at least ``takeover_steps`` steps, finishes any grasp
    it started (until the cube is lifted or lost) and then hands back; the other tasks' the same on the
    task's progress (m), keeping control once its expert has begun manipulating. ``max_takeovers`` caps
    takeovers per episode (0 = no cap).
    ``scale``: full device deflection as a fraction of the largest action step (real devices).

    ``gui`` (``robot_rl.teleop.gui``): every actor connects to the GUI server at ``gui_host:gui_port``
    (``robot-rl online`` starts it, ``robot-rl gui`` serves it standalone) with ``gui_token`` (empty = none;
    required when ``gui_host`` is not loopback). ``gui_port`` 0 lets ``robot-rl online`` pick a free port.
    ``gui_camera_hz``: camera frames per second each actor sends to the GUI (Hz; every camera of the step
    together; at or above ``env.control_hz`` every step's frames): decoding and drawing frames is the
    browser's main CPU cost.
    """

    device: InterventionDeviceName = "none"
    stall_steps: int = bounded(8, ge=1)
    stall_distance_m: float = bounded(0.005, ge=0)
    drift_distance_m: float = bounded(0.15, gt=0)
    takeover_steps: int = bounded(15, ge=1)
    max_takeovers: int = bounded(2, ge=0)
    scale: float = bounded(1.0, gt=0, le=1)
    gui_host: str = "127.0.0.1"
    gui_port: int = bounded(8765, ge=0, le=65535)
    gui_token: str = ""
    gui_camera_hz: float = bounded(5.0, gt=0)


@dataclass
class OnlineConfig:
    """Online RL with a human standing by: actors, a learner and RLPD buffers (docs/algorithms.md §1, §3-5).

    ``in_pipeline``: ``robot-rl pipeline`` runs this online stage (after offline RL, before evaluation)
    and evaluates its policy next to BC and offline RL. ``method``: ``qc`` / ``qc_fql`` (chunked RL with
    the QC critic, the flow policy extracted by best-of-N or FQL; hyper-parameters from ``offline``),
    ``sac`` (the HIL-SERL recipe, section ``sac``) or ``hg_dagger`` (flow BC on demos plus the steps a
    human drove, never the policy's own; its batches ignore ``demo_fraction``). ``init``: the offline
    checkpoint to start from (empty = ``<run_dir>/checkpoints/offline_seed<seed>``; ``sac`` starts from
    scratch).
    ``env_steps``: the budget of env steps over all actors, learner up or down: each actor logs no step past
    the lease the learner grants it (robot_rl.runtime.leases). ``utd_ratio``: gradient updates per env step;
    the learner waits for data beyond it. ``warmup_steps``: env steps before the first update.
    ``demo_fraction``: share of each batch from the demo + intervention buffer (RLPD symmetric sampling:
    0.5; ``sac`` draws ``sac.critic_only_updates + 1`` such batches per update). ``replay_capacity``: env
    steps of online episodes the learner holds in memory for sampling (FIFO over whole episodes; the
    demos are separate, every episode stays on disk; 0 = all): 100,000 as LeRobot's HIL-SERL online
    buffer, about 1.2 GB per 64x64 camera, up to 1.25x that allocated. ``publish_every``:
    updates between weight publications. ``checkpoint_every``: updates between
    learner checkpoints. ``max_env_steps_ahead``: actors wait while their env steps exceed
    ``updates / utd_ratio + max_env_steps_ahead`` (a simulation knob that keeps runs comparable on slow
    learners; 0 = never wait, as on a real robot). ``runtime``: ``local`` (processes on this machine,
    ZeroMQ on ``address``) or ``ray`` (``ray_address``; empty starts a local Ray). ``num_actors``: actor
    processes. ``envs_per_actor``: envs each actor steps as one batch (1: one env, as on a robot; N > 1 needs
    ``env.backend=mujoco_cpu`` and ``reward.mode=success``: one policy forward per chunk for all N envs, the
    intervention device drives env 0 only; robot_rl.runtime.batched_actor). ``connect_timeout_s``: how
    long a starting actor with no cached weights and no episode to deliver waits for the learner before it
    gives up (an actor with episodes to deliver waits for the learner as long as it takes).
    ``max_nan_stops``: an actor whose policy produces NaN/inf chunks in this many episodes in a row stops
    with an error instead of resetting forever. ``max_rejected_episodes``: an actor whose episodes the
    learner rejects (values outside the run's ranges, robot_rl.runtime.episode_guard) this many times in a
    row stops with a one-line fault instead of spending robot time on data that is never stored (rejected
    steps count for no lease, so the run would never end). ``actor_restarts``: how often ``--role all``
    restarts an actor process that crashed (back-off 1, 2, 4, ... s) before it stops the run.
    ``max_weight_age_s``: an actor that has not reached the learner for this long stops acting on its ever
    older weights (0 = never) until the learner is back; it keeps running and delivers its episodes then.
    ``log_every_s``: seconds between metric rows.
    ``tensorboard``/``wandb``: extra metric sinks. ``max_episode_steps``: the longest episode an actor
    records and the learner accepts (0 = ``env.max_episode_steps``); it also sizes the learner's message
    cap (``zmq.MAXMSGSIZE``). ``address`` off loopback (``tcp://*:5560``) needs ``security.keys``.
    ``obs_range_factor``: k of the learner's check of pushed observations: each entry must lie within
    ``[lo - k*span, hi + k*span]`` of the policy's stats ``min``/``max`` (robot_rl.runtime.episode_guard;
    0 = only finite). ``max_rollbacks``: a learner whose weights turn NaN/inf rolls back to its last
    checkpoint and quarantines the episodes stored since, at most this many times in a row, then stops.
    """

    method: OnlineMethod = "qc"
    in_pipeline: bool = False
    init: str = ""
    env_steps: int = bounded(3000, ge=1)
    utd_ratio: float = bounded(1.0, gt=0)
    batch_size: int = bounded(256, ge=1)
    warmup_steps: int = bounded(0, ge=0)
    demo_fraction: float = bounded(0.5, ge=0, le=1)
    replay_capacity: int = bounded(100_000, ge=0)
    publish_every: int = bounded(50, ge=1)
    checkpoint_every: int = bounded(500, ge=1)
    max_env_steps_ahead: int = bounded(300, ge=0)
    runtime: Runtime = "local"
    address: str = "tcp://127.0.0.1:5560"
    ray_address: str = ""
    num_actors: int = bounded(1, ge=1)
    envs_per_actor: int = bounded(1, ge=1)
    connect_timeout_s: float = bounded(120.0, gt=0)
    log_every_s: float = bounded(5.0, gt=0)
    max_nan_stops: int = bounded(3, ge=1)
    max_rejected_episodes: int = bounded(5, ge=1)
    actor_restarts: int = bounded(3, ge=0)
    max_weight_age_s: float = bounded(600.0, ge=0)
    tensorboard: bool = True
    wandb: bool = False
    wandb_project: str = "robot_rl"
    max_episode_steps: int = bounded(0, ge=0)
    obs_range_factor: float = bounded(10.0, ge=0)
    max_rollbacks: int = bounded(3, ge=0)

    def validate(self, at: str = "online.") -> list[str]:
        """``address`` is a ZeroMQ endpoint (:func:`~robot_rl.config_checks.address_problem`); named under
        ``at``."""
        reason = address_problem(self.address)
        return [] if reason is None else [f"{at}address={self.address!r}: {reason}"]


@dataclass
class PPOConfig:
    """Online PPO for flow policies, π_RL (docs/algorithms.md §8; ``robot-rl ppo``;
    :mod:`robot_rl.algos.flow_ppo`).

    ``method``: ``flow_noise`` (a learned std in every denoising step, bounded to
    ``[noise_std_min, noise_std_max]``, exact chain log-probability, averaged over its K + 1 terms with
    ``chain_logprob: mean`` as RLinf or summed with ``sum``) or ``flow_sde`` (the ODE turned into an SDE
    with ``σ_t = sde_noise_level·√(t/(1-t))`` at one random denoising step). ``init``: the BC checkpoint
    to start from (empty: ``<run_dir>/checkpoints/bc_seed<seed>``, trained first if missing).
    ``num_envs``: batched envs (``env.backend``; ``mujoco_cpu`` runs them in this process).
    ``rollout_chunks``: chunks per env per PPO iteration; ``epochs`` passes over the rollout in minibatches
    of ``minibatch`` chunks. ``lr``: Adam for the policy (and noise head; 1e-4 made the BC policy worse on
    the sim task, 1e-5 did not: benchmarks/README.md, "π_RL flow PPO"); ``value_lr``: Adam for the
    value MLP (``value_hidden_dims``, on the policy's detached observation features). ``clip``: PPO's ε
    on the per-element ratio. ``gamma`` / ``gae_lambda``: GAE per chunk (a chunk's reward is the sum of
    its step rewards). ``entropy_coef``: Flow-Noise's entropy bonus. ``max_grad_norm``: policy gradient
    clip. ``env_steps``: the budget of executed control steps over all envs. ``log_every``: PPO
    iterations between metric rows.
    """

    method: PPOMethod = "flow_noise"
    init: str = ""
    num_envs: int = bounded(8, ge=1)
    rollout_chunks: int = bounded(24, ge=1)
    epochs: int = bounded(4, ge=1)
    minibatch: int = bounded(64, ge=1)
    lr: float = bounded(1e-5, gt=0)
    value_lr: float = bounded(1e-3, gt=0)
    clip: float = bounded(0.2, gt=0, lt=1)
    gamma: float = bounded(0.99, gt=0, le=1)
    gae_lambda: float = bounded(0.95, ge=0, le=1)
    entropy_coef: float = bounded(0.005, ge=0)
    max_grad_norm: float = bounded(1.0, gt=0)
    noise_std_min: float = bounded(0.08, gt=0)
    noise_std_max: float = bounded(0.16, gt=0)
    sde_noise_level: float = bounded(0.5, gt=0)
    chain_logprob: ChainLogprob = "mean"
    value_hidden_dims: list[int] = bounded(factory=lambda: [256, 256], ge=1)
    env_steps: int = bounded(20000, ge=1)
    log_every: int = bounded(1, ge=1)

    def validate(self, at: str = "ppo.") -> list[str]:
        """``noise_std_min <= noise_std_max``; named under ``at``."""
        low, high = self.noise_std_min, self.noise_std_max
        if isinstance(low, int | float) and low > 0 and low > high:
            return [f"{at}noise_std_min={low}: must be <= {at}noise_std_max={high}"]
        return []


@dataclass
class SecurityConfig:
    """Who may talk to the learner and the critic server (robot_rl.security).

    ``keys``: a folder made by ``robot-rl keys`` (ZeroMQ CURVE key pairs). With it, the servers accept
    only the clients listed in ``<keys>/clients`` (actor K only with key ``actorK``) and traffic is
    encrypted; without it a server refuses to bind anything but a loopback address.
    """

    keys: str = ""


@dataclass
class DeployConfig:
    """How a real-time control loop (a robot) gets its action chunks (README "Serving a policy").

    ``server``: a policy server's address (``robot-rl serve``, e.g. ``tcp://127.0.0.1:5580``); empty runs
    the checkpoint in this process. ``token``: the server's shared token, if it has one. ``timeout_s``:
    longest wait for one reply before a clear error naming the address. ``client_key``: the name of this
    client's key in ``security.keys`` (needed for a server off loopback). ``async_lead`` (k): infer the
    next chunk when k actions of the current one remain (0: synchronous; else 1 <= k < policy.horizon);
    ``async_blend``: cross-fade that many steps from the old chunk to the new one (0 <= b <= k)
    (``robot_rl.executor.AsyncChunkExecutor``).
    """

    server: str = ""
    token: str = ""
    timeout_s: float = bounded(2.0, gt=0)
    client_key: str = "robot"
    async_lead: int = bounded(0, ge=0)
    async_blend: int = bounded(0, ge=0)

    def validate(self, at: str = "deploy.") -> list[str]:
        """``async_blend <= async_lead`` and ``server`` a ZeroMQ endpoint, each named under ``at``
        (``async_lead`` against the policy's horizon: :meth:`PipelineConfig.validate`)."""
        out = []
        lead, blend = self.async_lead, self.async_blend
        if isinstance(blend, int) and blend >= 0 and blend > max(lead, 0):
            out.append(f"{at}async_blend={blend}: must be <= {at}async_lead={lead}")
        reason = address_problem(self.server) if self.server else None
        if reason is not None:
            out.append(f"{at}server={self.server!r}: {reason}")
        return out


@dataclass
class PipelineConfig:
    """The whole main job: collect -> train (bc, offline) -> eval, in ``run_dir``.

    ``seeds`` are independent training seeds: BC and offline RL are each trained and evaluated once per seed.
    ``checkpoint_every`` is the number of gradient steps between resumable training checkpoints.
    ``threads``: torch CPU threads per process; 0 = an equal share of the cores among the processes the
    command runs (``robot_rl.threads``); set 1 when several jobs share the machine. ``ppo``: online PPO for
    flow policies (``robot-rl ppo``, :class:`PPOConfig`). ``recap``: RECAP (``offline.method=recap``,
    :class:`RecapConfig`). ``corft``: CO-RFT's own keys (``offline.method=corft``, :class:`CORFTConfig`).
    """

    run_dir: str = "runs/panda_pick_cube"
    seeds: list[int] = bounded(factory=lambda: [0, 1, 2], ge=0)
    env: EnvConfig = field(default_factory=EnvConfig)
    collect: CollectConfig = field(default_factory=CollectConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    bc: BCConfig = field(default_factory=BCConfig)
    offline: OfflineRLConfig = field(default_factory=OfflineRLConfig)
    recap: RecapConfig = field(default_factory=RecapConfig)
    corft: CORFTConfig = field(default_factory=CORFTConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    data: DataConfig = field(default_factory=DataConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    online: OnlineConfig = field(default_factory=OnlineConfig)
    sac: SACConfig = field(default_factory=SACConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    intervention: InterventionConfig = field(default_factory=InterventionConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    deploy: DeployConfig = field(default_factory=DeployConfig)
    device: str = "cpu"
    checkpoint_every: int = bounded(500, ge=1)
    threads: int = bounded(0, ge=0)

    def validate(self, at: str = "") -> list[str]:
        """Problems of the rules across sections, each naming its dotted key: the device and seeds, the
        critic on a VLA's trunk, ``deploy.async_lead`` below ``policy.horizon``, one actor on a robot with a
        device that drives its action, and a batched actor's needs."""
        out = []
        if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", self.device):
            out.append(f"{at}device={self.device!r}: must be cpu, cuda, cuda:N or mps")
        if not self.seeds:
            out.append(f"{at}seeds=[]: give at least one training seed")
        trunk_unsupported = self.policy.kind != "vla" or self.offline.method == "recap"
        if self.offline.critic_on_trunk is True and trunk_unsupported:
            out.append(
                f"{at}offline.critic_on_trunk=true with policy.kind={self.policy.kind}, offline.method="
                f"{self.offline.method}: the critic reads a VLA's trunk only for qc / qc_fql / corft on "
                "policy.kind=vla; set it false"
            )
        lead, horizon = self.deploy.async_lead, self.policy.horizon
        if isinstance(lead, int) and lead > 0 and not lead < horizon:
            out.append(
                f"{at}deploy.async_lead={lead}: must be < policy.horizon={horizon} (or 0: synchronous)"
            )
        robot = self.env.robot
        if robot is not None and self.online.num_actors != 1:
            out.append(
                f"{at}online.num_actors={self.online.num_actors}: a robot (env.robot) is driven by one "
                "actor; set online.num_actors=1"
            )
        if robot is not None and robot.action == "joint_position" and self.intervention.device != "none":
            out.append(
                f"{at}intervention.device={self.intervention.device}: it drives end-effector deltas, but "
                "env.robot.action=joint_position takes joint targets; set intervention.device=none"
            )
        return out + self._batched_actor_problems(at)

    def _batched_actor_problems(self, at: str) -> list[str]:
        """``online.envs_per_actor`` > 1 steps the in-process batched simulator (``env.backend=mujoco_cpu``)
        with the env's own success reward (the progress-critic reward wraps one env), no robot and no web
        GUI (robot_rl.runtime.batched_actor)."""
        n = self.online.envs_per_actor
        if not isinstance(n, int) or n <= 1:
            return []
        key, out = f"{at}online.envs_per_actor={n}", []
        if self.env.backend not in ("mujoco_cpu", "mjx"):
            out.append(
                f"{key} needs env.backend=mujoco_cpu or mjx (the in-process batched simulators), "
                f"not env.backend={self.env.backend!r}"
            )
        if self.reward.mode != "success":
            out.append(
                f"{key} with reward.mode={self.reward.mode!r}: the critic reward runs on one "
                "env; set reward.mode=success or online.envs_per_actor=1"
            )
        if self.env.robot is not None:
            out.append(f"{key}: a robot (env.robot) is one env; set online.envs_per_actor=1")
        if self.intervention.device == "gui":
            out.append(
                f"{key} with intervention.device=gui: the GUI's live view and relabels "
                "address one env's episodes; use another device (it drives env 0) or online.envs_per_actor=1"
            )
        return out


register_choice_decoders(PipelineConfig)

# The --quick preset: same pipeline, smaller budgets, so it finishes in minutes on 2 CPU cores.
QUICK_OVERRIDES: dict[str, object] = {
    "collect.num_episodes": 100,
    "bc.steps": 1500,
    "offline.steps": 1500,
    "seeds": [0],
    "eval.episodes_per_seed": 50,
}


def _set_dotted(tree: dict, dotted: str, value: object) -> None:
    node = tree
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    quick: bool = False,
    cls: type = PipelineConfig,
):
    """Load ``cls`` from an optional YAML file plus ``--a.b=value`` overrides.

    Precedence: defaults < YAML < ``--quick`` preset < command-line overrides.

    Raises:
        ConfigError: the YAML file is missing or malformed, a key (in the file or an override) is
            unknown, or (for a PipelineConfig) a value breaks its section's checks
            (robot_rl.config_checks); the message names the file and the key.
    """
    tree: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            tree = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: invalid YAML: {err}") from err
        if not isinstance(tree, dict):
            raise ConfigError(f"{path}: top level must be a mapping of config keys")
    if quick:
        for key, value in QUICK_OVERRIDES.items():
            _set_dotted(tree, key, value)
    for key, value in parse_overrides(overrides or []).items():
        _set_dotted(tree, key, value)
    where = f"{path}: " if path is not None else ""
    _refuse_renamed_sections(tree, cls, where)
    bad = boolean_number_problems(tree, cls)
    if bad:
        raise ConfigError(where + "; ".join(bad))
    try:
        cfg = draccus.decode(cls, tree)
    except draccus.utils.DecodingError as err:
        raise ConfigError(f"{where}unknown or invalid config key: {err}") from err
    bad = problems(cfg) if isinstance(cfg, PipelineConfig) else []
    if bad:
        raise ConfigError(where + "; ".join(bad))
    return cfg


RENAMED_SECTIONS: dict[str, str] = {"critic": "reward_model"}
"""Sections that have a new name: a key under the old one is an error naming the new one."""

ALIASES: dict[str, str] = {"policy.vlm": "policy.vla.vlm"}
"""Command-line spellings of config keys: ``--policy.vlm=<id or path>`` sets ``policy.vla.vlm``."""


def _refuse_renamed_sections(tree: dict, cls: type, where: str) -> None:
    """Raise ConfigError naming the new section for a key under a section of :data:`RENAMED_SECTIONS`
    (``critic`` is now ``reward_model``), when ``cls`` has the new section and not the old one."""
    names = {f.name for f in fields(cls)}
    for old, new in RENAMED_SECTIONS.items():
        if old in tree and new in names and old not in names:
            sub = tree[old]
            key = next(iter(sub)) if isinstance(sub, dict) and sub else ""
            dotted = f"{old}.{key}" if key else old
            raise ConfigError(
                f"{where}{dotted}: the {old} section is now {new}; write "
                f"{dotted.replace(old, new, 1)} (--{new}.<key>=... or {new}: in a YAML file)"
            )


def parse_overrides(args: list[str]) -> dict[str, object]:
    """Parse ``--a.b=value`` or ``--a.b value`` pairs; values are read as YAML (``[1, 2]``, ``true``). A key
    of :data:`ALIASES` is returned under the key it stands for.

    Raises:
        ConfigError: an argument is not of that form, or a key is given both as itself and by its alias.
    """
    out: dict[str, object] = {}
    spellings: dict[str, str] = {}  # key -> how the command line spelled it
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(f"expected a config override like --bc.steps=100, got {arg!r}")
        if "=" in arg:
            key, raw = arg[2:].split("=", 1)
            i += 1
        elif i + 1 < len(args):
            key, raw = arg[2:], args[i + 1]
            i += 2
        else:
            raise ConfigError(f"config override {arg!r} has no value")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise ConfigError(f"override --{key}: cannot parse value {raw!r}: {err}") from err
        spelling, key = key, ALIASES.get(key, key)
        if spellings.setdefault(key, spelling) != spelling:
            raise ConfigError(f"--{spellings[key]} and --{spelling} set the same key {key}; give one")
        out[key] = value
    return out


def save_config(cfg, path: str | Path) -> None:
    """Write ``cfg`` as YAML that :func:`load_config` reads back to an equal config."""
    Path(path).write_text(yaml.safe_dump(draccus.encode(cfg), sort_keys=False))


def config_to_dict(cfg) -> dict:
    """Plain-dict form of a config dataclass (for JSON checkpoints and reports)."""
    return draccus.encode(cfg)


def section_class(name: str) -> type:
    """The dataclass of ``PipelineConfig``'s section ``name`` (``offline``: :class:`OfflineRLConfig`), as
    the algorithm registry names a method's sections (:attr:`robot_rl.algos.registry.Algorithm.sections`).

    Raises:
        KeyError: ``name`` is not a section of ``PipelineConfig`` (names the sections).
    """
    sections = {
        f.name: f.default_factory for f in fields(PipelineConfig) if isinstance(f.default_factory, type)
    }
    if name not in sections:
        raise KeyError(f"{name!r} is not a PipelineConfig section; the sections are {sorted(sections)}")
    return sections[name]
