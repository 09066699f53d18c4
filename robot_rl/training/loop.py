"""The training loop shared by flow BC and chunked offline RL (``robot-rl train``), with resumable periodic
checkpoints and checkpoint scoring; the CLI, the pipeline and the benchmarks call it with the agent factory
(:class:`robot_rl.algos.registry.AgentFactory`: the module :mod:`robot_rl.policies.factory`)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from robot_rl import keys
from robot_rl.algos.batch import batch_to_torch
from robot_rl.algos.registry import AgentFactory, algorithm
from robot_rl.algos.targets import reward_affine
from robot_rl.checkpoint import CONFIG_FILE, read_header, save_checkpoint
from robot_rl.config import ConfigError, OfflineRLConfig, PipelineConfig, PolicyConfig, config_to_dict
from robot_rl.data.prev_action import prev_action_start, prev_action_steps
from robot_rl.data.training.loader import batches
from robot_rl.data.training.training_set import TrainingSet
from robot_rl.eval.open_loop import open_loop_eval, plot_open_loop
from robot_rl.eval.q_values import q_calibration
from robot_rl.eval.report import plot_training
from robot_rl.progress import progress
from robot_rl.run_dir import RunDir, write_json_atomic
from robot_rl.training.resume import (
    RNG_KEY,
    remove_resume,
    restore,
    restore_trained,
    resume_checkpoint,
    resume_dir,
    save_resume,
    set_rng_state,
    trained_steps,
)

if TYPE_CHECKING:
    from robot_rl.data.training.features import FeatureUse

LOG_EVERY = 50


def _method(cfg: PipelineConfig, algo: str) -> str:
    return "bc" if algo == "bc" else cfg.offline.method


def train_agent(
    cfg: PipelineConfig,
    algo: str,
    seed: int,
    run: RunDir,
    init_from: Path | None,
    agents: AgentFactory,
    on_features: Callable[[FeatureUse], None] | None = None,
) -> dict:
    """Train one agent and save it to ``run.checkpoint(algo, seed)``.

    The dataset is ``cfg.data.path`` (any local LeRobot v2.1/v3.0 dataset) or the run's own. Every
    ``cfg.checkpoint_every`` steps the modules, optimizers and step go to ``<ckpt>_resume``; a killed run
    continues from there (a step's batch depends only on (seed, step)), and log rows written after that
    checkpoint are dropped so each CSV log has each step once. With ``cfg.data.val_episodes`` the policy is
    scored on them every ``cfg.data.val_every`` steps (``logs/<algo>_seed<s>_val.csv``; offline RL adds the
    critic's Q against Monte-Carlo returns, :mod:`robot_rl.eval.q_values`), and the saved
    checkpoint is reloaded and scored open loop at the end (``open_loop/<algo>_seed<s>.json`` and ``.png``).
    A final checkpoint already there, trained for fewer steps than the budget (``robot-rl train`` rerun
    with a larger ``--bc.steps``/``--offline.steps``), is trained further from its step count with fresh
    optimizers (:func:`robot_rl.training.resume.restore_trained`). Offline RL warm-starts its flow policy
    from ``init_from``. The method's registry entry (:mod:`robot_rl.algos.registry`) says which label
    columns it reads and whether its batches carry per-prefix targets. The agent's
    :meth:`~robot_rl.algos.base.Agent.prepare` runs once its modules are loaded (RECAP fits its value
    unless restored, and labels the training frames); an agent with a ``critic`` is also scored on its
    calibration. ``on_features`` is called once the dataset is loaded with the columns the policy uses and
    ignores (also saved as the checkpoint config's ``features``). ``agents`` builds, warm-starts and reloads
    the agent (:class:`~robot_rl.algos.registry.AgentFactory`). The policy's action box is
    ``policy.action_low/high`` when set (the edge fills them with the env's box when training on the run's
    own dataset), else the dataset's min/max. Returns the last logged metrics (plus the final validation
    metrics).
    """
    budget = cfg.bc if algo == "bc" else cfg.offline
    method = algorithm(_method(cfg, algo))
    data = _training_set(cfg, run, algo)
    if method.labels:
        data.feature_use.read_labels(list(method.labels))
    if on_features is not None:
        on_features(data.feature_use)
    tasks = data.tasks if len(data.tasks) > 1 else []  # one task: nothing to condition on
    policy_cfg = replace(cfg.policy, horizon=data.horizon, tasks=tasks)
    cfg = replace(cfg, policy=_with_instruction(policy_cfg, data.tasks, data.dataset.root))
    if algo != "bc":
        cfg = replace(cfg, offline=resolve_reward_range(cfg.offline, data.train.sampler.rewards))
        data.train.sampler.prefixes = method.prefix_targets
    torch.manual_seed(seed)
    agent = agents.build_agent_from_config(
        method.name, cfg, data.obs_shapes, data.action_dim, data.stats, device=cfg.device
    )
    final_dir = run.checkpoint(algo, seed)
    resume_to = resume_dir(final_dir)
    resume_from = resume_checkpoint(final_dir)
    start, resumed = 0, {}
    log_path, val_path = run.train_log(algo, seed), run.val_log(algo, seed)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    trained = trained_steps(final_dir, algo)
    if resume_from is not None:
        resumed = restore(agent, resume_from)
        start = int(resumed["step"])
        _truncate_log(log_path, start)
        _truncate_log(val_path, start)
    elif trained is not None and trained < budget.steps:  # a finished run given a larger budget
        restore_trained(agent, final_dir)
        start = trained
        _truncate_log(log_path, start)
        _truncate_log(val_path, start)
    elif init_from is not None:
        agents.warm_start_from_bc(agent, init_from)
    metrics: dict[str, float] = {}
    config = {
        **config_to_dict(cfg),
        "method": method.name,
        "obs_shapes": {k: list(v) for k, v in data.obs_shapes.items()},
        "action_dim": data.action_dim,
        "seed": seed,
        "obs_keys": data.obs_keys,
        "features": data.feature_use.to_json(),
        "dataset": str(data.dataset.root),
        "fps": data.fps,
    }
    log, val_log = _CsvLog(log_path, append=start > 0), _CsvLog(val_path, append=start > 0)
    prepared = agent.prepare(data, seed)
    if prepared is not None:
        print(f"prepare {algo} seed {seed}: {prepared}", flush=True)
    agent.train()
    stream = batches(
        data, budget.batch_size, seed, start, budget.steps, cfg.data.num_workers, agent.batch_reuse
    )
    if resume_from is not None:  # after what a fresh run also did before its first step (the loader draws)
        set_rng_state(resumed[RNG_KEY])
    try:
        for step in progress(
            range(start, budget.steps),
            desc=f"train {algo} seed {seed}",
            initial=start,
            total=budget.steps,
            unit="step",
        ):
            metrics = agent.update(batch_to_torch(next(stream), cfg.device))
            last = step + 1 == budget.steps
            if (step + 1) % LOG_EVERY == 0 or last:
                log.write({"step": step + 1, **metrics})
            if data.val is not None and ((step + 1) % cfg.data.val_every == 0 or last):
                val = open_loop_eval(agent, data, data.val, cfg.data.val_max_frames, cfg.device)
                row = {"step": step + 1, **val.metrics}
                if agent.critic is not None:  # critic calibration: Q of recorded chunks vs. their MC returns
                    row.update(q_calibration(agent, data, data.val, cfg.data.val_max_frames, cfg.device))
                val_log.write(row)
            if (step + 1) % cfg.checkpoint_every == 0 and not last:
                save_resume(agent, resume_to, {"step": step + 1}, config, data.stats)
    finally:
        log.close()
        val_log.close()
        del stream  # stops DataLoader workers
    agent.eval()
    save_checkpoint(final_dir, agent.modules(), config, data.stats)
    remove_resume(final_dir)
    plot_training(log_path, val_path if data.val is not None else None, log_path.with_suffix(".png"))
    if data.val is not None:
        scored = _score_checkpoint(cfg, data, final_dir, run.open_loop(algo, seed), seed, agents)
        metrics = {**metrics, **scored}
    return metrics


def _with_instruction(policy: PolicyConfig, tasks: list[str], root: Path) -> PolicyConfig:
    """A VLA policy reads the instruction: each frame's ``task`` of a multi-task dataset, else
    ``policy.vla.instruction``, filled here with a single-task dataset's task unless set.

    Raises:
        ConfigError: ``policy.kind=vla`` on a dataset without task strings (names the dataset).
    """
    if policy.kind != "vla":
        return policy
    if not any(t.strip() for t in tasks):
        raise ConfigError(
            f"{root}: the dataset has no task column (tasks {tasks}); policy.kind=vla is conditioned on the "
            "language instruction: record the demos with a task, or set one for every episode"
        )
    if len(tasks) > 1 or policy.vla.instruction:
        return policy
    return replace(policy, vla=replace(policy.vla, instruction=tasks[0]))


def resolve_reward_range(offline: OfflineRLConfig, rewards) -> OfflineRLConfig:
    """Fill an empty ``offline.reward_range`` with ``[min, max]`` of the training frames' per-step
    ``rewards`` (N,) when ``reward_norm`` rescales or ``success_value`` is ``r_max``, and check the result.

    Raises:
        ConfigError: unknown ``offline.reward_norm`` or an invalid ``offline.reward_range``.
    """
    if (offline.reward_norm != "none" or offline.success_value == "r_max") and not offline.reward_range:
        offline = replace(offline, reward_range=[float(np.min(rewards)), float(np.max(rewards))])
    try:
        reward_affine(offline.reward_norm, offline.reward_range)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    return offline


def _training_set(cfg: PipelineConfig, run: RunDir, algo: str):
    """The dataset of ``cfg.data.path`` (else the run's own) prepared for ``algo`` (RL needs rewards)."""
    root = Path(cfg.data.path) if cfg.data.path else run.dataset
    frame_cache = run.root / "frame_cache"
    return TrainingSet(
        root,
        cfg.data,
        cfg.policy.horizon,
        cfg.offline.gamma,
        frame_cache,
        for_rl=algo != "bc",
        action_reference=cfg.policy.action_reference,
        reference_velocity=cfg.policy.action_reference_velocity,
    )


def score_checkpoint(
    cfg: PipelineConfig, algo: str, seed: int, run: RunDir, agents: AgentFactory
) -> dict[str, float]:
    """Score the run's trained ``algo`` checkpoint (reloaded with ``agents.load_agent``) open loop on
    ``cfg.data.val_episodes`` of the dataset; writes ``open_loop/<algo>_seed<s>.json`` and ``.png``. Raises
    ConfigError without validation episodes."""
    if not cfg.data.val_episodes:
        raise ConfigError("open-loop scoring needs held-out episodes: set data.val_episodes")
    checkpoint = run.checkpoint(algo, seed)
    if not (checkpoint / CONFIG_FILE).is_file():
        raise ConfigError(f"no trained checkpoint at {checkpoint}: run robot-rl train --algo {algo} first")
    saved = read_header(checkpoint)
    # the checkpoint's horizon and action inputs, whatever the config says
    policy = replace(
        cfg.policy,
        horizon=saved.policy.horizon,
        action_reference=saved.policy.action_reference,
        action_reference_velocity=saved.policy.action_reference_velocity,
    )
    prev_action = (saved.config.get("data") or {}).get("prev_action", False)
    start, steps = prev_action_start(saved.config), prev_action_steps(saved.config)
    data = replace(
        cfg.data, horizon_s=0.0, prev_action=prev_action, prev_action_start=start, prev_action_steps=steps
    )
    cfg = replace(cfg, policy=policy, data=data)
    data = _training_set(cfg, run, algo)
    return _score_checkpoint(cfg, data, checkpoint, run.open_loop(algo, seed), seed, agents)


def _score_checkpoint(
    cfg: PipelineConfig, data, checkpoint: Path, out: Path, seed: int, agents: AgentFactory
) -> dict[str, float]:
    """Reload the saved checkpoint (as a user would) and score it open loop on the validation episodes."""
    agent, _ = agents.load_agent(checkpoint, cfg.device, evaluate=True, seed=seed)
    result = open_loop_eval(agent, data, data.val, cfg.data.val_max_frames, cfg.device)
    names = data.dataset.features[keys.ACTION].get("names")
    flat_names = names[0] if names and isinstance(names[0], list) else names
    out.parent.mkdir(parents=True, exist_ok=True)
    plot_open_loop(result, out.with_suffix(".png"), flat_names)
    report = {
        "checkpoint": str(checkpoint),
        "dataset": str(data.dataset.root),
        "val_episodes": data.val.episodes,
        "frames_scored": len(result.rows),
        "horizon": data.horizon,
        **result.metrics,
        "mae_per_chunk_step": result.per_step_mae().tolist(),
    }
    write_json_atomic(out.with_suffix(".json"), report)
    return result.metrics


class _CsvLog:
    """Append rows (dicts with the same keys) to a CSV file, header first, flushed per row."""

    def __init__(self, path: Path, append: bool) -> None:
        self.path, self._file, self._writer = path, None, None
        self._append = append and path.is_file()

    def write(self, row: dict) -> None:
        if self._writer is None:
            self._file = open(self.path, "a" if self._append else "w", newline="")
            self._writer = csv.DictWriter(self._file, fieldnames=list(row))
            if not self._append:
                self._writer.writeheader()
        self._writer.writerow(row)
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _truncate_log(path: Path, step: int) -> None:
    """Keep the header and the complete rows of steps <= ``step``: rows past the checkpoint are re-run, and
    a row torn by the kill (no newline, or too few fields) is dropped."""
    if not path.is_file():
        return
    header, *rows = path.read_text().splitlines(keepends=True) or [""]
    fields = header.count(",")
    kept = [
        r for r in rows if r.endswith("\n") and r.count(",") == fields and int(r.split(",", 1)[0]) <= step
    ]
    path.write_text(header + "".join(kept))
