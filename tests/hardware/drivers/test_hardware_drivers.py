"""Vendor arm drivers (UR, xArm, Franka) as far as their real SDKs go without a controller: construction,
unit conversion on recorded traces in each vendor's units, limit checks, building each franky motion, and
the connection error against a closed port on localhost (each SDK fails at once there: no hang)."""

import math
import sys

import numpy as np
import pytest

from robot_rl.config import RobotConfig
from robot_rl.config_checks import robot_problems
from robot_rl.hardware.drivers import arm_common
from robot_rl.hardware.errors import CommandRejected, MissingExtraError, RobotConnectionError
from robot_rl.hardware.factory import make_robot
from robot_rl.hardware.robot import Command, CommandMode

rng = np.random.default_rng(0)


def _same_rotation(q1, q2):
    return abs(abs(float(np.dot(q1, q2))) - 1.0) < 1e-9


def test_rotation_conversions_round_trip():
    for _ in range(200):
        axis = rng.normal(size=3)
        rotvec = axis / np.linalg.norm(axis) * rng.uniform(0, math.pi - 1e-3)
        quat = arm_common.quat_from_rotvec(rotvec)
        assert np.linalg.norm(quat) == pytest.approx(1.0)
        np.testing.assert_allclose(arm_common.rotvec_from_quat(quat), rotvec, atol=1e-9)
        rpy = rng.uniform([-math.pi, -math.pi / 2 + 1e-3, -math.pi], [math.pi, math.pi / 2 - 1e-3, math.pi])
        np.testing.assert_allclose(arm_common.rpy_from_quat(arm_common.quat_from_rpy(rpy)), rpy, atol=1e-9)
    # roll pi about x: the tool pointing down
    assert _same_rotation(arm_common.quat_from_rpy([math.pi, 0, 0]), np.array([0.0, 1, 0, 0]))
    # an ee_delta rotation about base z composes on the left
    pos, quat = arm_common.apply_ee_delta(
        np.zeros(3), np.array([1.0, 0, 0, 0]), np.array([0.1, 0, 0, 0, 0, 0.5])
    )
    np.testing.assert_allclose(pos, [0.1, 0, 0])
    assert _same_rotation(quat, arm_common.quat_from_rpy([0, 0, 0.5]))


def test_vendor_addresses_are_checked_at_config_and_construction():
    for driver in ("ur", "xarm", "franka"):
        bad = RobotConfig(driver=driver)  # the default address is the sim server's tcp://127.0.0.1:5570
        assert any("env.robot.address" in p and driver in p for p in robot_problems(bad))
        with pytest.raises(ValueError, match=rf"env.robot.address='tcp://127.0.0.1:5570': driver {driver}"):
            make_robot(bad)
        assert robot_problems(RobotConfig(driver=driver, address="192.168.1.10")) == []


# UR: joints and TCP poses in ur_rtde's units (getActualQ rad, getActualTCPPose m + rotation vector) at
# 10 Hz, for the unit conversion and limit checks only: the TCP column was not recorded from an arm and does
# not follow the UR5e's kinematics (tests/hardware/drivers/test_dh_kinematics.py checks those)
UR_Q = np.array(
    [
        [0.000, -1.571, 1.571, -1.571, -1.571, 0.000],
        [0.012, -1.561, 1.552, -1.562, -1.571, 0.004],
        [0.031, -1.540, 1.519, -1.549, -1.570, 0.010],
        [0.055, -1.514, 1.480, -1.536, -1.569, 0.018],
    ]
)
UR_TCP = np.array(
    [
        [-0.1333, -0.4921, 0.4877, 0.0000, 3.1416, 0.0000],
        [-0.1391, -0.4902, 0.4810, 0.0101, 3.1380, -0.0153],
        [-0.1480, -0.4870, 0.4702, 0.0240, 3.1321, -0.0402],
        [-0.1597, -0.4821, 0.4561, 0.0411, 3.1257, -0.0707],
    ]
)


