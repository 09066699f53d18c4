"""What the learner knows of the env its actors step, described at the edge and passed in.

The learner builds no env (:mod:`robot_rl.runtime` imports neither :mod:`robot_rl.sim` nor
:mod:`robot_rl.teleop`): the edge (``robot-rl online``, a ROS 2 node, a test) describes the env with
:func:`robot_rl.actor_build.describe_env`, or from an env it already holds with :meth:`EnvInfo.of`, and
hands the result (or the describer, :data:`EnvDescriber`, to :func:`robot_rl.runtime.local.run_learner`) to
:class:`~robot_rl.runtime.learner.Learner`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from robot_rl.config import PipelineConfig


@dataclass(frozen=True)
class EnvInfo:
    """One env's observation shapes and action box.

    ``obs_shapes``: observation key -> per-frame shape; ``action_dim``: d; ``action_low`` /
    ``action_high``: d floats each in the env's action units, or both empty when any bound is infinite
    (the policy then falls back to the data's min/max).
    """

    obs_shapes: dict[str, tuple[int, ...]]
    action_dim: int
    action_low: list[float] = field(default_factory=list)
    action_high: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, observation_space: gym.spaces.Dict, action_space: gym.spaces.Box) -> EnvInfo:
        """The description of an env with these spaces (one env's, not a batch's)."""
        shapes = {k: tuple(int(d) for d in s.shape) for k, s in observation_space.spaces.items()}
        low, high = action_space.low.reshape(-1), action_space.high.reshape(-1)
        bounded = bool(np.isfinite(low).all() and np.isfinite(high).all())
        return cls(
            shapes,
            int(action_space.shape[0]),
            [float(v) for v in low] if bounded else [],
            [float(v) for v in high] if bounded else [],
        )


EnvDescriber = Callable[[PipelineConfig], EnvInfo]
"""``describe(cfg) -> EnvInfo``: the edge's description of the env
(:func:`robot_rl.actor_build.describe_env`); picklable where the Ray runtime ships it to the learner's
worker."""
