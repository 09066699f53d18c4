"""``robot-rl hardware sim-server``: the MuJoCo-backed robot server (robot_rl.hardware.sim_server), the
simulated Panda in real time behind a socket, with injectable latency, jitter and dropped requests."""

from __future__ import annotations

import argparse


def add_parser(hardware_sub: argparse._SubParsersAction) -> None:
    """Register ``sim-server`` under ``robot-rl hardware``."""
    from robot_rl.hardware.sim_server import add_arguments

    text = (
        "serve the simulated Panda in real time over ZeroMQ for the sim_server driver (env.robot.driver: "
        "sim_server), with optional injected latency, jitter and dropped requests"
    )
    add_arguments(hardware_sub.add_parser("sim-server", help=text, description=text))


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit code."""
    from robot_rl.hardware.sim_server import run as serve

    return serve(args)