def test_ur_trace_conversion_and_limits():
    from robot_rl.hardware.drivers.ur import URRobot, pose_to_si, si_to_pose

    robot = make_robot(RobotConfig(driver="ur", address="tcp://192.168.1.10"))
    assert isinstance(robot, URRobot) and robot.host == "192.168.1.10" and not robot.is_connected
    limits = robot.limits
    for q, tcp in zip(UR_Q, UR_TCP, strict=True):
        pos, quat = pose_to_si(tcp)
        assert np.linalg.norm(quat) == pytest.approx(1.0)
        back = si_to_pose(pos, quat)
        np.testing.assert_allclose(back[:3], tcp[:3])
        assert _same_rotation(arm_common.quat_from_rotvec(back[3:]), quat)
        arm_common.check_joint_targets(q, limits, robot.name)
    speeds = np.diff(UR_Q, axis=0) * limits.control_hz
    for qd in speeds:
        arm_common.check_joint_speeds(qd, limits, robot.name)
    too_far = UR_Q[-1].copy()
    too_far[2] = 6.5
    with pytest.raises(CommandRejected, match=r"ur@192.168.1.10: joint elbow target 6.5000 rad outside"):
        arm_common.check_joint_targets(too_far, limits, robot.name)
    with pytest.raises(CommandRejected, match=r"joint wrist3 speed -4.0000 rad/s beyond its limit 3.1416"):
        arm_common.check_joint_speeds(np.array([0, 0, 0, 0, 0, -4.0]), limits, robot.name)


# xArm 7: a recorded trace in the SDK's default units (get_servo_angle deg, get_position mm + rpy deg,
# get_gripper_position pulses)
XARM_DEG = np.array(
    [
        [0.0, -30.0, 0.0, 60.0, 0.0, 90.0, 0.0],
        [1.5, -28.8, 0.4, 61.2, 0.1, 90.3, -0.6],
        [3.2, -27.1, 0.9, 62.9, 0.2, 90.8, -1.3],
    ]
)
XARM_POSE = np.array(
    [
        [300.0, 0.0, 200.0, 180.0, 0.0, 0.0],
        [301.4, 7.9, 197.5, 179.2, -0.4, 1.5],
        [303.1, 16.8, 194.2, 178.1, -0.9, 3.2],
    ]
)
XARM_GRIPPER = np.array([850.0, 425.0, 0.0])


def test_xarm_trace_conversion_and_limits():
    pytest.importorskip("xarm")
    from robot_rl.hardware.drivers import xarm

    robot = xarm.XArmRobot("192.168.1.185", model=(7, 7))  # xArm 7, device type XARM7_X4
    limits = robot.limits
    assert limits.num_joints == 7
    np.testing.assert_allclose(
        np.rad2deg([limits.joint_low[3], limits.joint_high[3]]), [-11.0, 225.0], atol=0.01
    )
    for deg, pose, pulses in zip(XARM_DEG, XARM_POSE, XARM_GRIPPER, strict=True):
        rad = xarm.joints_to_si(deg)
        np.testing.assert_allclose(rad, deg * math.pi / 180)
        np.testing.assert_allclose(xarm.si_to_joints(rad), deg)
        arm_common.check_joint_targets(rad, limits, robot.name)
        pos, quat = xarm.pose_to_si(pose)
        np.testing.assert_allclose(pos, pose[:3] / 1000.0)
        back = xarm.si_to_pose(pos, quat)
        np.testing.assert_allclose(back[:3], pose[:3])
        assert _same_rotation(xarm.pose_to_si(back)[1], quat)  # roll 180 and -180 are one rotation
        assert xarm.si_to_gripper(xarm.gripper_to_si(pulses)) == pytest.approx(pulses)
    assert _same_rotation(xarm.pose_to_si(XARM_POSE[0])[1], np.array([0.0, 1, 0, 0]))  # tool down
    assert xarm.gripper_to_si(850.0) == 0.0 and xarm.gripper_to_si(0.0) == 1.0
    np.testing.assert_allclose(xarm.twist_to_xarm([0.1, 0, -0.05, 0, 0, math.pi]), [100, 0, -50, 0, 0, 180])
    speeds = np.diff(xarm.joints_to_si(XARM_DEG), axis=0) * limits.control_hz
    for qd in speeds:
        arm_common.check_joint_speeds(qd, limits, robot.name)
    below = xarm.joints_to_si(XARM_DEG[0])
    below[3] = math.radians(-20.0)
    with pytest.raises(CommandRejected, match=r"xarm@192.168.1.185: joint J4 target -0.3491 rad outside"):
        arm_common.check_joint_targets(below, limits, robot.name)
    lite6 = xarm.xarm_limits(6, xarm.LITE6_DEVICE_TYPE, 10.0)
    assert math.degrees(lite6.joint_low[2]) == pytest.approx(-3.5, abs=0.01) and lite6.ee_high[0] == 0.44
    with pytest.raises(RobotConnectionError, match="no joint limits for axis=7 device_type=99"):
        xarm.XArmRobot("192.168.1.185", model=(7, 99))


