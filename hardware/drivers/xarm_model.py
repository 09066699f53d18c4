"""xArm 7 kinematics: UFACTORY's published modified D-H parameters, joint limits, link masses, forward
kinematics and a numeric inverse, shared by the driver (:mod:`robot_rl.hardware.drivers.xarm`, to check
joint commands against the workspace box) and the controller emulator's MuJoCo arm
(:mod:`robot_rl_testing.xarm_emulator`).

Source: UFACTORY, "Kinematic and Dynamic Parameters of xArm 7" (docs.ufactory.cc, the ``ufactory_docs``
repository, ``support_articles/developer/kinematic-and-dynamic-parameters/xarm-series/xarm-7.md``):
modified (Craig) D-H, each joint frame ``T(i-1, i) = RotX(alpha) TransX(a) RotZ(theta_i) TransZ(d)``, all
offsets 0; "Model 1" link masses and centres of mass (in each link's D-H frame). Joint limits: the
xArm 7's (device type 7) row of ``xarm-python-sdk``'s ``XCONF.Robot.JOINT_LIMITS``, copied here so the
emulator needs no SDK.

The end-effector frame is the flange (link 7's frame, the controller's TCP with a zero TCP offset), in
the base frame: at all-zero joints it is at (0.206, 0, 0.1205) m pointing down (roll pi). Poses in the
SDK's form (``[x, y, z, roll, pitch, yaw]``, fixed axes ``R = Rz(yaw) Ry(pitch) Rx(roll)``) convert with
:func:`~robot_rl.hardware.drivers.arm_common.rpy_from_quat`.

Checked against the emulator's MuJoCo chain built from the same table, not against a real arm.
"""

from __future__ import annotations

import math

import numpy as np

from robot_rl.hardware.drivers.dh_kinematics import DHChain
from robot_rl.hardware.drivers.so101_model import matrix_to_quat

AXIS = 7
"""Joints of the modelled arm (``XArmAPI.axis``)."""
DEVICE_TYPE = 7
"""``XArmAPI.device_type`` of the modelled xArm 7 (``XCONF.Robot.Type.XARM7_X4``)."""
MODEL = (AXIS, DEVICE_TYPE)
"""``(XArmAPI.axis, XArmAPI.device_type)`` of the modelled arm."""
DH = (
    (0.0, 0.267, 0.0),
    (0.0, 0.0, -math.pi / 2),
    (0.0, 0.293, math.pi / 2),
    (0.0525, 0.0, math.pi / 2),
    (0.0775, 0.3425, math.pi / 2),
    (0.0, 0.0, math.pi / 2),
    (0.076, 0.097, -math.pi / 2),
)
"""Modified D-H ``(a (m), d (m), alpha (rad))`` of joints 1..7 (UFACTORY's table, mm converted to m)."""
XARM7 = DHChain("xarm7", DH, modified=True)
"""The chain as the drivers' shared :class:`~robot_rl.hardware.drivers.dh_kinematics.DHChain` (flange =
joint 7's frame), for the driver's measured-TCP forward kinematics."""
JOINT_LOW = np.array(
    [-2 * math.pi, -2.059488, -2 * math.pi, -0.191986, -2 * math.pi, -1.692969, -2 * math.pi]
)
"""Lower joint limits (rad), joints 1..7."""
JOINT_HIGH = np.array([2 * math.pi, 2.094395, 2 * math.pi, 3.92699, 2 * math.pi, math.pi, 2 * math.pi])
"""Upper joint limits (rad), joints 1..7."""
LINK_MASS = (2.177, 1.716, 1.485, 1.574, 1.209, 1.214, 0.17)
"""Link 1..7 masses (kg), UFACTORY's "Model 1"."""
LINK_COM = (
    (0.00015, 0.02724, -0.01375),
    (0.00022, -0.1247, 0.0189),
    (0.046, -0.0223, -0.00847),
    (-0.06975, -0.1125, 0.0132),
    (-0.00035, 0.0176, -0.0284),
    (0.06365, 0.03084, 0.0217),
    (0.0, -0.00677, -0.01098),
)
"""Link 1..7 centres of mass (m) in each link's D-H frame, UFACTORY's "Model 1"."""
REACH_M = 0.7
"""UFACTORY's stated reach of the xArm 7 (m)."""


def joint_origin(i: int) -> tuple[np.ndarray, np.ndarray]:
    """Joint ``i``'s (0-based) frame at zero angle in its parent's frame: (position (3,) m, rotation 3x3).

    From the modified D-H row ``(a, d, alpha)``: position ``RotX(alpha) (a, 0, d)``, rotation
    ``RotX(alpha)``; the joint turns about the new frame's z.
    """
    frame = XARM7.link(i, 0.0)
    return frame[:3, 3].copy(), frame[:3, :3].copy()


def joint_frames(q: np.ndarray) -> list[np.ndarray]:
    """The 4x4 transforms (base frame, m) of joint frames 1..7 at joint angles ``q`` (7,) rad; the last
    is the flange (:meth:`DHChain.frames`).

    Raises:
        ValueError: ``q`` is not (7,).
    """
    return XARM7.frames(q)


def forward_kinematics(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flange pose at joint angles ``q`` (7,) rad: (position (3,) m, unit quaternion (w, x, y, z)).

    Raises:
        ValueError: ``q`` is not (7,).
    """
    t = joint_frames(q)[-1]
    return t[:3, 3].copy(), matrix_to_quat(t[:3, :3])


def _rotvec_error(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Rotation vector (rad, base frame) turning ``current`` into ``target`` (3x3 rotations)."""
    r = target @ current.T
    angle = math.acos(float(np.clip((np.trace(r) - 1.0) / 2.0, -1.0, 1.0)))
    axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])
    if angle < 1e-9:
        return 0.5 * axis
    if math.pi - angle < 1e-6:  # half turn: the axis from the symmetric part
        k = int(np.argmax(np.diag(r)))
        axis = (r[:, k] + np.eye(3)[k]) / math.sqrt(2.0 * (1.0 + r[k, k]))
        return angle * axis
    return angle * axis / (2.0 * math.sin(angle))


def inverse_kinematics(
    pos: np.ndarray, rot: np.ndarray, q0: np.ndarray, iterations: int = 50, tol: float = 1e-6
) -> np.ndarray | None:
    """Joint angles (7,) rad that put the flange at ``pos`` (3,) m with rotation ``rot`` (3x3), found by
    damped least squares from ``q0`` (the nearest solution for near targets; the redundant joint stays
    near ``q0``), clipped to the joint limits. ``None`` when it does not converge to ``tol`` (m and rad).
    """
    q = np.clip(np.asarray(q0, dtype=np.float64).copy(), JOINT_LOW, JOINT_HIGH)
    for _ in range(iterations):
        frames = joint_frames(q)
        end = frames[-1]
        err = np.concatenate([pos - end[:3, 3], _rotvec_error(rot, end[:3, :3])])
        if np.max(np.abs(err)) < tol:
            return q
        jac = np.empty((6, AXIS))
        for i, f in enumerate(frames):
            z = f[:3, 2]
            jac[:3, i] = np.cross(z, end[:3, 3] - f[:3, 3])
            jac[3:, i] = z
        step = jac.T @ np.linalg.solve(jac @ jac.T + 1e-6 * np.eye(6), err)
        q = np.clip(q + step, JOINT_LOW, JOINT_HIGH)
    return None
