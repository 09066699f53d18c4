"""Forward kinematics of serial arms from their vendors' published Denavit-Hartenberg tables, and the tool
offset that turns the modelled flange into the controller's TCP.

A :class:`DHChain` row is ``(a, d, alpha)`` (m, m, rad; joint angle offsets are 0 in the tables used here):

- standard (Denavit-Hartenberg 1955), ``T(i-1, i) = RotZ(q_i) TransZ(d) TransX(a) RotX(alpha)``: Universal
  Robots' tables ("DH parameters for calculations of kinematics and dynamics", universal-robots.com);
- modified (Craig 1986), ``T(i-1, i) = RotX(alpha) TransX(a) RotZ(q_i) TransZ(d)``: Franka Robotics'
  table for the Panda and FR3 ("Robot and interface specifications", frankaemika.github.io/docs), whose
  flange sits ``d = 0.107`` m along the last joint's z.

A controller reports its TCP, not the flange: the flange plus a tool offset set on the pendant or in Desk.
:func:`tool_offset` measures that offset once, in the flange frame, from one reading of joints and TCP;
:meth:`DHChain.tcp` then predicts the TCP at any joint positions. An offset longer than
:data:`MAX_TOOL_M` means the table does not describe the arm (a wrong ``env.robot.ur_model``, or a base
frame that differs), and is refused; so is a later reading whose TCP is more than
:data:`MODEL_TOLERANCE_M` from the model's (:meth:`MeasuredTcp.check`), which is how a wrong table with a
plausible offset at the first pose is caught once the arm moves.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from robot_rl.hardware.errors import RobotFault
from robot_rl.hardware.robot import RobotState

MAX_TOOL_M = 0.4
"""The longest tool offset (m, flange to TCP) taken as a tool rather than as a model that does not fit."""
MODEL_TOLERANCE_M = 0.02
"""How far (m) the modelled TCP may be from the reported one at any reading: a nominal D-H table is
millimetres off a real arm; a wrong table is centimetres off once the joints have moved."""


def _standard(q: float, a: float, d: float, alpha: float) -> np.ndarray:
    ct, st, ca, sa = math.cos(q), math.sin(q), math.cos(alpha), math.sin(alpha)
    return np.array(
        [[ct, -st * ca, st * sa, a * ct], [st, ct * ca, -ct * sa, a * st], [0.0, sa, ca, d], [0, 0, 0, 1.0]]
    )


def _modified(q: float, a: float, d: float, alpha: float) -> np.ndarray:
    ct, st, ca, sa = math.cos(q), math.sin(q), math.cos(alpha), math.sin(alpha)
    return np.array(
        [
            [ct, -st, 0.0, a],
            [st * ca, ct * ca, -sa, -d * sa],
            [st * sa, ct * sa, ca, d * ca],
            [0.0, 0.0, 0.0, 1.0],
        ]
    )


@dataclass(frozen=True)
class DHChain:
    """An arm's kinematics: ``rows`` of ``(a (m), d (m), alpha (rad))``, one per joint, in the
    ``modified`` (Craig) or standard convention (module docstring); ``flange_d``: the flange's distance
    (m) along the last joint frame's z."""

    name: str
    rows: tuple[tuple[float, float, float], ...]
    modified: bool = False
    flange_d: float = 0.0

    @property
    def num_joints(self) -> int:
        return len(self.rows)

    def link(self, i: int, q: float) -> np.ndarray:
        """Joint ``i``'s (0-based) frame (4, 4) float64 in its parent's, at angle ``q`` rad."""
        a, d, alpha = self.rows[i]
        return (_modified if self.modified else _standard)(float(q), a, d, alpha)

    def frames(self, joint_pos: np.ndarray) -> list[np.ndarray]:
        """The joint frames 1..n (4, 4) float64 in the base frame (m) at ``joint_pos`` (n,) rad.

        Raises:
            ValueError: ``joint_pos`` does not have one value per row."""
        q = np.asarray(joint_pos, dtype=np.float64).reshape(-1)
        if q.shape != (self.num_joints,):
            raise ValueError(f"{self.name}: {q.shape[0]} joint positions for a {self.num_joints}-joint arm")
        out, pose = [], np.eye(4)
        for i, qi in enumerate(q):
            pose = pose @ self.link(i, qi)
            out.append(pose)
        return out

    def flange(self, joint_pos: np.ndarray) -> np.ndarray:
        """The flange pose (4, 4) float64 in the base frame (m) at ``joint_pos`` (n,) rad: the last joint
        frame, ``flange_d`` along its z.

        Raises:
            ValueError: ``joint_pos`` does not have one value per row."""
        pose = self.frames(joint_pos)[-1]
        return pose @ _standard(0.0, 0.0, self.flange_d, 0.0) if self.flange_d else pose

    def tcp(self, joint_pos: np.ndarray, tool: np.ndarray) -> np.ndarray:
        """The TCP position (3,) float64 m in the base frame at ``joint_pos`` (n,) rad, ``tool`` (3,) m
        being the TCP in the flange frame (:func:`tool_offset`)."""
        pose = self.flange(joint_pos)
        return pose[:3, 3] + pose[:3, :3] @ tool


