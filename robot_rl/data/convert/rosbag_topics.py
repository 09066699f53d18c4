"""The topics file of a rosbag2 <-> LeRobot conversion: which ROS 2 topics become which LeRobot features.

One YAML file (``--topics topics.yaml``) is read into :class:`TopicsConfig`; an unknown key is an error
naming the file and the key. The same file drives both directions
(:mod:`robot_rl.data.convert.rosbag` imports a bag, :mod:`robot_rl.data.convert.rosbag_export` writes one).
Example (``configs/ros2/rosbag_topics.yaml``)::

    fps: 10                       # LeRobot frame rate; the bag is resampled to it
    task: pick the cube           # every episode's task (a std_msgs/String episode marker overrides it)
    time: header                  # header: header.stamp when the message has one; receive: bag time
    interpolation: nearest        # nearest | linear (numeric topics; images are always nearest)
    state:
      topic: /joint_states        # sensor_msgs/JointState or std_msgs/Float64MultiArray
      fields: [position, velocity]
      joints: [shoulder, elbow, wrist, gripper]   # column order; empty: the first message's names
    action:
      topic: /arm_controller/commands   # JointState, JointTrajectory, Float64MultiArray or TwistStamped
    cameras:
      front: {topic: /camera/front/image_raw}      # sensor_msgs/Image (rgb8, bgr8, mono8)
      wrist: {topic: /camera/wrist/image_raw/compressed, type: sensor_msgs/msg/CompressedImage}
    episodes:
      split: gap                  # none | gap | topic
      gap_s: 1.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from robot_rl.config import ConfigError, load_config

JOINT_STATE = "sensor_msgs/msg/JointState"
FLOAT_ARRAY = "std_msgs/msg/Float64MultiArray"
TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
TWIST = "geometry_msgs/msg/TwistStamped"
IMAGE = "sensor_msgs/msg/Image"
COMPRESSED = "sensor_msgs/msg/CompressedImage"
BOOL = "std_msgs/msg/Bool"
STRING = "std_msgs/msg/String"
STATE_TYPES = (JOINT_STATE, FLOAT_ARRAY)
ACTION_TYPES = (JOINT_STATE, TRAJECTORY, FLOAT_ARRAY, TWIST)
CAMERA_TYPES = (IMAGE, COMPRESSED)
MARKER_TYPES = (BOOL, STRING)
JOINT_FIELDS = ("position", "velocity", "effort")
TWIST_NAMES = ["linear.x", "linear.y", "linear.z", "angular.x", "angular.y", "angular.z"]


@dataclass
class VectorTopic:
    """A topic read as one float vector per message (``state`` or ``action``).

    ``topic``: the ROS 2 topic name. ``type``: its message type (``sensor_msgs/msg/JointState`` or
    ``sensor_msgs/JointState``); empty on import means "whatever the bag records" (a given type must match
    the bag's), on export the default (JointState for state, Float64MultiArray for action).
    ``fields``: the JointState fields concatenated in this order (position, velocity, effort).
    ``joints``: joint names, in the column order wanted; every message must carry all of them (in any
    order). Empty: the first message's names. For Float64MultiArray they only name the columns.
    """

    topic: str = ""
    type: str = ""
    fields: list[str] = field(default_factory=lambda: ["position"])
    joints: list[str] = field(default_factory=list)


@dataclass
class CameraTopic:
    """One camera topic: ``topic`` and, optionally, ``type`` (``sensor_msgs/msg/Image`` or
    ``sensor_msgs/msg/CompressedImage``; on export it picks raw rgb8 or JPEG, default Image)."""

    topic: str = ""
    type: str = ""


@dataclass
class EpisodesConfig:
    """How the bag is cut into episodes. ``split``: ``none`` (one episode), ``gap`` (a new episode where
    no mapped topic has a message for more than ``gap_s`` seconds) or ``topic`` (markers on ``topic``:
    std_msgs/Bool true starts an episode and false ends it; std_msgs/String starts one at every message,
    its non-empty text being that episode's task). ``type``: the marker type the exporter writes
    (``std_msgs/msg/Bool``, the default, or ``std_msgs/msg/String`` carrying the task); on import it must
    match the bag's when given."""

    split: str = "none"
    gap_s: float = 1.0
    topic: str = ""
    type: str = ""


@dataclass
class TopicsConfig:
    """The topics file: LeRobot frame rate, task text, time source, interpolation, and the topic of
    ``observation.state``, ``action`` and each ``observation.images.<camera>``."""

    fps: int = 10
    task: str = ""
    robot_type: str = ""
    time: str = "header"
    interpolation: str = "nearest"
    state: VectorTopic = field(default_factory=VectorTopic)
    action: VectorTopic = field(default_factory=VectorTopic)
    cameras: dict[str, CameraTopic] = field(default_factory=dict)
    episodes: EpisodesConfig = field(default_factory=EpisodesConfig)


def full_type(name: str) -> str:
    """``sensor_msgs/JointState`` -> ``sensor_msgs/msg/JointState``; a full name is returned as is."""
    parts = name.split("/")
    return f"{parts[0]}/msg/{parts[1]}" if len(parts) == 2 else name


def _check_type(where: str, given: str, allowed: tuple[str, ...]) -> None:
    if given and full_type(given) not in allowed:
        raise ConfigError(f"{where}: type {given!r} is not one of {list(allowed)}")


def _one_of(where: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{where} must be one of {list(allowed)}, got {value!r}")


def load_topics(path: str | Path) -> TopicsConfig:
    """Read and check a topics file.

    Raises:
        ConfigError: naming the file and the key: a missing file, invalid YAML, an unknown key, a bad
            value (fps <= 0, an unknown ``time``/``interpolation``/``episodes.split``/field name, a type
            outside the supported ones, an empty state/action/camera topic, ``split: topic`` with no
            ``episodes.topic``, a non-positive ``gap_s``).
    """
    cfg = load_config(path, cls=TopicsConfig)
    where = str(path)
    if cfg.fps <= 0:
        raise ConfigError(f"{where}: fps must be positive, got {cfg.fps}")
    _one_of(f"{where}: time", cfg.time, ("header", "receive"))
    _one_of(f"{where}: interpolation", cfg.interpolation, ("nearest", "linear"))
    _one_of(f"{where}: episodes.split", cfg.episodes.split, ("none", "gap", "topic"))
    for role, topic, allowed in (("state", cfg.state, STATE_TYPES), ("action", cfg.action, ACTION_TYPES)):
        if not topic.topic:
            raise ConfigError(f"{where}: {role}.topic is required")
        _check_type(f"{where}: {role}", topic.type, allowed)
        if not topic.fields or any(f not in JOINT_FIELDS for f in topic.fields):
            raise ConfigError(f"{where}: {role}.fields must be a non-empty list of {list(JOINT_FIELDS)}")
    for name, cam in cfg.cameras.items():
        if not cam.topic:
            raise ConfigError(f"{where}: cameras.{name}.topic is required")
        _check_type(f"{where}: cameras.{name}", cam.type, CAMERA_TYPES)
    if cfg.episodes.split == "topic" and not cfg.episodes.topic:
        raise ConfigError(f"{where}: episodes.split is 'topic' but episodes.topic is empty")
    _check_type(f"{where}: episodes", cfg.episodes.type, MARKER_TYPES)
    if cfg.episodes.gap_s <= 0:
        raise ConfigError(f"{where}: episodes.gap_s must be positive, got {cfg.episodes.gap_s}")
    return cfg
