"""The Panda scene and its controller in MJX (MuJoCo's JAX port) for ``env.backend=mjx``
(:mod:`robot_rl.sim.batched_mjx`): the physics model MJX steps, and one env's control step written in
``jax.numpy`` so ``jit(vmap(...))`` runs N envs on the JAX device (CPU here, a GPU with ``jax[cuda]``).

The control step is the single env's (:meth:`robot_rl.sim.panda_base.PandaTaskEnv.step` with
``controller="actuator"``, :mod:`robot_rl.sim.controller`): the end-effector target moves by the action
(clipped to the workspace and to :data:`~robot_rl.sim.panda_base.MAX_LAG_M` of the pinch site), a
damped-least-squares IK (same iterations, damping, null-space pull, step cap and joint margins as
:meth:`~robot_rl.sim.controller.DiffIKController.solve`) gives the joint targets, the arm's affine position
actuators track them for ``n_substeps`` physics steps (``mjx.step`` in a ``fori_loop``, no host code in
between). The model is the single env's own (same bodies, geoms and actuators, so ``env.randomize``'s
per-episode values map one to one). Differences from ``mujoco_cpu``: float32, MJX's collision routines and
solver, and the contacts kept (:func:`restrict_contacts`).

XLA's CPU backend (jaxlib 0.10) compiles MJX's tree scans with its new fusion emitters into code that is
10-300x slower than the legacy emitters (the 25-body Panda's ``mjx.kinematics``: 172 ms vs 0.53 ms per
call; ``mjx.step`` 113 ms vs 4.9 ms), so :func:`configure_xla` turns them off (a CPU-only flag; GPUs are
unaffected). It must run before JAX creates its CPU backend.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from dataclasses import dataclass

import mujoco
import numpy as np

XLA_CPU_FLAG = "--xla_cpu_use_fusion_emitters=false"
"""XLA flag that makes MJX on the CPU usable (module docstring)."""


def configure_xla() -> None:
    """Add :data:`XLA_CPU_FLAG` to ``XLA_FLAGS`` unless ``XLA_FLAGS`` already sets it, and keep compiled
    programs in JAX's persistent cache (``jax_compilation_cache_dir``; when unset,
    ``<tmp>/robot_rl_jax_cache``): a task's first compile costs about 90 s on a 2-core CPU, a cached one a
    few seconds. Call before JAX's first computation: the flag is read when JAX creates its CPU backend."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_use_fusion_emitters" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {XLA_CPU_FLAG}".strip()
    import jax

    if not jax.config.jax_compilation_cache_dir:
        jax.config.update(
            "jax_compilation_cache_dir", os.path.join(tempfile.gettempdir(), "robot_rl_jax_cache")
        )


def restrict_contacts(m: mujoco.MjModel) -> int:
    """Turn off the collisions of every mesh geom of ``m`` in place (the arm links' and the gripper's
    convex hulls); the finger pads, the tasks' boxes and the floor keep colliding. MJX's mesh-mesh and
    mesh-box pairs are its slowest path; the tasks' contacts are pads-objects and objects-floor, so the
    arm can then pass through an object it would otherwise bump. Returns the number of geoms changed."""
    mesh = (m.geom_type == mujoco.mjtGeom.mjGEOM_MESH) & ((m.geom_contype != 0) | (m.geom_conaffinity != 0))
    m.geom_contype[mesh], m.geom_conaffinity[mesh] = 0, 0
    return int(mesh.sum())


def put_model(m: mujoco.MjModel):
    """``mjx.put_model(m)`` without MJX's per-mesh "coplanar face" warnings (the meshes do not collide)."""
    from mujoco import mjx

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*coplanar face.*")
        return mjx.put_model(m)


