"""The robot-side TCP boundary (issue 35): a client that is late between reading the state and sending
its command (a loaded host) cannot push the measured arm out of the safety box, because the robot's own
loop enforces the box the safety layer set at connect. Real MuJoCo physics; the robot server as a real
subprocess on localhost."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from robot_rl.config import SafetyConfig
from robot_rl.hardware.drivers.sim_server import SimServerRobot
from robot_rl.hardware.errors import CommandRejected, HardwareError
from robot_rl.hardware.robot import Command, CommandMode, Robot
from robot_rl.hardware.safety import SafeRobot
from robot_rl.hardware.sim_robot import MujocoRobot
from robot_rl.hardware.sim_server import serve_in_subprocess
from robot_rl.hardware.tcp_boundary import TcpBoundary
from robot_rl_testing.safety_audit import ADVERSARIES

LOW, HIGH = np.array([0.35, -0.2, 0.05]), np.array([0.6, 0.2, 0.35])
CFG = SafetyConfig(
    workspace_low=LOW.tolist(),
    workspace_high=HIGH.tolist(),
    velocity_scale=0.5,
    acceleration_scale=0.5,
    watchdog_ms=0,
    estop_signal="",
)
BAR_M = 0.005
"""Issue 35's bar: the measured end effector at most 5 mm beyond the box."""
SPIKE_S, SPIKE_P, USUAL_S = 0.06, 0.3, 0.005
"""A loaded client's read-to-send time: SPIKE_S s with probability SPIKE_P (preempted by other jobs),
else uniform in [0, USUAL_S] s."""


def _beyond(pos: np.ndarray) -> float:
    return float(np.max(np.maximum(LOW - pos, pos - HIGH)))


class LateClient(SimServerRobot):
    """A server client on a loaded host: each command leaves late after the safety layer read the state it
    was judged by (:data:`SPIKE_S`), while the arm moves on."""

    def __init__(self, address: str, seed: int = 0) -> None:
        super().__init__(address)
        self._rng = random.Random(seed)

    def command(self, cmd: Command) -> None:
        spiked = self._rng.random() < SPIKE_P
        time.sleep(SPIKE_S if spiked else self._rng.uniform(0.0, USUAL_S))
        super().command(cmd)


def _watch(address: str, stop: threading.Event, worst: list[float]) -> None:
    """Read the arm at the link's pace on a connection of its own; keep the largest excursion."""
    with SimServerRobot(address) as observer:
        while not stop.is_set():
            worst[0] = max(worst[0], _beyond(observer.read().ee_pos))


def test_a_late_client_cannot_push_the_measured_arm_out_of_the_box():
    """``out_of_box`` (both modes, switches): without the robot-side boundary this client took the arm
    out of the box by 75 and 81 mm in two of three runs, 3-17 mm in five shorter ones (issue 35)."""
    adversary = ADVERSARIES["out_of_box"]
    with serve_in_subprocess(extra_args=("--control-hz=50",)) as srv:
        client = LateClient(srv.address)
        safe = SafeRobot(client, CFG)
        stop, worst = threading.Event(), [0.0]
        watcher = threading.Thread(target=_watch, args=(srv.address, stop, worst), daemon=True)
        with safe:
            client.reset_scene(0)
            time.sleep(0.2)  # settle at home, inside the box
            watcher.start()
            rng, lim = np.random.default_rng(0), client.limits
            try:
                for step in range(200):
                    try:
                        safe.command(adversary(rng, lim, step))
                    except CommandRejected:
                        pass
                    time.sleep(1.0 / lim.control_hz)
                    worst[0] = max(worst[0], _beyond(client.read().ee_pos))
            finally:
                stop.set()
                watcher.join(timeout=5)
            brakes = client.ping()["stats"]["boundary_brakes"]
    assert worst[0] <= BAR_M, f"measured end effector {1000 * worst[0]:.1f} mm beyond the box"
    assert brakes > 0, "the server's boundary never acted: the adversary did not test it"


def test_the_brake_keeps_raw_pushes_at_the_face_in_process():
    """No safety layer: ``ee_delta`` pushes out of the box at 0.5 m/s (the sim's own box allows them) on the
    in-process real-time robot, whose physics enforces its TCP boundary every physics step."""
    robot = MujocoRobot(control_hz=50, lockstep=False, seed=0)
    robot.connect()
    worst = {}
    for enforced in (False, True):
        robot.reset_scene(0)
        robot.set_tcp_boundary(*((LOW, HIGH) if enforced else (None, None)))
        out = 0.0
        for k in range(150):
            push = np.array([1.0, -1.0, -1.0]) * 0.01 if k < 75 else np.array([-1.0, 1.0, 1.0]) * 0.01
            robot.command(Command(CommandMode.EE_DELTA, push))
            for _ in range(10):  # one 50 Hz period of 500 Hz physics
                robot.advance(1 / 500)
                out = max(out, _beyond(robot.read().ee_pos))
        worst[enforced] = out
    assert worst[False] > 0.05, worst  # the sim alone goes far out
    assert worst[True] <= BAR_M, worst
    assert robot.brake.brakes > 0


def test_bad_boundaries_are_refused_and_the_server_keeps_serving():
    with pytest.raises(ValueError, match="below"):
        TcpBoundary(HIGH, LOW)
    with pytest.raises(ValueError, match="3 finite"):
        TcpBoundary(np.array([0.0, np.nan, 0.0]), HIGH)
    with pytest.raises(ValueError, match="both"):
        MujocoRobot().set_tcp_boundary(LOW, None)
    with serve_in_subprocess() as srv, SimServerRobot(srv.address) as robot:
        with pytest.raises(HardwareError, match="below"):
            robot.set_tcp_boundary(HIGH, LOW)
        with pytest.raises(HardwareError, match="3 finite"):
            robot.set_tcp_boundary(LOW[:2], HIGH)
        with pytest.raises(HardwareError, match="both"):
            robot._request("set_boundary", low=LOW, high=None)
        robot.set_tcp_boundary(LOW, HIGH)
        robot._request("set_boundary", low=None, high=None)  # cleared
        assert robot.read().joint_pos.shape == (7,)


class NoModels(MujocoRobot):
    """The simulated arm as a driver that declares none of the optional hooks (a UR or Franka): the base
    class's defaults answer for it."""

    tracking_time_s = Robot.tracking_time_s
    link_clearance = Robot.link_clearance
    set_tcp_boundary = Robot.set_tcp_boundary


def test_the_layer_asks_the_declared_hooks_and_works_without_them():
    """``Robot`` declares ``tracking_time_s``, ``link_clearance`` and ``set_tcp_boundary`` with defaults
    (0 s, no collision model, no robot-side boundary); the safety layer reports what the robot enforces."""
    bare = NoModels(lockstep=True, seed=0)
    assert bare.tracking_time_s == 0.0 and bare.link_clearance(np.zeros(7)) is None
    assert bare.set_tcp_boundary(LOW, HIGH) is False
    for robot, enforced in ((MujocoRobot(lockstep=True, seed=0), True), (bare, False)):
        with SafeRobot(robot, CFG) as safe:
            assert safe.robot_side_boundary is enforced
            assert (robot.brake.box is not None) is enforced
            assert (safe.link_clearance(safe.read().joint_pos) is not None) is enforced
            for _ in range(20):  # a push out of the box: the layer alone keeps the arm in
                safe.command(Command(CommandMode.EE_DELTA, np.array([0.0, 0.0, -0.02])))
            assert _beyond(safe.read().ee_pos) <= BAR_M
