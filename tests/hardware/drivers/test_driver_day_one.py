"""Each vendor arm driver's first session with a real controller, against fakes of the vendor SDK objects
that cannot exist here (no controller in CI): each fake keeps the vendor's API and checks every call
against the vendor's documented limits, and the driver code above it is the real one.

- UR: ``rtde_receive`` / ``rtde_control`` (ur_rtde's documented servoJ/servoL ranges); a ``RobotEnv`` on a
  UR runs its home motion and steps without a gripper.
- xArm: ``xarm.wrapper.XArmAPI`` (UFACTORY's servo-mode guide: setpoints only in mode 1, at most 10 mm
  apart, 100-250 Hz); the SDK's joint-limit table is the real one.
- Franka: ``franky.Robot`` / ``franky.Gripper`` (the Franka Hand's datasheet: 80 mm stroke, 0.1 m/s,
  70 N continuous force); the rest of franky (motions, ``RealtimeConfig``) is the real wheel.
"""

from __future__ import annotations

import sys
import time
import types

import numpy as np
import pytest
from waits import wait_until

from robot_rl.config import EnvConfig, RobotConfig
from robot_rl.config_checks import robot_problems
from robot_rl.hardware.factory import make_robot
from robot_rl.hardware.robot import Command, CommandMode
from robot_rl.hardware.robot_env import RobotEnv

UR_HOME = np.array([0.0, -1.571, 1.571, -1.571, -1.571, 0.0])


def ur5e_tcp(q: np.ndarray) -> np.ndarray:
    """A UR5e's TCP pose ``[x, y, z, rx, ry, rz]`` (m, rotation vector) at joints ``q`` with a zero tool
    offset: the flange of UR's published D-H table."""
    from robot_rl.hardware.drivers.arm_common import rotvec_from_quat
    from robot_rl.hardware.drivers.dh_kinematics import UR_MODELS
    from robot_rl.hardware.drivers.so101_model import matrix_to_quat

    pose = UR_MODELS["ur5e"].flange(q)
    return np.concatenate([pose[:3, 3], rotvec_from_quat(matrix_to_quat(pose[:3, :3]))])


class FakeURController:
    """ur_rtde's receive and control interfaces of one UR5e controller (no tool offset); the arm tracks
    servo targets at once (a ``servoJ`` moves the TCP to the targets' pose). Every servo/speed call is
    checked against ur_rtde's documented argument ranges."""

    def __init__(self) -> None:
        self.q = UR_HOME.copy()
        self.tcp = ur5e_tcp(self.q)
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
        self.tcp = ur5e_tcp(self.q)
        return True

    def servoL(self, pose, speed, acceleration, time, lookahead_time, gain):  # noqa: N802
        self._check_servo(pose, speed, acceleration, time, lookahead_time, gain)
        self.tcp, _ = np.asarray(pose, dtype=np.float64), self.calls.append("servoL")
        return True

    def servoStop(self):  # noqa: N802
        self.calls.append("servoStop")

    def triggerProtectiveStop(self):  # noqa: N802
        self.calls.append("triggerProtectiveStop")
        return True

    def setWatchdog(self, min_frequency):  # noqa: N802
        assert min_frequency > 0
        self.calls.append(f"setWatchdog {min_frequency:g}")
        return True

    def kickWatchdog(self):  # noqa: N802
        self.calls.append("kickWatchdog")
        return True

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


def test_a_ur_demo_records_with_a_teleop_device_and_no_gripper(ur):
    """Before: every teleop device refused the (3,) action box ("d >= 4"), and recording latched the last
    xyz step as if it were the gripper when the operator let go."""
    from robot_rl.config import InterventionConfig
    from robot_rl.recording import record_episode
    from robot_rl.runtime.intervention import HumanInput
    from robot_rl.teleop.command import ActionMapper, DeviceCommand

    class Pad:  # a held pad: full +x for 3 steps, then let go, then the success label
        def __init__(self, low, high) -> None:
            self.mapper, self.polls = ActionMapper(low, high, InterventionConfig().scale), 0

        def reset(self, env_seed: int) -> None:
            self.polls = 0

        def close(self) -> None:
            pass

        def poll(self, obs) -> HumanInput:
            self.polls += 1
            if self.polls > 5:
                return HumanInput(None, "success")
            return self.mapper(DeviceCommand(np.array([1.0, 0.0, 0.0]), 1.0, self.polls <= 3))

    env = _ur_env("ee_delta")
    try:
        frames, summary = record_episode(env, Pad(env.action_space.low, env.action_space.high), seed=0)
    finally:
        env.close()
    actions = frames["action"]
    assert actions.shape == (5, 3) and summary["label"] == "success"
    assert np.all(actions[:3, 0] > 0) and np.all(actions[3:] == 0.0), actions  # let go: hold, no grip


