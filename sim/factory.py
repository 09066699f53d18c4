"""Build the env an ``EnvConfig`` describes: the built-in Panda task or any gymnasium id through the
adapter."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np

from robot_rl.config import AdapterConfig, EnvConfig, PipelineConfig
from robot_rl.hardware.robot_env import RobotEnv
from robot_rl.known_warnings import filter_known_warnings
from robot_rl.sim.adapter import env_rate_hz, make_foreign_env
from robot_rl.sim.batched_maniskill import ManiSkillEnv
from robot_rl.sim.gl_env import check_mujoco_gl
from robot_rl.sim.tasks import TASKS, build_task_env

BUILTIN_ID = "robot_rl/PandaPickCube-v0"


def make_env(cfg: EnvConfig, render_mode: str | None = None) -> gym.Env:
    """Build the env described by ``cfg``.

    A built-in id (the task suite, :data:`robot_rl.sim.tasks.TASKS`, e.g.
    :class:`~robot_rl.sim.panda_pick_cube.PandaPickCubeEnv`) gets its env with the rates, horizon,
    success rule and cameras of ``cfg`` (``cfg.kwargs`` are passed on, e.g. ``torque_every``). Any other id
    goes through :func:`robot_rl.sim.adapter.make_foreign_env` with ``cfg.module``, ``cfg.kwargs`` and
    ``cfg.adapter``. ``env.unwrapped.task`` (built-in) or ``env.task`` (adapter) is the instruction.
    With ``cfg.robot`` set, the built-in task runs on that robot instead:
    :class:`robot_rl.hardware.robot_env.RobotEnv` (same keys and spaces; it connects the robot). With
    ``cfg.backend == "maniskill"`` the id is a ManiSkill3 task, built as
    :class:`robot_rl.sim.batched_maniskill.ManiSkillEnv` (the backend's keys, spaces and rate).

    Raises:
        ValueError: invalid built-in env settings (rates, cameras, render mode, ``cfg.randomize``),
            ``cfg.robot`` with a foreign id, or ``cfg.randomize`` or ``cfg.spawn_region`` set for a
            foreign id.
        HardwareError: the robot or a camera cannot be reached (names it).
        AdapterError: the adapter does not fit the foreign env (unknown key, wrong shape; a ConfigError).
        gymnasium.error.Error: an unregistered id.
        RendererError: ``MUJOCO_GL`` is set to a value MuJoCo refuses (names the valid ones).
    """
    check_mujoco_gl()  # before anything imports mujoco
    filter_known_warnings()  # also in spawned env workers
    if cfg.robot is not None:
        if cfg.id != BUILTIN_ID:
            raise ValueError(f"env.robot runs the built-in task {BUILTIN_ID}, not env.id={cfg.id!r}")

        return RobotEnv.from_config(cfg, render_mode=render_mode)
    if cfg.backend == "maniskill":
        return ManiSkillEnv(cfg, render_mode)
    if cfg.id in TASKS:
        # Constructed directly: gym.make would swallow max_episode_steps into its own TimeLimit wrapper.
        return build_task_env(cfg, render_mode)
    if cfg.randomize is not None and cfg.randomize.any_set():
        raise ValueError(f"env.randomize randomises the built-in tasks only, not env.id={cfg.id!r}; unset it")
    if cfg.spawn_region:
        raise ValueError(f"env.spawn_region places the built-in tasks' objects only, not env.id={cfg.id!r}")
    if cfg.environment_state_size:
        raise ValueError(
            f"env.environment_state_size pads the built-in tasks' state only, not env.id={cfg.id!r}"
        )
    return make_foreign_env(cfg.id, cfg.module, cfg.adapter, dict(cfg.kwargs), render_mode)


SIM_DRIVERS = ("sim", "sim_server")
"""Robot drivers that run the built-in MuJoCo Panda (in process or behind the robot server)."""


def robot_type(cfg: EnvConfig) -> str:
    """The robot model written as ``robot_type`` into a dataset's ``info.json``: ``cfg.robot_type`` when set;
    else ``panda`` for the built-in tasks (also behind the ``sim``/``sim_server`` robot drivers), the
    driver's name for a real robot (``so101``, ``ur``, ``xarm``, ``franka``, ``ros2``), the env id for a
    foreign env."""
    if cfg.robot_type:
        return cfg.robot_type
    if cfg.robot is not None:
        return "panda" if cfg.robot.driver in SIM_DRIVERS else cfg.robot.driver
    return "panda" if cfg.id in TASKS else cfg.id


def box_bounds(space: gym.spaces.Box) -> dict[str, list[float]]:
    """``{"action_low": [...], "action_high": [...]}`` (d floats each, the env's action units) for a
    bounded action space, the form ``PolicyConfig.action_low/high`` take; ``{}`` when any bound is infinite
    (the policy then falls back to the data's min/max)."""
    low, high = space.low.reshape(-1), space.high.reshape(-1)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        return {}
    return {"action_low": [float(v) for v in low], "action_high": [float(v) for v in high]}


def action_box(cfg: EnvConfig) -> dict[str, list[float]]:
    """:func:`box_bounds` of the env's action space (one env is built and closed). Raises what
    :func:`make_env` raises."""
    env = make_env(cfg)
    try:
        return box_bounds(env.action_space)
    finally:
        env.close()


def resolve_control_hz(
    cfg: PipelineConfig, env: gym.Env | gym.vector.VectorEnv | None = None, dataset_fps: float | None = None
) -> PipelineConfig:
    """``cfg`` with ``env.control_hz`` set to the env's own control rate (Hz), which ``cycle_time_s``,
    videos and online episode metadata divide by.

    The built-in tasks and a robot run at ``env.control_hz`` (returned unchanged). A foreign env runs at
    ``env.adapter.fps`` if set, else at its ``metadata["render_fps"]`` (read from ``env`` if given, a
    single or vector env of ``cfg.env``, else from one env built and closed), else at ``dataset_fps``
    (the fps of the dataset the policy was trained on).

    Raises:
        AdapterError: a foreign env with none of the three (names ``env.adapter.fps``).
        Whatever :func:`make_env` raises when an env is built.
    """
    if cfg.env.id in TASKS or cfg.env.robot is not None:
        return cfg
    adapter = cfg.env.adapter or AdapterConfig()
    if adapter.fps:
        rate = float(adapter.fps)
    elif env is not None:
        rate = env_rate_hz(env, adapter, dataset_fps)
    else:
        built = make_env(cfg.env)
        try:
            rate = env_rate_hz(built, adapter, dataset_fps)
        finally:
            built.close()
    return replace(cfg, env=replace(cfg.env, control_hz=rate))
