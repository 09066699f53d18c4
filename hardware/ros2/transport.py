"""Pick a node's transport: :func:`make_node` (``auto``: rclpy when importable, else cyclonedds)."""

from __future__ import annotations

from robot_rl.hardware.errors import MissingExtraError
from robot_rl.hardware.ros2.node import Node, NodeArgs
from robot_rl.hardware.ros2.rclpy_node import RclpyNode


def make_node(name: str, args: NodeArgs) -> Node:
    """A :class:`Node` on ``args.transport`` (``auto``: rclpy when importable, else cyclonedds).

    Raises:
        MissingExtraError: the transport's library is missing (names the extra / ROS 2 install).
    """
    transport = args.transport
    if transport == "auto":
        try:
            import rclpy  # noqa: F401

            transport = "rclpy"
        except ImportError:
            transport = "cyclonedds"
    if transport == "rclpy":
        return RclpyNode(name, args)
    try:  # cyclone_node imports cyclonedds (the ros extra) at module level
        from robot_rl.hardware.ros2.cyclone_node import CycloneNode
    except ImportError as exc:
        raise MissingExtraError(
            "the cyclonedds ROS 2 transport needs cyclonedds: pip install 'robot-rl[ros]' "
            "(or source a ROS 2 install for rclpy)"
        ) from exc

    return CycloneNode(name, args)
