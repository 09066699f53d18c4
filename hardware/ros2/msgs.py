"""The ROS 2 standard messages robot_rl publishes and subscribes, as cyclonedds ``IdlStruct`` types with
ROS 2's DDS wire names, so they interoperate with any ROS 2 node on ``rmw_cyclonedds_cpp`` (or any RMW
speaking standard DDS): the type of ``sensor_msgs/msg/JointState`` is ``sensor_msgs::msg::dds_::JointState_``
and its topic ``/joint_states`` is ``rt/joint_states`` on the wire (:func:`dds_topic`), CDR (XCDR1)
little-endian encoding.

Field names, order and types follow the ROS 2 Humble/Jazzy ``.msg`` definitions exactly (both distros
agree on every type here); ``tests/hardware/ros2/test_ros2_msgs.py`` checks that each serialises byte for byte
as ``rosbags``' independent ROS 2 type store does. Unsigned/float widths matter on the wire: ``uint32``
fields are :mod:`cyclonedds.idl.types` ``uint32``, ``float32`` sequences are ``sequence[float32]``.
``uint8[]`` payloads (images) take ``bytes``.

Each class has ``ROS_TYPE`` (``pkg/msg/Type``), the name rclpy and rosbags use.
"""

# no `from __future__ import annotations`: cyclonedds resolves the field types from live annotations

import math
import time
from dataclasses import dataclass, field

from cyclonedds.idl import IdlStruct
from cyclonedds.idl import types as t


def _ros(pkg: str, name: str) -> dict[str, str]:
    return {"typename": f"{pkg}::msg::dds_::{name}_"}


# -- builtin_interfaces ---------------------------------------------------------------------------------
@dataclass
class Time(IdlStruct, **_ros("builtin_interfaces", "Time")):
    """``builtin_interfaces/msg/Time``: ``sec`` (s, int32) + ``nanosec`` (ns, uint32 < 1e9)."""

    sec: t.int32 = 0
    nanosec: t.uint32 = 0


@dataclass
class Duration(IdlStruct, **_ros("builtin_interfaces", "Duration")):
    """``builtin_interfaces/msg/Duration``: ``sec`` (s, int32) + ``nanosec`` (ns, uint32 < 1e9)."""

    sec: t.int32 = 0
    nanosec: t.uint32 = 0


# -- std_msgs -------------------------------------------------------------------------------------------
@dataclass
class Header(IdlStruct, **_ros("std_msgs", "Header")):
    """``std_msgs/msg/Header``: capture ``stamp`` and coordinate ``frame_id``."""

    stamp: Time = field(default_factory=Time)
    frame_id: str = ""


@dataclass
class Bool(IdlStruct, **_ros("std_msgs", "Bool")):
    """``std_msgs/msg/Bool``."""

    data: bool = False


@dataclass
class String(IdlStruct, **_ros("std_msgs", "String")):
    """``std_msgs/msg/String``."""

    data: str = ""


@dataclass
class Float32(IdlStruct, **_ros("std_msgs", "Float32")):
    """``std_msgs/msg/Float32`` (the critic node's progress and done probability)."""

    data: t.float32 = 0.0


@dataclass
class MultiArrayDimension(IdlStruct, **_ros("std_msgs", "MultiArrayDimension")):
    """``std_msgs/msg/MultiArrayDimension``."""

    label: str = ""
    size: t.uint32 = 0
    stride: t.uint32 = 0


@dataclass
class MultiArrayLayout(IdlStruct, **_ros("std_msgs", "MultiArrayLayout")):
    """``std_msgs/msg/MultiArrayLayout``."""

    dim: t.sequence[MultiArrayDimension] = field(default_factory=list)
    data_offset: t.uint32 = 0


@dataclass
class Float32MultiArray(IdlStruct, **_ros("std_msgs", "Float32MultiArray")):
    """``std_msgs/msg/Float32MultiArray``."""

    layout: MultiArrayLayout = field(default_factory=MultiArrayLayout)
    data: t.sequence[t.float32] = field(default_factory=list)


@dataclass
class Float64MultiArray(IdlStruct, **_ros("std_msgs", "Float64MultiArray")):
    """``std_msgs/msg/Float64MultiArray`` (a forward position controller's ``~/commands``)."""

    layout: MultiArrayLayout = field(default_factory=MultiArrayLayout)
    data: t.sequence[t.float64] = field(default_factory=list)


