"""Each vendor arm driver's first session with a real controller, against fakes of the vendor SDK objects
that cannot exist here (no controller in CI): each fake keeps the vendor's API and checks every call
against the vendor's documented limits, and the driver code above it is the real one.

- UR: ``rtde_receive`` / ``rtde_control`` (ur_rtde's documented servoJ/servoL ranges); a ``RobotEnv`` on a
  UR runs its home motion and steps without a gripper.
- Franka: ``franky.Robot`` / ``franky.Gripper`` (the Franka Hand's datasheet: 80 mm stroke, 0.1 m/s,
  70 N continuous force); the rest of franky (motions, ``RealtimeConfig``) is the real wheel.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from robot_rl.config import EnvConfig, RobotConfig
from robot_rl.config_checks import robot_problems
from robot_rl.hardware.factory import make_robot
from robot_rl.hardware.robot import Command, CommandMode
from robot_rl.hardware.robot_env import RobotEnv

UR_HOME = np.array([0.0, -1.571, 1.571, -1.571, -1.571, 0.0])


class FakeURController:
    """ur_rtde's receive and control interfaces of one UR controller; the arm tracks servo targets at
    once. Every servo/speed call is checked against ur_rtde's documented argument ranges."""

    def __init__(self) -> None:
        self.q = UR_HOME.copy()
        self.tcp = np.array([-0.1333, -0.4921, 0.4877, 0.0, 3.1416, 0.0])
        self.calls: list[str] = []
        self.receive = types.ModuleType("rtde_receive")
        self.receive.RTDEReceiveInterface = lambda host: self
        self.control = types.ModuleType("rtde_control")
        self.control.RTDEControlInterface = lambda host: self

    # RTDEReceiveInterface
    def getActualQ(self):  # noqa: N802  (ur_rtde's names)
        return self.q.tolist()

    def getActualQd(self):  # noqa: N802
        return [0.0] * 6

    def getActualTCPPose(self):  # noqa: N802
        return self.tcp.tolist()

    def isProtectiveStopped(self):  # noqa: N802
        return False

    def isEmergencyStopped(self):  # noqa: N802
        return False

    # RTDEControlInterface
    @staticmethod
    def _check_servo(target, speed, acceleration, time, lookahead_time, gain):
        assert len(target) == 6 and all(np.isfinite(target))
        assert speed == 0.0 and acceleration == 0.0  # unused by servoJ/servoL
        assert time > 0 and 0.03 <= lookahead_time <= 0.2 and 100 <= gain <= 2000

    def servoJ(self, q, speed, acceleration, time, lookahead_time, gain):  # noqa: N802
        self._check_servo(q, speed, acceleration, time, lookahead_time, gain)
        self.q, _ = np.asarray(q, dtype=np.float64), self.calls.append("servoJ")
        return True

    def servoL(self, pose, speed, acceleration, time, lookahead_time, gain):  # noqa: N802
        self._check_servo(pose, speed, acceleration, time, lookahead_time, gain)
        self.tcp, _ = np.asarray(pose, dtype=np.float64), self.calls.append("servoL")
        return True

    def servoStop(self):  # noqa: N802
        self.calls.append("servoStop")

    def stopScript(self):  # noqa: N802
        self.calls.append("stopScript")

    def disconnect(self):
        pass


@pytest.fixture
def ur(monkeypatch):
    fake = FakeURController()
    monkeypatch.setitem(sys.modules, "rtde_receive", fake.receive)
    monkeypatch.setitem(sys.modules, "rtde_control", fake.control)
    return fake


def _ur_env(action: str) -> RobotEnv:
    home = (UR_HOME + 0.1).tolist()  # a few home-motion commands at 0.5 rad/s, 10 Hz
    rcfg = RobotConfig(
        driver="ur",
        address="192.168.1.10",
        action=action,
        reset="none",
        success="operator",
        realtime="never",
        home_joints=home,
        home_timeout_s=1.0,
    )
    cfg = EnvConfig(robot=rcfg, num_envs=1, cameras=[])
    return RobotEnv(make_robot(rcfg, cfg.control_hz), {}, cfg)


