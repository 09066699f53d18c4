"""The ``online`` stage: human-in-the-loop online RL (robot_rl.runtime) for one seed, the learner here and
its actors as local processes or Ray actors, with its preflight checks and the web GUI it may start.

When it finishes, ``stages/online_<method>_seed<k>.json`` is written and a rerun skips it; a killed run
resumes from the learner checkpoint and the replay on disk.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace

from robot_rl.actor_build import build_actor_parts, describe_env
from robot_rl.config import PipelineConfig
from robot_rl.extras import require
from robot_rl.policies import factory as agents
from robot_rl.run_dir import RunDir, online_name
from robot_rl.runtime.intervention import DeviceError
from robot_rl.runtime.local import run_local
from robot_rl.runtime.ray_backend import run_ray
from robot_rl.sim import make_env
from robot_rl.stages.envs import action_bounds
from robot_rl.teleop import make_device
from robot_rl.teleop.gui.device import TOKEN_ENV
from robot_rl.teleop.gui.server import start_process


def preflight(cfg: PipelineConfig, role: str = "all") -> None:
    """What an online run needs, checked before the learner or any actor starts: a writable run dir, the
    optional packages the learner's metric sinks use, and the intervention device of a local actor (opened
    once and closed; not for ``--runtime ray``, whose actors may run on other machines).

    Raises:
        OSError: the run dir is not writable (names the path).
        MissingExtraError: ``online.wandb=true`` without wandb, or ``intervention.device=gui`` without the
            ``gui`` extra (names the ``pip install``).
        DeviceError: the device named by ``intervention.device`` is missing or not accessible.
    """
    RunDir(cfg.run_dir).check_writable()
    if role != "actor" and cfg.online.wandb:
        require("wandb", "online.wandb=true", "pip install wandb")
    if role != "actor" and cfg.intervention.device == "gui":  # the learner's side serves the GUI
        for module in ("fastapi", "uvicorn"):
            require(module, "intervention.device=gui", "pip install 'robot-rl[gui]'")
    local_actor = role == "actor" or (role == "all" and cfg.online.runtime == "local")
    if local_actor and cfg.intervention.device in ("keyboard", "gamepad", "spacemouse"):
        _open_device(cfg)


def _open_device(cfg: PipelineConfig) -> None:
    """Open and close ``cfg.intervention.device`` for the env's action box (one env is built and closed)."""
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
            summary = run_ray(cfg, seed, build_actor_parts, describe_env, agents)
        else:
            summary = run_local(cfg, seed, describe_env, agents)
    finally:
        if gui is not None:
            gui.terminate()
            gui.wait(timeout=10)
    result = {**summary, "wall_time_s": time.time() - start}
    run.mark_done(stage, result)
    return result
