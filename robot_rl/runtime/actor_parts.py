"""What an online actor acts with, built at the edge and passed in: the runtime builds no env and no device
and imports no policy networks.

The edge (``robot-rl online``, the Ray workers it starts, the ROS 2 ``actor_node``) calls a builder
(:func:`robot_rl.actor_build.build_actor_parts`, or one of its own) with the run's config and the actor's
id; :class:`~robot_rl.runtime.actor.Actor` takes the result. So :mod:`robot_rl.runtime` imports neither the
simulator (:mod:`robot_rl.sim`) nor the teleop devices (:mod:`robot_rl.teleop`) nor the policies
(:mod:`robot_rl.policies`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from robot_rl.algos.registry import AgentFactory
from robot_rl.config import PipelineConfig
from robot_rl.runtime.intervention import InterventionDevice


@dataclass
class ActorParts:
    """An actor's env and intervention device.

    ``env``: with one env (``online.envs_per_actor`` = 1) a gymnasium env (behind the reward hook); with N > 1
    the DISABLED-autoreset batch :class:`~robot_rl.sim.batched_rollout.RolloutView` (``end(mask)``,
    ``env.tasks()``). ``observation_space``: key -> Box of one env's observation; ``action_space``: Box (d,)
    in the env's action units. ``device``: None without intervention (it drives env 0). ``task``: the env's
    fixed instruction ("" when it has none). ``robot``: the robot the env drives (``estop`` /
    ``reset_estop``), None in simulation. ``agents``: the agent factory the actor loads the learner's
    policy with (:class:`~robot_rl.algos.registry.AgentFactory`, the module :mod:`robot_rl.policies.factory`).
    The actor owns and closes ``env`` and ``device``.
    """

    env: Any
    observation_space: dict[str, gym.spaces.Box]
    action_space: gym.spaces.Box
    device: InterventionDevice | None
    task: str = ""
    robot: Any = None
    agents: AgentFactory = field(kw_only=True)


ActorBuilder = Callable[[PipelineConfig, int], ActorParts]
"""``build(cfg, actor_id) -> ActorParts``: must be picklable (a module-level function or a partial of
one) where the Ray runtime ships it to its workers."""
