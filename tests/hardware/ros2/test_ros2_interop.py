"""Interop with ROS 2's default middleware: every message type robot_rl publishes or subscribes crosses, in
both directions, between the project's cyclonedds node and a plain rclpy node (``tests/rclpy_peer.py``,
ROS 2 Kilted's PyPI wheels on ``rmw_fastrtps_cpp``) in another process, checked field by field on each side;
and the project's rclpy nodes and topics are listed by the ROS graph API.

Before the fix in ``cyclone_node.INTEROP_CONFIG`` no type with a sequence field (JointState, Image,
JointTrajectory, ...) matched a Fast DDS 3 endpoint in either direction."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import fields, is_dataclass

import pytest
from repo_paths import TESTS

pytest.importorskip("cyclonedds")
pytest.importorskip("rclpy")
from ros2_helpers import new_domain  # noqa: E402
from ros2_samples import SAMPLES  # noqa: E402

from robot_rl.hardware.ros2 import msgs  # noqa: E402
from robot_rl.hardware.ros2.msgs import ros_type  # noqa: E402
from robot_rl.hardware.ros2.node import NodeArgs  # noqa: E402
from robot_rl.hardware.ros2.transport import make_node  # noqa: E402

PEER = TESTS / "rclpy_peer.py"
PEER_PYTHON = os.environ.get("ROBOT_RL_RCLPY_PEER_PYTHON", sys.executable)
"""The peer's interpreter: this venv's (Kilted wheels), or another distro's rclpy, e.g. a venv with the
``ros-jazzy-*`` wheels (how the Jazzy check in the README was run)."""
TIMEOUT_S = 40.0
PROBE_TOPIC = "/robot_rl_probe/joint_states"


def plain(value):
    """Our message (or field value) as the peer prints rclpy's: dicts, lists, ``uint8[]`` as ints."""
    if is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, bytes):
        return list(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def topic(direction: str, msg_type: type) -> str:
    pkg, _, name = ros_type(msg_type).split("/")
    return f"/interop/{direction}/{pkg}/{name}"


def _lines(proc: subprocess.Popen) -> queue.Queue:
    out: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [out.put(line) for line in proc.stdout], daemon=True).start()
    return out


def _lists_probe(graph: dict | None) -> bool:
    """The peer's ROS graph holds the project's rclpy node and its topic (discovery takes a moment)."""
    return bool(graph) and "/robot_rl_graph_probe" in graph["nodes"] and PROBE_TOPIC in graph["topics"]


@pytest.fixture
def peer():
    """The plain-rclpy echo node on a domain of its own (loopback discovery); yields (domain, lines)."""
    domain = new_domain()
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    env.pop("RMW_IMPLEMENTATION", None)  # ROS 2's default: Fast DDS
    if PEER_PYTHON != sys.executable:  # the ROS wheels' start-up set these for this venv's libraries
        env.pop("_ROS_WHEELS_BOOTSTRAP_COMPLETE", None)
        env.pop("LD_LIBRARY_PATH", None)
    types = [ros_type(type(m)) for m in SAMPLES]
    proc = subprocess.Popen(
        [PEER_PYTHON, str(PEER), *types],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield domain, _lines(proc)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_every_message_type_crosses_both_ways_with_fastdds(peer):
    domain, lines = peer
    node = make_node("interop_cyclone", NodeArgs(transport="cyclonedds", domain_id=domain, loopback=True))
    probe_args = NodeArgs(transport="rclpy", domain_id=domain, loopback=True)
    graph_probe = make_node("robot_rl_graph_probe", probe_args)
    assert (node.transport, graph_probe.transport) == ("cyclonedds", "rclpy")
    probe_pub = graph_probe.publisher(msgs.JointState, PROBE_TOPIC)
    back: dict[type, object] = {}
    for sample in SAMPLES:
        node.subscribe(type(sample), topic("r2c", type(sample)), lambda m: back.setdefault(type(m), m))
    pubs = [(node.publisher(type(s), topic("c2r", type(s))), s) for s in SAMPLES]
    seen_by_rclpy: dict[str, dict] = {}
    graph = None
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline and (len(back) < len(SAMPLES) or not _lists_probe(graph)):
            for pub, sample in pubs:
                if type(sample) not in back or ros_type(type(sample)) not in seen_by_rclpy:
                    pub.publish(sample)
            probe_pub.publish(msgs.JointState(name=["j"], position=[0.0]))
            node.spin_once(0.05)
            graph_probe.spin_once(0.0)
            while not lines.empty():
                line = json.loads(lines.get())
                if "graph" in line:
                    graph = line["graph"]
                else:
                    seen_by_rclpy[line["type"]] = line["fields"]
    finally:
        node.close()
        graph_probe.close()
    missing_r = sorted({ros_type(type(s)) for s in SAMPLES} - set(seen_by_rclpy))
    missing_c = sorted(ros_type(t) for t in {type(s) for s in SAMPLES} - set(back))
    assert not missing_r, f"never reached the rclpy node: {missing_r}"
    assert not missing_c, f"never came back from the rclpy node: {missing_c}"
    for sample in SAMPLES:  # cyclonedds -> rclpy, read by rclpy's own deserializer
        assert seen_by_rclpy[ros_type(type(sample))] == plain(sample), ros_type(type(sample))
    for sample in SAMPLES:  # rclpy's serializer -> cyclonedds
        assert back[type(sample)] == sample, ros_type(type(sample))
    assert "/robot_rl_graph_probe" in graph["nodes"], graph["nodes"]
    assert graph["topics"][PROBE_TOPIC] == ["sensor_msgs/msg/JointState"]
    assert graph["topics"]["/interop/c2r/sensor_msgs/JointState"] == ["sensor_msgs/msg/JointState"]
