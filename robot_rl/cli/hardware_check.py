"""``robot-rl hardware check --config FILE [--move]``: connect to the robot and cameras of ``env.robot``,
print the state, limits and camera rates; move nothing unless ``--move``, which fails when the jog is not
measured or the end-effector pose is unknown (:func:`robot_rl.hardware.check.check_hardware`)."""

from __future__ import annotations

import argparse

from robot_rl.config import ConfigError

HELP = (
    "check: connect to env.robot and its cameras, print state, limits and frame rates; moves only with "
    "--move. sim-server: serve the simulated Panda in real time for env.robot.driver: sim_server"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``hardware`` subcommand's arguments (``--config``/``--quick`` come from the main parser)."""
    p.add_argument("action", choices=["check", "sim-server"], help="sim-server: see its flags below")
    p.add_argument(
        "--move",
        action="store_true",
        help="jog the last joint a little (0.05 rad; no joint control: the end effector 1 cm up) and back; "
        "fails (exit 1) unless the motion is measured and the end-effector pose is known",
    )
    p.add_argument("--camera-seconds", type=float, default=1.0, help="how long to read each camera (s)")


def run(args: argparse.Namespace, cfg) -> None:
    """Run ``hardware check`` on ``cfg.env.robot``.

    Raises:
        ConfigError: the config has no ``env.robot``.
    """
    if cfg.env.robot is None:
        raise ConfigError("hardware check needs env.robot in the config (e.g. --env.robot.driver=sim)")
    from robot_rl.hardware.check import check_hardware

    check_hardware(cfg.env.robot, move=args.move, camera_seconds=args.camera_seconds)
