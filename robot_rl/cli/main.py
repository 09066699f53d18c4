"""``robot-rl``: the command-line entry point.

The subcommands are the rows of :data:`robot_rl.cli.commands.COMMANDS`. Every subcommand that reads the
experiment config takes ``--config FILE``, ``--quick`` and any number of ``--a.b=value`` overrides of the
typed config (robot_rl.config); unknown keys are errors that name the key. ``--overrides="--a.b=1 --c.d=2"``
gives more arguments in one: split by shell rules and read as if appended to the command line (so they win
over earlier ones), the form a ROS 2 launch file passes, as launch substitutes ``$(var overrides)`` into one
argument (empty: nothing).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from robot_rl.cli import errors
from robot_rl.cli.commands import BY_NAME, COMMANDS, load
from robot_rl.config import load_config
from robot_rl.known_warnings import filter_known_warnings
from robot_rl.sim.gl_env import RendererError, check_mujoco_gl

DEBUG_HELP = "show the traceback of an error instead of one line (also: ROBOT_RL_DEBUG=1)"
OVERRIDES_HELP = (
    "more arguments in one, split by shell rules and read as if appended to the command line, e.g. "
    "--overrides='--config=configs/my_arm.yaml --bc.steps=100' (what launch/*.launch.xml pass; empty: none)"
)


def _parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser of every command; only the command ``argv`` names gets its own flags (its module is
    imported for them), so ``robot-rl --help`` imports no command module."""
    parser = argparse.ArgumentParser(prog="robot-rl", description=__doc__)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = next((word for word in argv if not word.startswith("-")), None)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        if command.name != chosen:
            continue
        if command.needs_config is not False:
            p.add_argument("--config", help="experiment YAML (configs/*.yaml); defaults if omitted")
            p.add_argument("--quick", action="store_true", help="small budgets: minutes on 2 CPU cores")
            p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
            p.add_argument("--overrides", default="", metavar="'--A.B=V ...'", help=OVERRIDES_HELP)
        if command.seeds:
            p.add_argument("--seed", type=int, default=None, help="training seed (default: all of cfg.seeds)")
        if command.arguments is not None:
            load(command.arguments)(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, load the config and run the subcommand. Returns the process exit code.

    A known, user-fixable error (robot_rl.cli.errors) prints one line and exits non-zero (2 for a config
    error); ``--debug`` or ``ROBOT_RL_DEBUG=1`` shows its traceback instead.
    """
    try:
        check_mujoco_gl()  # before a command module (some load while parsing) imports MuJoCo
    except RendererError as err:
        code = errors.report(err, debug="--debug" in (sys.argv[1:] if argv is None else argv))
        if code is None:
            raise
        return code
    args, overrides = parse_command_line(argv)
    command = BY_NAME[args.command]
    run = load(command.run)
    if not command.config_needed(args):
        return run(args)
    filter_known_warnings()
    cfg = None
    with errors.ThreadErrors(args.debug) as background:
        try:
            cfg = load_config(args.config, overrides, quick=args.quick)
            run(args, cfg, overrides)
            if background.errors:  # e.g. a metrics writer thread that hit a full disk
                raise background.errors[0]
        except Exception as err:
            code = errors.report(err, debug=args.debug, run_dir=cfg.run_dir if cfg is not None else None)
            if code is None:
                raise
            return code
    return 0


def parse_command_line(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """``argv`` (None: ``sys.argv[1:]``) as :func:`main` reads it: the subcommand's arguments and the config
    overrides, with the words of ``--overrides`` (shell rules) appended to ``argv``. Exits with a usage error
    (status 2) on a bad argument, an unclosed quote in ``--overrides``, or an override given to a subcommand
    without a config.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser(argv)
    args, overrides = parser.parse_known_args(argv)
    try:
        words = shlex.split(getattr(args, "overrides", ""))
    except ValueError as err:
        parser.error(f"--overrides {args.overrides!r}: {err}")
    if words:
        args, overrides = parser.parse_known_args([*argv, *words])
    if not BY_NAME[args.command].config_needed(args) and overrides:
        parser.error(f"unrecognized arguments: {' '.join(overrides)}")
    return args, overrides


if __name__ == "__main__":
    sys.exit(main())
