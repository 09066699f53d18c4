"""sim_robot_node + policy_node as two processes over cyclonedds (loopback) at 10 Hz: the policy moves the
simulated arm; SIGKILLed mid-run, the robot holds (the twist watchdog applies no stale command) while the
sim node keeps running; a restarted policy node moves it again."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import numpy as np
import pytest

pytest.importorskip("cyclonedds")
from launch_files import ROBOT_RL  # noqa: E402
from ros2_helpers import TRANSPORTS, new_domain, node_flags  # noqa: E402

from robot_rl.hardware.ros2 import msgs  # noqa: E402
from robot_rl.hardware.ros2.node import parse_args  # noqa: E402
from robot_rl.hardware.ros2.transport import make_node  # noqa: E402


def _start(args: list[str], log) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.Popen(
        [*ROBOT_RL, "ros2", *args], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


@pytest.fixture(scope="module")
def offline_checkpoint(tmp_path_factory) -> str:
    """A trained offline checkpoint, built once for both transports."""
    from online_setup import build_offline_run

    run = tmp_path_factory.mktemp("policy_kill") / "run"
    build_offline_run(run)
    return str(run / "checkpoints" / "offline_seed0")


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_policy_moves_the_arm_holds_when_killed_and_resumes(tmp_path, offline_checkpoint, transport):
    ckpt = offline_checkpoint
    domain = new_domain()
    log = open(tmp_path / "nodes.log", "wb")
    sim = _start(
        [
            "sim_robot_node",
            *node_flags(domain, transport),
            "cameras:=[front]",
            "control_hz:=10.0",
            "command_timeout_s:=0.3",
            "twist_mode:=servo",  # the watchdog is what holds a Servo-style arm
        ],
        log,
    )
    policy_args = ["policy_node", *node_flags(domain, transport), f"checkpoint:={ckpt}", "episodes:=0"]
    policy = _start(policy_args, log)
    node = make_node("kill_test_listener", parse_args(node_flags(domain, transport), "t"))
    poses: list[tuple[float, np.ndarray]] = []
    twists: list[float] = []
    node.subscribe(
        msgs.PoseStamped,
        "/ee_pose",
        lambda m: poses.append(
            (time.monotonic(), np.array([m.pose.position.x, m.pose.position.y, m.pose.position.z]))
        ),
    )
    node.subscribe(
        msgs.TwistStamped, "/servo_node/delta_twist_cmds", lambda m: twists.append(time.monotonic())
    )

    def spin(seconds: float, until=lambda: False) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not until():
            node.spin_once(0.05)

    def path_length(t0: float, t1: float) -> float:
        pts = [p for t, p in poses if t0 <= t <= t1]
        return float(sum(np.linalg.norm(b - a) for a, b in zip(pts, pts[1:], strict=False)))

    try:
        spin(120.0, lambda: len(twists) >= 30)  # start-up (torch import, GL) then 3 s of 10 Hz commands
        t = time.monotonic()
        assert len(twists) >= 30, (tmp_path / "nodes.log").read_text()[-3000:]
        rate = (len(twists) - 1) / (twists[-1] - twists[0])
        assert 2.0 < rate < 15.0  # about 10 Hz; never faster, slower on a loaded machine
        assert path_length(twists[0], t) > 0.01  # the policy moved the end effector (m)
        os.killpg(policy.pid, signal.SIGKILL)
        policy.wait()
        killed = time.monotonic()
        spin(1.0)  # past command_timeout_s and settling
        n_twists = len(twists)
        hold_start = time.monotonic()
        spin(2.0)
        assert len(twists) == n_twists  # nobody commands now
        assert sim.poll() is None  # the robot node keeps running
        assert poses[-1][0] > hold_start + 1.5  # ... and publishing
        assert path_length(hold_start, time.monotonic()) < 0.002  # the arm holds (m over 2 s)
        assert killed < hold_start
        policy = _start(policy_args, log)
        restarted = len(twists)
        spin(120.0, lambda: len(twists) >= restarted + 20)
        assert len(twists) >= restarted + 20
        assert path_length(twists[restarted], time.monotonic()) > 0.01  # it moves again
    finally:
        node.close()
        for p in (policy, sim):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
