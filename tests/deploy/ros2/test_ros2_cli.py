"""``robot-rl ros2 <node>``: the console command runs a registered node as a real process over DDS
(loopback, both transports); bad arguments fail with the reason and exit code 2."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

pytest.importorskip("cyclonedds")
from ros2_helpers import TRANSPORTS, new_domain, node_flags  # noqa: E402

from robot_rl.deploy.ros2 import registry  # noqa: E402
from robot_rl.hardware.ros2 import msgs  # noqa: E402
from robot_rl.hardware.ros2.node import parse_args  # noqa: E402
from robot_rl.hardware.ros2.transport import make_node  # noqa: E402

CODE = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"


def _cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CODE, *args], capture_output=True, text=True, timeout=timeout
    )


def test_bad_node_and_parameters_fail_with_the_reason():
    out = _cli("ros2", "no_such_node")
    assert out.returncode == 2 and "invalid choice: 'no_such_node'" in out.stderr
    out = _cli("ros2", "sim_robot_node", "--ros-args", "-p", "contrl_hz:=10.0", "--dds-loopback")
    assert out.returncode == 2 and "unknown parameters ['contrl_hz']" in out.stderr
    out = _cli("ros2", "policy_node", "episodes:=many")
    assert out.returncode == 2 and "parameter episodes:='many' must be int" in out.stderr
    with pytest.raises(KeyError, match="robot_rl has"):
        registry.parameters("no_such_node")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sim_robot_node_runs_from_the_console_command(transport):
    domain = new_domain()
    flags = node_flags(domain, transport)
    proc = subprocess.Popen(
        [sys.executable, "-c", CODE, "ros2", "sim_robot_node", *flags, "state_rate_hz:=20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    node = make_node("test_listener", parse_args(flags, "t"))
    got: list = []
    node.subscribe(msgs.JointState, "/joint_states", got.append)
    try:
        lines = [proc.stdout.readline()]
        while (
            "sim_robot_node ready" not in lines[-1] and len(lines) < 5
        ):  # log lines (PyOpenGL's) may come first
            lines.append(proc.stdout.readline())
        assert f"sim_robot_node ready ({transport}" in lines[-1], lines
        deadline = time.monotonic() + 10.0
        while len(got) < 5 and time.monotonic() < deadline:
            node.spin_once(0.1)
        assert len(got) >= 5 and got[-1].name[:7] == [f"joint{i}" for i in range(1, 8)]
        proc.terminate()
        assert proc.wait(timeout=10) == 0  # SIGTERM: a clean stop
    finally:
        proc.kill()
        node.close()


def test_a_robot_node_keeps_the_configs_ros2_keys_and_sets_its_own(tmp_path):
    """A config with its own ROS 2 arm (joints, topics) keeps them in a node; the node's transport, domain
    and sim_prefix parameters win (the nodes used to replace the whole ``env.robot.ros2`` with defaults)."""
    from robot_rl.hardware.ros2.node import robot_run_config

    config = tmp_path / "arm.yaml"
    config.write_text(
        "env:\n  robot:\n    driver: ros2\n    timeout_s: 0.5\n    ros2:\n"
        "      joint_states_topic: /my_arm/joint_states\n      domain_id: 3\n      ee_step_max: 0.01\n"
        "  num_envs: 1\n"
    )
    args = parse_args(node_flags(17), "policy_node")
    params = {"config": str(config), "overrides": "--env.robot.ros2.stale_s=0.2", "sim_prefix": ""}
    ros2 = robot_run_config(args, params).env.robot.ros2
    assert (ros2.joint_states_topic, ros2.ee_step_max, ros2.stale_s) == ("/my_arm/joint_states", 0.01, 0.2)
    assert (ros2.domain_id, ros2.transport, ros2.loopback, ros2.sim_prefix) == (17, "cyclonedds", True, "")
    fresh = robot_run_config(args, {"config": "", "overrides": "", "sim_prefix": "/sim"}).env.robot
    assert (fresh.driver, fresh.ros2.domain_id, fresh.ros2.sim_prefix) == ("ros2", 17, "/sim")
