"""``robot-rl keys FOLDER --actors N [--clients NAME ...]``: make the CURVE keys of the learner link and the
critic server (robot_rl.security); existing keys are kept, so it can be rerun to add clients."""

from __future__ import annotations

import argparse
import sys

from robot_rl.config import ConfigError
from robot_rl.security import actor_key_name, make_keys


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``keys`` subcommand's arguments."""
    p.add_argument("folder", help="key folder to create or add to")
    p.add_argument("--actors", type=int, default=0, help="make keys actor0 .. actor<N-1>")
    p.add_argument("--clients", nargs="*", default=[], help="other client key names (e.g. critic clients)")


def run(args: argparse.Namespace) -> int:
    """Write the keys and list them; returns the exit code (1 on a bad name or an unwritable folder)."""
    names = [actor_key_name(k) for k in range(max(args.actors, 0))] + list(args.clients)
    try:
        written = make_keys(args.folder, names)
    except (ConfigError, OSError) as err:
        print(f"robot-rl keys: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    print(
        f"keys in {args.folder}: servers need server.key_secret and clients/; client <name> needs "
        "<name>.key_secret and server.key"
    )
    return 0
