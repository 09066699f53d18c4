"""The ``robot-rl`` subcommands as a table: one :class:`Command` row per command.

A row names its command, its help, whether it reads the experiment config, and where its code lives as
``"module:function"`` strings: ``arguments(parser)`` adds the command's own flags and ``run`` runs it.
:func:`robot_rl.cli.main.main` imports a row's module only when that command is given (:func:`load`, the one
place the CLI imports lazily), so ``robot-rl --help`` imports no command module and each command module
imports what it needs at module level.

A command with a config gets ``--config``, ``--quick``, ``--overrides`` and ``--debug`` from the main
parser (and ``--seed`` when ``seeds`` is set); its ``run(args, cfg, overrides) -> None`` receives the loaded
:class:`~robot_rl.config.PipelineConfig` and the ``--a.b=value`` overrides. A command without one gets only
its own flags and ``run(args) -> int`` returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Command:
    """One subcommand of ``robot-rl``.

    Attributes:
        name: the subcommand word, e.g. ``"train"``.
        help: one line for ``robot-rl --help`` and the command's own ``--help``.
        run: ``"module:function"`` of the code that runs it: ``run(args, cfg, overrides)`` with a config,
            ``run(args) -> exit code`` without.
        arguments: ``"module:function"`` adding the command's own flags to its parser; None: no own flags.
        needs_config: whether the command reads the experiment config; a callable decides from the parsed
            arguments (``hardware check`` does, ``hardware sim-server`` does not).
        seeds: add ``--seed`` (one training seed instead of all of ``cfg.seeds``).
    """

    name: str
    help: str
    run: str
    arguments: str | None = None
    needs_config: bool | Callable[[argparse.Namespace], bool] = True
    seeds: bool = False

    def config_needed(self, args: argparse.Namespace) -> bool:
        """Whether this invocation (``args`` as parsed) loads the experiment config."""
        return self.needs_config(args) if callable(self.needs_config) else self.needs_config


def load(ref: str) -> Callable[..., Any]:
    """The function ``"package.module:function"`` names, its module imported now.

    Raises:
        ModuleNotFoundError / AttributeError: ``ref`` names no module or no such function (a bad row).
    """
    module, _, function = ref.partition(":")
    return getattr(importlib.import_module(module), function)


def _hardware_needs_config(args: argparse.Namespace) -> bool:
    return args.action != "sim-server"


COMMANDS: tuple[Command, ...] = (
    Command(
        "collect",
        "collect scripted demonstrations into a LeRobot v3.0 dataset",
        "robot_rl.cli.stages:collect",
    ),
    Command(
        "train",
        "train flow BC (--algo bc) or chunked offline RL (--algo offline) on the run's dataset or on any "
        "local LeRobot dataset (--data.path)",
        "robot_rl.cli.stages:train",
        "robot_rl.cli.stages:train_arguments",
        seeds=True,
    ),
    Command(
        "eval",
        "evaluate a trained checkpoint in parallel simulated envs",
        "robot_rl.cli.stages:evaluate",
        "robot_rl.cli.stages:eval_arguments",
        seeds=True,
    ),
    Command(
        "open-loop",
        "score a checkpoint open loop on the dataset's held-out episodes (data.val_episodes)",
        "robot_rl.cli.stages:open_loop",
        "robot_rl.cli.stages:train_arguments",
        seeds=True,
    ),
    Command(
        "pipeline",
        "collect -> train bc -> train offline -> eval -> report; finished stages are skipped",
        "robot_rl.cli.stages:pipeline",
    ),
    Command(
        "critic",
        "progress critic: train (on --data.path or the run's dataset), eval (VOC, done AUC, curves) or "
        "serve (a batching critic server on --address)",
        "robot_rl.cli.critic:run",
        "robot_rl.cli.critic:critic_arguments",
    ),
    Command(
        "online",
        "human-in-the-loop online RL from the offline checkpoint: a learner and actors (local processes "
        "or Ray) with a simulated or real human able to take over",
        "robot_rl.cli.online:run",
        "robot_rl.cli.online:add_arguments",
        seeds=True,
    ),
    Command(
        "ppo",
        "online PPO for flow policies (π_RL: --ppo.method flow_noise|flow_sde) in the batched simulator: "
        "BC checkpoint -> PPO -> eval of both",
        "robot_rl.cli.ppo:run",
        seeds=True,
    ),
    Command(
        "label",
        "write critic progress and rewards (--reward.mode shaped|critic) into a copy of a dataset",
        "robot_rl.cli.critic:run",
        "robot_rl.cli.critic:label_arguments",
    ),
    Command(
        "hardware",
        "check: connect to env.robot and its cameras, print state, limits and frame rates; moves only with "
        "--move. sim-server: serve the simulated Panda in real time for env.robot.driver: sim_server",
        "robot_rl.cli.hardware:run",
        "robot_rl.cli.hardware:add_arguments",
        needs_config=_hardware_needs_config,
    ),
    Command(
        "record",
        "record teleoperated demos on the robot of env.robot into a LeRobot v3.0 dataset (resumable)",
        "robot_rl.cli.record:run",
        "robot_rl.cli.record:add_arguments",
    ),
    Command(
        "dataset",
        "inspect, validate, merge, split, filter, convert and visualize datasets",
        "robot_rl.cli.dataset:run",
        "robot_rl.cli.dataset:add_arguments",
        needs_config=False,
    ),
    Command(
        "keys",
        "make ZeroMQ CURVE keys for the learner and the critic server (a server binding anything but "
        "127.0.0.1 needs them: --security.keys=FOLDER)",
        "robot_rl.cli.keys:run",
        "robot_rl.cli.keys:add_arguments",
        needs_config=False,
    ),
    Command(
        "serve",
        "serve a checkpoint's action chunks over ZeroMQ to RemotePolicy clients (a robot's control loop)",
        "robot_rl.cli.serve:run",
        "robot_rl.cli.serve:add_arguments",
        needs_config=False,
    ),
    Command(
        "gui",
        "the human-in-the-loop web GUI of a run: watch, take over, label and stop the actors",
        "robot_rl.cli.gui:run",
        "robot_rl.cli.gui:add_arguments",
        needs_config=False,
    ),
    Command(
        "ros2",
        "run a ROS 2 node of robot_rl (sim robot, policy) with ROS-style arguments",
        "robot_rl.cli.ros2:run",
        "robot_rl.cli.ros2:add_arguments",
        needs_config=False,
    ),
)
"""Every subcommand, in ``robot-rl --help`` order."""

BY_NAME: dict[str, Command] = {c.name: c for c in COMMANDS}
