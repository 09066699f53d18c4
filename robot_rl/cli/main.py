"""``robot-rl``: the command-line entry point.

Every subcommand takes ``--config FILE``, ``--quick`` and any number of ``--a.b=value`` overrides of the
typed config (robot_rl.config); unknown keys are errors that name the key. ``--overrides="--a.b=1 --c.d=2"``
gives more arguments in one: split by shell rules and read as if appended to the command line (so they win
over earlier ones), the form a ROS 2 launch file passes, as launch substitutes ``$(var overrides)`` into one
argument (empty: nothing).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from robot_rl.cli import dataset, errors, gui, hardware_check, keys, online, record, ros2, serve, sim_server
from robot_rl.config import load_config
from robot_rl.known_warnings import filter_known_warnings
from robot_rl.run_dir import online_name

COMMANDS = {
    "collect": "collect scripted demonstrations into a LeRobot v3.0 dataset",
    "train": "train flow BC (--algo bc) or chunked offline RL (--algo offline) on the run's dataset or on "
    "any local LeRobot dataset (--data.path)",
    "eval": "evaluate a trained checkpoint in parallel simulated envs",
    "open-loop": "score a checkpoint open loop on the dataset's held-out episodes (data.val_episodes)",
    "pipeline": "collect -> train bc -> train offline -> eval -> report; finished stages are skipped",
    "critic": "progress critic: train (on --data.path or the run's dataset), eval (VOC, done AUC, curves) or "
    "serve (a batching critic server on --address)",
    "online": "human-in-the-loop online RL from the offline checkpoint: a learner and actors (local "
    "processes or Ray) with a simulated or real human able to take over",
    "ppo": "online PPO for flow policies (π_RL: --ppo.method flow_noise|flow_sde) in the batched simulator: "
    "BC checkpoint -> PPO -> eval of both",
    "label": "write critic progress and rewards (--reward.mode shaped|critic) into a copy of a dataset",
    "hardware": hardware_check.HELP,
    "record": "record teleoperated demos on the robot of env.robot into a LeRobot v3.0 dataset (resumable)",
}
DEBUG_HELP = "show the traceback of an error instead of one line (also: ROBOT_RL_DEBUG=1)"
OVERRIDES_HELP = (
    "more arguments in one, split by shell rules and read as if appended to the command line, e.g. "
    "--overrides='--config=configs/my_arm.yaml --bc.steps=100' (what launch/*.launch.xml pass; empty: none)"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="robot-rl", description=__doc__)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--config", help="experiment YAML (configs/*.yaml); defaults if omitted")
        p.add_argument("--quick", action="store_true", help="small budgets: minutes on 2 CPU cores")
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        p.add_argument("--overrides", default="", metavar="'--A.B=V ...'", help=OVERRIDES_HELP)
        if name in ("train", "eval", "open-loop", "online", "ppo"):
            p.add_argument("--seed", type=int, default=None, help="training seed (default: all of cfg.seeds)")
        if name in ("train", "open-loop"):
            p.add_argument("--algo", choices=["bc", "offline"], default="bc")
        if name == "eval":
            p.add_argument("--algo", choices=["bc", "offline", "online", "ppo"], default="bc")
        if name == "online":
            online.add_arguments(p)
        if name == "hardware":
            hardware_check.add_arguments(p)
            sim_server.add_arguments(p)
        if name == "record":
            record.add_arguments(p)
        if name == "critic":
            p.add_argument("action", choices=["train", "eval", "serve"])
            p.add_argument(
                "--address",
                default="tcp://127.0.0.1:5555",
                help="serve: ZeroMQ bind address (off loopback it needs --security.keys)",
            )
            p.add_argument("--max-batch", type=int, default=64, help="serve: most pairs per forward pass")
            p.add_argument(
                "--max-wait-ms", type=float, default=0.0, help="serve: wait this long to fill a batch"
            )
        if name == "label":
            p.add_argument("--output", required=True, help="folder of the labelled copy of the dataset")
            p.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    dataset.add_parser(sub)
    keys.add_parser(sub)
    serve.add_parser(sub)
    gui.add_parser(sub)
    ros2.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, load the config and run the subcommand. Returns the process exit code.

    A known, user-fixable error (robot_rl.cli.errors) prints one line and exits non-zero (2 for a config
    error); ``--debug`` or ``ROBOT_RL_DEBUG=1`` shows its traceback instead.
    """
    args, overrides = parse_command_line(argv)
    if _without_config(args):
        modules = {
            "dataset": dataset,
            "keys": keys,
            "serve": serve,
            "gui": gui,
            "ros2": ros2,
            "hardware": sim_server,
        }
        return modules[args.command].run(args)
    filter_known_warnings()
    cfg = None
    with errors.ThreadErrors(args.debug) as background:
        try:
            cfg = load_config(args.config, overrides, quick=args.quick)
            _run(args, cfg, overrides)
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
    parser = _parser()
    args, overrides = parser.parse_known_args(argv)
    try:
        words = shlex.split(getattr(args, "overrides", ""))
    except ValueError as err:
        parser.error(f"--overrides {args.overrides!r}: {err}")
    if words:
        args, overrides = parser.parse_known_args([*argv, *words])
    if _without_config(args) and overrides:
        parser.error(f"unrecognized arguments: {' '.join(overrides)}")
    return args, overrides


