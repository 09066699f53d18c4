"""The robot-side (controller-side) TCP boundary: a Cartesian box that the robot's own real-time loop
keeps the tool centre point in, whatever its client sends and however late the client is.

Real controllers enforce it in their own loop: xArm's safety boundary (``set_reduced_tcp_boundary`` +
``set_fence_mode``; the arm stops with controller error C35 "Safety Boundary Limit" at the boundary), UR's
safety planes (safety configuration, set on the teach pendant) and Franka's Cartesian limits with reflexes
(Desk). The client-side layer (:class:`~robot_rl.hardware.safety.SafeRobot`) keeps commands in the box, but
it judges the arm from a reading that is already old when its command arrives; on a loaded client host
that gap grows by milliseconds while the arm moves on (0.3 m/s x 20 ms = 6 mm). The robot-side boundary is
the backstop that holds regardless of the client's load.

:class:`BoundaryBrake` is that boundary for the simulated Panda (:class:`MujocoRobot`, in process and behind
the MuJoCo robot server, :mod:`robot_rl.hardware.sim_server`), run every physics step (500 Hz) inside its
physics, as a controller runs it every cycle: when the pinch site, moving outward across a face at more than
:data:`MIN_SPEED_M_S`, would cross it within :data:`HORIZON_S` at its present velocity, the joint targets
become the measured joints less their velocity times :data:`BRAKE_S` (a joint PD then brakes with damping
``KP*BRAKE_S+KD`` instead of ``KD``) and the Cartesian target the measured pinch, so the next ``ee_delta``
starts from where the arm stopped; and an ``ee_delta`` target is kept in the box (a target already outside may
stay there, not move further out). A new joint target is judged by the velocity it gives after the coming step
(its torque's acceleration, by ``mj_forward`` on a copy of the scene), so the step that follows a target
change cannot carry the arm out before the check sees it move. The constants were measured against the
adversaries of ``benchmarks/bench_safety.py`` (``benchmarks/README.md``).

Limits: the brake is sized for the speeds the client-side layer passes. It is a joint-space brake, so a
fast arm's path curves while it slows: raw commands with no layer, at the PD's full speed, overshot by up
to 10 mm (``ee_delta`` pushes of 50 mm per 20 ms period, the arm at 0.85 m/s) and 50-110 mm (random joint
targets, several m/s) in the measurements of issue 35, where pushes of 10 mm per period stay within 5 mm
(tests/hardware/test_robot_side_boundary.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import mujoco
import numpy as np

if TYPE_CHECKING:  # the robot owns its brake: sim_robot imports this module
    from robot_rl.hardware.sim_robot import MujocoRobot

HORIZON_S = 0.05
"""Look-ahead (s) of the brake's trigger: the pinch's position this far ahead at its present velocity."""
BRAKE_S = 0.1
"""The brake's joint target lies this far (s) behind the measured joints along their velocity."""
MIN_SPEED_M_S = 1e-3
"""Outward speeds (m/s) below this never trigger the brake (a resting arm's numerical drift)."""