@dataclass(frozen=True)
class ArmSpec:
    """Constant indices and settings of the Panda controller (from the single env's, so both agree).

    Attributes:
        qpos_adr, dof_adr, ctrl_adr: int (7,) arm joint qpos / dof / actuator indices.
        q_low, q_high: (7,) rad joint targets' bounds (limits minus the controller's margin).
        q_home: (7,) rad null-space posture. target_quat: (4,) wxyz pinch orientation (pointing down).
        site, site_body: pinch site id and its body id. grip_act: gripper actuator id.
        driver_qpos: qpos index of the gripper's driver joint (closure = qpos / 0.8 rad).
        iterations, damping: IK iterations per control step and the DLS regulariser (m^2).
        n_substeps: physics steps per control step.
    """

    qpos_adr: np.ndarray
    dof_adr: np.ndarray
    ctrl_adr: np.ndarray
    q_low: np.ndarray
    q_high: np.ndarray
    q_home: np.ndarray
    target_quat: np.ndarray
    site: int
    site_body: int
    grip_act: int
    driver_qpos: int
    iterations: int
    damping: float
    n_substeps: int

    @classmethod
    def of(cls, env) -> ArmSpec:
        """The spec of a :class:`~robot_rl.sim.panda_base.PandaTaskEnv` ``env``."""
        c = env.controller
        return cls(
            qpos_adr=np.asarray(c.qpos_adr),
            dof_adr=np.asarray(c.dof_adr),
            ctrl_adr=np.asarray(c.ctrl_adr),
            q_low=np.asarray(c.q_low),
            q_high=np.asarray(c.q_high),
            q_home=np.asarray(env.q_home),
            target_quat=np.asarray(c.target_quat),
            site=int(c.site_id),
            site_body=int(env.model.site_bodyid[c.site_id]),
            grip_act=int(env._grip_act),
            driver_qpos=int(env._driver_qpos),
            iterations=int(c.iterations),
            damping=float(c.damping),
            n_substeps=int(env.n_substeps),
        )


def mat2quat(mat):
    """wxyz unit quaternion (4,) of a rotation matrix (3, 3): MuJoCo's ``mju_mat2Quat`` (same branches,
    so the same sign)."""
    import jax.numpy as jnp

    r = mat.reshape(9)
    tr = r[0] + r[4] + r[8]
    q0 = jnp.stack([1 + tr, r[7] - r[5], r[2] - r[6], r[3] - r[1]])
    q1 = jnp.stack([r[7] - r[5], 1 + r[0] - r[4] - r[8], r[1] + r[3], r[2] + r[6]])
    q2 = jnp.stack([r[2] - r[6], r[1] + r[3], 1 - r[0] + r[4] - r[8], r[5] + r[7]])
    q3 = jnp.stack([r[3] - r[1], r[2] + r[6], r[5] + r[7], 1 - r[0] - r[4] + r[8]])
    quat = jnp.where(tr > 0, q0, jnp.where((r[0] > r[4]) & (r[0] > r[8]), q1, jnp.where(r[4] > r[8], q2, q3)))
    return quat / jnp.linalg.norm(quat)


def _quat_mul(a, b):
    import jax.numpy as jnp

    return jnp.stack(
        [
            a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
            a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
            a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
            a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0],
        ]
    )


def sub_quat(qa, qb):
    """(3,) rotation vector (rad) taking ``qb`` to ``qa`` in ``qb``'s frame: MuJoCo's ``mju_subQuat``."""
    import jax.numpy as jnp

    dif = _quat_mul(qb * jnp.array([1.0, -1.0, -1.0, -1.0]), qa)
    axis = dif[1:]
    sin_half = jnp.linalg.norm(axis)
    speed = 2.0 * jnp.arctan2(sin_half, dif[0])
    speed = jnp.where(speed > jnp.pi, speed - 2.0 * jnp.pi, speed)
    safe = jnp.where(sin_half > 0, sin_half, 1.0)
    return jnp.where(sin_half > 0, axis * speed / safe, jnp.zeros(3))


