"""``mjx`` backend of :class:`~robot_rl.sim.batched.BatchedEnv`: N envs of a built-in Panda task stepped
as one ``jit(vmap(control step))`` in MJX (MuJoCo's JAX port) on JAX's default device: the CPU here, a GPU
when ``jax[cuda]`` is installed (MJX rather than MuJoCo Warp: MJX runs on a CPU-only JAX, so CI tests the
same code a GPU runs).

On the device, per control step and env: the end-effector target update, the differential IK, the arm's
position actuators over ``n_substeps`` physics steps, observations, goal, success hold, reward, truncation
(:mod:`robot_rl.sim.mjx_physics`, :mod:`robot_rl.sim.mjx_tasks`); no host code runs inside a step. Resets
place the objects on the host with the single env's own code and random streams (a template
:class:`~robot_rl.sim.panda_base.PandaTaskEnv` given env i's generators in turn), so env i's initial states
equal ``mujoco_cpu``'s for the same seeds, then finish on the device (``mjx.forward``).

Same semantics as ``mujoco_cpu`` with ``env.kwargs.controller=actuator`` (the controller is always the
actuator one here), except: float32 physics and MJX's collision routines (trajectories drift apart once
contacts start; tests/sim/test_sim_mjx.py states the tolerances), mesh geoms (arm links, gripper hulls) do not
collide (:func:`~robot_rl.sim.mjx_physics.restrict_contacts`), and a diverged simulation is detected by
non-finite ``qpos``/``qvel`` (``info["sim_unstable"]``) instead of MuJoCo's warning. Not supported (they
raise ``ValueError``): cameras (state only; MJX's ray-cast renderer is not wired in), ``env.tasks``
(one task per batch), the drawer task, and the ``env.randomize`` knobs drawn per step or changing shapes
(``action_delay_steps``, ``action_noise_std``, ``obs_noise_std``, ``object_size_scale``); the other
dynamics knobs are per-env model fields (masses, inertias, friction, damping, armature, gains).

Arrays come back as numpy through the :class:`~robot_rl.sim.batched.BatchedEnv` API (``step``,
``step_chunk``, ``reset``): on a GPU that is one device-to-host copy of the observations per step, and one
host-to-device copy of the actions. :meth:`MjxBatchedEnv.step_device` and
:meth:`MjxBatchedEnv.observation_device` are the path without them: torch tensors sharing the sim's
buffers on its device (DLPack, :mod:`robot_rl.sim.mjx_dlpack`), so a torch policy on that device reads the
observations and returns its actions with no copy; what still crosses to the host there is the resets
(placement runs on the host, once per finished episode).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from robot_rl import keys
from robot_rl.config import EnvConfig
from robot_rl.sim.batched import BatchedEnv, seed_list
from robot_rl.sim.mjx_physics import (  # MuJoCo and numpy only: JAX loads in the functions that run it
    ArmSpec,
    configure_xla,
    control_step,
    put_model,
    restrict_contacts,
    state_obs,
)
from robot_rl.sim.mjx_tasks import BUILDERS, choice_of, jax_task
from robot_rl.sim.panda_base import MAX_LAG_M, WORKSPACE_HIGH, WORKSPACE_LOW
from robot_rl.sim.tasks import build_task_env

if TYPE_CHECKING:
    import torch

PARAM_FIELDS = (
    "body_mass",
    "body_inertia",
    "geom_friction",
    "dof_damping",
    "dof_armature",
    "actuator_gainprm",
    "actuator_biasprm",
)
"""Model fields held per env (``env.randomize`` draws them per episode; the arm's gains live in the last
two)."""
UNSUPPORTED_KNOBS = ("action_delay_steps", "action_noise_std", "obs_noise_std", "object_size_scale")
"""``env.randomize`` knobs this backend refuses (module docstring)."""

_COMPILED: dict[tuple, tuple] = {}
"""Jitted (reset, merge, step) functions per task settings, shared by every env of this process."""


def _where_rows(mask, new, old):
    import jax
    import jax.numpy as jnp

    def pick(n, o):
        return jnp.where(mask.reshape((-1,) + (1,) * (n.ndim - 1)), n, o)

    return jax.tree_util.tree_map(pick, new, old)


@dataclass
class DeviceStep:
    """What :meth:`MjxBatchedEnv.step_device` returns: torch tensors on the sim's device, sharing its
    buffers (read-only).

    Attributes:
        obs: ``observation.state`` (N, 22) and ``observation.environment_state`` (N, E) float32, after the
            step (no auto-reset: an ended env's row is its episode's last observation).
        reward: float32 (N,). terminated: bool (N,) success. truncated: bool (N,) horizon or unstable.
        sim_unstable: bool (N,) non-finite ``qpos``/``qvel``.
    """

    obs: dict[str, torch.Tensor]
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    sim_unstable: torch.Tensor


def _build_functions(template, task_id: str, reward_mode: str):
    """Jitted ``reset(qpos, mocap, choice, params)``, ``merge(mask, new, old)`` and
    ``step(state, actions, active)`` of ``template``'s task (all N-batched)."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    m = template.model.__copy__()
    restrict_contacts(m)
    mx = put_model(m)
    d0 = mjx.make_data(mx)
    arm = ArmSpec.of(template)
    task = jax_task(task_id, template)
    pad = template.env_state_size - template.env_state_dim
    ws = (jnp.asarray(WORKSPACE_LOW, jnp.float32), jnp.asarray(WORKSPACE_HIGH, jnp.float32))
    hold, horizon = template.success_hold_steps, template.max_episode_steps

    def observe(d, choice):
        env_state = jnp.concatenate([task.env_state(d, choice), jnp.zeros(pad)]).astype(jnp.float32)
        return {keys.STATE: jnp.nan_to_num(state_obs(d, arm)), keys.ENV_STATE: jnp.nan_to_num(env_state)}

    def reset_one(qpos, mocap, choice, params):
        d = mjx.forward(mx.replace(**params), d0.replace(qpos=qpos, mocap_pos=mocap))
        state = {"d": d, "target": d.site_xpos[arm.site], "steps": 0, "held": 0, "choice": choice}
        return {**state, "params": params}, observe(d, choice)

    def step_one(s, action):
        m_i = mx.replace(**s["params"])
        d, target = control_step(m_i, s["d"], s["target"], action, arm, ws, MAX_LAG_M)
        steps = s["steps"] + 1
        held = jnp.where(task.goal(d, s["choice"]), s["held"] + 1, 0)
        success = held >= hold
        if reward_mode == "dense":
            reward = task.dense(d, s["choice"])
        else:
            reward = success.astype(jnp.float32)
        unstable = ~(jnp.isfinite(d.qpos).all() & jnp.isfinite(d.qvel).all())
        truncated = (~success & (steps >= horizon)) | unstable
        new = {**s, "d": d, "target": target, "steps": steps, "held": held}
        return new, observe(d, s["choice"]), reward, success, truncated, unstable

    def step(state, actions, active):
        new, obs, reward, success, truncated, unstable = jax.vmap(step_one)(state, actions)
        return _where_rows(active, new, state), obs, reward, success & active, truncated & active, unstable

    return jax.jit(jax.vmap(reset_one)), jax.jit(_where_rows), jax.jit(step)


