"""The built-in task suite: gymnasium ids -> env class and scripted expert, and the one place an
``EnvConfig`` becomes a built-in env (used by :func:`robot_rl.sim.make_env` and the ``mujoco_cpu``
batched backend).

=================================  ==========================================  ===========================
id                                 instruction                                 note
=================================  ==========================================  ===========================
``robot_rl/PandaPickCube-v0``      Pick up the cube and lift it.               the original task
``robot_rl/PandaPickColour-v0``    Pick up the <red|green|blue> cube and ...   colour drawn per episode
``robot_rl/PandaPlaceInBin-v0``    Put the cube in the bin.
``robot_rl/PandaStack-v0``         Stack the red cube on the blue cube.
``robot_rl/PandaPushToTarget-v0``  Push the cube onto the green target.
``robot_rl/PandaOpenDrawer-v0``    Open the drawer.
=================================  ==========================================  ===========================
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from robot_rl.config import EnvConfig


@dataclass(frozen=True)
class TaskSpec:
    """A suite task: ``env`` and ``expert`` as ``"module:Class"`` paths (imported when used)."""

    env: str
    expert: str


TASKS: dict[str, TaskSpec] = {
    "robot_rl/PandaPickCube-v0": TaskSpec(
        "robot_rl.sim.panda_pick_cube:PandaPickCubeEnv", "robot_rl.sim.expert:PickCubeExpert"
    ),
    "robot_rl/PandaPickColour-v0": TaskSpec(
        "robot_rl.sim.panda_tasks:PandaPickColourEnv", "robot_rl.sim.task_experts:PickColourExpert"
    ),
    "robot_rl/PandaPlaceInBin-v0": TaskSpec(
        "robot_rl.sim.panda_tasks:PandaPlaceInBinEnv", "robot_rl.sim.task_experts:PlaceInBinExpert"
    ),
    "robot_rl/PandaStack-v0": TaskSpec(
        "robot_rl.sim.panda_tasks:PandaStackEnv", "robot_rl.sim.task_experts:StackExpert"
    ),
    "robot_rl/PandaPushToTarget-v0": TaskSpec(
        "robot_rl.sim.panda_tasks:PandaPushToTargetEnv", "robot_rl.sim.task_experts:PushExpert"
    ),
    "robot_rl/PandaOpenDrawer-v0": TaskSpec(
        "robot_rl.sim.panda_tasks:PandaOpenDrawerEnv", "robot_rl.sim.task_experts:OpenDrawerExpert"
    ),
}
"""Every built-in task, by gymnasium id."""

MANISKILL_EXPERTS: dict[str, str] = {
    "PickCube-v1": "robot_rl.sim.maniskill_experts:PickCubeV1Expert",
    "PushCube-v1": "robot_rl.sim.maniskill_experts:PushCubeV1Expert",
    "StackCube-v1": "robot_rl.sim.maniskill_experts:StackCubeV1Expert",
}
"""Scripted experts of ManiSkill3 tasks (``env.backend=maniskill``), by ManiSkill id."""


def _load(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _spec(task_id: str) -> TaskSpec:
    if task_id not in TASKS:
        raise ValueError(f"unknown built-in task {task_id!r}; the suite has {', '.join(TASKS)}")
    return TASKS[task_id]


def task_env_class(task_id: str) -> type:
    """The :class:`~robot_rl.sim.panda_base.PandaTaskEnv` subclass of ``task_id``.

    Raises:
        ValueError: ``task_id`` is not a suite task (lists the suite).
    """
    return _load(_spec(task_id).env)


def has_expert(task_id: str) -> bool:
    """True when ``collect`` has a scripted expert for ``task_id`` (a suite task or a ManiSkill task of
    :data:`MANISKILL_EXPERTS`)."""
    return task_id in TASKS or task_id in MANISKILL_EXPERTS


def make_expert(task_id: str, noise: float = 0.0, seed: int = 0):
    """A fresh scripted expert of ``task_id`` (``reset(seed)``, ``act(obs) -> float32 (4,)``; pick-colour's
    reads ``obs["task"]``); ManiSkill ids of :data:`MANISKILL_EXPERTS` too.

    Raises:
        ValueError: ``task_id`` has no expert (lists the suite), or ``noise`` < 0.
    """
    path = MANISKILL_EXPERTS.get(task_id) or _spec(task_id).expert
    return _load(path)(noise=noise, seed=seed)


def build_task_env(cfg: EnvConfig, render_mode: str | None = None, cameras: list[str] | None = None):
    """The suite env ``cfg.id`` with the rates, horizon, success rule and cameras of ``cfg`` (``cameras``
    overrides ``cfg.cameras``; ``cfg.kwargs`` are passed on, e.g. ``torque_every``, ``reward``; so are
    ``cfg.randomize``, ``cfg.spawn_region`` and ``cfg.environment_state_size``).

    Raises:
        ValueError: ``cfg.id`` is not a suite task, or invalid env settings (rates, cameras, render mode,
            ``spawn_region``, ``environment_state_size``).
    """
    cls = task_env_class(cfg.id)
    return cls(
        control_hz=cfg.control_hz,
        physics_hz=cfg.physics_hz,
        max_episode_steps=cfg.max_episode_steps,
        success_hold_steps=cfg.success_hold_steps,
        lift_height_m=cfg.lift_height_m,
        cameras=list(cfg.cameras if cameras is None else cameras),
        image_size=cfg.image_size,
        render_mode=render_mode,
        randomize=cfg.randomize,
        spawn_region=cfg.spawn_region or None,
        environment_state_size=cfg.environment_state_size,
        **cfg.kwargs,
    )
