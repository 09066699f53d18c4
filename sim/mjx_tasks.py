"""The built-in tasks' observations, goals and rewards in ``jax.numpy`` for ``env.backend=mjx``: each is
the single env's method (:mod:`robot_rl.sim.panda_pick_cube`, :mod:`robot_rl.sim.panda_tasks`) read from an
``mjx.Data`` instead of an ``MjData``. The drawer task is not here (its slide joint's friction loss is
untested in MJX); object placement stays on the host (:mod:`robot_rl.sim.batched_mjx`), so initial states
are the single env's for the same seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from robot_rl.sim.assets import CUBE_HALF_SIZE_M as H
from robot_rl.sim.panda_base import OPEN_CLOSURE
from robot_rl.sim.panda_pick_cube import GRASP_CLOSURE, GRASP_DISTANCE_M
from robot_rl.sim.panda_tasks import (
    BIN_FLOOR_M,
    BIN_INNER_M,
    ON_TABLE_Z,
    STACK_XY_M,
    STACK_Z_M,
    TARGET_RADIUS_M,
)


@dataclass(frozen=True)
class JaxTask:
    """One task's functions of ``(d, choice)`` (``d``: one env's ``mjx.Data``; ``choice``: int32 scalar,
    the per-episode choice, e.g. pick-colour's target cube; 0 for other tasks).

    Attributes:
        env_state: ``observation.environment_state`` float32 (``env_state_dim``,) (units as the task's).
        goal: bool scalar, the task's goal holds (success after ``success_hold_steps``).
        dense: the shaped reward (float32 scalar), or None when the task has none.
    """

    env_state: Callable
    goal: Callable
    dense: Callable | None = None


def _free_pose(d, adr: int):
    return d.qpos[adr : adr + 7]


def _closure(d, env):
    return d.qpos[env._driver_qpos] / 0.8


def _pick_cube(env) -> JaxTask:
    import jax.numpy as jnp

    adr, body, rest, lift = env._cube_qpos, env._cube_body, env._cube_rest_z, env.lift_height_m
    site = env._pinch

    def dense(d, _choice):  # robot_rl.sim.panda_pick_cube.dense_reward
        cube = d.xpos[body]
        dist = jnp.linalg.norm(d.site_xpos[site] - cube)
        c = _closure(d, env)
        grasp = (dist < GRASP_DISTANCE_M) & (c > GRASP_CLOSURE[0]) & (c < GRASP_CLOSURE[1])
        return (
            2.0 * (1.0 - jnp.tanh(10.0 * dist)) + 3.0 * grasp + 5.0 * jnp.clip((cube[2] - rest) / lift, 0, 1)
        )

    return JaxTask(
        env_state=lambda d, _c: _free_pose(d, adr),
        goal=lambda d, _c: d.xpos[body][2] - rest > lift,
        dense=dense,
    )


def _pick_colour(env) -> JaxTask:
    import jax.numpy as jnp

    adr = np.asarray(env._cube_q)
    lift = env.lift_height_m
    return JaxTask(
        env_state=lambda d, _c: jnp.concatenate([_free_pose(d, int(a)) for a in adr]),
        goal=lambda d, c: d.qpos[jnp.asarray(adr)[c] + 2] - H > lift,
    )


def _place_in_bin(env) -> JaxTask:
    import jax.numpy as jnp

    adr, tray = env._cube_q[0], env._bin

    def goal(d, _c):
        cube, centre = d.qpos[adr : adr + 3], d.mocap_pos[tray]
        inside = jnp.all(jnp.abs(cube[:2] - centre[:2]) < BIN_INNER_M)
        return inside & (cube[2] < BIN_FLOOR_M + H + 0.01) & (_closure(d, env) < OPEN_CLOSURE)

    return JaxTask(
        env_state=lambda d, _c: jnp.concatenate([_free_pose(d, adr), d.mocap_pos[tray]]), goal=goal
    )


def _stack(env) -> JaxTask:
    import jax.numpy as jnp

    top, bottom = env._cube_q

    def goal(d, _c):
        a, b = d.qpos[top : top + 3], d.qpos[bottom : bottom + 3]
        on = (jnp.linalg.norm(a[:2] - b[:2]) < STACK_XY_M) & (jnp.abs(a[2] - b[2] - 2 * H) < STACK_Z_M)
        return on & (b[2] < ON_TABLE_Z) & (_closure(d, env) < OPEN_CLOSURE)

    return JaxTask(
        env_state=lambda d, _c: jnp.concatenate([_free_pose(d, top), _free_pose(d, bottom)]), goal=goal
    )


def _push(env) -> JaxTask:
    import jax.numpy as jnp

    adr, mark = env._cube_q[0], env._goal

    def goal(d, _c):
        cube, centre = d.qpos[adr : adr + 3], d.mocap_pos[mark]
        return (jnp.linalg.norm(cube[:2] - centre[:2]) < TARGET_RADIUS_M) & (cube[2] < ON_TABLE_Z)

    return JaxTask(
        env_state=lambda d, _c: jnp.concatenate([_free_pose(d, adr), d.mocap_pos[mark]]), goal=goal
    )


BUILDERS: dict[str, Callable] = {
    "robot_rl/PandaPickCube-v0": _pick_cube,
    "robot_rl/PandaPickColour-v0": _pick_colour,
    "robot_rl/PandaPlaceInBin-v0": _place_in_bin,
    "robot_rl/PandaStack-v0": _stack,
    "robot_rl/PandaPushToTarget-v0": _push,
}
"""Task id -> builder of its :class:`JaxTask` from a host env of that task (for its ids and settings)."""


def choice_of(env) -> int:
    """The per-episode choice (:class:`JaxTask`) of the host env ``env`` after its reset."""
    return int(getattr(env, "target", 0))


def jax_task(task_id: str, env) -> JaxTask:
    """The :class:`JaxTask` of ``task_id`` for the host env ``env`` of that task.

    Raises:
        ValueError: ``task_id`` has no MJX version (names the ones that do).
    """
    if task_id not in BUILDERS:
        raise ValueError(f"env.backend=mjx runs {', '.join(BUILDERS)}; not {task_id!r}")
    return BUILDERS[task_id](env)