def tool_offset(chain: DHChain, joint_pos: np.ndarray, tcp_pos: np.ndarray, who: str) -> np.ndarray:
    """The TCP (3,) m in the flange frame, from one reading of the joints ``joint_pos`` (n,) rad and the
    controller's TCP position ``tcp_pos`` (3,) m (base frame); ``who`` names the robot in the error.

    Raises:
        ValueError: the offset is longer than :data:`MAX_TOOL_M`: the table does not fit the arm."""
    pose = chain.flange(joint_pos)
    tool = pose[:3, :3].T @ (np.asarray(tcp_pos, dtype=np.float64) - pose[:3, 3])
    if not np.all(np.isfinite(tool)) or np.linalg.norm(tool) > MAX_TOOL_M:
        raise ValueError(
            f"{who}: the {chain.name} kinematic model puts the flange {np.linalg.norm(tool):.3f} m from the "
            f"TCP the controller reports (at most {MAX_TOOL_M} m is taken as a tool): the model does not fit "
            "this arm (check env.robot.ur_model, or the TCP and base set on the controller)"
        )
    return tool


class MeasuredTcp:
    """A driver's forward kinematics: ``chain``'s flange plus the controller's tool offset, measured from
    the first reading after each :meth:`forget` (a connect: the TCP set on the controller may have
    changed)."""

    def __init__(self, chain: DHChain) -> None:
        self.chain = chain
        self.tool: np.ndarray | None = None

    def forget(self) -> None:
        """Measure the tool offset again at the next call."""
        self.tool = None

    def check(self, state: RobotState, who: str) -> None:
        """Check a reading against the model (once the tool offset is measured).

        Raises:
            RobotFault: the reported TCP is more than :data:`MODEL_TOLERANCE_M` from the modelled one."""
        if self.tool is None:
            return
        off = float(np.linalg.norm(self.chain.tcp(state.joint_pos, self.tool) - state.ee_pos))
        if off > MODEL_TOLERANCE_M:
            raise RobotFault(
                f"{who}: the {self.chain.name} kinematic model is {off:.3f} m from the TCP the controller "
                f"reports (at most {MODEL_TOLERANCE_M} m): it does not fit this arm, so joint commands "
                "cannot be checked against the workspace box (check env.robot.ur_model, or the TCP and base "
                "set on the controller)"
            )

    def __call__(self, joint_pos: np.ndarray, read: Callable[[], RobotState], who: str) -> np.ndarray:
        """The TCP position (3,) float64 m (base frame) at ``joint_pos`` (n,) rad; ``read`` gives the
        robot's state when the tool offset is still to be measured; ``who`` names the robot.

        Raises:
            RobotFault: the chain does not fit the arm (:func:`tool_offset`).
            Whatever ``read`` raises (not connected, link down)."""
        if self.tool is None:
            state = read()
            try:
                self.tool = tool_offset(self.chain, state.joint_pos, state.ee_pos, who)
            except ValueError as err:
                raise RobotFault(str(err)) from err
        return self.chain.tcp(joint_pos, self.tool)


HALF_PI = math.pi / 2


def _ur(d1: float, a2: float, a3: float, d4: float, d5: float, d6: float, name: str) -> DHChain:
    """A UR arm's standard D-H chain from its six published lengths (m)."""
    rows = ((0.0, d1, HALF_PI), (a2, 0.0, 0.0), (a3, 0.0, 0.0), (0.0, d4, HALF_PI), (0.0, d5, -HALF_PI))
    return DHChain(name, (*rows, (0.0, d6, 0.0)))


UR_MODELS: dict[str, DHChain] = {
    "ur3e": _ur(0.15185, -0.24355, -0.2132, 0.13105, 0.08535, 0.0921, "ur3e"),
    "ur5e": _ur(0.1625, -0.425, -0.3922, 0.1333, 0.0997, 0.0996, "ur5e"),
    "ur10e": _ur(0.1807, -0.6127, -0.57155, 0.17415, 0.11985, 0.11655, "ur10e"),
    "ur16e": _ur(0.1807, -0.4784, -0.36, 0.17415, 0.11985, 0.11655, "ur16e"),
    "ur20": _ur(0.2363, -0.862, -0.7287, 0.201, 0.1593, 0.1543, "ur20"),
    "ur3": _ur(0.1519, -0.24365, -0.21325, 0.11235, 0.08535, 0.0819, "ur3"),
    "ur5": _ur(0.089159, -0.425, -0.39225, 0.10915, 0.09465, 0.0823, "ur5"),
    "ur10": _ur(0.1273, -0.612, -0.5723, 0.163941, 0.1157, 0.0922, "ur10"),
}
"""``env.robot.ur_model`` -> its chain (Universal Robots' published tables; CB3 ``ur5`` is the third
series)."""

FRANKA = DHChain(
    "franka",
    (
        (0.0, 0.333, 0.0),
        (0.0, 0.0, -HALF_PI),
        (0.0, 0.316, HALF_PI),
        (0.0825, 0.0, HALF_PI),
        (-0.0825, 0.384, -HALF_PI),
        (0.0, 0.0, HALF_PI),
        (0.088, 0.0, HALF_PI),
    ),
    modified=True,
    flange_d=0.107,
)
"""The Franka Panda's and FR3's chain (the same kinematics; Franka Robotics' modified D-H table)."""
