"""The ``train`` stage (bc or offline, one seed, resumable and extendable) and the open-loop score of a
trained checkpoint."""

from __future__ import annotations

import time
from dataclasses import replace

from robot_rl.config import PipelineConfig
from robot_rl.data.training.features import FeatureUse
from robot_rl.policies import factory as agents
from robot_rl.run_dir import RunDir
from robot_rl.sim import action_box
from robot_rl.training.loop import score_checkpoint, train_agent
from robot_rl.training.resume import trained_steps


def train(cfg: PipelineConfig, algo: str, seed: int) -> dict:
    """Train ``algo`` ('bc' or 'offline') for one seed; offline RL warm-starts from that seed's BC policy.

    A finished stage is skipped, unless its budget (``bc.steps`` / ``offline.steps``) has grown since: then
    training continues from the saved checkpoint to the new budget
    (:func:`robot_rl.training.loop.train_agent`) and that seed's evaluation of ``algo`` is run again. A
    smaller or equal budget keeps the checkpoint and prints how to train longer.

    Raises OSError naming the path when the run dir is not writable (checked before training starts).
    """
    run = RunDir(cfg.run_dir)
    stage = f"train_{algo}_seed{seed}"
    steps = (cfg.bc if algo == "bc" else cfg.offline).steps
    if run.is_done(stage):
        done = run.result(stage)
        have = done.get("steps") or trained_steps(run.checkpoint(algo, seed), algo)
        if have is None:
            return done
        if steps <= have:
            key = key_steps(algo)
            print(
                f"train {algo} seed {seed}: already trained ({have} steps, {key}={steps}); checkpoint "
                f"{done['checkpoint']}. To train longer, rerun with --{key}=<more than {have}>",
                flush=True,
            )
            return {**done, "steps": have}
        print(
            f"train {algo} seed {seed}: continuing from step {have} to {key_steps(algo)}={steps}", flush=True
        )
        run.clear(stage)
        run.clear(f"eval_{algo}_seed{seed}")
    run.check_writable()
    start = time.time()
    init = run.checkpoint("bc", seed) if algo == "offline" else None
    if init is not None and not run.is_done(f"train_bc_seed{seed}"):
        train(cfg, "bc", seed)
    metrics = train_agent(
        with_env_action_box(cfg), algo, seed, run, init, agents, on_features=print_train_inputs
    )
    result = {
        "checkpoint": str(run.checkpoint(algo, seed)),
        "steps": steps,
        "final": metrics,
        "wall_time_s": time.time() - start,
    }
    run.mark_done(stage, result)
    return result


def key_steps(algo: str) -> str:
    """The config key of ``algo``'s step budget."""
    return "bc.steps" if algo == "bc" else "offline.steps"


def open_loop(cfg: PipelineConfig, algo: str, seed: int) -> dict:
    """Open-loop action error of a trained checkpoint on the dataset's held-out episodes (no simulator)."""
    run = RunDir(cfg.run_dir)
    run.check_writable()
    return score_checkpoint(cfg, algo, seed, run, agents)


def with_env_action_box(cfg: PipelineConfig) -> PipelineConfig:
    """``cfg`` with ``policy.action_low/high`` set to the env's action box (:func:`robot_rl.sim.action_box`;
    one env is built and closed) when training on the run's own dataset (recorded in ``cfg.env``) and
    neither is configured; else ``cfg`` (the policy then uses the dataset's min/max, or the configured box).
    An unbounded box stays empty."""
    if cfg.policy.action_low or cfg.policy.action_high or cfg.data.path:
        return cfg
    return replace(cfg, policy=replace(cfg.policy, **action_box(cfg.env)))


def print_train_inputs(use: FeatureUse) -> None:
    """Print :meth:`FeatureUse.lines` (inputs with shapes, targets, ignored columns with reasons)."""
    for line in use.lines():
        print(line, flush=True)
