"""``robot-rl hardware sim-server``: the MuJoCo-backed robot server (robot_rl.hardware.sim_server), the
simulated Panda in real time behind a socket, with injectable latency, jitter and dropped requests. It
takes its own flags, not the experiment config."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the server's flags, as a group, to the ``hardware`` subcommand's parser."""
    from robot_rl.hardware.sim_server import add_arguments

    add_arguments(
        p.add_argument_group(
            "sim-server",
            "serve the simulated Panda in real time over ZeroMQ for env.robot.driver: sim_server, with "
            "optional injected latency, jitter and dropped requests",
        )
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit code."""
    from robot_rl.hardware.sim_server import run as serve

    return serve(args)
