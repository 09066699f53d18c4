"""The Robot interface's command checks and the in-process sim-backed Panda (real MuJoCo)."""

import numpy as np
import pytest

from robot_rl.hardware.errors import CommandRejected, RobotConnectionError
from robot_rl.hardware.robot import Command, CommandMode, check_command
from robot_rl.hardware.sim_robot import MujocoRobot


@pytest.mark.parametrize(
    "cmd",
    [
        Command(CommandMode.EE_DELTA, np.array([0.0, np.nan, 0.0])),
        Command(CommandMode.EE_DELTA, np.zeros(4)),
        Command(CommandMode.JOINT_POSITION, np.zeros(6)),
        Command(CommandMode.EE_VELOCITY, np.zeros(6)),
        Command(CommandMode.EE_DELTA, np.zeros(3), gripper=1.5),
    ],
)
def test_check_command_rejects_bad_commands(cmd):
    with pytest.raises(CommandRejected, match="arm"):
        check_command(cmd, (CommandMode.EE_DELTA, CommandMode.JOINT_POSITION), 7, "arm")


def test_sim_robot_moves_down_and_closes_gripper():
    robot = MujocoRobot(seed=0)
    with pytest.raises(RobotConnectionError, match="not connected"):
        robot.read()
    with robot:
        start = robot.read()
        assert start.joint_pos.shape == (7,) and start.extra["environment_state"].shape == (7,)
        for _ in range(5):
            robot.command(Command(CommandMode.EE_DELTA, np.array([0.0, 0.0, -0.02]), gripper=1.0))
        end = robot.read()
    assert end.ee_pos[2] < start.ee_pos[2] - 0.05
    assert end.gripper > 0.5 and end.timestamp > start.timestamp


def test_factory_names_unknown_driver_and_builds_sim():
    from robot_rl.config import RobotConfig
    from robot_rl.hardware.factory import make_robot

    with pytest.raises(ValueError, match="env.robot.driver"):
        make_robot(RobotConfig(driver="kuka"))
    assert isinstance(make_robot(RobotConfig(driver="sim")), MujocoRobot)
