"""Sim-to-real domain randomisation of the built-in Panda tasks (``env.randomize``,
:class:`robot_rl.config.RandomizeConfig`): dynamics, timing and visuals drawn per episode.

A :class:`Randomizer` belongs to one :class:`~robot_rl.sim.panda_base.PandaTaskEnv` and is called at three
points: :meth:`Randomizer.reset` after the task placed its objects (restores the nominal model, draws this
episode's values and writes them into the env's private ``MjModel``, the controller gains and the initial
object poses), :meth:`Randomizer.action` on every step (action delay, then action noise) and
:meth:`Randomizer.observe` on every observation (state noise).

Reproducibility: a reset with a seed restarts the randomiser's own generator from ``(seed, SALT)``; each
episode then takes one 63-bit episode key from it, and every knob draws from its own generator
``(episode key, knob index)``. So the same reset seed gives the same episode, switching one knob on does not
change another knob's draws, and the task's ``np_random`` (object placement, instruction) is never touched.
With every knob off nothing is drawn or written: the env is bit-identical to one without randomisation.

Domain randomisation as in Tobin et al. 2017 (visuals) and Peng et al. 2018 (dynamics, latency).
"""

from __future__ import annotations

from collections import deque
from dataclasses import fields

import mujoco
import numpy as np

from robot_rl.config import RandomizeConfig
from robot_rl.config_checks import randomize_problems

SALT = 0x5EED_DA7A
"""Mixed into the reset seed so the randomiser's stream differs from the task's ``np_random``."""
KNOBS = tuple(f.name for f in fields(RandomizeConfig))
"""The knobs in a fixed order; a knob's index picks its generator."""
_DEFAULT_RGBA = np.array([0.5, 0.5, 0.5, 1.0], dtype=np.float32)


def check(cfg: RandomizeConfig) -> None:
    """Validate ``cfg`` as ``load_config`` does.

    Raises:
        ValueError: a range that is not ``[]`` or ``[low, high]``, ``low > high``, or an element out of its
            rule (e.g. a negative scale); names the key ``env.randomize.<knob>``.
    """
    out = randomize_problems(cfg)
    if out:
        raise ValueError("; ".join(out))


def _quat_from_rotvec(v: np.ndarray) -> np.ndarray:
    """(4,) wxyz unit quaternion of the rotation vector ``v`` (3,) rad."""
    angle = float(np.linalg.norm(v))
    if angle == 0.0:
        return np.array([1.0, 0.0, 0.0, 0.0])
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * v / angle])


def _mul_quat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return out


