"""The local runtime: the learner in this process, each actor in its own process, ZeroMQ on localhost.

No services are needed. ``robot-rl online`` (role ``all``) binds the learner's socket, starts
``online.num_actors`` actor processes (``robot-rl online --role actor``) that connect to it, and trains.
The roles can also be started by hand, on one machine or several: ``--role learner`` on the learning
machine (``--online.address=tcp://*:5560``) and ``--role actor --actor-id K`` next to each robot
(``--online.address=tcp://<learner host>:5560``). Off loopback both need ``--security.keys=<folder>``
(``robot-rl keys``): the learner its server key and client list, actor K its key ``actorK``. Without keys
(loopback) the actors of a run prove they belong to it with the learner's run token, which they read from
the run dir they share with it (``<online dir>/learner.token``; :mod:`robot_rl.runtime.link`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from robot_rl.algos.registry import AgentFactory
from robot_rl.config import PipelineConfig, save_config
from robot_rl.run_dir import RunDir, online_name
from robot_rl.runtime.actor import actor_folder
from robot_rl.runtime.actor_claim import claim_folder
from robot_rl.runtime.actor_parts import ActorBuilder
from robot_rl.runtime.batched_actor import actor_class
from robot_rl.runtime.env_info import EnvDescriber
from robot_rl.runtime.learner import Learner
from robot_rl.runtime.link import LearnerServer, ZmqLearnerLink
from robot_rl.security import (
    TOKEN_FILE,
    actor_key_name,
    check_address,
    load_client_keys,
    load_server_keys,
)
from robot_rl.transport import PeerUnavailableError

log = logging.getLogger(__name__)


def run_learner(
    cfg: PipelineConfig,
    seed: int,
    describe: EnvDescriber,
    agents: AgentFactory,
    check=None,
    on_bound=None,
) -> dict:
    """Serve and train one learner until its budget is spent; returns its summary. ``describe(cfg)``: the
    edge's description of the env the actors step (:func:`robot_rl.actor_build.describe_env`), asked once
    the address is checked; ``agents``: the edge's agent factory (:class:`~robot_rl.runtime.learner.Learner`).

    ``on_bound(endpoint)`` is called once the socket is bound (with the actual port when ``:0`` was
    asked for), before training starts.
    """
    keys = load_server_keys(cfg.security.keys) if cfg.security.keys else None
    check_address(cfg.online.address, keys, "online.address", bind=True)  # before the slow learner build
    learner = Learner(cfg, seed, env=describe(cfg), agents=agents)
    server = LearnerServer(learner, cfg.online.address, keys).start()
    log.info("learner: serving on %s", server.address)
    try:
        if on_bound is not None:
            on_bound(server.address)
        return learner.train(check=check)
    finally:
        server.close()


def run_actor(
    cfg: PipelineConfig,
    seed: int,
    actor_id: int,
    parent_pid: int | None = None,
    actor_cls: type | None = None,
    *,
    build: ActorBuilder,
) -> dict:
    """Run actor ``actor_id`` against the learner at ``cfg.online.address``; returns its counters.
    ``build(cfg, actor_id)``: its env and device (:mod:`robot_rl.runtime.actor_parts`), built once the
    actor's folder is locked.
    ``actor_cls``: an :class:`~robot_rl.runtime.actor.Actor` subclass to run instead (``actor_node``'s);
    default: :func:`robot_rl.runtime.batched_actor.actor_class` (batched if ``online.envs_per_actor`` > 1).
    The actor's folder is locked while it runs (:mod:`robot_rl.runtime.actor_claim`). Without
    ``security.keys`` the actor reads the learner's run token from ``<online dir>/learner.token`` when it
    first calls the learner (so it may start first: until the file appears it acts as if the learner were
    unreachable).

    Raises:
        ActorIdError: another live actor process holds the folder, or the learner holds the id for another
            actor (one-line errors; the other actor goes on).
        PeerUnavailableError: the actor gave up on the learner; when it never found the token file, the line
            also names that file and the fixes.
        ConfigError: the token file is damaged.
        LinkTokenError: the learner refused this run dir's token (another learner's run)."""
    actor_cls = actor_cls or actor_class(cfg)
    keys = load_client_keys(cfg.security.keys, actor_key_name(actor_id)) if cfg.security.keys else None
    check_address(cfg.online.address, keys, "online.address", bind=False)
    folder = actor_folder(cfg, seed, actor_id)
    with claim_folder(folder, actor_id):
        link = ZmqLearnerLink(cfg.online.address, keys=keys, token=folder.parent / TOKEN_FILE)
        try:
            return actor_cls(cfg, seed, actor_id, link, build(cfg, actor_id), parent_pid=parent_pid).run()
        except PeerUnavailableError as err:
            missing = link.missing_token_file()
            if missing is None:
                raise
            raise PeerUnavailableError(
                f"{err}; nor is there a learner token at {missing}: start the learner on this run_dir first "
                f"(robot-rl online --role learner --run_dir={cfg.run_dir}), copy that file from the "
                "learner's run dir, or use --security.keys"
            ) from err
        finally:
            link.close()


class ActorFaultError(RuntimeError):
    """An actor process stopped on a fault a restart cannot fix (it printed a one-line ``robot-rl:`` error:
    a missing device or critic, a bad config, a broken policy), or crashed more than
    ``online.actor_restarts`` times; the message names the actor and its log."""


class ActorProcesses:
    """Actor processes started from this one, each logging to ``<online dir>/actor<k>.log``.

    :meth:`check` heals the run: an actor that died from a signal (SIGKILL, the OOM killer) or an
    unexpected crash (a traceback) is restarted after a back-off of 1, 2, 4, ... s, at most
    ``online.actor_restarts`` times; it resumes from its episode log, so nothing recorded is lost. An actor
    that stopped on a known fault (a one-line ``robot-rl:`` error, not transient) stops the run with that
    line.
    """

    def __init__(self, cfg: PipelineConfig, seed: int, address: str) -> None:
        run = RunDir(cfg.run_dir)
        folder = run.root / "online" / f"{online_name(cfg)}_seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        config_path = folder / "config.yaml"
        save_config(cfg, config_path)
        self.max_restarts = cfg.online.actor_restarts
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.cmds: list[list[str]] = []
        self.restarts: list[int] = []
        self.restart_at: list[float | None] = []
        for k in range(cfg.online.num_actors):
            self.cmds.append(
                [
                    sys.executable,
                    "-m",
                    "robot_rl.cli.main",
                    "online",
                    "--role",
                    "actor",
                    "--actor-id",
                    str(k),
                    "--seed",
                    str(seed),
                    "--parent-pid",
                    str(os.getpid()),
                    "--config",
                    str(config_path),
                    f"--online.address={address}",
                ]
            )
            self.logs.append(folder / f"actor{k}.log")
            self.restarts.append(0)
            self.restart_at.append(None)
            self.procs.append(self._start(k))

    def _start(self, k: int) -> subprocess.Popen:
        with open(self.logs[k], "ab") as out:
            return subprocess.Popen(self.cmds[k], stdout=out, stderr=subprocess.STDOUT)

    def _last_line(self, k: int) -> str:
        lines = [line for line in self.logs[k].read_text(errors="replace").splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""

    def check(self) -> None:
        """Restart crashed actors when their back-off has passed (see the class docstring).

        Raises:
            ActorFaultError: an actor stopped on a known fault, or crashed more than the restart limit.
        """
        now = time.monotonic()
        for k, proc in enumerate(self.procs):
            code = proc.poll()
            if code is None or code == 0:
                continue
            if self.restart_at[k] is None:
                line = self._last_line(k)
                if code > 0 and line.startswith("robot-rl: "):
                    raise ActorFaultError(f"actor {k} stopped: {line.removeprefix('robot-rl: ')}")
                if self.restarts[k] >= self.max_restarts:
                    raise ActorFaultError(
                        f"actor {k} crashed {self.restarts[k] + 1} times (exit code {code}; "
                        f"online.actor_restarts={self.max_restarts}); see {self.logs[k]}"
                    )
                self.restart_at[k] = now + 2.0 ** self.restarts[k]
                log.warning(
                    "actor %d exited with code %d; restarting it in %.0f s", k, code, 2.0 ** self.restarts[k]
                )
            elif now >= self.restart_at[k]:
                self.restarts[k] += 1
                self.restart_at[k] = None
                self.procs[k] = self._start(k)
                log.warning("actor %d restarted (%d of %d)", k, self.restarts[k], self.max_restarts)

    def stop(self, timeout_s: float = 60.0) -> list[int | None]:
        """Wait for the actors to finish, then terminate any left. Returns their exit codes."""
        for p in self.procs:
            try:
                p.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                p.terminate()
                p.wait(timeout=10)
        return [p.returncode for p in self.procs]


def run_local(cfg: PipelineConfig, seed: int, describe: EnvDescriber, agents: AgentFactory) -> dict:
    """Learner here (``describe``, ``agents``: as :func:`run_learner`), ``cfg.online.num_actors`` actor
    processes; returns the learner's summary plus the actors' exit codes."""
    actors: list[ActorProcesses] = []

    def start_actors(endpoint: str) -> None:
        actors.append(ActorProcesses(cfg, seed, endpoint.replace("0.0.0.0", "127.0.0.1")))

    try:
        summary = run_learner(
            cfg, seed, describe, agents, check=lambda: actors[0].check(), on_bound=start_actors
        )
    finally:
        codes = actors[0].stop() if actors else []
    return {**summary, "actor_exit_codes": codes}
