"""The node API over real DDS (loopback) on both transports, and ROS-style parameters."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("cyclonedds")
from ros2_helpers import TRANSPORTS, new_domain, node_flags  # noqa: E402

from robot_rl.hardware.ros2 import msgs  # noqa: E402
from robot_rl.hardware.ros2.node import ParameterError, parse_args  # noqa: E402
from robot_rl.hardware.ros2.transport import make_node  # noqa: E402


def test_ros_style_parameters(tmp_path):
    params = tmp_path / "p.yaml"
    params.write_text(
        "/**:\n  ros__parameters:\n    rate_hz: 5.0\n    joints: [a, b]\n"
        "policy:\n  ros__parameters:\n    rate_hz: 7\n"
    )
    args = parse_args(["--ros-args", "--params-file", str(params), "-p", "name:=x", "flag:=true"], "policy")
    assert args.params == {"rate_hz": 7, "joints": ["a", "b"], "name": "x", "flag": True}
    args = parse_args(
        ["rate_hz:=10", "--ros-transport", "cyclonedds", "--domain-id", "7", "--dds-loopback"], "n"
    )
    assert (args.params, args.transport, args.domain_id, args.loopback) == (
        {"rate_hz": 10},
        "cyclonedds",
        7,
        True,
    )
    assert parse_args(["--ros-args", "-r", "__node:=other", "__ns:=/x"], "n").params == {}
    with pytest.raises(ParameterError, match="expected name:=value"):
        parse_args(["--rate", "3"], "n")
    with pytest.raises(ParameterError, match="--ros-transport 'zenoh'"):
        parse_args(["--ros-transport=zenoh"], "n")
    with pytest.raises(ParameterError, match="ros__parameters"):
        params.write_text("/**: {rate_hz: 3}\n")
        parse_args(["--params-file", str(params)], "n")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_declared_parameters_are_typed_and_unknown_ones_rejected(transport):
    flags = node_flags(new_domain(), transport)
    node = make_node("n", parse_args([*flags, "rate_hz:=10", "topic:=/x", "typo:=1"], "n"))
    try:
        assert node.param("rate_hz", 30.0) == 10.0  # int given, float declared: converted
        assert node.param("topic", "/joint_states") == "/x"
        assert node.param("other", True) is True
        with pytest.raises(ParameterError, match="unknown parameters \\['typo'\\]"):
            node.check_params()
        node.args.params["rate_hz"] = "fast"
        with pytest.raises(ParameterError, match="rate_hz:='fast' must be float"):
            node.param("rate_hz", 30.0)
    finally:
        node.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pubsub_and_timer_over_dds_and_wrong_type_never_delivered(transport):
    domain = new_domain()
    args = parse_args(node_flags(domain, transport), "t")
    pub_node, sub_node = make_node("pub", args), make_node("sub", args)
    # rclpy's nodes of a process share one participant, which refuses a second type on a topic: the
    # wrong-type writer is a cyclonedds one (another participant; on rclpy, another middleware too)
    bad_node = make_node("bad", parse_args(node_flags(domain, "cyclonedds"), "t"))
    assert sub_node.transport == transport
    got, ticks = [], []
    sub_node.subscribe(msgs.JointState, "/joint_states", got.append)
    start = time.monotonic()
    sub_node.timer(0.05, lambda: ticks.append(time.monotonic()))
    pub = pub_node.publisher(msgs.JointState, "/joint_states")
    bad = bad_node.publisher(msgs.String, "/joint_states")
    with pytest.raises(TypeError, match="publisher of sensor_msgs/msg/JointState got String"):
        pub.publish(msgs.String("x"))
    # until 1 s and 10 ticks (a loaded CI machine once spun only 9 times in 1 s), at most 10 s
    while time.monotonic() - start < 10 and (time.monotonic() - start < 1 or len(ticks) < 10):
        pub.publish(msgs.JointState(name=["j"], position=[1.0]))
        bad.publish(msgs.String("not a joint state"))
        sub_node.spin_once(0.02)
    elapsed = time.monotonic() - start
    for node in (pub_node, sub_node, bad_node):
        node.close()
    assert got and all(isinstance(m, msgs.JointState) and m.position == [1.0] for m in got)
    assert 10 <= len(ticks) <= elapsed / 0.05 + 2  # a 20 Hz timer: never faster than its period
