"""Pick a node's transport: :func:`make_node` (``auto``: rclpy when importable, else cyclonedds)."""

from __future__ import annotations

from robot_rl.hardware.errors import MissingExtraError
from robot_rl.hardware.ros2.node import Node, NodeArgs


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
        from robot_rl.hardware.ros2.rclpy_node import RclpyNode

        return RclpyNode(name, args)
    try:
        import cyclonedds  # noqa: F401
    except ImportError:
        raise MissingExtraError(
            "the cyclonedds ROS 2 transport needs cyclonedds: pip install 'robot-rl[ros]' "
            "(or source a ROS 2 install for rclpy)"
        ) from None
    from robot_rl.hardware.ros2.cyclone_node import CycloneNode

    return CycloneNode(name, args)
