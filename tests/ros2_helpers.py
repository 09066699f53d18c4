"""Helpers of the ROS 2 tests: a DDS domain id of their own per test, reserved host-wide (no cross-talk
between tests, xdist workers or concurrent test sessions on this host), node command lines on the
loopback-only config, and the transports every node test runs on."""

from __future__ import annotations

import fcntl
import importlib.util
import itertools
import os
import tempfile
import threading
from collections import deque
from pathlib import Path

import pytest

_counter = itertools.count()

TRANSPORTS = [
    "cyclonedds",
    pytest.param(
        "rclpy",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("rclpy") is None, reason="no rclpy: pip install 'robot-rl[rclpy]'"
        ),
    ),
]
"""``@pytest.mark.parametrize("transport", TRANSPORTS)``: each node test on both transports (rclpy: ROS 2
Kilted's wheels on Fast DDS, which ``setup.sh test`` installs)."""


DOMAINS = 101
"""Domain ids handed out: 1..101. Higher ids put a participant's ports (7400 + 250 * domain + ...) in
Linux's ephemeral range (32768-60999), where any socket bound to port 0 (the tests' ZeroMQ servers) may
take one: ROS 2's own advice is to keep domain ids at or below 101 on Linux."""
HELD = 16
"""Domain ids one process keeps reserved at once; drawing another releases its oldest."""
_LOCKS = Path(tempfile.gettempdir()) / "robot_rl_ros2_domains"
_held: deque[tuple[int, int]] = deque()  # (domain id, fd of its lock file), oldest first


def new_domain() -> int:
    """A DDS domain id in [1, :data:`DOMAINS`] that no other process on this host holds: each id is a
    ``flock`` on ``$TMPDIR/robot_rl_ros2_domains/<id>.lock``, kept by this process (for its :data:`HELD`
    newest ids; the kernel drops it when the process dies, however it dies). Before, ids were
    ``1 + (pid * 7 + n) % 101``: two xdist workers with consecutive pids drew the same id whenever one had
    drawn 7 more than the other, and a test then saw the other's nodes on its topics.

    Raises:
        RuntimeError: every id is held by other processes.
    """
    _LOCKS.mkdir(exist_ok=True)
    start = os.getpid() * 7 + next(_counter)
    for k in range(DOMAINS):
        domain = 1 + (start + k) % DOMAINS
        if any(d == domain for d, _ in _held):
            continue
        fd = os.open(_LOCKS / f"{domain}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _held.append((domain, fd))
        if len(_held) > HELD:
            os.close(_held.popleft()[1])  # closing the file releases its lock
        return domain
    raise RuntimeError(f"all {DOMAINS} ROS 2 domain ids are held by other processes (locks in {_LOCKS})")


def node_flags(domain: int, transport: str = "cyclonedds") -> list[str]:
    """Command-line flags putting a node on ``domain`` over ``transport``, discovery on loopback only."""
    return ["--ros-transport", transport, f"--domain-id={domain}", "--dds-loopback"]


class Spun:
    """A node app (``factory(node)``, e.g. ``SimRobotNode``) on a fresh node of ``domain`` over
    ``transport``, spun by a thread as ``run_node`` would; ``close`` stops the thread, then the app."""

    def __init__(self, name: str, factory, domain: int, transport: str, *params: str) -> None:
        from robot_rl.hardware.ros2.node import parse_args
        from robot_rl.hardware.ros2.transport import make_node

        self.domain = domain
        self.node = make_node(name, parse_args([*node_flags(domain, transport), *params], name))
        self.app = factory(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.node.spin, args=(self._stop.is_set,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.app.close()


def stock_arm_config(domain: int, transport: str = "cyclonedds", **kw):
    """``env.robot.ros2`` (a ``Ros2Config``) of a stock Panda as ``sim_robot_node mode:=stock`` simulates
    it: no pose topic, kinematics from the project's model, IK to the JointTrajectoryController, the
    fingers (m) through their trajectory controller; ``kw`` overrides keys."""
    from robot_rl.config import Ros2Config
    from robot_rl.hardware.ros2 import stock_arm

    values = {
        "transport": transport,
        "domain_id": domain,
        "loopback": True,
        "joint_names": list(stock_arm.ARM_JOINTS),
        "ee_pose_topic": "",
        "kinematics": "panda",
        "joint_command": "trajectory",
        "ee_command": "ik",  # twist_topic stays set, unused
        "gripper_joint": "panda_finger_joint1",
        "gripper_open": 0.04,
        "gripper_closed": 0.0,
        "gripper_command": "trajectory",
        "gripper_topic": "/gripper_trajectory_controller/joint_trajectory",
        "connect_wait_s": 20.0,
    }
    return Ros2Config(**{**values, **kw})