def _without_config(args: argparse.Namespace) -> bool:
    return args.command in ("dataset", "keys", "serve", "gui", "ros2") or (
        args.command == "hardware" and args.action == "sim-server"
    )


def _run(args: argparse.Namespace, cfg, overrides: list[str]) -> None:
    if args.command == "hardware":  # no torch: a quick check on the robot's own computer
        hardware_check.run(args, cfg)
        return
    from robot_rl.cli import stages  # heavy imports (torch, mujoco) only after the config is valid
    from robot_rl.threads import set_threads

    set_threads(cfg.threads, cfg.online.num_actors + 1 if args.command == "online" else 1)
    if args.command in ("critic", "label"):
        from robot_rl.cli import critic

        critic.run(args, cfg)
    elif args.command == "collect":
        stages.collect(cfg)
    elif args.command == "record":
        print(record.run(args, cfg))
    elif args.command == "pipeline":
        stages.pipeline(cfg)
    else:
        seeds = [args.seed] if args.seed is not None else cfg.seeds
        for seed in seeds:
            if args.command == "online":
                print(online.run(args, cfg, seed))
            elif args.command == "ppo":
                from robot_rl.cli import ppo

                print(ppo.run(cfg, seed), flush=True)
            elif args.command == "train":
                print(_train_summary(cfg, args.algo, seed, stages.train(cfg, args.algo, seed)), flush=True)
            elif args.command == "open-loop":
                print(stages.open_loop(cfg, args.algo, seed))
            else:
                from robot_rl.config import parse_overrides
                from robot_rl.eval.inference import check_trained_values, given_inference
                from robot_rl.run_dir import RunDir

                algo = {"online": online_name(cfg), "ppo": f"ppo_{cfg.ppo.method}"}.get(args.algo, args.algo)
                given = parse_overrides(overrides)
                if not cfg.deploy.server:  # a served policy acts with its checkpoint's values
                    check_trained_values(cfg, given, RunDir(cfg.run_dir).checkpoint(algo, seed))
                knobs = given_inference(cfg, given)
                print(_eval_summary(cfg, algo, seed, stages.evaluate(cfg, algo, seed, knobs)), flush=True)


def _train_summary(cfg, algo: str, seed: int, result: dict) -> str:
    from robot_rl.eval.summary import train_summary
    from robot_rl.run_dir import RunDir

    run = RunDir(cfg.run_dir)
    val_log = run.val_log(algo, seed)
    return train_summary(
        algo, seed, result, str(run.train_log(algo, seed)), str(val_log) if val_log.is_file() else None
    )


def _eval_summary(cfg, algo: str, seed: int, result: dict) -> str:
    from robot_rl.eval.splits import eval_variant
    from robot_rl.eval.summary import eval_summary
    from robot_rl.run_dir import RunDir

    path = RunDir(cfg.run_dir).eval_file(algo, seed, eval_variant(cfg.eval.name, cfg.eval.split))
    groups = {"task": result.get("per_task", {}), "instruction": result.get("per_instruction", {})}
    return eval_summary(algo, seed, result["summary"], str(path), groups, result.get("split", "test"))


if __name__ == "__main__":
    sys.exit(main())