def test_an_estop_triggers_the_urs_protective_stop_then_sends_nothing(ur, tmp_path):
    """Before: an e-stop only streamed hold targets (a request the controller keeps acting on only while
    this process lives) and no robot-side watchdog was set; now the controller's own protective stop, no
    command while latched, and ur_rtde's watchdog armed at connect and fed by every command."""
    from robot_rl.config import SafetyConfig
    from robot_rl.hardware.errors import CommandRejected
    from robot_rl.hardware.safety import SafeRobot

    rcfg = RobotConfig(driver="ur", address="192.168.1.10")
    log = tmp_path / "faults.jsonl"
    robot = SafeRobot(make_robot(rcfg, 10.0), SafetyConfig(estop_signal="", fault_log=str(log)))
    robot.connect()
    try:
        robot.command(Command(CommandMode.JOINT_POSITION, UR_HOME + 0.01, None, time.monotonic()))
        robot.estop("test")
        # the controller's own watchdog is armed at connect and fed with every command
        assert ur.calls[:3] == ["setWatchdog 1", "kickWatchdog", "servoJ"], ur.calls[:3]
        wait_until(lambda: "triggerProtectiveStop" in ur.calls)
        assert "triggerProtectiveStop" in ur.calls, ur.calls[-5:]
        after = len(ur.calls)
        time.sleep(0.5)  # five control periods: the watchdog thread would have held five times
        assert ur.calls[after - 1 :] == ["triggerProtectiveStop"], ur.calls[after - 1 :]
        with pytest.raises(CommandRejected, match="e-stop latched"):
            robot.command(Command(CommandMode.JOINT_POSITION, UR_HOME, None, time.monotonic()))
        assert "the controller's own stop was triggered" in log.read_text()
    finally:
        robot.disconnect()


def test_joint_commands_keep_the_urs_tcp_in_the_box_by_its_published_kinematics(ur):
    """Before: the UR driver had no kinematic model, so joint commands were never checked against the box
    (the layer could only react once the measured TCP was already out). Now the UR5e's D-H table is its
    forward kinematics: a joint target that would take the TCP out of the box is shortened to stay in."""
    from robot_rl.config import SafetyConfig
    from robot_rl.hardware.safety import SafeRobot

    start = ur.tcp[:3]
    box = SafetyConfig(
        workspace_low=(start - [0.05, 0.05, 0.05]).tolist(),
        workspace_high=(start + [0.05, 0.05, 0.02]).tolist(),  # 2 cm of room above the TCP
        estop_signal="",
        watchdog_ms=0,
    )
    robot = SafeRobot(make_robot(RobotConfig(driver="ur", address="192.168.1.10"), 10.0), box)
    with robot:
        np.testing.assert_allclose(robot.forward_kinematics(UR_HOME), start, atol=1e-9)
        up = UR_HOME.copy()
        up[1] -= 0.3  # the shoulder lifts the arm: the TCP would rise about 15 cm
        for _ in range(40):
            robot.command(Command(CommandMode.JOINT_POSITION, up, None, time.monotonic()))
        assert robot.counters.clipped > 0
        assert ur.tcp[2] <= box.workspace_high[2] + 1e-6 and ur.tcp[2] > start[2] + 0.015  # up to the lid
    problems = robot_problems(RobotConfig(driver="ur", address="192.168.1.10", ur_model="ur7"))
    assert any("env.robot.ur_model='ur7'" in p for p in problems)


def test_a_kinematic_model_that_does_not_fit_the_arm_is_one_line(ur):
    """A UR10e's table on a UR5e: at the first pose the difference passes for a 25 cm tool, but once the
    joints move the modelled TCP is centimetres off the reported one, and reading the arm is a fault."""
    from robot_rl.hardware.errors import RobotFault

    robot = make_robot(RobotConfig(driver="ur", address="192.168.1.10", ur_model="ur10e"), 10.0)
    robot.connect()
    try:
        robot.forward_kinematics(UR_HOME)  # the tool offset is measured at the first pose
        q = UR_HOME.copy()
        for _ in range(5):  # the shoulder and elbow move 0.15 rad each, within the speed limit
            q[1:3] += [-0.03, 0.03]
            robot.command(Command(CommandMode.JOINT_POSITION, q, None, time.monotonic()))
        with pytest.raises(
            RobotFault, match=r"ur@192\.168\.1\.10: the ur10e kinematic model is 0\.\d+ m from"
        ):
            robot.read()
    finally:
        robot.disconnect()


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
    robot = make_robot(RobotConfig(driver="franka", address="172.16.0.2"))
    robot.connect()
    q = np.array([0.0, -0.5, 0.0, -2.0, 0.0, 1.5, 0.8])
    for grip in (0.0, 0.0, 1.0, 1.0, 1.0, 0.2, 0.2):  # 10 Hz commands: open, close and hold, open a bit
        robot.command(Command(CommandMode.JOINT_POSITION, q, grip))
    assert hands[0].calls == [
        ("move", pytest.approx(0.08), 0.1),
        ("grasp", 0.0, 0.1, 20.0, 0.08),  # the default env.robot.grasp_force_n
        ("move", pytest.approx(0.064), 0.1),
    ]
    robot.disconnect()
    assert (
        make_robot(RobotConfig(driver="franka", address="172.16.0.2", grasp_force_n=30.0)).grasp_force == 30.0
    )
    with pytest.raises(ValueError, match="env.robot.grasp_force_n=100"):
        make_robot(RobotConfig(driver="franka", address="172.16.0.2", grasp_force_n=100.0))


