"""The π_RL PPO loop (docs/algorithms.md §8; :mod:`robot_rl.algos.flow_ppo`): roll out N batched envs one
action chunk at a time, compute chunk-level GAE, run PPO epochs over minibatches, repeat until
``ppo.env_steps`` control steps have been executed; warm-started from a BC checkpoint and saved in the
checkpoint format of every other agent (``method: ppo``), so ``robot-rl eval`` and the policy server load it
unchanged.

The rollout is the engine of every stage (:meth:`robot_rl.rollout.Rollout.run_schedule`, the N envs in
phase): an env whose episode ends inside a chunk stops there (later chunk steps are not executed and are
masked out of the loss) and is reset, from its own random stream, at the next query of all N envs. A
terminated chunk bootstraps nothing; a truncated one (time limit) bootstraps V of the kept final
observation; a chunk whose episode goes on bootstraps V of the next chunk's observation.

Instructions: every rollout, value and update query gives each env its episode's instruction as
``obs["task"]`` (the batched env's ``tasks()``; the final observation keeps the ended episode's), as
evaluation does, so policies conditioned on the instruction (the VLA; a flow policy with ``policy.tasks``)
train on tasks that draw it per episode.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import draccus
import numpy as np
import torch

from robot_rl.algos.flow_ppo import chunk_gae
from robot_rl.algos.registry import AgentFactory
from robot_rl.checkpoint import check_compatible, load_checkpoint, save_checkpoint
from robot_rl.config import ConfigError, EnvConfig, PipelineConfig, PolicyConfig, config_to_dict
from robot_rl.keys import TASK
from robot_rl.rollout import RecordedEpisode, Rollout, StepReport
from robot_rl.run_dir import RunDir
from robot_rl.runtime.metrics import MetricSinks

# Training env seeds: env i of training seed s starts at PPO_SEED_OFFSET + s * 100_000 + i, clear of the
# demo seeds (collect.seed * 100_000 + j) and of the evaluation seeds (from 1_000_000 on).
PPO_SEED_OFFSET = 2_000_000
EPISODE_WINDOW = 50  # finished episodes in the logged success rate / return

RolloutEnvs = Callable[[EnvConfig, int], Any]
"""``make(env_cfg, num_envs)``: the edge's N-env batch of ``env_cfg`` (``env.backend``) as the
DISABLED-autoreset :class:`~robot_rl.sim.batched_rollout.RolloutView` the rollout steps (``num_envs``,
``single_observation_space``, ``single_action_space``, ``reset``/``step``/``end``/``close``)."""


def ppo_name(cfg: PipelineConfig) -> str:
    """Checkpoint, log and stage name of a PPO run: ``ppo_<method>``."""
    return f"ppo_{cfg.ppo.method}"


def _policy_obs(obs: dict[str, np.ndarray], keys: list[str], tasks: np.ndarray, device) -> dict:
    """The policy's input: ``keys`` of ``obs`` as tensors on ``device`` and each env's instruction as
    ``obs["task"]`` (N strings), as evaluation gives them (policies conditioned on no instruction ignore
    it)."""
    return {**{k: torch.as_tensor(np.asarray(obs[k])).to(device) for k in keys}, TASK: tasks}


def build_ppo_agent(cfg: PipelineConfig, init: Path, agents: AgentFactory):
    """The PPO agent around the BC policy of checkpoint ``init`` (its policy config, shapes and
    normalisation; built by ``agents.build_agent``, weights by ``agents.warm_start_from_bc``,
    :class:`~robot_rl.algos.registry.AgentFactory`).

    Returns: (agent, the BC checkpoint's config dict, its stats).
    Raises:
        FileNotFoundError / CheckpointError: ``init`` is missing, corrupt or does not fit.
    """
    ckpt = load_checkpoint(init)
    config, stats = ckpt.header.config, ckpt.stats
    policy_cfg = draccus.decode(PolicyConfig, config.get("policy") or {})
    shapes = {k: tuple(v) for k, v in config["obs_shapes"].items()}
    agent = agents.build_agent(
        "ppo", policy_cfg, cfg.ppo, shapes, int(config["action_dim"]), stats, device=cfg.device
    )
    agents.warm_start_from_bc(agent, init)
    return agent, config, stats


class _ChunkBuffer:
    """One iteration's chunks: T chunks of N envs."""

    def __init__(self, t: int, n: int, obs_space, keys: list[str], k1: int, flat: int, horizon: int):
        self.obs = {k: np.zeros((t, n, *obs_space[k].shape), dtype=obs_space[k].dtype) for k in keys}
        self.tasks = np.empty((t, n), dtype=object)  # each chunk's instruction
        self.chain = torch.zeros(t, n, k1, flat)
        self.step = torch.zeros(t, n, dtype=torch.long)
        self.log_prob = torch.zeros(t, n, flat)
        self.valid = np.zeros((t, n, horizon), dtype=bool)
        self.values, self.next_values, self.rewards = (np.zeros((t, n), np.float32) for _ in range(3))
        self.terminated, self.done = np.zeros((t, n), bool), np.zeros((t, n), bool)


def train_ppo(
    cfg: PipelineConfig,
    seed: int,
    run: RunDir,
    init: Path,
    agents: AgentFactory,
    make_envs: RolloutEnvs,
    on_log=None,
) -> dict:
    """Run PPO from the BC checkpoint ``init`` and save ``run.checkpoint(ppo_name(cfg), seed)``, on the
    ``ppo.num_envs`` envs ``make_envs(cfg.env, ppo.num_envs)`` builds (:data:`RolloutEnvs`; closed here),
    the agent built by ``agents`` (:func:`build_ppo_agent`).

    Metrics rows (``logs/ppo_<method>_seed<s>.csv``, :class:`robot_rl.runtime.metrics.MetricSinks`): per
    ``ppo.log_every`` iterations the env steps, ``success_rate`` and ``episode_return`` over the last 50
    finished episodes, ``approx_kl``, ``clip_frac``, losses, ``entropy``, ``env_steps_per_s`` (rollout
    only) and ``total_steps_per_s`` (with the updates). ``on_log(row)`` is called with each row.

    Returns: the last row plus ``env_steps``, ``episodes`` and ``wall_time_s``.
    Raises:
        ConfigError: the checkpoint observes a key the env does not have.
        FileNotFoundError / CheckpointError: as :func:`build_ppo_agent`.
        ValueError: NaN/inf rewards, values or advantages (:func:`robot_rl.algos.flow_ppo.chunk_gae`).
    """
    torch.manual_seed(seed)
    agent, config, stats = build_ppo_agent(cfg, init, agents)
    obs_keys = list(config["obs_keys"])
    p = cfg.ppo
    env = make_envs(cfg.env, p.num_envs)
    try:
        space = env.single_observation_space.spaces
        missing = [k for k in obs_keys if k not in space]
        if missing:
            raise ConfigError(
                f"{init}: the policy observes {missing}, which env {cfg.env.id} does not provide"
            )
        check_compatible(
            config, {k: v.shape for k, v in space.items()}, env.single_action_space.shape[0], init
        )
        low = env.single_action_space.low.astype(np.float32)
        high = env.single_action_space.high.astype(np.float32)
        name = ppo_name(cfg)
        sinks = MetricSinks(run.train_log(name, seed))
        try:
            ppo_run = _PPORun(cfg, seed, agent, env.num_envs, space, obs_keys, low, high)
            result = ppo_run.run(env, sinks, on_log)
        finally:
            sinks.close()
    finally:
        env.close()
    saved = {
        **config,
        "method": "ppo",
        "ppo": config_to_dict(p),
        "seed": seed,
        "init": str(init),
        "env_steps": result["env_steps"],
    }
    shapes = {k: tuple(v) for k, v in config["obs_shapes"].items()}
    agent.eval()
    save_checkpoint(
        run.checkpoint(name, seed),
        agent.modules(),
        saved,
        stats,
        obs_shapes=shapes,
        action_dim=int(config["action_dim"]),
    )
    return result


class _BudgetSpent(Exception):
    """Raised by :class:`_PPORun` at the query after the last update: the rollout ends there, nothing of that
    query is executed."""


class _PPORun:
    """One PPO run on the rollout engine (:meth:`robot_rl.rollout.Rollout.run_schedule`): the chunk source
    (each query of the N envs, in phase, is one chunk: ``agent.explore``), the schedule (every env starts
    its next episode at the query after its episode ended, from the env's own random stream; the first
    from ``PPO_SEED_OFFSET + seed * 100_000 + i``) and the ``on_step`` / ``on_episode`` hooks that collect
    each chunk's rewards, validity and final observations. A chunk is finished at the next query (whose
    observations are those after it, the reset envs' first ones), every ``ppo.rollout_chunks`` chunks the
    agent is updated, and the query after the update that spends ``ppo.env_steps`` ends the run."""

    def __init__(self, cfg: PipelineConfig, seed: int, agent, num_envs: int, obs_space, obs_keys, low, high):
        self.p, self.device, self.agent = cfg.ppo, cfg.device, agent
        self.n, self.space, self.obs_keys, self.low, self.high = num_envs, obs_space, obs_keys, low, high
        policy = agent.policy
        self.h, self.flat, self.k1 = policy.horizon, policy.horizon * policy.action_dim, policy.flow_steps + 1
        self.first_seeds = {i: PPO_SEED_OFFSET + seed * 100_000 + i for i in range(num_envs)}
        self.ep_return, self.ep_success = np.zeros(num_envs), np.zeros(num_envs, bool)
        self.window: deque[tuple[bool, float]] = deque(maxlen=EPISODE_WINDOW)
        self.env_steps = self.episodes = self.iteration = 0
        self.start_time = time.monotonic()
        self.rollout_time = self.t0 = 0.0
        self.row: dict = {}
        self.buf: _ChunkBuffer | None = None
        self.chunk = 0  # chunks of this iteration finished
        self.pending = False  # a chunk is being executed
        self.spent = False
        self.log = None  # (sinks, on_log), set by run

    # -- the schedule ------------------------------------------------------------------------------------
    def start(self, idle: np.ndarray) -> dict[int, int | None]:
        if self.spent:
            return {}
        if self.first_seeds:
            seeds, self.first_seeds = self.first_seeds, {}
            return seeds
        return {int(i): None for i in np.flatnonzero(idle)}

    def stop(self) -> bool:
        return self.spent

    def cut(self, steps: np.ndarray) -> np.ndarray:
        return np.zeros(len(steps), bool)

    def wait(self) -> bool:
        return False

    # -- the hooks -----------------------------------------------------------------------------------------
    def on_step(self, env_id: int, step: StepReport) -> None:
        self.rewards[env_id, step.chunk_index] = step.reward
        self.valid[env_id, step.chunk_index] = True
        self.terminated[env_id] |= step.terminated
        self.success[env_id] |= bool(step.info.get("is_success", False))

    def on_episode(self, ep: RecordedEpisode) -> None:
        if ep.stopped_by is None and not ep.cut:  # the env ended it (the run's end abandons the rest)
            self.final[ep.env_id] = True
            self.final_obs[ep.env_id] = ep.final_obs

    # -- the source ----------------------------------------------------------------------------------------
    def reset(self, env_id: int, env_seed: int | None) -> None:
        """Nothing per episode: exploration noise comes from torch's RNG, seeded once per run."""

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        """The next chunk (N, h, d) of every env, after finishing the last one and updating when the
        iteration is full.

        Raises:
            _BudgetSpent: ``ppo.env_steps`` are spent (after the last update).
            RuntimeError: not every env was queried (the envs are kept in phase)."""
        if len(env_ids) != self.n:
            raise RuntimeError(
                f"PPO queries all {self.n} envs at once; got a query for envs {env_ids.tolist()}"
            )
        tasks = np.asarray(obs[TASK], dtype=object)
        if self.pending:
            self._finish_chunk(obs, tasks)
        if self.buf is not None and self.chunk == self.p.rollout_chunks:
            self._update()
        if self.buf is None:
            if self.env_steps >= self.p.env_steps:
                self.spent = True
                raise _BudgetSpent
            self.buf = _ChunkBuffer(
                self.p.rollout_chunks, self.n, self.space, self.obs_keys, self.k1, self.flat, self.h
            )
            self.chunk, self.t0 = 0, time.monotonic()
            self.agent.eval()
        buf, c = self.buf, self.chunk
        for k in self.obs_keys:
            buf.obs[k][c] = obs[k]
        buf.tasks[c] = tasks
        out = self.agent.explore(_policy_obs(obs, self.obs_keys, tasks, self.device))
        buf.chain[c], buf.step[c], buf.log_prob[c] = (
            out["chain"].cpu(),
            out["step"].cpu(),
            out["log_prob"].cpu(),
        )
        buf.values[c] = out["value"].cpu().numpy()
        self.tasks = tasks
        self.rewards = np.zeros((self.n, self.h), np.float32)
        self.valid = np.zeros((self.n, self.h), bool)
        self.terminated, self.success, self.final = (np.zeros(self.n, bool) for _ in range(3))
        self.final_obs: dict[int, dict[str, np.ndarray]] = {}
        self.pending = True
        return np.clip(out["actions"].cpu().numpy(), self.low, self.high)

    def _finish_chunk(self, obs: dict[str, np.ndarray], tasks: np.ndarray) -> None:
        """Store the executed chunk's rewards, flags and bootstrap values: V of ``obs`` (after the chunk)
        where the episode goes on, V of the kept final observation (with its episode's instruction) where it
        ended."""
        buf, c, device = self.buf, self.chunk, self.device
        buf.valid[c] = self.valid
        buf.rewards[c] = self.rewards.sum(axis=1)
        buf.terminated[c] = self.terminated
        buf.done[c] = self.final
        next_v = self.agent.values(_policy_obs(obs, self.obs_keys, tasks, device)).cpu().numpy()
        if self.final.any():
            rows = np.flatnonzero(self.final)
            final = {k: np.stack([self.final_obs[i][k] for i in rows]) for k in self.obs_keys}
            next_v[rows] = (
                self.agent.values(_policy_obs(final, self.obs_keys, self.tasks[rows], device)).cpu().numpy()
            )
        buf.next_values[c] = next_v
        self.ep_return += buf.rewards[c]
        self.ep_success |= self.success
        for i in np.flatnonzero(self.final):
            self.window.append((bool(self.ep_success[i]), float(self.ep_return[i])))
            self.ep_return[i], self.ep_success[i] = 0.0, False
            self.episodes += 1
        self.env_steps += int(self.valid.sum())
        self.chunk += 1
        self.pending = False

    def _update(self) -> None:
        """GAE over the iteration's chunks, the PPO epochs, and a metrics row every ``ppo.log_every``."""
        p, buf = self.p, self.buf
        self.rollout_time += time.monotonic() - self.t0
        adv, ret = chunk_gae(
            buf.rewards, buf.values, buf.next_values, buf.terminated, buf.done, p.gamma, p.gae_lambda
        )
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        metrics = _update(self.agent, buf, adv, ret, p, self.device)
        self.buf = None
        self.iteration += 1
        if self.iteration % p.log_every == 0 or self.env_steps >= p.env_steps:
            wall = time.monotonic() - self.start_time
            window = self.window
            self.row = {
                "iteration": self.iteration,
                "episodes": self.episodes,
                "success_rate": float(np.mean([s for s, _ in window])) if window else float("nan"),
                "episode_return": float(np.mean([r for _, r in window])) if window else float("nan"),
                **metrics,
                "env_steps_per_s": self.env_steps / max(self.rollout_time, 1e-9),
                "total_steps_per_s": self.env_steps / max(wall, 1e-9),
            }
            sinks, on_log = self.log
            sinks.write(self.env_steps, self.row)
            if on_log is not None:
                on_log({"env_steps": self.env_steps, **self.row})

    def run(self, env, sinks, on_log) -> dict:
        """Roll out on ``env`` (a batched env) until ``ppo.env_steps`` are spent; returns the last metrics
        row plus ``env_steps``, ``episodes`` and ``wall_time_s``."""
        self.log = (sinks, on_log)
        engine = Rollout(env, self, stop_on=(_BudgetSpent,), on_step=self.on_step)
        engine.run_schedule(self, self.on_episode)
        wall = time.monotonic() - self.start_time
        return {**self.row, "env_steps": self.env_steps, "episodes": self.episodes, "wall_time_s": wall}


def _update(agent, buf: _ChunkBuffer, adv: np.ndarray, ret: np.ndarray, p, device) -> dict[str, float]:
    """``p.epochs`` passes over the rollout's T*N chunks in shuffled minibatches of ``p.minibatch``."""
    total = adv.size
    flat_obs = {k: torch.as_tensor(v.reshape(total, *v.shape[2:])) for k, v in buf.obs.items()}
    flat_tasks = buf.tasks.reshape(total)
    data = {
        "chain": buf.chain.reshape(total, *buf.chain.shape[2:]),
        "step": buf.step.reshape(total),
        "log_prob": buf.log_prob.reshape(total, -1),
        "advantages": torch.as_tensor(adv.reshape(total)),
        "returns": torch.as_tensor(ret.reshape(total)),
        "valid": torch.as_tensor(buf.valid.reshape(total, -1)),
    }
    sums: dict[str, float] = {}
    count = 0
    agent.train()
    for _ in range(p.epochs):
        order = torch.randperm(total)
        for lo in range(0, total, p.minibatch):
            idx = order[lo : lo + p.minibatch]
            batch = {k: v[idx].to(device) for k, v in data.items()}
            batch["observations"] = {k: v[idx].to(device) for k, v in flat_obs.items()}
            batch["observations"][TASK] = flat_tasks[idx.numpy()]
            m = agent.update(batch)
            for key, value in m.items():
                sums[key] = sums.get(key, 0.0) + value
            count += 1
    return {key: value / max(count, 1) for key, value in sums.items()}