# -- sensor_msgs ----------------------------------------------------------------------------------------
@dataclass
class JointState(IdlStruct, **_ros("sensor_msgs", "JointState")):
    """``sensor_msgs/msg/JointState``: per joint ``name``, ``position`` (rad or m), ``velocity`` (rad/s),
    ``effort`` (N·m); the value lists may be empty."""

    header: Header = field(default_factory=Header)
    name: t.sequence[str] = field(default_factory=list)
    position: t.sequence[t.float64] = field(default_factory=list)
    velocity: t.sequence[t.float64] = field(default_factory=list)
    effort: t.sequence[t.float64] = field(default_factory=list)


@dataclass
class Image(IdlStruct, **_ros("sensor_msgs", "Image")):
    """``sensor_msgs/msg/Image``: ``data`` is ``height * step`` bytes (``rgb8``: step = 3 * width)."""

    header: Header = field(default_factory=Header)
    height: t.uint32 = 0
    width: t.uint32 = 0
    encoding: str = ""
    is_bigendian: t.uint8 = 0
    step: t.uint32 = 0
    data: t.sequence[t.uint8] = field(default_factory=bytes)


@dataclass
class CompressedImage(IdlStruct, **_ros("sensor_msgs", "CompressedImage")):
    """``sensor_msgs/msg/CompressedImage``: ``format`` ``jpeg``/``png``, ``data`` the encoded bytes."""

    header: Header = field(default_factory=Header)
    format: str = ""
    data: t.sequence[t.uint8] = field(default_factory=bytes)


@dataclass
class Joy(IdlStruct, **_ros("sensor_msgs", "Joy")):
    """``sensor_msgs/msg/Joy``: ``axes`` in [-1, 1], ``buttons`` 0/1."""

    header: Header = field(default_factory=Header)
    axes: t.sequence[t.float32] = field(default_factory=list)
    buttons: t.sequence[t.int32] = field(default_factory=list)


# -- geometry_msgs --------------------------------------------------------------------------------------
@dataclass
class Point(IdlStruct, **_ros("geometry_msgs", "Point")):
    """``geometry_msgs/msg/Point`` (m)."""

    x: t.float64 = 0.0
    y: t.float64 = 0.0
    z: t.float64 = 0.0


@dataclass
class Quaternion(IdlStruct, **_ros("geometry_msgs", "Quaternion")):
    """``geometry_msgs/msg/Quaternion`` (x, y, z, w order, as ROS)."""

    x: t.float64 = 0.0
    y: t.float64 = 0.0
    z: t.float64 = 0.0
    w: t.float64 = 1.0


@dataclass
class Pose(IdlStruct, **_ros("geometry_msgs", "Pose")):
    """``geometry_msgs/msg/Pose``."""

    position: Point = field(default_factory=Point)
    orientation: Quaternion = field(default_factory=Quaternion)


@dataclass
class PoseStamped(IdlStruct, **_ros("geometry_msgs", "PoseStamped")):
    """``geometry_msgs/msg/PoseStamped`` (the end-effector pose the sim robot publishes)."""

    header: Header = field(default_factory=Header)
    pose: Pose = field(default_factory=Pose)


@dataclass
class Vector3(IdlStruct, **_ros("geometry_msgs", "Vector3")):
    """``geometry_msgs/msg/Vector3``."""

    x: t.float64 = 0.0
    y: t.float64 = 0.0
    z: t.float64 = 0.0


@dataclass
class Twist(IdlStruct, **_ros("geometry_msgs", "Twist")):
    """``geometry_msgs/msg/Twist``: ``linear`` (m/s), ``angular`` (rad/s)."""

    linear: Vector3 = field(default_factory=Vector3)
    angular: Vector3 = field(default_factory=Vector3)


@dataclass
class TwistStamped(IdlStruct, **_ros("geometry_msgs", "TwistStamped")):
    """``geometry_msgs/msg/TwistStamped`` (MoveIt Servo's ``~/delta_twist_cmds``)."""

    header: Header = field(default_factory=Header)
    twist: Twist = field(default_factory=Twist)


# -- trajectory_msgs ------------------------------------------------------------------------------------
@dataclass
class JointTrajectoryPoint(IdlStruct, **_ros("trajectory_msgs", "JointTrajectoryPoint")):
    """``trajectory_msgs/msg/JointTrajectoryPoint``: targets reached ``time_from_start`` after the
    trajectory's header stamp."""

    positions: t.sequence[t.float64] = field(default_factory=list)
    velocities: t.sequence[t.float64] = field(default_factory=list)
    accelerations: t.sequence[t.float64] = field(default_factory=list)
    effort: t.sequence[t.float64] = field(default_factory=list)
    time_from_start: Duration = field(default_factory=Duration)


