"""``robot-rl gui --run_dir DIR [--host 127.0.0.1] [--port 8765] [--token T]``: the human-in-the-loop web
GUI of a run (robot_rl.teleop.gui): live actor panels, take-over, labels, e-stop, episode browser.
Actors of ``robot-rl online --intervention.device=gui`` connect to it (``robot-rl online`` starts one by
itself; this command serves it standalone, e.g. for ``--role actor`` runs)."""

from __future__ import annotations

import argparse
import os

from robot_rl.cli import errors
from robot_rl.teleop.gui.device import TOKEN_ENV
from robot_rl.teleop.gui.server import serve


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``gui`` subcommand's arguments."""
    p.add_argument("--run_dir", required=True, help="the run's folder (runs/<name>)")
    p.add_argument("--host", default="127.0.0.1", help="bind address; off loopback it needs --token")
    p.add_argument("--port", type=int, default=8765, help="TCP port (0: a free one; printed)")
    p.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV, ""),
        help=f"token every page and websocket must carry (default: ${TOKEN_ENV}; prefer it to the flag, "
        "which other local users can read in the process list)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C or SIGTERM; returns the exit code (a known error is one line on stderr)."""
    return errors.run_server(lambda: serve(args.run_dir, args.host, args.port, args.token), args.debug)
