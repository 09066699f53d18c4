"""Build the env an ``EnvConfig`` describes: the built-in Panda task or any gymnasium id through the
adapter."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robot_rl.config import EnvConfig
from robot_rl.sim.gl_env import check_mujoco_gl

BUILTIN_ID = "robot_rl/PandaPickCube-v0"


def make_env(cfg: EnvConfig, render_mode: str | None = None) -> gym.Env:
    """Build the env described by ``cfg``.

    The built-in id gets :class:`~robot_rl.sim.panda_pick_cube.PandaPickCubeEnv` with the rates, horizon,
    success rule and cameras of ``cfg`` (``cfg.kwargs`` are passed on, e.g. ``torque_every``). Any other id
    goes through :func:`robot_rl.sim.adapter.make_foreign_env` with ``cfg.module``, ``cfg.kwargs`` and
    ``cfg.adapter``. ``env.unwrapped.task`` (built-in) or ``env.task`` (adapter) is the instruction.
    With ``cfg.robot`` set, the built-in task runs on that robot instead:
    :class:`robot_rl.hardware.robot_env.RobotEnv` (same keys and spaces; it connects the robot).

    Raises:
        ValueError: invalid built-in env settings (rates, cameras, render mode), or ``cfg.robot`` with a
            foreign id.
        HardwareError: the robot or a camera cannot be reached (names it).
        KeyError: the adapter names an unknown foreign observation key.
        gymnasium.error.Error: an unregistered id.
        RendererError: ``MUJOCO_GL`` is set to a value MuJoCo refuses (names the valid ones).
    """
    check_mujoco_gl()  # before anything imports mujoco
    if cfg.robot is not None:
        if cfg.id != BUILTIN_ID:
            raise ValueError(f"env.robot runs the built-in task {BUILTIN_ID}, not env.id={cfg.id!r}")
        from robot_rl.hardware.robot_env import RobotEnv

        return RobotEnv.from_config(cfg, render_mode=render_mode)
    if cfg.id == BUILTIN_ID:
        from robot_rl.sim.panda_pick_cube import PandaPickCubeEnv

        # Constructed directly: gym.make would swallow max_episode_steps into its own TimeLimit wrapper.
        return PandaPickCubeEnv(
            control_hz=cfg.control_hz,
            physics_hz=cfg.physics_hz,
            max_episode_steps=cfg.max_episode_steps,
            success_hold_steps=cfg.success_hold_steps,
            lift_height_m=cfg.lift_height_m,
            cameras=list(cfg.cameras),
            image_size=cfg.image_size,
            render_mode=render_mode,
            **cfg.kwargs,
        )
    from robot_rl.sim.adapter import make_foreign_env

    return make_foreign_env(cfg.id, cfg.module, cfg.adapter, dict(cfg.kwargs), render_mode)


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