class FakeXArm:
    """``xarm.wrapper.XArmAPI`` of an xArm 7 control box whose arm reaches each servo setpoint at once.
    Every servo call is checked against UFACTORY's servo-mode guide (mode 1 set and state 0, setpoints at
    most 10 mm apart: a farther one is not executed); breaches go to :attr:`violations`."""

    def __init__(self) -> None:
        self.connected, self.axis, self.device_type = True, 7, 7
        self.has_error, self.error_code = False, 0
        self.mode, self.state = 0, 0
        self.angles = np.array([0.0, -30.0, 0.0, 60.0, 0.0, 90.0, 0.0])  # deg
        self.pose = np.array([300.0, 0.0, 200.0, 180.0, 0.0, 0.0])  # mm, deg
        self.sent: list[tuple[float, np.ndarray]] = []
        self.violations: list[str] = []
        self.module = types.ModuleType("xarm.wrapper")
        self.module.XArmAPI = lambda host, is_radian: self

    def motion_enable(self, enable):
        return 0

    def set_gripper_mode(self, mode):
        return 0

    def set_gripper_enable(self, enable):
        return 0

    def set_mode(self, mode):
        self.mode, self.state = mode, 3  # a new mode waits for set_state(0)
        return 0

    def set_state(self, state):
        self.state = state
        return 0

    def disconnect(self):
        pass

    def get_joint_states(self, is_radian=False):
        return 0, [self.angles.tolist(), [0.0] * 7, [0.0] * 7]

    def get_position(self, is_radian=False):
        return 0, self.pose.tolist()

    def get_gripper_position(self):
        return 0, 850.0

    def _servo(self, what, value):
        if (self.mode, self.state) != (1, 0):
            self.violations.append(f"{what} in mode {self.mode} state {self.state}")
        self.sent.append((time.monotonic(), np.asarray(value, dtype=np.float64)))

    def set_servo_cartesian(self, mvpose, is_radian=False):
        step = float(np.linalg.norm(np.asarray(mvpose[:3]) - self.pose[:3]))
        if step > 10.0:
            self.violations.append(f"set_servo_cartesian {step:.1f} mm from the last setpoint")
        self._servo("set_servo_cartesian", mvpose)
        self.pose = np.asarray(mvpose, dtype=np.float64)
        return 0

    def set_servo_angle_j(self, angles, is_radian=False):
        self._servo("set_servo_angle_j", angles)
        self.angles = np.asarray(angles, dtype=np.float64)
        return 0


@pytest.fixture
def xarm_box(monkeypatch):
    pytest.importorskip("xarm")
    fake = FakeXArm()
    monkeypatch.setitem(sys.modules, "xarm.wrapper", fake.module)
    return fake


def test_xarm_servo_mode_streams_near_setpoints_fast_at_capped_speed(xarm_box):
    from robot_rl.hardware.drivers import xarm

    robot = make_robot(RobotConfig(driver="xarm", address="192.168.1.185"), control_hz=10.0)
    robot.connect()
    try:
        assert robot.limits.ee_step_max <= 0.025 + 1e-12  # 10 Hz targets at most 25 mm apart
        for _ in range(3):  # 10 Hz ee_delta targets 20 mm apart
            robot.command(Command(CommandMode.EE_DELTA, np.array([0.02, 0.0, 0.0])))
            time.sleep(0.1)
        wait_until(lambda: abs(xarm_box.pose[0] - 360.0) < 1e-6)
        np.testing.assert_allclose(xarm_box.pose[:3], [360.0, 0.0, 200.0], atol=1e-6)
        times = np.array([t for t, _ in xarm_box.sent])
        steps = np.linalg.norm(np.diff([p[:3] for _, p in xarm_box.sent], axis=0), axis=1)
        assert len(steps) >= 40 and np.median(np.diff(times)) <= 0.010  # >= 100 Hz while moving
        assert steps.max() <= 1000 * xarm.SERVO_LINEAR_SPEED / xarm.STREAM_HZ + 1e-6  # 0.25 m/s cap (mm)

        xarm_box.sent.clear()
        target = np.deg2rad(xarm_box.angles) + np.array([0.2, 0, 0, 0, 0, 0, 0])
        robot.command(Command(CommandMode.JOINT_POSITION, target))
        wait_until(lambda: abs(np.deg2rad(xarm_box.angles[0]) - target[0]) < 1e-9)
        np.testing.assert_allclose(np.deg2rad(xarm_box.angles), target, atol=1e-9)
        joint_steps = np.abs(np.diff([np.deg2rad(a) for _, a in xarm_box.sent], axis=0))
        assert len(joint_steps) >= 30
        assert joint_steps.max() <= xarm.SERVO_JOINT_SPEED / xarm.STREAM_HZ + 1e-9  # 1 rad/s cap
    finally:
        robot.disconnect()
    assert xarm_box.violations == []