class MjxBatchedEnv(BatchedEnv):
    """N envs of a built-in Panda task in MJX; see the module docstring.

    Args:
        cfg: env config with a built-in id of :data:`robot_rl.sim.mjx_tasks.BUILDERS` (rates, horizon,
            success rule, ``spawn_region``, ``environment_state_size``, ``randomize``; ``kwargs``:
            ``reward`` and ``controller``, which must be ``actuator`` if given); no cameras, robot or tasks.
        num_envs: N.

    Raises:
        ImportError: ``mujoco-mjx`` or ``jax`` is missing (names the pip extra).
        ValueError: an unsupported task, setting or ``env.randomize`` knob (names the key).
    """

    def __init__(self, cfg: EnvConfig, num_envs: int) -> None:
        if importlib.util.find_spec("jax") is None or importlib.util.find_spec("mujoco.mjx") is None:
            raise ImportError("env.backend=mjx needs MJX and JAX: `pip install -e '.[mjx]'`")
        configure_xla()
        problems = []
        if cfg.id not in BUILDERS:
            problems.append(f"env.id={cfg.id!r} (mjx runs {', '.join(BUILDERS)})")
        if cfg.robot is not None or cfg.tasks or cfg.cameras:
            problems.append(
                "env.robot, env.tasks and env.cameras must be unset (mjx is state-only, one task)"
            )
        if cfg.kwargs.get("controller", "actuator") != "actuator":
            problems.append("env.kwargs.controller must be 'actuator' (the PD runs in MuJoCo's actuators)")
        knobs = [k for k in UNSUPPORTED_KNOBS if getattr(cfg.randomize, k)]
        if knobs:
            problems.append(f"env.randomize.{', env.randomize.'.join(knobs)} are not supported")
        if problems:
            raise ValueError("env.backend=mjx: " + "; ".join(problems))
        kwargs = {k: v for k, v in cfg.kwargs.items() if k != "torque_every"}
        self._template = build_task_env(replace(cfg, kwargs={**kwargs, "controller": "actuator"}), cameras=[])
        t = self._template
        key = (cfg.id, t.n_substeps, t.physics_hz, t.max_episode_steps, t.success_hold_steps,
               t.lift_height_m, t.env_state_size, t.reward_mode)  # fmt: skip
        if key not in _COMPILED:
            _COMPILED[key] = _build_functions(t, cfg.id, t.reward_mode)
        self._reset_fn, self._merge_fn, self._step_fn = _COMPILED[key]
        self.num_envs = num_envs
        self.task = t.task
        self.single_action_space = t.action_space
        self.single_observation_space = spaces.Dict(
            {k: t.observation_space[k] for k in (keys.STATE, keys.ENV_STATE)}
        )
        self._rngs: list[Any] = [None] * num_envs
        self._rand_bases: list[Any] = [None] * num_envs
        self._tasks = [t.task] * num_envs
        m = t.model
        self._qpos = np.tile(m.qpos0, (num_envs, 1)).astype(np.float32)
        self._mocap = np.zeros((num_envs, m.nmocap, 3), np.float32)
        self._choice = np.zeros(num_envs, np.int32)
        self._params = {
            f: np.tile(getattr(m, f), (num_envs,) + (1,) * getattr(m, f).ndim) for f in PARAM_FIELDS
        }
        self._params = {f: v.astype(np.float32) for f, v in self._params.items()}
        self._state = None
        self._obs: dict[str, Any] | None = None  # the current observations, JAX arrays on the device
        self._all = None  # (N,) True on the device: step_device's active mask
        import jax

        self._device = jax.devices()[0]

    # ----------------------------------------------------------------- host-side placement
    def _place(self, i: int, seed: int | None) -> None:
        """Reset the template with env i's random streams (and ``seed``); keep what the device needs."""
        t = self._template
        t._np_random = self._rngs[i]
        if t.randomizer.enabled:
            t.randomizer._base = self._rand_bases[i]
        t.reset(seed=seed)
        self._rngs[i] = t.np_random
        if t.randomizer.enabled:
            self._rand_bases[i] = t.randomizer._base
        self._tasks[i] = t.task
        self._qpos[i] = t.data.qpos
        self._mocap[i] = t.data.mocap_pos
        self._choice[i] = choice_of(t)
        for f in PARAM_FIELDS:
            self._params[f][i] = getattr(t.model, f)
        arm = t.controller.ctrl_adr
        self._params["actuator_gainprm"][i, arm, 0] = t.controller.kp
        self._params["actuator_biasprm"][i, arm, 1] = -t.controller.kp
        self._params["actuator_biasprm"][i, arm, 2] = -t.controller.kd

    def _put(self, array: np.ndarray):
        """``array`` on the sim's device, committed there: every input of the jitted programs is, as the
        DLPack actions of :meth:`step_device` are, so both paths run one compiled program (JAX compiles
        committed and uncommitted inputs separately)."""
        import jax

        return jax.device_put(array, self._device)

    def _device_reset(self, mask: np.ndarray) -> None:
        fresh = self._reset_fn(
            self._put(self._qpos), self._put(self._mocap), self._put(self._choice),
            {f: self._put(v) for f, v in self._params.items()},
        )  # fmt: skip
        if self._state is None:
            self._state, self._obs = fresh
        else:
            self._state, self._obs = self._merge_fn(self._put(mask), fresh, (self._state, self._obs))

    # ----------------------------------------------------------------- BatchedEnv
    def reset(self, *, seed=None, options: dict[str, Any] | None = None):
        seeds = seed_list(seed, self.num_envs)
        mask = (options or {}).get("reset_mask")
        mask = np.ones(self.num_envs, bool) if mask is None else np.asarray(mask, dtype=bool)
        if self._state is None and not mask.all():
            raise RuntimeError("mjx batched env: the first reset() must reset every env")
        for i in np.flatnonzero(mask):
            self._place(int(i), seeds[i])
        self._device_reset(mask)
        self.task = self._tasks[0]
        obs = {k: np.array(v) for k, v in self._obs.items()}
        return obs, {"is_success": np.zeros(self.num_envs, dtype=bool)}

    def tasks(self) -> list[str]:
        """Each env's instruction for its current episode (N strings)."""
        return list(self._tasks)

    def _step_active(self, actions: np.ndarray, active: np.ndarray):

        if self._state is None:
            raise RuntimeError("mjx batched env: call reset() (all envs) before step()")
        mask = self._put(active)
        self._state, obs, reward, success, truncated, unstable = self._step_fn(
            self._state, self._put(np.asarray(actions, np.float32)), mask
        )
        self._obs = obs if active.all() else self._merge_fn(mask, obs, self._obs)
        out = {k: np.array(v) for k, v in self._obs.items()}
        raw = {"is_success": np.array(success), "sim_unstable": np.array(unstable) & active}
        return out, np.array(reward, np.float64), np.array(success), np.array(truncated), raw

    def observation_device(self) -> dict[str, torch.Tensor]:
        """The current observations as torch tensors on the sim's device sharing its buffers (no copy;
        read-only): ``observation.state`` (N, 22), ``observation.environment_state`` (N, E) float32.

        Raises:
            RuntimeError: before the first :meth:`reset`.
        """
        from robot_rl.sim.mjx_dlpack import to_torch  # torch, which the simulator otherwise never loads

        if self._obs is None:
            raise RuntimeError("mjx batched env: call reset() (all envs) before observation_device()")
        return {k: to_torch(v) for k, v in self._obs.items()}

    def step_device(self, actions: torch.Tensor) -> DeviceStep:
        """One control step of every env from a torch tensor on the sim's device, without the host: the
        actions enter the sim and the results leave it through DLPack (:mod:`robot_rl.sim.mjx_dlpack`).
        No auto-reset: reset the ended envs with ``reset(options={"reset_mask": ...})`` (host placement),
        then read :meth:`observation_device`.

        Args:
            actions: torch float32 (N, 4) ``[dx, dy, dz, grip]`` in the single env's units (m, closure in
                [0, 1]); not checked against the bounds on the device (the host path checks them).

        Raises:
            ValueError: ``actions``' shape is not (N, 4).
            RuntimeError: before the first :meth:`reset`.
        """
        import jax.numpy as jnp

        from robot_rl.sim.mjx_dlpack import to_jax, to_torch  # torch, as in observation_device

        if self._state is None:
            raise RuntimeError("mjx batched env: call reset() (all envs) before step_device()")
        shape = (self.num_envs, *self.single_action_space.shape)
        if tuple(actions.shape) != shape:
            raise ValueError(f"step_device: actions must have shape {shape}, got {tuple(actions.shape)}")
        if self._all is None:
            self._all = self._put(np.ones(self.num_envs, bool))
        a = to_jax(actions)
        if a.dtype != jnp.float32:
            a = a.astype(jnp.float32)
        state, obs, reward, success, truncated, unstable = self._step_fn(self._state, a, self._all)
        self._state, self._obs = state, obs
        obs = {k: to_torch(v) for k, v in self._obs.items()}
        return DeviceStep(obs, to_torch(reward), to_torch(success), to_torch(truncated), to_torch(unstable))

    def _reset_envs(self, mask: np.ndarray):
        obs, _ = self.reset(options={"reset_mask": mask})
        return obs

    def close(self) -> None:
        self._state = self._obs = None
        self._template.close()
