"""``robot-rl ppo``: BC checkpoint -> online PPO for flow policies (π_RL, docs/algorithms.md §8) in the
batched
simulator -> evaluation of both, for one training seed.

With ``ppo.init`` empty the start is the run's own BC checkpoint: demos are collected (built-in task,
unless ``data.path`` names a dataset) and BC is trained first when those stages have not finished. The
PPO stage (``stages/ppo_<method>_seed<s>.json``) and each evaluation are skipped on a rerun once done;
a killed PPO run starts over (it keeps no resume checkpoint). A multi-task batch (``env.tasks``) is not
evaluated here: evaluation runs one task at a time, and the summary says how.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from robot_rl.config import EnvConfig, PipelineConfig
from robot_rl.eval.summary import stage_eval_summary
from robot_rl.policies import factory as agents
from robot_rl.run_dir import RunDir
from robot_rl.sim.batched_factory import make_batched_env
from robot_rl.sim.batched_rollout import RolloutView
from robot_rl.stages.collect import collect
from robot_rl.stages.evaluate import evaluate
from robot_rl.stages.train import train
from robot_rl.threads import set_threads
from robot_rl.training.ppo import ppo_name, train_ppo


def rollout_envs(env: EnvConfig, num_envs: int) -> RolloutView:
    """PPO's envs (:data:`robot_rl.training.ppo.RolloutEnvs`): ``num_envs`` envs of ``env`` batched on
    ``env.backend`` (:func:`robot_rl.sim.make_batched_env`) as the rollout's view."""
    return RolloutView(make_batched_env(env, num_envs=num_envs))


def run(args: argparse.Namespace, cfg: PipelineConfig, overrides: list[str]) -> None:
    """``robot-rl ppo``: run :func:`run_seed` for each training seed (``--seed``, else ``cfg.seeds``) and
    print its summary."""
    set_threads(cfg.threads)
    for seed in [args.seed] if args.seed is not None else cfg.seeds:
        print(run_seed(cfg, seed), flush=True)


def run_seed(cfg: PipelineConfig, seed: int) -> str:
    """Run the stages for ``seed`` and return a short summary (PPO metrics, success before and after).

    Raises:
        FileNotFoundError: ``ppo.init`` names a missing checkpoint.
        ConfigError / CheckpointError: as :func:`robot_rl.training.ppo.train_ppo`.
    """
    run_dir = RunDir(cfg.run_dir)
    run_dir.check_writable()
    if cfg.ppo.init:
        init = Path(cfg.ppo.init)
        if not (init / "config.json").is_file():
            raise FileNotFoundError(f"ppo.init={cfg.ppo.init}: no checkpoint there (config.json missing)")
    else:
        init = run_dir.checkpoint("bc", seed)
        if not cfg.data.path:
            collect(cfg)
        train(cfg, "bc", seed)
    name = ppo_name(cfg)
    stage = f"{name}_seed{seed}"
    if run_dir.is_done(stage):
        trained = run_dir.result(stage)
    else:
        start = time.time()

        def show(row: dict) -> None:
            print(
                f"ppo {cfg.ppo.method} seed {seed}: {row['env_steps']} env steps, "
                f"success {row['success_rate']:.2f}, kl {row.get('approx_kl', float('nan')):.2e}, "
                f"clip {row.get('clip_frac', float('nan')):.3f}, {row['env_steps_per_s']:.0f} env steps/s",
                flush=True,
            )

        trained = train_ppo(cfg, seed, run_dir, init, agents, rollout_envs, on_log=show)
        trained["checkpoint"] = str(run_dir.checkpoint(name, seed))
        trained["init"] = str(init)
        trained["wall_time_s"] = time.time() - start
        run_dir.mark_done(stage, trained)
    lines = [
        f"ppo {cfg.ppo.method} seed {seed}: {trained['env_steps']} env steps in "
        f"{trained['wall_time_s']:.0f} s ({trained['env_steps_per_s']:.0f} env steps/s in rollouts), "
        f"checkpoint {trained['checkpoint']}"
    ]
    if cfg.env.tasks:  # evaluation runs one task at a time (paired episodes per task)
        lines.append(
            f"env.tasks: evaluate each task with `robot-rl eval --algo ppo --ppo.method={cfg.ppo.method} "
            f"--seeds=[{seed}] --env.id=<task> --eval.name=<task>` (env.tasks unset)"
        )
        return "\n".join(lines)
    if not cfg.ppo.init:
        lines.append(stage_eval_summary(cfg, "bc", seed, evaluate(cfg, "bc", seed), by_group=False))
    lines.append(stage_eval_summary(cfg, name, seed, evaluate(cfg, name, seed), by_group=False))
    return "\n".join(lines)
