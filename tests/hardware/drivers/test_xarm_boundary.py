"""The xArm's robot-side safety boundary (issue 35) through the real ``xarm-python-sdk`` against the
protocol-level control box emulator: the safety layer sets it from its box at connect (fence mode on), and
the controller then stops the arm with error C35 at the boundary however far the client pushes."""

from __future__ import annotations

import time

import numpy as np
import pytest
from waits import wait_until

pytest.importorskip("mujoco")
pytest.importorskip("xarm")

from robot_rl.config import RobotConfig, SafetyConfig  # noqa: E402
from robot_rl.hardware.drivers.xarm import BOUNDARY_MARGIN_M  # noqa: E402
from robot_rl.hardware.errors import RobotFault  # noqa: E402
from robot_rl.hardware.factory import make_robot  # noqa: E402
from robot_rl.hardware.robot import Command, CommandMode  # noqa: E402
from robot_rl.hardware.safety import SafeRobot  # noqa: E402
from robot_rl_testing.xarm_emulator import ERROR_SAFETY_BOUNDARY  # noqa: E402

LOW, HIGH = np.array([0.2, -0.3, 0.15]), np.array([0.6, 0.3, 0.55])
"""The box of test_xarm_emulator's record test; the emulator's home TCP (0.399, 0, 0.348) m is inside."""


def test_the_safety_layer_sets_the_controllers_boundary_at_connect(xarm_emu):
    cfg = SafetyConfig(workspace_low=LOW.tolist(), workspace_high=HIGH.tolist(), estop_signal="")
    robot = SafeRobot(make_robot(RobotConfig(driver="xarm", address=xarm_emu.host), 10.0), cfg)
    assert xarm_emu.tcp_boundary is None and not xarm_emu.fence_mode
    with robot:
        low, high = xarm_emu.tcp_boundary
        np.testing.assert_allclose(low, LOW - BOUNDARY_MARGIN_M, atol=1e-3 + 1e-9)
        np.testing.assert_allclose(high, HIGH + BOUNDARY_MARGIN_M, atol=1e-3 + 1e-9)
        assert np.all(low <= LOW - BOUNDARY_MARGIN_M) and np.all(high >= HIGH + BOUNDARY_MARGIN_M)  # outward
        assert xarm_emu.fence_mode
        assert xarm_emu.unknown_registers == set()


def test_the_controller_stops_the_arm_at_the_boundary_with_c35(xarm_emu):
    """No safety layer: the driver streams ``ee_delta`` targets 0.1 m past the boundary's +x face; the
    controller refuses the first setpoint beyond it and stops the arm (error C35), the TCP inside."""
    robot = make_robot(RobotConfig(driver="xarm", address=xarm_emu.host), 10.0)
    robot.connect()
    try:
        start = robot.read().ee_pos
        low, high = start - 0.05, start + 0.03  # the +x face 3 cm ahead (plus the margin)
        robot.set_tcp_boundary(low, high)
        with pytest.raises(RobotFault, match=str(ERROR_SAFETY_BOUNDARY)):
            for _ in range(30):  # 3 s at 10 Hz, 0.025 m per step: far past the face
                robot.command(Command(CommandMode.EE_DELTA, np.array([0.025, 0.0, 0.0])))
                time.sleep(0.1)
        assert xarm_emu.error_code == ERROR_SAFETY_BOUNDARY and xarm_emu.state == 4
        assert any(s.reason == "boundary" for s in xarm_emu.servo_log)
        assert wait_until(lambda: False, 0.3) is False  # let the arm settle where it stopped
        tcp = np.asarray(xarm_emu._tcp_pose()[:3]) / 1000.0
        assert tcp[0] <= high[0] + BOUNDARY_MARGIN_M + 1e-3, tcp - high
        assert tcp[0] > high[0] - 0.01, "the arm stopped far short of the face: the stream never got there"
    finally:
        xarm_emu.error_code = 0  # as clean_error on the box, so the driver's disconnect can hold
        robot.disconnect()


def test_a_tcp_outside_the_boundary_is_refused_at_connect_naming_the_box(xarm_emu):
    robot = make_robot(RobotConfig(driver="xarm", address=xarm_emu.host), 10.0)
    robot.connect()
    try:
        start = robot.read().ee_pos
        with pytest.raises(RobotFault, match="outside the safety boundary"):
            robot.set_tcp_boundary(start + 0.05, start + 0.2)
        assert not xarm_emu.fence_mode  # nothing was set
    finally:
        robot.disconnect()
