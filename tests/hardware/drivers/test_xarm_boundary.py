"""The xArm's robot-side safety boundary (issue 35) through the real ``xarm-python-sdk`` against the
protocol-level control box emulator: the safety layer sets it from its box at connect (fence mode on), and
the controller then stops the arm with error C35 at the boundary however far the client pushes."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("mujoco")
pytest.importorskip("xarm")
from xarm.core.config.x_config import XCONF  # noqa: E402

from robot_rl.config import RobotConfig, SafetyConfig  # noqa: E402
from robot_rl.hardware.drivers.xarm import BOUNDARY_MARGIN_M  # noqa: E402
from robot_rl.hardware.errors import RobotFault  # noqa: E402
from robot_rl.hardware.factory import make_robot  # noqa: E402
from robot_rl.hardware.robot import Command, CommandMode  # noqa: E402
from robot_rl.hardware.safety import SafeRobot  # noqa: E402
from robot_rl_testing.xarm_emulator import ERROR_SAFETY_BOUNDARY, XArmControllerEmulator  # noqa: E402

LOW, HIGH = np.array([0.2, -0.3, 0.15]), np.array([0.6, 0.3, 0.55])
"""The box of test_xarm_emulator's record test; the emulator's home TCP (0.399, 0, 0.348) m is inside."""


@pytest.fixture
def emu(monkeypatch):
    with XArmControllerEmulator() as emulator:
        for name, port in emulator.sdk_overrides.items():
            monkeypatch.setattr(XCONF.SocketConf, name, port)
        yield emulator


def _wait(done, timeout_s: float = 5.0) -> bool:
    t0 = time.monotonic()
    while not done():
        if time.monotonic() - t0 > timeout_s:
            return False
        time.sleep(0.01)
    return True


def test_the_safety_layer_sets_the_controllers_boundary_at_connect(emu):
    cfg = SafetyConfig(workspace_low=LOW.tolist(), workspace_high=HIGH.tolist(), estop_signal="")
    robot = SafeRobot(make_robot(RobotConfig(driver="xarm", address=emu.host), 10.0), cfg)
    assert emu.tcp_boundary is None and not emu.fence_mode
    with robot:
        low, high = emu.tcp_boundary
        np.testing.assert_allclose(low, LOW - BOUNDARY_MARGIN_M, atol=1e-3 + 1e-9)
        np.testing.assert_allclose(high, HIGH + BOUNDARY_MARGIN_M, atol=1e-3 + 1e-9)
        assert np.all(low <= LOW - BOUNDARY_MARGIN_M) and np.all(high >= HIGH + BOUNDARY_MARGIN_M)  # outward
        assert emu.fence_mode
        assert emu.unknown_registers == set()


def test_the_controller_stops_the_arm_at_the_boundary_with_c35(emu):
    """No safety layer: the driver streams ``ee_delta`` targets 0.1 m past the boundary's +x face; the
    controller refuses the first setpoint beyond it and stops the arm (error C35), the TCP inside."""
    robot = make_robot(RobotConfig(driver="xarm", address=emu.host), 10.0)
    robot.connect()
    try:
        start = robot.read().ee_pos
        low, high = start - 0.05, start + 0.03  # the +x face 3 cm ahead (plus the margin)
        robot.set_tcp_boundary(low, high)
        with pytest.raises(RobotFault, match=str(ERROR_SAFETY_BOUNDARY)):
            for _ in range(30):  # 3 s at 10 Hz, 0.025 m per step: far past the face
                robot.command(Command(CommandMode.EE_DELTA, np.array([0.025, 0.0, 0.0])))
                time.sleep(0.1)
        assert emu.error_code == ERROR_SAFETY_BOUNDARY and emu.state == 4
        assert any(s.reason == "boundary" for s in emu.servo_log)
        assert _wait(lambda: False, 0.3) is False  # let the arm settle where it stopped
        tcp = np.asarray(emu._tcp_pose()[:3]) / 1000.0
        assert tcp[0] <= high[0] + BOUNDARY_MARGIN_M + 1e-3, tcp - high
        assert tcp[0] > high[0] - 0.01, "the arm stopped far short of the face: the stream never got there"
    finally:
        emu.error_code = 0  # as clean_error on the box, so the driver's disconnect can hold
        robot.disconnect()


def test_a_tcp_outside_the_boundary_is_refused_at_connect_naming_the_box(emu):
    robot = make_robot(RobotConfig(driver="xarm", address=emu.host), 10.0)
    robot.connect()
    try:
        start = robot.read().ee_pos
        with pytest.raises(RobotFault, match="outside the safety boundary"):
            robot.set_tcp_boundary(start + 0.05, start + 0.2)
        assert not emu.fence_mode  # nothing was set
    finally:
        robot.disconnect()