@dataclass
class JointTrajectory(IdlStruct, **_ros("trajectory_msgs", "JointTrajectory")):
    """``trajectory_msgs/msg/JointTrajectory`` (a JointTrajectoryController's ``~/joint_trajectory``)."""

    header: Header = field(default_factory=Header)
    joint_names: t.sequence[str] = field(default_factory=list)
    points: t.sequence[JointTrajectoryPoint] = field(default_factory=list)


def _bytes_payloads(cls: type[IdlStruct]) -> None:
    """Serialise ``cls.data`` (``uint8[]``) as one block of bytes and read it back as ``bytes``.

    cyclonedds 11's ``sequence[uint8]`` packs and unpacks one Python int per byte (88 ms to write and 16 ms
    to read a 480x640 rgb8 image here, and a list of 921,600 ints on the reader); its ``BytesMachine`` puts
    the same XCDR bytes on the wire (uint32 length, then the bytes) with one copy. The declared type stays
    ``sequence<uint8>`` (ROS 2's ``uint8[]``, the XTypes type information); only the (de)serialiser of the
    field is swapped. If cyclonedds' internals differ from 11.0's, the generic (slow, correct) one stays.
    """
    from cyclonedds.idl._machinery import BytesMachine, PlainCdrV2SequenceOfPrimitiveMachine, StructMachine

    cls.__idl__.populate()
    for machine in (cls.__idl__.v1_machine, cls.__idl__.v2_machine):
        members = getattr(machine, "members_machines", {}) if isinstance(machine, StructMachine) else {}
        old = members.get("data")
        if isinstance(old, PlainCdrV2SequenceOfPrimitiveMachine) and old.size == 1 and old.max_length is None:
            members["data"] = BytesMachine()


_bytes_payloads(Image)
_bytes_payloads(CompressedImage)

MESSAGES: tuple[type[IdlStruct], ...] = (
    Time,
    Duration,
    Header,
    Bool,
    String,
    Float32,
    MultiArrayDimension,
    MultiArrayLayout,
    Float32MultiArray,
    Float64MultiArray,
    JointState,
    Image,
    CompressedImage,
    Joy,
    Point,
    Quaternion,
    Pose,
    PoseStamped,
    Vector3,
    Twist,
    TwistStamped,
    JointTrajectoryPoint,
    JointTrajectory,
)
"""Every message type here."""
SEQUENCE_OF: dict[tuple[type, str], type] = {
    (MultiArrayLayout, "dim"): MultiArrayDimension,
    (JointTrajectory, "points"): JointTrajectoryPoint,
}
"""Fields that are sequences of messages, and the message type of their items."""


def ros_type(cls: type[IdlStruct]) -> str:
    """``pkg/msg/Type`` of a message class (from its DDS type name ``pkg::msg::dds_::Type_``)."""
    pkg, _, _, name = cls.__idl_typename__.split("::")
    return f"{pkg}/msg/{name[:-1]}"


def check_type(topic: str, msg_type: type, msg: object) -> None:
    """Check a message before a publisher of ``msg_type`` on ``topic`` sends it (both transports).

    Raises:
        TypeError: ``msg`` is another type (names the topic and both types).
    """
    if type(msg) is not msg_type:
        raise TypeError(f"{topic}: publisher of {ros_type(msg_type)} got {type(msg).__name__}")


def dds_topic(topic: str) -> str:
    """The DDS topic of a ROS 2 topic: ``/joint_states`` -> ``rt/joint_states`` (ROS 2's ``rt`` prefix).

    Raises:
        ValueError: not an absolute ROS name (``/a/b``; letters, digits, ``_``, ``/``).
    """
    if not topic.startswith("/") or topic.endswith("/") or "//" in topic:
        raise ValueError(f"topic {topic!r} must be an absolute ROS name such as /joint_states")
    if not all(c.isalnum() or c in "_/" for c in topic):
        raise ValueError(f"topic {topic!r} has characters outside [A-Za-z0-9_/]")
    return "rt" + topic


def stamp(seconds: float | None = None) -> Time:
    """A ``Time`` of ``seconds`` (s since the Unix epoch, as ROS' system clock; None: now)."""
    s = time.time() if seconds is None else seconds
    sec = math.floor(s)
    return Time(int(sec), min(int(round((s - sec) * 1e9)), 999_999_999))


def seconds(t_: Time | Duration) -> float:
    """A ``Time``/``Duration`` in s."""
    return t_.sec + t_.nanosec * 1e-9


def duration(s: float) -> Duration:
    """A ``Duration`` of ``s`` seconds (>= 0)."""
    sec = math.floor(s)
    return Duration(int(sec), min(int(round((s - sec) * 1e9)), 999_999_999))
