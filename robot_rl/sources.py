"""Chunk sources for robot_rl.rollout: a trained agent behind the safety filter, and the wrapper that feeds
``observation.prev_action`` to a policy trained with it (the scripted expert's source is
:class:`robot_rl.sim.expert_source.ExpertSource`; the edge builds an evaluation's source with
:func:`robot_rl.source_build.policy_source`)."""

from __future__ import annotations

from collections import deque

import numpy as np
import torch

from robot_rl import keys
from robot_rl.algos.base import NonFiniteChunkError
from robot_rl.data.prev_action import history_feature, start_actions
from robot_rl.executor import ChunkError, ChunkExecutor


class AgentSource:
    """Queries ``agent.act`` (B, h, d) and applies the safety filter: NaN/inf chunks are rejected with a
    NonFiniteChunkError, a chunk of another action dimension than the box's with a ChunkError
    (:mod:`robot_rl.executor`), and finite actions are clipped to the env's action box [low, high].

    ``execution='open_loop'`` returns whole chunks (the rollout executes all h actions before the next
    query); ``'temporal_ensemble'`` queries every step and returns the ACT-weighted action as a chunk of 1.

    With ``seed`` set (evaluation), each sub-env's observation is acted on alone with torch's RNG seeded
    from ``(seed, env_seed, query index in the episode)``: an episode's outcome is a function of its env
    seed alone, the same with any ``env.num_envs`` (batched sampling noise and batched floating-point
    sums would otherwise depend on which episodes share a batch). ``seed=None`` (online exploration)
    queries the batch at once with torch's global RNG.
    """

    def __init__(
        self,
        agent,
        obs_keys: list[str],
        low: np.ndarray,
        high: np.ndarray,
        device: str = "cpu",
        execution: str = "open_loop",
        decay: float = 0.1,
        num_envs: int = 1,
        seed: int | None = None,
    ):
        self.agent, self.obs_keys, self.low, self.high, self.device = agent, obs_keys, low, high, device
        horizon = agent.policy.horizon
        self.executors = [ChunkExecutor(horizon, execution, decay, low, high) for _ in range(num_envs)]
        self.ensemble = execution == "temporal_ensemble"
        self.seed = seed
        self.episode: list[tuple[int, int]] = [(0, 0)] * num_envs  # (env seed, queries so far)

    def reset(self, env_id: int, env_seed: int) -> None:
        self.executors[env_id].reset()
        self.episode[env_id] = (int(env_seed), 0)

    def _act(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        def batch(rows) -> dict:
            out = {k: torch.as_tensor(np.asarray(obs[k])[rows]).to(self.device) for k in self.obs_keys}
            if keys.TASK in obs:  # the instructions (strings), for a task-conditioned policy
                out[keys.TASK] = np.asarray(obs[keys.TASK], dtype=object)[rows]
            return out

        if self.seed is None:
            return self.agent.act(batch(slice(None))).cpu().numpy()
        device = torch.device(self.device)
        devices = (
            [device.index if device.index is not None else torch.cuda.current_device()]
            if device.type == "cuda"
            else []
        )
        chunks = []
        for j, env_id in enumerate(env_ids):
            env_seed, query = self.episode[env_id]
            self.episode[env_id] = (env_seed, query + 1)
            state = np.random.SeedSequence([self.seed, env_seed, query]).generate_state(2, np.uint32)
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(int(state[0]) << 32 | int(state[1]))
                chunks.append(self.agent.act(batch(slice(j, j + 1))).cpu().numpy())
        return np.concatenate(chunks)

    @torch.no_grad()
    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        """Chunks (B, h, d) float32 for the observations (B, ...) of sub-envs ``env_ids``, inside the box.

        Raises:
            ChunkError: the policy's chunks are not (B, h, d) with the box's d (names both shapes).
            NonFiniteChunkError: they hold NaN or inf (nothing is executed)."""
        chunk = self._act(obs, env_ids)
        if chunk.ndim != 3 or chunk.shape[-1] != len(self.low):
            raise ChunkError(
                f"the policy's chunks have shape {chunk.shape} but the env's action space needs "
                f"(B, h, d={len(self.low)}): the checkpoint was trained for another action space"
            )
        if not np.isfinite(chunk).all():
            raise NonFiniteChunkError(
                "policy produced NaN/inf actions; stopping instead of sending them to the robot"
            )
        chunk = np.clip(chunk, self.low, self.high)
        if not self.ensemble:
            return chunk
        steps = []
        for row, env_id in zip(chunk, env_ids, strict=True):
            self.executors[env_id].push(row)
            steps.append(self.executors[env_id].pop())
        return np.stack(steps)[:, None, :]

    def close(self) -> None:
        """Nothing to release (the agent lives in this process)."""


class StepwiseSource:
    """A per-observation policy (``RemotePolicy``) executed one action per control step by one executor
    per sub-env: :class:`robot_rl.executor.ChunkExecutor` (temporal ensembling) or
    :class:`robot_rl.executor.AsyncChunkExecutor` (the next chunk is inferred while the current
    one runs, ``deploy.async_lead``). Returns chunks of h = 1, (k, 1, d) float32.
    """

    def __init__(self, policy, executors: list) -> None:
        self.policy, self.executors = policy, executors

    def reset(self, env_id: int, env_seed: int) -> None:
        self.policy.reset(env_id, env_seed)
        self.executors[env_id].reset()

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        from functools import partial

        steps = [
            self.executors[i].step(partial(self.policy.chunk, int(i), {k: v[j] for k, v in obs.items()}))
            for j, i in enumerate(env_ids)
        ]
        return np.stack(steps)[:, None, :].astype(np.float32)

    def close(self) -> None:
        for ex in self.executors:
            getattr(ex, "close", lambda: None)()
        self.policy.close()


class SourceWrapper:
    """Base of the chunk-source wrappers: a wrapper is a ``robot_rl.rollout.ChunkSource`` around ``inner``,
    whose other attributes (``agent``, ...) stay reachable; :meth:`reset` and :meth:`close` reach it too."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name: str):
        if name == "inner":  # not set yet (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def reset(self, env_id: int, env_seed: int) -> None:
        self.inner.reset(env_id, env_seed)

    def close(self) -> None:
        getattr(self.inner, "close", lambda: None)()


class PrevActionSource(SourceWrapper):
    """Feeds ``observation.prev_action`` (``data.prev_action``) to the wrapped chunk source, with the
    definition training uses (:mod:`robot_rl.data.prev_action`): of the last ``steps`` (k) executed
    actions, the most recent and the changes before it (:func:`~robot_rl.data.prev_action.history_feature`),
    (k·d,) float32 per env; commands before the episode's first step are the start value ``start``
    (``data.prev_action_start`` of the checkpoint: zeros or an observation key), read at the episode's first
    query.

    Every action of a returned chunk is taken to be executed in order (open-loop chunks, or chunks of 1
    under temporal ensembling or an async executor), so the next query gets the chunk's last k actions. A
    caller that executes something else (the online actor when a human takes over) reports each executed
    action with :meth:`executed`; once it does, the reported actions replace the assumed chunk. Other
    attributes (``agent``, ...) are the wrapped source's.

    Args:
        inner: a ``robot_rl.rollout.ChunkSource`` whose policy reads ``observation.prev_action``.
        start: 'zeros' or an observation key of the action's shape.
        action_dim: d.
        num_envs: sub-envs of the vector env.
        steps: k, ``data.prev_action_steps`` of the checkpoint (>= 1).
    Raises:
        ValueError: ``steps`` < 1. On a query: KeyError / ValueError from
        :func:`robot_rl.data.prev_action.start_actions` when ``start`` is not an observation of the action's
        shape.
    """

    def __init__(self, inner, start: str, action_dim: int, num_envs: int = 1, steps: int = 1) -> None:
        super().__init__(inner)
        if steps < 1:
            raise ValueError(f"data.prev_action_steps={steps}: expected >= 1")
        self.start, self.action_dim, self.steps = start, action_dim, steps
        self.history: list[deque[np.ndarray]] = [deque(maxlen=steps) for _ in range(num_envs)]
        self.first: list[np.ndarray | None] = [None] * num_envs  # the start value, from the first query
        self.pending: list[np.ndarray | None] = [None] * num_envs  # the last chunk, taken as executed

    def reset(self, env_id: int, env_seed: int) -> None:
        super().reset(env_id, env_seed)
        self.history[env_id].clear()
        self.first[env_id] = self.pending[env_id] = None

    def executed(self, env_id: int, action: np.ndarray) -> None:
        """Record the action (d,) that sub-env ``env_id`` executed at this control step."""
        self.pending[env_id] = None
        self.history[env_id].append(np.asarray(action, np.float32).reshape(self.action_dim).copy())

    def feature(self, env_id: int) -> np.ndarray:
        """``observation.prev_action`` of sub-env ``env_id`` now, (k·d,) float32 (after its first query)."""
        past = list(reversed(self.history[env_id]))
        past += [self.first[env_id]] * (self.steps - len(past))
        return history_feature(np.stack(past))

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        for i in env_ids:
            if self.pending[i] is not None:  # no action reported since: the whole chunk was executed
                self.history[i].extend(self.pending[i])
                self.pending[i] = None
        first = [self.first[i] is None for i in env_ids]
        if any(first):
            starts = start_actions(self.start, obs, len(env_ids), self.action_dim)
            for j, i in enumerate(env_ids):
                if first[j]:
                    self.first[i] = starts[j]
        prev = np.stack([self.feature(int(i)) for i in env_ids])
        chunks = self.inner({**obs, keys.PREV_ACTION: prev}, env_ids)
        for i, chunk in zip(env_ids, chunks, strict=True):
            self.pending[i] = np.asarray(chunk, np.float32).reshape(-1, self.action_dim).copy()
        return chunks
