"""``robot-rl serve --checkpoint DIR [--address tcp://127.0.0.1:5580] [--token T] [--keys FOLDER]``: serve a
trained checkpoint's action chunks to robots (robot_rl.deploy.policy_server)."""

from __future__ import annotations

import argparse
import os
import signal
import threading

from robot_rl.cli import errors
from robot_rl.deploy.policy_protocol import DEFAULT_ADDRESS
from robot_rl.deploy.policy_server import ServedPolicy, serve_policy
from robot_rl.security import check_address, load_server_keys
from robot_rl.threads import set_threads

TOKEN_ENV = "ROBOT_RL_SERVE_TOKEN"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``serve`` subcommand's arguments."""
    p.add_argument("--checkpoint", required=True, help="checkpoint folder (runs/<run>/checkpoints/<algo>...)")
    p.add_argument("--address", default=DEFAULT_ADDRESS, help="bind address; off loopback it needs --keys")
    p.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV, ""),
        help=f"shared token every request must carry (default: ${TOKEN_ENV}; prefer it to the flag, which "
        "other local users can read in the process list)",
    )
    p.add_argument("--keys", default="", help="CURVE key folder (robot-rl keys); required off loopback")
    p.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:N or mps")
    p.add_argument("--max-message-mb", type=float, default=64.0, help="largest request frame accepted (MiB)")
    p.add_argument(
        "--delay-ms", type=float, default=0.0, help="testing: add this to each inference (slow policy)"
    )
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: all cores)")


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint and serve until SIGTERM or Ctrl-C; prints ``serving <endpoint> ...`` once it
    accepts requests and ``stopped: served N chunks, M error replies`` when SIGTERM stops it. Returns the
    exit code; a known error (bad key folder, non-loopback address without keys, missing or corrupt
    checkpoint) is one line on stderr (robot_rl.cli.errors)."""

    def serve() -> None:
        keys = load_server_keys(args.keys) if args.keys else None
        check_address(args.address, keys, "--address", bind=True)
        if args.threads:
            set_threads(args.threads)
        policy = ServedPolicy.load(args.checkpoint, args.device)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        spec = policy.spec

        def ready(endpoint: str) -> None:
            print(
                f"serving {endpoint} model {spec.model_id} horizon {spec.horizon} action_dim "
                f"{spec.action_dim}{' (token required)' if args.token else ''}; Ctrl-C or SIGTERM stops it",
                flush=True,
            )

        served = serve_policy(
            policy, args.address, keys, args.token, args.max_message_mb, args.delay_ms, stop, ready
        )
        print(f"stopped: served {served['chunks']} chunks, {served['errors']} error replies", flush=True)

    return errors.run_server(serve, args.debug)
