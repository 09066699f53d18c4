"""One rollout loop for every stage: scripted demos, evaluation and (later) online actors.

It drives a gymnasium vector env created with ``AutoresetMode.DISABLED`` over an exact list of env seeds,
executes action chunks open loop (the QC default: the whole chunk of h actions runs before the next query)
and hands each finished episode, with its LeRobot-keyed frames, to a callback. When the env's reset info
holds ``task`` (the built-in tasks: the episode's instruction), the source also gets ``obs["task"]`` (k,)
object array of instructions, and the episode records it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from robot_rl import keys


class ChunkSource(Protocol):
    """Anything that proposes action chunks: a scripted expert (h = 1) or a policy.

    ``reset(env_id, env_seed)`` starts a new episode in sub-env ``env_id``, reset with ``env_seed``; a
    stochastic source seeds its episode noise from it, so an episode depends on its env seed only, not on
    which worker ran it or whether the run was resumed. ``__call__(obs, env_ids)`` gets the observations
    of the envs that need a new chunk, each value of shape (k, ...), and returns float32 chunks (k, h, d)
    in the env's action units.
    """

    def reset(self, env_id: int, env_seed: int) -> None: ...

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray: ...


@dataclass
class RecordedEpisode:
    """A finished episode. ``frames`` maps LeRobot keys to arrays (T, ...): observations at t, the
    executed ``action``, ``next.reward``, ``next.done`` (true termination only), ``next.success`` and
    ``complementary_info.is_intervention``. ``task``: the episode's instruction from the env's reset info
    ("" when the env gives none)."""

    env_seed: int
    frames: dict[str, np.ndarray]
    success: bool
    episode_return: float
    steps: int
    success_step: int | None = None
    task: str = ""


@dataclass
class _EnvSlot:
    seed: int | None = None
    task: str = ""
    queue: deque = field(default_factory=deque)
    steps: list[dict[str, np.ndarray]] = field(default_factory=list)
    success_step: int | None = None


def _take(obs: dict[str, np.ndarray], idx) -> dict[str, np.ndarray]:
    return {k: v[idx] for k, v in obs.items()}


def _set_tasks(slots: list[_EnvSlot], info: dict, mask: np.ndarray) -> None:
    """Record each reset env's instruction from the vector env's reset ``info["task"]`` (if any)."""
    if "task" not in info:
        return
    valid = np.asarray(info.get("_task", np.ones(len(slots), bool)), dtype=bool)
    for i in np.flatnonzero(mask & valid):
        slots[i].task = str(info["task"][i])


def rollout(
    vec_env,
    source: ChunkSource,
    env_seeds: list[int],
    on_episode: Callable[[RecordedEpisode], None],
    idle_action: np.ndarray | None = None,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Run one episode per entry of ``env_seeds`` on ``vec_env`` (N sub-envs, DISABLED autoreset).

    Each sub-env is reset with the next unused seed when its episode ends; a sub-env with no seed left
    steps ``idle_action`` (default: the middle of the action box) and its results are ignored.

    Raises:
        ValueError: the source returned a chunk of the wrong shape or with NaN/inf values; the env itself
            rejects out-of-range actions.
    """
    num_envs = vec_env.num_envs
    pending = deque(env_seeds)
    slots = [_EnvSlot() for _ in range(num_envs)]
    first = [pending.popleft() if pending else None for _ in range(num_envs)]
    obs, info = vec_env.reset(seed=[s if s is not None else 0 for s in first])
    _set_tasks(slots, info, np.ones(num_envs, bool))
    with_task = "task" in info
    for i, seed in enumerate(first):
        slots[i].seed = seed
        if seed is not None:
            source.reset(i, seed)
    space = vec_env.single_action_space
    if idle_action is None:
        idle_action = ((space.low + space.high) / 2).astype(np.float32)
    action_dim = space.shape[0]
    while any(s.seed is not None for s in slots):
        need = np.array([i for i, s in enumerate(slots) if s.seed is not None and not s.queue], dtype=int)
        if need.size:
            query = _take(obs, need)
            if with_task:
                query[keys.TASK] = np.array([slots[i].task for i in need], dtype=object)
            chunks = np.asarray(source(query, need), dtype=np.float32)
            if chunks.ndim != 3 or chunks.shape[0] != need.size or chunks.shape[2] != action_dim:
                raise ValueError(
                    f"chunk source returned shape {chunks.shape}; expected ({need.size}, h, {action_dim})"
                )
            if not np.isfinite(chunks).all():
                raise ValueError("chunk source returned NaN/inf actions; refusing to send them to the env")
            for i, chunk in zip(need, chunks, strict=True):
                slots[i].queue.extend(chunk)
        actions = np.stack([s.queue.popleft() if s.seed is not None else idle_action for s in slots])
        next_obs, reward, terminated, truncated, info = vec_env.step(actions)
        success = np.asarray(info.get("is_success", np.zeros(num_envs, bool)), dtype=bool)
        reset_mask = np.zeros(num_envs, dtype=bool)
        for i, slot in enumerate(slots):
            if slot.seed is None:
                continue
            step = {k: v[i] for k, v in obs.items()}
            step[keys.ACTION] = actions[i]
            step[keys.REWARD] = np.float32(reward[i])
            step[keys.DONE] = bool(terminated[i])
            step[keys.SUCCESS] = bool(success[i])
            step[keys.INTERVENTION] = False
            slot.steps.append(step)
            if success[i] and slot.success_step is None:
                slot.success_step = len(slot.steps)
            if terminated[i] or truncated[i]:
                on_episode(_finish(slot))
                if progress is not None:
                    progress(1)
                slot.seed = pending.popleft() if pending else None
                slot.queue.clear()
                slot.steps = []
                slot.success_step = None
                reset_mask[i] = slot.seed is not None
        obs = next_obs
        if reset_mask.any():
            seeds = [slot.seed if m else None for slot, m in zip(slots, reset_mask, strict=True)]
            fresh, info = vec_env.reset(seed=seeds, options={"reset_mask": reset_mask})
            _set_tasks(slots, info, reset_mask)
            for k in obs:
                obs[k][reset_mask] = fresh[k][reset_mask]
            for i in np.flatnonzero(reset_mask):
                source.reset(int(i), slots[i].seed)


def _finish(slot: _EnvSlot) -> RecordedEpisode:
    frames = {k: np.stack([s[k] for s in slot.steps]) for k in slot.steps[0]}
    return RecordedEpisode(
        env_seed=int(slot.seed),
        frames=frames,
        success=slot.success_step is not None,
        episode_return=float(frames[keys.REWARD].sum()),
        steps=len(slot.steps),
        success_step=slot.success_step,
        task=slot.task,
    )
