"""An arm's kinematics from the project's own MuJoCo model of it, for a ROS 2 arm that publishes only its
joint states (a stock ros2_control driver publishes no end-effector pose topic): the end-effector pose from
the measured joints, and joint targets for an end-effector move (inverse kinematics) without MoveIt Servo.

``panda``: the Franka Panda of the pick-cube scene (:func:`robot_rl.sim.assets.load_model`, the MJCF the
simulator and ``sim_robot_node`` run), end effector its ``pinch`` site (between the fingertips), base frame
its ``link0``; the arm joints are taken in order (``env.robot.ros2.joint_names`` ``panda_joint1..7`` map
to the model's ``joint1..7``). Inverse kinematics is the simulator's own damped least squares
(:class:`robot_rl.sim.controller.DiffIKController`): position target, gripper pointing down, null-space
pull towards the simulator's home posture, joint limits less 0.05 rad.
"""

from __future__ import annotations

import mujoco
import numpy as np

from robot_rl.config import ROS2_KINEMATICS
from robot_rl.sim.assets import load_model
from robot_rl.sim.controller import ARM_JOINTS, DiffIKController
from robot_rl.sim.panda_base import ARM_GUESS, DOWN_QUAT

IK_ITERATIONS = 10
"""Gauss-Newton iterations per :meth:`ArmKinematics.solve` (from the measured joints, 3 cm steps)."""


class ArmKinematics:
    """Forward and inverse kinematics of model ``name`` (module doc).

    Raises:
        ValueError: ``name`` is not a model of ``ROS2_KINEMATICS`` (``none`` is none).
    """

    def __init__(self, name: str) -> None:
        if name == "none" or name not in ROS2_KINEMATICS:
            raise ValueError(f"env.robot.ros2.kinematics={name!r}: no such arm model; {ROS2_KINEMATICS[1:]}")
        self.model = load_model()
        self._data = mujoco.MjData(self.model)
        self._qpos_adr = np.array([self.model.joint(j).qposadr[0] for j in ARM_JOINTS])
        self._site = self.model.site("pinch").id
        self._ik = DiffIKController(self.model, ARM_GUESS, DOWN_QUAT, iterations=IK_ITERATIONS)
        self.num_joints = len(ARM_JOINTS)

    def pose(self, joint_pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """End-effector ``(position (3,) m, quaternion (4,) w, x, y, z)`` in the base frame at arm joint
        positions ``joint_pos`` (7,) rad.

        Raises:
            ValueError: ``joint_pos`` is not 7 values (from numpy).
        """
        d = self._data
        d.qpos[self._qpos_adr] = joint_pos
        mujoco.mj_kinematics(self.model, d)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, d.site_xmat[self._site])
        return d.site_xpos[self._site].copy(), quat

    def solve(self, joint_pos: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Joint positions (7,) rad, within the model's limits less 0.05 rad, that put the end effector at
        ``target`` (3,) m (base frame) pointing down, starting from ``joint_pos`` (7,) rad (the measured
        joints: the solution stays on their branch). A target out of reach gives the nearest posture found.
        """
        qpos = self._data.qpos.copy()
        qpos[self._qpos_adr] = joint_pos
        return self._ik.solve(qpos, np.asarray(target, dtype=np.float64))
