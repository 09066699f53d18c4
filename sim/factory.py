"""Build the env an ``EnvConfig`` describes: the built-in Panda task or any gymnasium id through the
adapter."""

from __future__ import annotations

import gymnasium as gym

from robot_rl.config import EnvConfig

BUILTIN_ID = "robot_rl/PandaPickCube-v0"


def make_env(cfg: EnvConfig, render_mode: str | None = None) -> gym.Env:
    """Build the env described by ``cfg``.

    The built-in id gets :class:`~robot_rl.sim.panda_pick_cube.PandaPickCubeEnv` with the rates, horizon,
    success rule and cameras of ``cfg`` (``cfg.kwargs`` are passed on, e.g. ``torque_every``). Any other id
    goes through :func:`robot_rl.sim.adapter.make_foreign_env` with ``cfg.module``, ``cfg.kwargs`` and
    ``cfg.adapter``. ``env.unwrapped.task`` (built-in) or ``env.task`` (adapter) is the instruction.

    Raises:
        ValueError: invalid built-in env settings (rates, cameras, render mode).
        KeyError: the adapter names an unknown foreign observation key.
        gymnasium.error.Error: an unregistered id.
    """
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


def action_box(cfg: EnvConfig) -> tuple[list[float], list[float]]:
    """The env's action box ``(low, high)`` in its action units, each a list of d floats (one env is built
    and closed). Raises what :func:`make_env` raises."""
    env = make_env(cfg)
    try:
        space = env.action_space
        return [float(v) for v in space.low.reshape(-1)], [float(v) for v in space.high.reshape(-1)]
    finally:
        env.close()
