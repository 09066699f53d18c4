"""``robot-rl ros2 <node> [ROS arguments]``: run one of robot_rl's ROS 2 nodes
(:data:`robot_rl.deploy.ros2.registry.NODES`) with ROS-style arguments (``name:=value``,
``--ros-args -p name:=value``, ``--params-file FILE``, ``--ros-transport``, ``--domain-id``,
``--dds-loopback``), as ``ros2 run robot_rl <node>`` does on a ROS 2 machine."""

from __future__ import annotations

import argparse

from robot_rl.deploy.ros2.registry import NODES, entry_point


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``ros2`` subcommand's arguments: the node and its ROS-style arguments."""
    p.add_argument("node", choices=sorted(NODES), help="node executable")
    p.add_argument(
        "node_args",
        nargs=argparse.REMAINDER,
        help="the node's arguments: name:=value, --ros-args -p name:=value, --params-file FILE, "
        "--ros-transport {auto,rclpy,cyclonedds}, --domain-id N, --dds-loopback",
    )


def run(args: argparse.Namespace) -> int:
    """Run the node until SIGINT/SIGTERM (or, for ``policy_node``, its episodes); return its exit code
    (2 for a bad parameter, with the reason on stderr)."""
    return entry_point(args.node)(list(args.node_args))