@dataclass(frozen=True)
class TcpBoundary:
    """A Cartesian box for the tool centre point, robot base frame.

    Attributes:
        low: (3,) float64 m, the box's lower corner (x, y, z).
        high: (3,) float64 m, its upper corner; above ``low`` on every axis.

    Raises:
        ValueError: not 3 finite values each, or ``low`` not below ``high`` on an axis (the message names
            the values).
    """

    low: np.ndarray
    high: np.ndarray

    def __post_init__(self) -> None:
        low, high = np.asarray(self.low, dtype=np.float64), np.asarray(self.high, dtype=np.float64)
        if low.shape != (3,) or high.shape != (3,) or not np.all(np.isfinite(low) & np.isfinite(high)):
            raise ValueError(
                f"TCP boundary low={low.tolist()} high={high.tolist()}: need 3 finite values (m) each"
            )
        if np.any(low >= high):
            raise ValueError(f"TCP boundary low={low.tolist()} must be below high={high.tolist()} per axis")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "_low", low.tolist())
        object.__setattr__(self, "_high", high.tolist())

    def crossing(self, pos: np.ndarray, vel: np.ndarray, horizon_s: float) -> bool:
        """Whether ``pos`` (3,) m moving at ``vel`` (3,) m/s outward faster than :data:`MIN_SPEED_M_S`
        across a face is beyond that face within ``horizon_s`` (s). Plain floats: it runs every physics
        step, where numpy's per-call overhead would double the step's cost."""
        for p, v, lo, hi in zip(pos.tolist(), vel.tolist(), self._low, self._high, strict=True):
            if (v > MIN_SPEED_M_S and p + v * horizon_s > hi) or (
                v < -MIN_SPEED_M_S and p + v * horizon_s < lo
            ):
                return True
        return False

    def clip_target(self, old: np.ndarray, new: np.ndarray) -> np.ndarray:
        """``new`` (3,) m kept in the box, except that an axis of ``old`` (3,) m already outside may stay as
        far out as ``old`` (not further)."""
        return np.clip(new, np.minimum(self.low, old), np.maximum(self.high, old))


class BoundaryBrake:
    """Keeps the pinch of a :class:`MujocoRobot` inside a :class:`TcpBoundary` (module doc); the robot calls
    :meth:`before_step` before every physics step and :meth:`clip_ee_delta` on every ``ee_delta``.

    Args:
        robot: the simulated robot that owns this brake.
        horizon_s: trigger look-ahead (s), :data:`HORIZON_S`.
        brake_s: brake target offset (s), :data:`BRAKE_S`.

    Attributes:
        box: the box enforced, or ``None`` (no boundary: the brake does nothing).
        brakes: physics steps at which the brake acted.
    """

    def __init__(self, robot: MujocoRobot, horizon_s: float = HORIZON_S, brake_s: float = BRAKE_S) -> None:
        self.robot, self.horizon_s, self.brake_s = robot, horizon_s, brake_s
        self.box: TcpBoundary | None = None
        self.brakes = 0
        env = robot.env
        self._jac = np.zeros((3, env.model.nv))
        self._scratch = mujoco.MjData(env.model)  # a new target is judged here: the scene stays untouched
        self._judged = env.controller.q_des  # the joint target the last step was judged with: every target
        # change assigns a new array (IK, joint command, halt, this brake), so identity tells a new one

    def before_step(self) -> None:
        """Run the boundary for the next physics step: brake when the pinch would cross a face."""
        if self.box is None:
            return
        env = self.robot.env
        m, d, ctrl = env.model, env.data, env.controller
        vs = ctrl._vs  # the arm's dofs (a slice when contiguous: no copies)
        dq = d.qvel[vs]
        if ctrl.q_des is self._judged:
            mujoco.mj_jacSite(m, d, self._jac, None, env._pinch)
            vel = self._jac[:, vs] @ dq
        else:  # a new target: judge the velocity it gives after this step (its torque's acceleration)
            scratch = self._scratch
            mujoco.mj_copyData(scratch, m, d)
            ctrl.apply(scratch)
            mujoco.mj_forward(m, scratch)
            mujoco.mj_jacSite(m, scratch, self._jac, None, env._pinch)
            vel = self._jac[:, vs] @ (dq + scratch.qacc[vs] * m.opt.timestep)
        pos = d.site_xpos[env._pinch]
        if self.box.crossing(pos, vel, self.horizon_s):
            ctrl.q_des = d.qpos[env._arm_q] - dq * self.brake_s
            env._target = pos.copy()
            self.brakes += 1
        self._judged = ctrl.q_des

    def clip_ee_delta(self, delta: np.ndarray) -> np.ndarray:
        """``delta`` (3,) m of an ``ee_delta`` command shortened so that the Cartesian target it moves stays
        in the boundary (unchanged without one)."""
        if self.box is None:
            return delta
        old = self.robot.env._target
        new = self.box.clip_target(old, old + delta)
        return delta if np.array_equal(new, old + delta) else new - old  # unclipped: bit for bit
