"""``robot-rl online``: human-in-the-loop online RL from the offline checkpoint (robot_rl.runtime).

Roles: ``all`` (default: the learner here plus ``online.num_actors`` actor processes, or Ray actors with
``--runtime ray``: the stage :func:`robot_rl.stages.online.online`), ``learner`` (serve and train only) and
``actor`` (act against a running learner).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace

from robot_rl.actor_build import build_actor_parts, describe_env
from robot_rl.config import ConfigError, PipelineConfig
from robot_rl.policies import factory as agents
from robot_rl.runtime.local import run_actor, run_learner
from robot_rl.sim import resolve_control_hz
from robot_rl.stages.online import online, preflight
from robot_rl.threads import set_threads

ROLES = ("all", "learner", "actor")
RUNTIMES = ("local", "ray")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``online`` subcommand's own flags (the rest are config overrides)."""
    p.add_argument("--role", choices=ROLES, default="all", help="all (default), learner or actor")
    p.add_argument("--actor-id", type=int, default=0, help="actor: this actor's id (0..)")
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--init", default=None, help="offline checkpoint to start from (= --online.init)")
    p.add_argument(
        "--runtime", choices=RUNTIMES, default=None, help="local processes or ray (= --online.runtime)"
    )
    p.add_argument("--ray-address", default=None, help="Ray cluster address (= --online.ray_address)")


def apply_flags(args: argparse.Namespace, cfg: PipelineConfig) -> PipelineConfig:
    """Fold ``--init``, ``--runtime`` and ``--ray-address`` into ``cfg.online``."""
    changes = {
        k: v
        for k, v in (("init", args.init), ("runtime", args.runtime), ("ray_address", args.ray_address))
        if v is not None
    }
    return replace(cfg, online=replace(cfg.online, **changes)) if changes else cfg


def run(args: argparse.Namespace, cfg: PipelineConfig, overrides: list[str]) -> None:
    """Run ``args.role`` for each training seed (``--seed``, else ``cfg.seeds``) and print its summary.

    Raises:
        ConfigError: an unknown ``online.runtime``, or ``env.tasks`` with fewer ``online.envs_per_actor``.
    """
    set_threads(cfg.threads, cfg.online.num_actors + 1)
    for seed in [args.seed] if args.seed is not None else cfg.seeds:
        print(run_role(args, cfg, seed))


def run_role(args: argparse.Namespace, cfg: PipelineConfig, seed: int) -> dict:
    """Dispatch one role for training seed ``seed``; returns its summary."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    cfg = apply_flags(args, cfg)
    if cfg.online.runtime not in RUNTIMES:
        raise ConfigError(f"online.runtime={cfg.online.runtime!r}; expected one of {RUNTIMES}")
    if cfg.env.tasks and cfg.online.envs_per_actor < len(cfg.env.tasks):
        raise ConfigError(
            f"env.tasks={list(cfg.env.tasks)} with online.envs_per_actor={cfg.online.envs_per_actor}: a "
            "multi-task online run steps every task in each actor's batch; set online.envs_per_actor to at "
            f"least {len(cfg.env.tasks)}"
        )
    cfg = resolve_control_hz(cfg)  # a foreign env's own rate, for episode cycle times
    if args.role != "all":
        preflight(cfg, args.role)
    if args.role == "actor":
        return run_actor(cfg, seed, args.actor_id, args.parent_pid, build=build_actor_parts)
    if args.role == "learner":
        return run_learner(cfg, seed, describe_env, agents)
    return online(cfg, seed)
