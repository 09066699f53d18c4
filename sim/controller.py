"""End-effector position controller for the torque-driven Panda: differential IK -> joint PD + gravity
compensation.

Once per control step, :meth:`DiffIKController.set_target` solves damped-least-squares IK (a few
Gauss-Newton iterations on a scratch ``MjData``) for joint targets that put the pinch site at the target
position with a fixed pointing-down orientation, with a null-space pull towards the home posture and joint
targets kept inside the joint limits. Every physics step :meth:`DiffIKController.torques` computes
``tau = Kp (q* - q) - Kd dq + qfrc_bias`` (N m; ``kp``/``kd`` default to :data:`KP`/:data:`KD`), clipped
to the actuator torque limits.

With ``mode="actuator"`` the same PD law runs inside MuJoCo instead, so a control step is one
``mj_step(m, d, n_substeps)`` call with no Python per physics step (it releases the GIL for all of them,
which is what lets the ``mujoco_cpu`` batched backend's threads run in parallel): each arm motor becomes an
affine position actuator, force ``kp·ctrl − kp·q − kd·dq`` clamped to the old torque range
(``forcerange``), ``ctrl = q*``; gravity is compensated by MuJoCo's body ``gravcomp`` (the model must be
compiled with ``arm_gravcomp=True``, :func:`robot_rl.sim.assets.load_model`). Two differences from
``numpy``: Coriolis/centrifugal terms are not compensated (``gravcomp`` is gravity only), and the gravity
compensation is not inside the torque clamp; the damping term is integrated implicitly by the
``implicitfast`` integrator.
"""

from __future__ import annotations

import mujoco
import numpy as np

ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 8))
KP = np.array([600.0, 600.0, 600.0, 600.0, 250.0, 150.0, 50.0])
"""Joint stiffness (N m / rad)."""
KD = np.array([50.0, 50.0, 50.0, 50.0, 20.0, 15.0, 5.0])
"""Joint damping (N m s / rad)."""
MODES = ("numpy", "actuator")
"""Where the joint PD runs: a numpy torque every physics step, or MuJoCo's actuators."""


def _as_slice(idx: np.ndarray) -> slice | np.ndarray:
    """``idx`` as a slice when it is a contiguous ascending run, else unchanged."""
    if len(idx) and np.array_equal(idx, np.arange(idx[0], idx[0] + len(idx))):
        return slice(int(idx[0]), int(idx[0]) + len(idx))
    return idx