def test_ur_env_has_no_gripper_dimension_and_runs_an_episode(ur):
    env = _ur_env("joint_position")
    try:
        assert env.action_space.shape == (6,) and env.observation_space["observation.state"].shape == (6,)
        assert env.feature_names["action"] == [f"{j}.pos" for j in env.robot.limits.joint_names]
        obs, info = env.reset(seed=0)
        assert info["home_steps"] > 0 and obs["observation.state"].shape == (6,)
        np.testing.assert_allclose(ur.q, UR_HOME + 0.1, atol=1e-9)
        target = (UR_HOME + 0.12).astype(np.float32)
        obs, _, _, truncated, info = env.step(target)
        assert not truncated and "robot_error" not in info
        np.testing.assert_allclose(ur.q, target, atol=1e-6)
    finally:
        env.close()

    env = _ur_env("ee_delta")
    try:
        assert env.action_space.shape == (3,)
        env.reset(seed=0)
        before = ur.tcp.copy()
        obs, _, _, truncated, info = env.step(np.array([0.01, 0.0, -0.01], np.float32))
        assert not truncated and "robot_error" not in info
        assert obs["observation.state"].shape == (2 * 6 + 7,)
        np.testing.assert_allclose(ur.tcp[:3] - before[:3], [0.01, 0.0, -0.01], atol=1e-9)
    finally:
        env.close()


def test_gripper_none_is_a_checked_key():
    assert robot_problems(RobotConfig(driver="sim", gripper="none")) == []
    (problem,) = robot_problems(RobotConfig(driver="sim", gripper="off"))
    assert problem.startswith("env.robot.gripper")


class FakeFrankaHand:
    """``franky.Gripper``: the Franka Hand, checked against its datasheet (80 mm stroke, at most 0.1 m/s,
    at most 70 N continuous grasping force)."""

    max_width = 0.08

    def __init__(self, fci_hostname: str) -> None:
        self.width = self.max_width
        self.calls: list[tuple] = []

    def _check(self, width, speed):
        assert 0.0 <= width <= self.max_width and 0.0 < speed <= 0.1

    def move_async(self, width, speed):
        self._check(width, speed)
        self.calls.append(("move", width, speed))
        self.width = width

    def grasp_async(self, width, speed, force, epsilon_inner=0.005, epsilon_outer=0.005):
        self._check(width, speed)
        assert 0.0 < force <= 70.0 and epsilon_inner >= 0 and epsilon_outer >= 0
        self.calls.append(("grasp", width, speed, force, epsilon_outer))


class FakeFrankyRobot:
    """``franky.Robot`` at the FCI: records its constructor's ``realtime_config`` and the motions."""

    made: list[FakeFrankyRobot] = []

    def __init__(self, fci_hostname: str, **kwargs) -> None:
        import franky

        self.realtime_config = kwargs.get("realtime_config", franky.RealtimeConfig.Enforce)
        self.relative_dynamics_factor = 1.0
        self.motions: list = []
        FakeFrankyRobot.made.append(self)

    def move(self, motion, asynchronous: bool = False):
        import franky

        assert isinstance(motion, franky.Motion) and asynchronous
        self.motions.append(motion)

    def stop(self):
        pass


@pytest.fixture
def franky_fakes(monkeypatch):
    franky = pytest.importorskip("franky")
    FakeFrankyRobot.made = []
    hands: list[FakeFrankaHand] = []

    def hand(host):
        hands.append(FakeFrankaHand(host))
        return hands[-1]

    monkeypatch.setattr(franky, "Robot", FakeFrankyRobot)
    monkeypatch.setattr(franky, "Gripper", hand)
    return franky, hands


def test_franka_realtime_config_is_a_key(franky_fakes):
    franky, _ = franky_fakes
    for value, expected in (
        ("enforce", franky.RealtimeConfig.Enforce),
        ("ignore", franky.RealtimeConfig.Ignore),
    ):
        robot = make_robot(RobotConfig(driver="franka", address="172.16.0.2", franka_realtime=value))
        robot.connect()
        assert FakeFrankyRobot.made[-1].realtime_config == expected
        robot.disconnect()
    bad = RobotConfig(driver="franka", address="172.16.0.2", franka_realtime="off")
    assert any(p.startswith("env.robot.franka_realtime") for p in robot_problems(bad))
    with pytest.raises(ValueError, match="env.robot.franka_realtime='off'"):
        make_robot(bad)


def test_franka_closing_grasps_with_force_once(franky_fakes):
    _, hands = franky_fakes
    robot = make_robot(RobotConfig(driver="franka", address="172.16.0.2", grasp_force_n=30.0))
    robot.connect()
    q = np.array([0.0, -0.5, 0.0, -2.0, 0.0, 1.5, 0.8])
    for grip in (0.0, 0.0, 1.0, 1.0, 1.0, 0.2, 0.2):  # 10 Hz commands: open, close and hold, open a bit
        robot.command(Command(CommandMode.JOINT_POSITION, q, grip))
    assert hands[0].calls == [
        ("move", pytest.approx(0.08), 0.1),
        ("grasp", 0.0, 0.1, 30.0, 0.08),
        ("move", pytest.approx(0.064), 0.1),
    ]
    robot.disconnect()
    with pytest.raises(ValueError, match="env.robot.grasp_force_n=100"):
        make_robot(RobotConfig(driver="franka", address="172.16.0.2", grasp_force_n=100.0))