class Randomizer:
    """The ``env.randomize`` draws of one Panda task env (see the module docstring).

    Args:
        env: the :class:`~robot_rl.sim.panda_base.PandaTaskEnv` (its ``model``, ``data``, ``controller``,
            ``action_space`` and gripper actuator are randomised).
        cfg: the ranges; ``None`` or all empty: off.

    Raises:
        ValueError: an invalid range (see :func:`check`).
    """

    def __init__(self, env, cfg: RandomizeConfig | None) -> None:
        self.cfg = cfg if cfg is not None else RandomizeConfig()
        check(self.cfg)
        self.enabled = self.cfg.any_set()
        if not self.enabled:
            return
        self.env = env
        m = env.model
        free = np.flatnonzero(m.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
        self.obj_bodies = m.jnt_bodyid[free]
        self.obj_qpos = m.jnt_qposadr[free]
        self.obj_geoms = [np.flatnonzero(m.geom_bodyid == b) for b in self.obj_bodies]
        robot_root = m.body_rootid[m.jnt_bodyid[m.joint("joint1").id]]
        self.robot_dofs = np.flatnonzero(m.body_rootid[m.dof_bodyid] == robot_root)
        self.tinted_geoms = np.flatnonzero((m.geom_matid < 0) | np.any(m.geom_rgba != _DEFAULT_RGBA, axis=1))
        self._nominal = {
            name: getattr(m, name).copy()
            for name in (
                "body_mass",
                "body_inertia",
                "geom_friction",
                "geom_size",
                "geom_pos",
                "geom_rbound",
                "geom_aabb",
                "dof_damping",
                "dof_armature",
                "actuator_gainprm",
                "actuator_biasprm",
                "cam_pos",
                "cam_quat",
                "cam_fovy",
                "light_pos",
                "light_diffuse",
                "geom_rgba",
                "mat_rgba",
            )
        }
        self._kp, self._kd = env.controller.kp.copy(), env.controller.kd.copy()
        low, high = env.action_space.low.astype(np.float64), env.action_space.high.astype(np.float64)
        self._act_low, self._act_high, self._act_half = low, high, (high - low) / 2.0
        self._base: np.random.Generator | None = None
        self._queue: deque[np.ndarray] = deque()
        self._act_rng = self._obs_rng = np.random.default_rng(0)
        self.action_noise_std = self.obs_noise_std = 0.0
        self.delay = 0
        self.values: dict[str, np.ndarray] = {}
        """This episode's draws, by knob (for logging and tests)."""

    # ----------------------------------------------------------------- draws
    def _draw(self, key: int, knob: str, shape: tuple[int, ...] = ()) -> np.ndarray | None:
        rng_range = getattr(self.cfg, knob)
        if not rng_range:
            return None
        rng = np.random.default_rng([key, KNOBS.index(knob)])
        lo, hi = rng_range
        value = (
            rng.integers(lo, hi + 1, size=shape)
            if knob == "action_delay_steps"
            else rng.uniform(lo, hi, shape)
        )
        self.values[knob] = np.asarray(value)
        return np.asarray(value)

    def reset(self, seed: int | None) -> None:
        """Draw this episode's values and apply them (call after the task placed its objects, before
        ``mj_forward``). ``seed``: the env's reset seed (``None``: continue the randomiser's stream)."""
        if not self.enabled:
            return
        if seed is not None or self._base is None:
            self._base = np.random.default_rng(None if seed is None else [int(seed), SALT])
        key = int(self._base.integers(2**63))
        env, m, d = self.env, self.env.model, self.env.data
        for name, value in self._nominal.items():
            getattr(m, name)[:] = value
        self.values = {}
        n_obj = len(self.obj_bodies)
        mass = self._draw(key, "object_mass_scale", (n_obj,))
        if mass is not None:
            m.body_mass[self.obj_bodies] *= mass
            m.body_inertia[self.obj_bodies] *= mass[:, None]
        friction = self._draw(key, "object_friction_scale", (n_obj,))
        if friction is not None:
            for geoms, s in zip(self.obj_geoms, friction, strict=True):
                m.geom_friction[geoms] *= s
        size = self._draw(key, "object_size_scale", (n_obj,))
        if size is not None:
            for body, geoms, adr, s in zip(self.obj_bodies, self.obj_geoms, self.obj_qpos, size, strict=True):
                for name in ("geom_size", "geom_pos", "geom_rbound", "geom_aabb"):
                    getattr(m, name)[geoms] *= s
                m.body_inertia[body] *= s * s
                d.qpos[adr + 2] *= s  # an object resting on the floor stays resting on it
        pos = self._draw(key, "object_pos_jitter_m", (n_obj, 2))
        if pos is not None:
            for adr, offset in zip(self.obj_qpos, pos, strict=True):
                d.qpos[adr : adr + 2] += offset
        yaw = self._draw(key, "object_yaw_jitter_rad", (n_obj,))
        if yaw is not None:
            for adr, angle in zip(self.obj_qpos, yaw, strict=True):
                d.qpos[adr + 3 : adr + 7] = _mul_quat(
                    _quat_from_rotvec(np.array([0.0, 0.0, angle])), d.qpos[adr + 3 : adr + 7]
                )
        damping = self._draw(key, "joint_damping_scale")
        if damping is not None:
            m.dof_damping[self.robot_dofs] *= damping
        armature = self._draw(key, "armature_scale")
        if armature is not None:
            m.dof_armature[self.robot_dofs] *= armature
        grip = env._grip_act
        kp = self._draw(key, "actuator_kp_scale")
        env.controller.kp = self._kp * (1.0 if kp is None else kp)
        if kp is not None:
            m.actuator_gainprm[grip, 0] *= kp
            m.actuator_biasprm[grip, 1] *= kp
        kd = self._draw(key, "actuator_kd_scale")
        env.controller.kd = self._kd * (1.0 if kd is None else kd)
        if kd is not None:
            m.actuator_biasprm[grip, 2] *= kd
        delay = self._draw(key, "action_delay_steps")
        self.delay = 0 if delay is None else int(delay)
        self._queue = deque(np.zeros(4) for _ in range(self.delay))
        noise = self._draw(key, "action_noise_std")
        self.action_noise_std = 0.0 if noise is None else float(noise)
        noise = self._draw(key, "obs_noise_std")
        self.obs_noise_std = 0.0 if noise is None else float(noise)
        self._act_rng = np.random.default_rng([key, len(KNOBS)])
        self._obs_rng = np.random.default_rng([key, len(KNOBS) + 1])
        self._randomize_visuals(key)

    def _randomize_visuals(self, key: int) -> None:
        m = self.env.model
        cam_pos = self._draw(key, "camera_pos_jitter_m", (m.ncam, 3))
        if cam_pos is not None:
            m.cam_pos += cam_pos
        cam_rot = self._draw(key, "camera_rot_jitter_rad", (m.ncam, 3))
        if cam_rot is not None:
            for i in range(m.ncam):
                m.cam_quat[i] = _mul_quat(m.cam_quat[i], _quat_from_rotvec(cam_rot[i]))
        fovy = self._draw(key, "camera_fovy_jitter_deg", (m.ncam,))
        if fovy is not None:
            m.cam_fovy += fovy
        light = self._draw(key, "light_pos_jitter_m", (m.nlight, 3))
        if light is not None:
            m.light_pos += light
        diffuse = self._draw(key, "light_diffuse_scale", (m.nlight,))
        if diffuse is not None:
            m.light_diffuse *= diffuse[:, None]
        rgba = self._draw(key, "rgba_jitter", (len(self.tinted_geoms) + m.nmat, 3))
        if rgba is not None:
            n = len(self.tinted_geoms)
            m.geom_rgba[self.tinted_geoms, :3] = np.clip(m.geom_rgba[self.tinted_geoms, :3] + rgba[:n], 0, 1)
            m.mat_rgba[:, :3] = np.clip(m.mat_rgba[:, :3] + rgba[n:], 0, 1)

    # ----------------------------------------------------------------- per step
    def action(self, a: np.ndarray) -> np.ndarray:
        """The command applied this step for the checked action ``a`` float64 (4,): the action given
        ``delay`` steps ago (the initial hold command in the first ``delay`` steps), plus this episode's
        action noise (normalised units, clipped to the action box)."""
        if not self.enabled:
            return a
        if self.delay:
            self._queue.append(np.array(a, dtype=np.float64))
            a = self._queue.popleft()
        if self.action_noise_std > 0.0:
            noise = self._act_rng.standard_normal(a.shape) * self.action_noise_std * self._act_half
            a = np.clip(a + noise, self._act_low, self._act_high)
        return a

    def observe(self, state: np.ndarray) -> np.ndarray:
        """``observation.state`` float32 (22,) plus this episode's Gaussian noise (state units)."""
        if not self.enabled or self.obs_noise_std == 0.0:
            return state
        noise = self._obs_rng.standard_normal(state.shape) * self.obs_noise_std
        return (state + noise).astype(np.float32)
