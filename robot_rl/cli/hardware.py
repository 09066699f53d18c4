"""``robot-rl hardware check --config FILE [--move]``: connect to the robot and cameras of ``env.robot``,
print the state, limits and camera rates; move nothing unless ``--move``, which fails when the jog is not
measured or the end-effector pose is unknown (:func:`robot_rl.hardware.check.check_hardware`).

``robot-rl hardware sim-server``: the MuJoCo-backed robot server (robot_rl.hardware.sim_server), the
simulated Panda in real time behind a socket, with injectable latency, jitter and dropped requests. It takes
its own flags, not the experiment config. Neither action imports torch: a quick check on the robot's own
computer.
"""

from __future__ import annotations

import argparse

from robot_rl.config import ConfigError, PipelineConfig
from robot_rl.hardware import sim_server
from robot_rl.hardware.check import check_hardware


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``hardware`` subcommand's arguments (``--config``/``--quick`` come from the main parser) and the
    sim-server's flags as a group."""
    p.add_argument("action", choices=["check", "sim-server"], help="sim-server: see its flags below")
    p.add_argument(
        "--move",
        action="store_true",
        help="jog the last joint a little (0.05 rad; no joint control: the end effector 1 cm up) and back; "
        "fails (exit 1) unless the motion is measured and the end-effector pose is known",
    )
    p.add_argument("--camera-seconds", type=float, default=1.0, help="how long to read each camera (s)")
    sim_server.add_arguments(
        p.add_argument_group(
            "sim-server",
            "serve the simulated Panda in real time over ZeroMQ for env.robot.driver: sim_server, with "
            "optional injected latency, jitter and dropped requests",
        )
    )


def run(
    args: argparse.Namespace, cfg: PipelineConfig | None = None, overrides: list[str] | None = None
) -> int:
    """``sim-server`` (no config): serve until SIGINT/SIGTERM and return the exit code. ``check``: run the
    check on ``cfg.env.robot``; returns 0.

    Raises:
        ConfigError: ``check`` with a config that has no ``env.robot``.
    """
    if args.action == "sim-server":
        return sim_server.run(args)
    if cfg is None or cfg.env.robot is None:
        raise ConfigError("hardware check needs env.robot in the config (e.g. --env.robot.driver=sim)")
    check_hardware(cfg.env.robot, move=args.move, camera_seconds=args.camera_seconds)
    return 0
