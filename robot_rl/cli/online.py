"""``robot-rl online``: human-in-the-loop online RL from the offline checkpoint (robot_rl.runtime).

Roles: ``all`` (default: the learner here plus ``online.num_actors`` actor processes, or Ray actors with
``--runtime ray``), ``learner`` (serve and train only) and ``actor`` (act against a running learner).
The ``all`` role is a pipeline stage: when it finishes, ``stages/online_<method>_seed<k>.json`` is
written and a rerun skips it; a killed run resumes from the learner checkpoint and the replay on disk.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import replace

from robot_rl.config import PipelineConfig
from robot_rl.run_dir import RunDir, online_name

ROLES = ("all", "learner", "actor")
RUNTIMES = ("local", "ray")


def add_arguments(p) -> None:
    """The ``online`` subcommand's own flags (the rest are config overrides)."""
    p.add_argument("--role", choices=ROLES, default="all", help="all (default), learner or actor")
    p.add_argument("--actor-id", type=int, default=0, help="actor: this actor's id (0..)")
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--init", default=None, help="offline checkpoint to start from (= --online.init)")
    p.add_argument(
        "--runtime", choices=RUNTIMES, default=None, help="local processes or ray (= --online.runtime)"
    )
    p.add_argument("--ray-address", default=None, help="Ray cluster address (= --online.ray_address)")


def apply_flags(args, cfg: PipelineConfig) -> PipelineConfig:
    """Fold ``--init``, ``--runtime`` and ``--ray-address`` into ``cfg.online``."""
    changes = {
        k: v
        for k, v in (("init", args.init), ("runtime", args.runtime), ("ray_address", args.ray_address))
        if v is not None
    }
    return replace(cfg, online=replace(cfg.online, **changes)) if changes else cfg


def run(args, cfg: PipelineConfig, seed: int) -> dict:
    """Dispatch one role for training seed ``seed``."""
    from robot_rl.config import ConfigError
    from robot_rl.runtime.local import run_actor, run_learner
    from robot_rl.sim import resolve_control_hz

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
        from robot_rl.actor_build import build_actor_parts

        return run_actor(cfg, seed, args.actor_id, args.parent_pid, build=build_actor_parts)
    if args.role == "learner":
        from robot_rl.actor_build import describe_env

        return run_learner(cfg, seed, describe_env)
    return online(cfg, seed)


def preflight(cfg: PipelineConfig, role: str = "all") -> None:
    """What an online run needs, checked before the learner or any actor starts: a writable run dir, the
    optional packages the learner's metric sinks use, and the intervention device of a local actor (opened
    once and closed; not for ``--runtime ray``, whose actors may run on other machines).

    Raises:
        OSError: the run dir is not writable (names the path).
        MissingExtraError: ``online.wandb=true`` without wandb (names the ``pip install``).
        DeviceError: the device named by ``intervention.device`` is missing or not accessible.
    """
    from robot_rl.extras import require

    RunDir(cfg.run_dir).check_writable()
    if role != "actor" and cfg.online.wandb:
        require("wandb", "online.wandb=true", "pip install wandb")
    local_actor = role == "actor" or (role == "all" and cfg.online.runtime == "local")
    if local_actor and cfg.intervention.device in ("keyboard", "gamepad", "spacemouse"):
        _open_device(cfg)


def _open_device(cfg: PipelineConfig) -> None:
    """Open and close ``cfg.intervention.device`` for the env's action box (one env is built and closed)."""
    from robot_rl.cli.envs import action_bounds
    from robot_rl.runtime.intervention import DeviceError
    from robot_rl.sim import make_env
    from robot_rl.teleop import make_device

    env = make_env(cfg.env)
    try:
        low, high = action_bounds(env.action_space)
    finally:
        env.close()
    try:
        make_device(cfg.intervention, low, high, task_id=cfg.env.id).close()
    except DeviceError as err:
        raise DeviceError(f"intervention.device={cfg.intervention.device}: {err}") from err


def start_gui(cfg: PipelineConfig, seed: int):
    """Start the web GUI (``robot-rl gui``) as a child process for ``intervention.device=gui``; returns it
    and ``cfg`` with the port it serves on (``intervention.gui_port=0`` picks a free one), which the
    actors connect to. Its log: ``<online dir>/gui.log``.

    Raises:
        RuntimeError: the GUI did not start (names its log).
    """
    import os

    from robot_rl.teleop.gui.device import TOKEN_ENV
    from robot_rl.teleop.gui.server import start_process

    iv = cfg.intervention
    root = RunDir(cfg.run_dir).root
    log_path = root / "online" / f"{online_name(cfg)}_seed{seed}" / "gui.log"
    token = iv.gui_token or os.environ.get(TOKEN_ENV, "")
    proc, port = start_process(root, iv.gui_host, iv.gui_port, token, log_path)
    logging.getLogger(__name__).info("gui: http://%s:%d/ (log %s)", iv.gui_host, port, log_path)
    return proc, replace(cfg, intervention=replace(iv, gui_port=port))


def online(cfg: PipelineConfig, seed: int) -> dict:
    """The online stage: train, then mark ``online_<method>_seed<seed>`` done (skipped when already).
    :func:`preflight` runs first."""
    run = RunDir(cfg.run_dir)
    stage = f"{online_name(cfg)}_seed{seed}"
    if run.is_done(stage):
        return run.result(stage)
    preflight(cfg)
    start = time.time()
    gui = None
    if cfg.intervention.device == "gui":
        gui, cfg = start_gui(cfg, seed)
    try:
        if cfg.online.runtime == "ray":
            from robot_rl.actor_build import build_actor_parts, describe_env
            from robot_rl.runtime.ray_backend import run_ray

            summary = run_ray(cfg, seed, build_actor_parts, describe_env)
        else:
            from robot_rl.actor_build import describe_env
            from robot_rl.runtime.local import run_local

            summary = run_local(cfg, seed, describe_env)
    finally:
        if gui is not None:
            gui.terminate()
            gui.wait(timeout=10)
    result = {**summary, "wall_time_s": time.time() - start}
    run.mark_done(stage, result)
    return result
