"""The π_RL PPO loop (docs/algorithms.md §8; :mod:`robot_rl.algos.flow_ppo`): roll out N batched envs one
action
chunk at a time, compute chunk-level GAE, run PPO epochs over minibatches, repeat until ``ppo.env_steps``
control steps have been executed; warm-started from a BC checkpoint and saved in the checkpoint format of
every other agent (``method: ppo``), so ``robot-rl eval`` and the policy server load it unchanged.

Auto-reset and truncation (:class:`robot_rl.sim.batched.ChunkResult`): an env whose episode ends inside a
chunk stops there (later chunk steps are not executed and are masked out of the loss) and is reset after
the chunk. A terminated chunk bootstraps nothing; a truncated one (time limit) bootstraps V of the kept
``final_observation``; a chunk whose episode goes on bootstraps V of the next chunk's observation.

Instructions: every rollout, value and update query gives each env its episode's instruction as
``obs["task"]`` (the batched env's ``tasks()``; the final observation keeps the ended episode's), as
evaluation does, so policies conditioned on the instruction (the VLA; a flow policy with ``policy.tasks``)
train on tasks that draw it per episode.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

import numpy as np
import torch

from robot_rl.algos.flow_ppo import chunk_gae
from robot_rl.config import ConfigError, PipelineConfig, config_to_dict
from robot_rl.keys import TASK
from robot_rl.run_dir import RunDir

# Training env seeds: env i of training seed s starts at PPO_SEED_OFFSET + s * 100_000 + i, clear of the
# demo seeds (collect.seed * 100_000 + j) and of the evaluation seeds (from 1_000_000 on).
PPO_SEED_OFFSET = 2_000_000
EPISODE_WINDOW = 50  # finished episodes in the logged success rate / return


def ppo_name(cfg: PipelineConfig) -> str:
    """Checkpoint, log and stage name of a PPO run: ``ppo_<method>``."""
    return f"ppo_{cfg.ppo.method}"


def _policy_obs(obs: dict[str, np.ndarray], keys: list[str], tasks: np.ndarray, device) -> dict:
    """The policy's input: ``keys`` of ``obs`` as tensors on ``device`` and each env's instruction as
    ``obs["task"]`` (N strings), as evaluation gives them (policies conditioned on no instruction ignore
    it)."""
    return {**{k: torch.as_tensor(np.asarray(obs[k])).to(device) for k in keys}, TASK: tasks}


def build_ppo_agent(cfg: PipelineConfig, init: Path):
    """The PPO agent around the BC policy of checkpoint ``init`` (its policy config, shapes and
    normalisation; weights by :func:`robot_rl.policies.factory.warm_start_from_bc`).

    Returns: (agent, the BC checkpoint's config dict, its stats).
    Raises:
        FileNotFoundError / CheckpointError: ``init`` is missing, corrupt or does not fit.
    """
    import draccus

    from robot_rl.config import PolicyConfig
    from robot_rl.policies.checkpoint import load_checkpoint
    from robot_rl.policies.factory import build_agent, warm_start_from_bc

    ckpt = load_checkpoint(init)
    config, stats = ckpt.header.config, ckpt.stats
    policy_cfg = draccus.decode(PolicyConfig, config.get("policy") or {})
    shapes = {k: tuple(v) for k, v in config["obs_shapes"].items()}
    agent = build_agent(
        "ppo", policy_cfg, cfg.ppo, shapes, int(config["action_dim"]), stats, device=cfg.device
    )
    warm_start_from_bc(agent, init)
    return agent, config, stats


class _Rollout:
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


def train_ppo(cfg: PipelineConfig, seed: int, run: RunDir, init: Path, on_log=None) -> dict:
    """Run PPO from the BC checkpoint ``init`` and save ``run.checkpoint(ppo_name(cfg), seed)``.

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
    from robot_rl.policies.checkpoint import check_compatible, save_checkpoint
    from robot_rl.runtime.metrics import MetricSinks
    from robot_rl.sim.batched_factory import make_batched_env

    torch.manual_seed(seed)
    agent, config, stats = build_ppo_agent(cfg, init)
    obs_keys = list(config["obs_keys"])
    p = cfg.ppo
    env = make_batched_env(cfg.env, num_envs=p.num_envs)
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
            result = _loop(cfg, seed, agent, env, obs_keys, low, high, sinks, on_log)
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


def _loop(cfg, seed, agent, env, obs_keys, low, high, sinks, on_log) -> dict:
    p, device = cfg.ppo, cfg.device
    n, t_chunks = env.num_envs, p.rollout_chunks
    policy = agent.policy
    h, flat, k1 = policy.horizon, policy.horizon * policy.action_dim, policy.flow_steps + 1
    obs, _ = env.reset(seed=[PPO_SEED_OFFSET + seed * 100_000 + i for i in range(n)])
    tasks = np.asarray(env.tasks(), dtype=object)  # each env's instruction, drawn per episode by some tasks
    ep_return, ep_success = np.zeros(n), np.zeros(n, bool)
    window: deque[tuple[bool, float]] = deque(maxlen=EPISODE_WINDOW)
    env_steps = episodes = iteration = 0
    start = time.monotonic()
    rollout_time = 0.0
    row: dict = {}
    space = env.single_observation_space.spaces
    while env_steps < p.env_steps:
        buf = _Rollout(t_chunks, n, space, obs_keys, k1, flat, h)
        t0 = time.monotonic()
        agent.eval()
        for c in range(t_chunks):
            for k in obs_keys:
                buf.obs[k][c] = obs[k]
            buf.tasks[c] = tasks
            out = agent.explore(_policy_obs(obs, obs_keys, tasks, device))
            res = env.step_chunk(np.clip(out["actions"].cpu().numpy(), low, high))
            buf.chain[c], buf.step[c], buf.log_prob[c] = (
                out["chain"].cpu(),
                out["step"].cpu(),
                out["log_prob"].cpu(),
            )
            buf.values[c] = out["value"].cpu().numpy()
            buf.valid[c] = res.valid
            buf.rewards[c] = res.reward.sum(axis=1)
            buf.terminated[c] = res.terminated.any(axis=1)
            buf.done[c] = res.final
            next_tasks = np.asarray(env.tasks(), dtype=object)  # new episodes' for envs reset in the chunk
            next_v = agent.values(_policy_obs(res.obs, obs_keys, next_tasks, device)).cpu().numpy()
            if res.final.any():
                rows = np.flatnonzero(res.final)
                final = {k: res.final_observation[k][rows] for k in obs_keys}
                next_v[rows] = agent.values(_policy_obs(final, obs_keys, tasks[rows], device)).cpu().numpy()
            buf.next_values[c] = next_v
            ep_return += buf.rewards[c]
            ep_success |= res.is_success.any(axis=1)
            for i in np.flatnonzero(res.final):
                window.append((bool(ep_success[i]), float(ep_return[i])))
                ep_return[i], ep_success[i] = 0.0, False
                episodes += 1
            env_steps += int(res.valid.sum())
            obs, tasks = res.obs, next_tasks
        rollout_time += time.monotonic() - t0
        adv, ret = chunk_gae(
            buf.rewards, buf.values, buf.next_values, buf.terminated, buf.done, p.gamma, p.gae_lambda
        )
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        metrics = _update(agent, buf, adv, ret, p, device)
        iteration += 1
        if iteration % p.log_every == 0 or env_steps >= p.env_steps:
            wall = time.monotonic() - start
            row = {
                "iteration": iteration,
                "episodes": episodes,
                "success_rate": float(np.mean([s for s, _ in window])) if window else float("nan"),
                "episode_return": float(np.mean([r for _, r in window])) if window else float("nan"),
                **metrics,
                "env_steps_per_s": env_steps / max(rollout_time, 1e-9),
                "total_steps_per_s": env_steps / max(wall, 1e-9),
            }
            sinks.write(env_steps, row)
            if on_log is not None:
                on_log({"env_steps": env_steps, **row})
    return {**row, "env_steps": env_steps, "episodes": episodes, "wall_time_s": time.monotonic() - start}


def _update(agent, buf: _Rollout, adv: np.ndarray, ret: np.ndarray, p, device) -> dict[str, float]:
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