class DiffIKController:
    """Pinch-site position control for the 7 arm joints of ``model``.

    Args:
        model: compiled scene holding gym-hil's Panda (joints ``joint1..7``, site ``pinch``).
        q_home: (7,) rad null-space posture.
        target_quat: (4,) wxyz world orientation the pinch site holds (pointing down).
        iterations: Gauss-Newton IK iterations per :meth:`set_target` call.
        damping: damped-least-squares regulariser (m^2).
        mode: one of :data:`MODES` (module docstring); ``"actuator"`` rewrites the arm actuators of
            ``model`` (a private copy) into position actuators.

    Raises:
        ValueError: unknown ``mode``, or ``"actuator"`` on a model compiled without arm ``gravcomp``.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        q_home: np.ndarray,
        target_quat: np.ndarray,
        iterations: int = 3,
        damping: float = 1e-4,
        mode: str = "numpy",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"controller must be one of {MODES}, got {mode!r}")
        if mode == "actuator" and model.ngravcomp == 0:
            raise ValueError(
                "controller mode 'actuator' needs a model compiled with arm gravity compensation "
                "(robot_rl.sim.assets.load_model(..., arm_gravcomp=True))"
            )
        self.mode = mode
        self.model = model
        self.scratch = mujoco.MjData(model)
        self.site_id = model.site("pinch").id
        self.qpos_adr = np.array([model.joint(j).qposadr[0] for j in ARM_JOINTS])
        self.dof_adr = np.array([model.joint(j).dofadr[0] for j in ARM_JOINTS])
        ranges = np.array([model.joint(j).range for j in ARM_JOINTS])
        margin = 0.05
        self.q_low, self.q_high = ranges[:, 0] + margin, ranges[:, 1] - margin
        act = [model.actuator(f"actuator{i}").id for i in range(1, 8)]
        self.tau_low, self.tau_high = model.actuator_ctrlrange[act, 0], model.actuator_ctrlrange[act, 1]
        self.ctrl_adr = np.array(act)
        self.q_home = np.asarray(q_home, dtype=np.float64)
        self.target_quat = np.asarray(target_quat, dtype=np.float64)
        self.iterations = iterations
        self.damping = damping
        self.q_des = self.q_home.copy()
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))
        self._quat = np.zeros(4)
        self._err = np.zeros(6)
        self._rot_local = np.zeros(3)
        # Slices (views, no copies) for the hot per-physics-step path when the arm's indices are contiguous.
        self._qs = _as_slice(self.qpos_adr)
        self._vs = _as_slice(self.dof_adr)
        self._cs = _as_slice(self.ctrl_adr)
        self._tau = np.zeros(7)
        self.kp, self.kd = KP.copy(), KD.copy()  # per instance: env.randomize scales them per episode
        if mode == "actuator":
            model.actuator_biastype[self.ctrl_adr] = mujoco.mjtBias.mjBIAS_AFFINE
            model.actuator_biasprm[self.ctrl_adr, 0] = 0.0  # no constant term; kp, kd are written per step
            model.actuator_forcelimited[self.ctrl_adr] = 1
            model.actuator_forcerange[self.ctrl_adr] = np.stack([self.tau_low, self.tau_high], axis=1)
            model.actuator_ctrllimited[self.ctrl_adr] = 0

    def solve(self, qpos: np.ndarray, target_pos: np.ndarray, iterations: int | None = None) -> np.ndarray:
        """Joint positions (7,) rad, within limits, placing the pinch site at ``target_pos`` (3,) m.

        ``qpos`` is the full ``data.qpos`` used as the starting point (other joints are kept).
        """
        d, m = self.scratch, self.model
        d.qpos[:] = qpos
        q = qpos[self.qpos_adr].copy()
        for _ in range(iterations or self.iterations):
            d.qpos[self.qpos_adr] = q
            mujoco.mj_kinematics(m, d)
            mujoco.mj_comPos(m, d)
            mujoco.mj_jacSite(m, d, self._jacp, self._jacr, self.site_id)
            self._err[:3] = target_pos - d.site_xpos[self.site_id]
            mujoco.mju_mat2Quat(self._quat, d.site_xmat[self.site_id])
            mujoco.mju_subQuat(self._rot_local, self.target_quat, self._quat)
            self._err[3:] = d.site_xmat[self.site_id].reshape(3, 3) @ self._rot_local
            jac = np.vstack([self._jacp[:, self.dof_adr], self._jacr[:, self.dof_adr]])
            jjt = jac @ jac.T + self.damping * np.eye(6)
            pinv = jac.T @ np.linalg.solve(jjt, np.eye(6))
            dq = pinv @ self._err
            null = np.eye(7) - pinv @ jac
            dq += null @ (0.5 * (self.q_home - q))
            step = np.abs(dq).max()
            if step > 0.3:
                dq *= 0.3 / step
            q = np.clip(q + dq, self.q_low, self.q_high)
        return q

    def set_target(self, data: mujoco.MjData, target_pos: np.ndarray) -> None:
        """Solve IK for ``target_pos`` (3,) m from the current state and store the joint targets."""
        self.q_des = self.solve(data.qpos, target_pos)

    def torques(self, data: mujoco.MjData) -> np.ndarray:
        """Joint torques (7,) N m: PD towards the stored targets plus gravity/Coriolis compensation.

        Returns an internal buffer, overwritten by the next call.
        """
        tau = self._tau
        np.subtract(self.q_des, data.qpos[self._qs], out=tau)
        tau *= self.kp
        tau -= self.kd * data.qvel[self._vs]
        tau += data.qfrc_bias[self._vs]
        np.minimum(tau, self.tau_high, out=tau)
        np.maximum(tau, self.tau_low, out=tau)
        return tau

    def apply(self, data: mujoco.MjData) -> None:
        """``numpy``: write :meth:`torques` into ``data.ctrl`` for the arm actuators (every physics step).
        ``actuator``: write the gains ``kp``, ``kd`` into the model and ``q*`` into ``data.ctrl`` (once per
        control step)."""
        if self.mode == "numpy":
            data.ctrl[self._cs] = self.torques(data)
            return
        m = self.model
        m.actuator_gainprm[self._cs, 0] = self.kp
        m.actuator_biasprm[self._cs, 1] = -self.kp
        m.actuator_biasprm[self._cs, 2] = -self.kd
        data.ctrl[self._cs] = self.q_des
