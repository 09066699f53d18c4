"""Forward kinematics of the vendor arms from their published D-H tables
(robot_rl.hardware.drivers.dh_kinematics), checked against models made independently of them: the MuJoCo
Panda of the simulated tasks (MuJoCo Menagerie's model, built from Franka's URDF) and UR's closed-form
zero pose."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl.hardware.drivers.dh_kinematics import FRANKA, MAX_TOOL_M, UR_MODELS, tool_offset
from robot_rl.hardware.sim_robot import MujocoRobot


def test_franka_table_matches_the_mujoco_panda_everywhere():
    robot = MujocoRobot(seed=0)
    with robot:
        state = robot.read()
        tool = tool_offset(FRANKA, state.joint_pos, state.ee_pos, robot.name)
        # the sim's pinch site sits on the flange's axis: the hand (0.1034 m) plus the fingertips
        np.testing.assert_allclose(tool[:2], 0.0, atol=1e-9)
        assert 0.1 < tool[2] < 0.2
        rng = np.random.default_rng(0)
        for _ in range(50):
            q = rng.uniform(robot.limits.joint_low, robot.limits.joint_high)
            np.testing.assert_allclose(FRANKA.tcp(q, tool), robot.forward_kinematics(q), atol=1e-9)


@pytest.mark.parametrize("model", sorted(UR_MODELS))
def test_ur_tables_give_the_closed_form_zero_pose(model):
    """At all-zero joints a UR lies stretched along -x: its flange is at (a2 + a3, -(d4 + d6), d1 - d5)
    (UR's D-H diagram), pointing along -y."""
    chain = UR_MODELS[model]
    (_, d1, _), (a2, _, _), (a3, _, _), (_, d4, _), (_, d5, _), (_, d6, _) = chain.rows
    pose = chain.flange(np.zeros(6))
    np.testing.assert_allclose(pose[:3, 3], [a2 + a3, -(d4 + d6), d1 - d5], atol=1e-12)
    np.testing.assert_allclose(pose[:3, 2], [0.0, -1.0, 0.0], atol=1e-12)


def test_a_tool_longer_than_a_tool_is_a_model_that_does_not_fit():
    q = np.zeros(6)
    far = UR_MODELS["ur5e"].flange(q)[:3, 3] + [0.0, 0.0, MAX_TOOL_M + 0.05]
    with pytest.raises(ValueError, match=r"ur@h: the ur5e kinematic model puts the flange 0\.450 m from"):
        tool_offset(UR_MODELS["ur5e"], q, far, "ur@h")
    with pytest.raises(ValueError, match="6 joint positions for a 7-joint arm"):
        FRANKA.flange(np.zeros(6))