def ik_solve(m, d, target_pos, arm: ArmSpec):
    """Joint targets (7,) rad within limits putting the pinch site at ``target_pos`` (3,) m, pointing down,
    from the state ``d``: :meth:`robot_rl.sim.controller.DiffIKController.solve` in ``jax.numpy``
    (damped least squares, Buss 2004; null-space pull towards ``q_home``; per-iteration step capped at
    0.3 rad)."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx
    from mujoco.mjx._src.support import jac  # MJX's mj_jac (not re-exported by mujoco.mjx)

    qa, va = jnp.asarray(arm.qpos_adr), jnp.asarray(arm.dof_adr)
    q_home, tquat = jnp.asarray(arm.q_home, jnp.float32), jnp.asarray(arm.target_quat, jnp.float32)
    eye6, eye7 = jnp.eye(6), jnp.eye(7)

    def iteration(_, q):
        x = mjx.com_pos(m, mjx.kinematics(m, d.replace(qpos=d.qpos.at[qa].set(q))))
        pos, mat = x.site_xpos[arm.site], x.site_xmat[arm.site]
        jacp, jacr = jac(m, x, pos, arm.site_body)
        err = jnp.concatenate([target_pos - pos, mat @ sub_quat(tquat, mat2quat(mat))])
        j = jnp.concatenate([jacp[va].T, jacr[va].T])  # (6, 7)
        pinv = j.T @ jnp.linalg.solve(j @ j.T + arm.damping * eye6, eye6)
        dq = pinv @ err + (eye7 - pinv @ j) @ (0.5 * (q_home - q))
        step = jnp.abs(dq).max()
        dq = jnp.where(step > 0.3, dq * (0.3 / step), dq)
        return jnp.clip(q + dq, arm.q_low, arm.q_high)

    return jax.lax.fori_loop(0, arm.iterations, iteration, d.qpos[qa])


def physics_step(m, d):
    """``mjx.step`` with MuJoCo's ``implicitfast`` velocity derivative: an actuator whose force is clamped
    at its ``forcerange`` contributes no velocity derivative (MuJoCo C's ``mjd_actuator_vel``; MJX 3.8.1
    keeps it). The gripper's actuator (force range +-5 N, velocity bias -10) is clamped while it closes:
    with MJX's own step the fingers closed 10% slower than on ``mujoco_cpu`` (closure 0.54 vs 0.60 after
    one control step), with this step as fast."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx
    from mujoco.mjx._src import support
    from mujoco.mjx._src.forward import _advance  # MJX's own integration step after the solve

    d = mjx.forward(m, d)
    affine_bias = np.asarray(m.actuator_biastype) == mujoco.mjtBias.mjBIAS_AFFINE
    affine_gain = np.asarray(m.actuator_gaintype) == mujoco.mjtGain.mjGAIN_AFFINE
    vel = m.actuator_biasprm[:, 2] * affine_bias + m.actuator_gainprm[:, 2] * affine_gain * d.ctrl
    lo, hi = m.actuator_forcerange[:, 0], m.actuator_forcerange[:, 1]
    clamped = np.asarray(m.actuator_forcelimited, bool) & (
        (d.actuator_force <= lo) | (d.actuator_force >= hi)
    )
    moment = d._impl.actuator_moment
    qderiv = moment.T @ jax.vmap(jnp.multiply)(moment, jnp.where(clamped, 0.0, vel))
    qderiv -= jnp.diag(m.dof_damping)
    if m.ntendon:
        qderiv -= d._impl.ten_J.T @ jnp.diag(m.tendon_damping) @ d._impl.ten_J
    qm = support.full_m(m, d) if support.is_sparse(m) else d._impl.qM
    qh, _ = jax.scipy.linalg.cho_factor(qm - m.opt.timestep * qderiv)
    qacc = jax.scipy.linalg.cho_solve((qh, False), d.qfrc_smooth + d.qfrc_constraint)
    return _advance(m, d, d.act_dot, qacc)


def control_step(m, d, target, action, arm: ArmSpec, workspace: tuple[np.ndarray, np.ndarray], lag: float):
    """One control step of one env: returns ``(d, target)`` after ``arm.n_substeps`` physics steps.

    Args:
        m, d: the env's ``mjx.Model`` (its per-env fields already in) and ``mjx.Data``.
        target: (3,) m the end-effector target before the step. action: (4,) ``[dx, dy, dz, grip]``.
        workspace: (low (3,), high (3,)) m box of the target. lag: m the target may lead the pinch site.
    """
    import jax
    import jax.numpy as jnp

    pinch = d.site_xpos[arm.site]
    target = jnp.clip(target + action[:3], workspace[0], workspace[1])
    target = jnp.clip(target, pinch - lag, pinch + lag)
    q_des = ik_solve(m, d, target, arm)
    ctrl = (
        d.ctrl.at[jnp.asarray(arm.ctrl_adr)]
        .set(q_des)
        .at[arm.grip_act]
        .set(255.0 * jnp.clip(action[3], 0.0, 1.0))
    )
    d = jax.lax.fori_loop(0, arm.n_substeps, lambda _, x: physics_step(m, x), d.replace(ctrl=ctrl))
    return d, target


def state_obs(d, arm: ArmSpec):
    """``observation.state`` float32 (22,) of ``d`` (:mod:`robot_rl.sim.panda_base`'s layout and units)."""
    import jax.numpy as jnp

    return jnp.concatenate(
        [
            d.qpos[jnp.asarray(arm.qpos_adr)],
            d.qvel[jnp.asarray(arm.dof_adr)],
            d.site_xpos[arm.site],
            mat2quat(d.site_xmat[arm.site]),
            d.qpos[arm.driver_qpos][None] / 0.8,
        ]
    ).astype(jnp.float32)
