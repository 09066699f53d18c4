"""The ``rclpy`` transport of :class:`robot_rl.hardware.ros2.node.Node`, for machines with a ROS 2 install
(Humble or Jazzy; ``source /opt/ros/<distro>/setup.bash`` first).

**Untested**: written against rclpy's documented API (``rclpy.init``, ``Node.create_publisher``,
``create_subscription``, ``create_timer``, ``rclpy.spin_once``), but rclpy cannot be installed on the
machine this was developed on (it is on neither PyPI nor Debian), so this module has never been run. The
cyclonedds transport is the tested one; with ``RMW_IMPLEMENTATION=rmw_cyclonedds_cpp`` both put the same
bytes on the wire.

Messages are converted field by field between :mod:`robot_rl.hardware.ros2.msgs` dataclasses and the
generated rclpy classes of the same ``pkg/msg/Type`` (same field names), so node code is transport-free.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from robot_rl.hardware.errors import MissingExtraError
from robot_rl.hardware.ros2.msgs import SEQUENCE_OF, ros_type
from robot_rl.hardware.ros2.node import Node, NodeArgs, Publisher


def _rclpy():
    try:
        import rclpy
        import rclpy.node
    except ImportError:
        raise MissingExtraError(
            "--ros-transport rclpy needs rclpy from a ROS 2 install (source /opt/ros/<distro>/setup.bash), "
            "or use --ros-transport cyclonedds (pip install 'robot-rl[ros]')"
        ) from None
    return rclpy


def ros_class(msg_type: type) -> type:
    """The rclpy message class of one of our message types (``sensor_msgs.msg.JointState``...)."""
    pkg, _, name = ros_type(msg_type).split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


def to_ros(msg: Any) -> Any:
    """Our dataclass message -> the rclpy message of the same type (recursively)."""
    out = ros_class(type(msg))()
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name)
        if dataclasses.is_dataclass(value):
            value = to_ros(value)
        elif isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            value = [to_ros(v) for v in value]
        setattr(out, f.name, value)
    return out


def from_ros(ros_msg: Any, msg_type: type) -> Any:
    """An rclpy message -> our dataclass ``msg_type`` (recursively; arrays become lists, uint8[] bytes)."""
    kwargs = {}
    for f in dataclasses.fields(msg_type):
        value = getattr(ros_msg, f.name)
        if dataclasses.is_dataclass(f.default_factory):  # a nested message
            value = from_ros(value, f.default_factory)
        elif (msg_type, f.name) in SEQUENCE_OF:
            value = [from_ros(v, SEQUENCE_OF[msg_type, f.name]) for v in value]
        elif f.default_factory is bytes:
            value = bytes(value)
        elif not isinstance(value, str | int | float | bool):
            value = [v.item() if hasattr(v, "item") else v for v in value]
        kwargs[f.name] = value
    return msg_type(**kwargs)


class _RclpyPublisher(Publisher):
    def __init__(self, pub: Any) -> None:
        self._pub = pub

    def publish(self, msg: Any) -> None:
        self._pub.publish(to_ros(msg))

    def subscription_count(self) -> int:
        return int(self._pub.get_subscription_count())


class RclpyNode(Node):
    """A node on rclpy (module doc). ``args.domain_id`` is passed to ``rclpy.init`` only when
    ``--domain-id`` was given; otherwise ROS 2 reads ``ROS_DOMAIN_ID`` itself. ``--dds-loopback`` is
    ignored (ROS 2 has ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` on Jazzy, ``ROS_LOCALHOST_ONLY=1`` on
    Humble)."""

    transport = "rclpy"

    def __init__(self, name: str, args: NodeArgs) -> None:
        super().__init__(name, args)
        rclpy = _rclpy()
        self._rclpy = rclpy
        if not rclpy.ok():
            rclpy.init(domain_id=args.domain_id)
        self._node = rclpy.node.Node(name)

    def publisher(self, msg_type: type, topic: str, depth: int = 10) -> Publisher:
        return _RclpyPublisher(self._node.create_publisher(ros_class(msg_type), topic, depth))

    def subscribe(self, msg_type: type, topic: str, callback: Callable[[Any], None], depth: int = 10) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        qos = QoSProfile(depth=depth, reliability=ReliabilityPolicy.BEST_EFFORT)
        self._node.create_subscription(
            ros_class(msg_type), topic, lambda m: callback(from_ros(m, msg_type)), qos
        )

    def spin_once(self, timeout_s: float = 0.1) -> None:
        self._rclpy.spin_once(self._node, timeout_sec=min(timeout_s, self._run_timers()))
        self._run_timers()

    def close(self) -> None:
        if self._node is not None:
            self._node.destroy_node()
            self._node = None