# Franka: a recorded trace in franky's units (joint positions rad, end_effector_pose with (x, y, z, w))
FRANKA_Q = np.array(
    [
        [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785],
        [0.02, -0.770, 0.01, -2.340, 0.0, 1.575, 0.790],
    ]
)
FRANKA_POSE = [
    (np.array([0.307, 0.0, 0.487]), np.array([1.0, 0.0, 0.0, 0.0])),
    (np.array([0.312, 0.006, 0.480]), np.array([0.9998, 0.0175, 0.0, 0.0])),
]


def test_franka_trace_conversion_limits_and_motions():
    franky = pytest.importorskip("franky")
    from robot_rl.hardware.drivers import franka

    robot = make_robot(RobotConfig(driver="franka", address="172.16.0.2"))
    assert isinstance(robot, franka.FrankaRobot) and robot.limits.num_joints == 7
    for q, (t, q_xyzw) in zip(FRANKA_Q, FRANKA_POSE, strict=True):
        arm_common.check_joint_targets(q, robot.limits, robot.name)
        wxyz = franka.quat_to_si(q_xyzw)
        assert wxyz[0] == q_xyzw[3] and np.allclose(franka.si_to_quat(wxyz), q_xyzw)
        affine = franky.Affine(t, franka.si_to_quat(wxyz / np.linalg.norm(wxyz)))
        assert _same_rotation(franka.quat_to_si(affine.quaternion), wxyz / np.linalg.norm(wxyz))
    bent = FRANKA_Q[0].copy()
    bent[3] = 0.0  # joint 4 must stay below -0.0698 rad
    with pytest.raises(CommandRejected, match="franka@172.16.0.2: joint panda_joint4 target 0.0000 rad"):
        arm_common.check_joint_targets(bent, robot.limits, robot.name)
    # every mode's franky motion builds from our arguments (the SDK checks types and shapes)
    target = (FRANKA_POSE[0][0], franka.quat_to_si(FRANKA_POSE[0][1]))
    built = {
        CommandMode.JOINT_POSITION: franka.make_motion(franky, CommandMode.JOINT_POSITION, FRANKA_Q[0], 10.0),
        CommandMode.JOINT_VELOCITY: franka.make_motion(franky, CommandMode.JOINT_VELOCITY, np.zeros(7), 10.0),
        CommandMode.EE_VELOCITY: franka.make_motion(franky, CommandMode.EE_VELOCITY, np.zeros(6), 10.0),
        CommandMode.EE_DELTA: franka.make_motion(franky, CommandMode.EE_DELTA, np.zeros(3), 10.0, target),
    }
    assert isinstance(built[CommandMode.EE_DELTA], franky.CartesianImpedanceTrackingMotion)
    np.testing.assert_allclose(built[CommandMode.EE_DELTA].get_reference().target.translation, target[0])
    assert isinstance(built[CommandMode.JOINT_POSITION], franky.JointMotion)


@pytest.mark.parametrize(
    ("driver", "module", "what"),
    [
        ("ur", "rtde_receive", "UR controller"),
        ("xarm", "xarm", "xArm control box"),
        ("franka", "franky", "Franka"),
    ],
)
def test_unreachable_controller_names_its_address(driver, module, what):
    pytest.importorskip(module)
    robot = make_robot(RobotConfig(driver=driver, address="127.0.0.1"))  # nothing listens on its ports
    with pytest.raises(RobotConnectionError, match="not connected"):
        robot.command(
            Command(CommandMode.JOINT_POSITION, np.zeros(robot.limits.num_joints if driver != "xarm" else 7))
        )
    with pytest.raises(
        RobotConnectionError, match=rf"{driver}@127.0.0.1: cannot connect to the {what} at 127.0.0.1"
    ):
        robot.connect()
    assert not robot.is_connected
    robot.disconnect()  # safe after a failed connect


@pytest.mark.parametrize(
    ("driver", "module", "extra"),
    [("ur", "rtde_receive", "ur"), ("xarm", "xarm.wrapper", "xarm"), ("franka", "franky", "franka")],
)
def test_missing_sdk_names_the_extra(monkeypatch, driver, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # what an environment without the extra looks like
    robot = make_robot(RobotConfig(driver=driver, address="127.0.0.1"))
    with pytest.raises(
        MissingExtraError,
        match=rf"env.robot.driver={driver} needs {module}: pip install 'robot-rl\[{extra}\]'",
    ):
        robot.connect()
