"""The edge's builder of an online actor's parts (:class:`robot_rl.runtime.actor_parts.ActorParts`): its env
on the simulator or robot of ``cfg.env`` behind the reward hook, and its intervention device; and of the
learner's description of that env (:func:`describe_env`).

``robot-rl online`` (local processes and Ray workers) and the ROS 2 ``actor_node`` (with its own device) call
it and pass the parts to :class:`robot_rl.runtime.actor.Actor`, the description to
:class:`robot_rl.runtime.learner.Learner`. It is an edge module (tests/test_layering.py ``EDGE``): it imports
the simulator and the teleop devices at module level, and only the wiring (the CLI, the stages) and the ROS 2
nodes import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from robot_rl.config import PipelineConfig
from robot_rl.policies import factory as agents
from robot_rl.rewards.registry import load_critic
from robot_rl.rewards.shaping import CriticRewardWrapper, shaping_gamma
from robot_rl.run_dir import RunDir
from robot_rl.runtime.actor_parts import ActorParts
from robot_rl.runtime.env_info import EnvInfo
from robot_rl.runtime.intervention import InterventionDevice
from robot_rl.sim import make_batched_env, make_env
from robot_rl.sim.batched_rollout import RolloutView
from robot_rl.teleop import make_device

DeviceFactory = Callable[[PipelineConfig, np.ndarray, np.ndarray, int, str], "InterventionDevice | None"]
"""``factory(cfg, action_low, action_high, actor_id, task_id)``: the device that drives env 0, or None."""


def config_device(
    cfg: PipelineConfig, low: np.ndarray, high: np.ndarray, actor_id: int, task_id: str
) -> InterventionDevice | None:
    """The device ``intervention.device`` names (:func:`robot_rl.teleop.make_device`; None for ``none``),
    paced to ``env.control_hz``, the simulated human playing task ``task_id``."""
    if cfg.intervention.device == "none":
        return None
    return make_device(
        cfg.intervention, low, high, actor_id=actor_id, control_hz=cfg.env.control_hz, task_id=task_id
    )


def actor_task_ids(cfg: PipelineConfig, actor_id: int) -> list[str]:
    """``env.tasks`` rotated by the actor id: env i of actor k runs ``env.tasks[(k + i) % T]``, so the device
    of actor k (on env 0) drives task ``k % T`` and T actors' devices cover every task."""
    k = actor_id % len(cfg.env.tasks)
    return list(cfg.env.tasks[k:]) + list(cfg.env.tasks[:k])


def build_actor_parts(
    cfg: PipelineConfig, actor_id: int, device: DeviceFactory = config_device
) -> ActorParts:
    """Actor ``actor_id``'s parts: one env of ``cfg.env`` behind the reward hook (:func:`reward_hook`), or
    with ``online.envs_per_actor`` = N > 1 the in-process ``mujoco_cpu`` batch of N envs
    (:class:`~robot_rl.sim.batched_rollout.RolloutView`; with ``env.tasks`` env i runs
    :func:`actor_task_ids`'s task i); and ``device(cfg, low, high, actor_id, task_id)`` for env 0's task.

    Raises:
        DeviceError: the configured intervention device is unavailable (the env is closed first).
        ValueError: unknown ``intervention.device``; N > 1 with an env that is not a built-in simulated task.
    """
    if cfg.online.envs_per_actor > 1:
        task_ids = actor_task_ids(cfg, actor_id) if cfg.env.tasks else [cfg.env.id]
        env_cfg = replace(cfg.env, tasks=task_ids) if cfg.env.tasks else cfg.env
        backend = "mjx" if cfg.env.backend == "mjx" else "mujoco_cpu"
        env = RolloutView(make_batched_env(env_cfg, cfg.online.envs_per_actor, backend=backend))
        task, robot = env.env.task, None
        spaces, action_space = env.single_observation_space.spaces, env.single_action_space
    else:
        env = make_env(cfg.env)
        task = getattr(env.unwrapped, "task", getattr(env, "task", ""))
        env = reward_hook(cfg, env, task)
        task_ids, robot = [cfg.env.id], getattr(env.unwrapped, "robot", None)
        spaces, action_space = env.observation_space.spaces, env.action_space
    low, high = action_space.low.astype(np.float32), action_space.high.astype(np.float32)
    try:
        human = device(cfg, low, high, actor_id, task_ids[0])
    except BaseException:
        env.close()
        raise
    return ActorParts(env, spaces, action_space, human, task, robot, agents=agents)


def describe_env(cfg: PipelineConfig) -> EnvInfo:
    """The env's observation shapes and action box (:class:`~robot_rl.runtime.env_info.EnvInfo`); one env is
    built and closed: ``cfg.env``'s, or with ``env.tasks`` the multi-task batch the actors step, whose
    observations may leave ``environment_state`` out.

    Raises:
        ValueError / ImportError: as :func:`robot_rl.sim.make_env` (unknown id, bad settings, a missing
            extra).
    """
    if cfg.env.tasks:
        env = make_batched_env(cfg.env, len(cfg.env.tasks), backend="mujoco_cpu")
        spaces = (env.single_observation_space, env.single_action_space)
    else:
        env = make_env(cfg.env)
        spaces = (env.observation_space, env.action_space)
    try:
        return EnvInfo.of(*spaces)
    finally:
        env.close()


def reward_hook(cfg: PipelineConfig, env, task: str):
    """The reward the learner sees: the env's success signal (``reward.mode=success``: ``env`` itself), or a
    progress critic's (:class:`robot_rl.rewards.shaping.CriticRewardWrapper`, the critic of
    ``reward_model.checkpoint`` or ``<run_dir>/critic``)."""
    if cfg.reward.mode == "success":
        return env
    critic_dir = cfg.reward_model.checkpoint or str(RunDir(cfg.run_dir).root / "critic")
    gamma = shaping_gamma(cfg, "online")
    return CriticRewardWrapper(env, load_critic(critic_dir), cfg.reward, task, gamma, cfg.reward_model.rule)
