"""``robot-rl dataset info|validate|stats PATH``: inspect, check and re-derive statistics of any LeRobot
dataset (v3.0 or v2.1) on local disk, with no simulator and no config."""

from __future__ import annotations

import argparse
import json
import sys

ACTIONS = {
    "info": "features, episodes, fps, tasks and size of a dataset",
    "validate": "check schema, timestamps, video frame counts and NaNs; list every problem (exit 1 if any)",
    "stats": "recompute normalisation statistics into meta/stats.json (or --out)",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``dataset`` and its actions on the top-level subparsers."""
    parser = sub.add_parser("dataset", help="inspect, validate and re-derive stats of a LeRobot dataset")
    actions = parser.add_subparsers(dest="action", required=True)
    for name, help_text in ACTIONS.items():
        p = actions.add_parser(name, help=help_text, description=help_text)
        p.add_argument("path", help="dataset root (the folder holding meta/info.json)")
        if name == "info":
            p.add_argument("--json", action="store_true", help="print the summary as JSON")
        if name == "stats":
            p.add_argument("--out", help="write here instead of <path>/meta/stats.json")


def run(args: argparse.Namespace) -> int:
    """Run one dataset action; returns the exit code (1 on a bad dataset, with the problem on stderr)."""
    from robot_rl.data.errors import DatasetError

    try:
        if args.action == "validate":
            return _validate(args.path)
        if args.action == "info":
            return _info(args.path, args.json)
        from robot_rl.data.dataset_tools import recompute_stats

        print(f"wrote {recompute_stats(args.path, args.out)}")
        return 0
    except (DatasetError, ValueError) as err:
        print(f"robot-rl dataset {args.action}: {err}", file=sys.stderr)
        return 1


def _validate(path: str) -> int:
    from robot_rl.data.validate import validate_dataset

    problems = validate_dataset(path)
    if not problems:
        print(f"{path}: OK")
        return 0
    print(f"{path}: {len(problems)} problem(s)", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    return 1


def _info(path: str, as_json: bool) -> int:
    from robot_rl.data.dataset_tools import dataset_summary

    summary = dataset_summary(path)
    if as_json:
        print(json.dumps(summary, indent=2))
        return 0
    lengths = summary["episode_length"]
    print(f"{summary['root']}  (LeRobot {summary['codebase_version']}, robot {summary['robot_type']!r})")
    print(
        f"  {summary['episodes']} episodes, {summary['frames']} frames at {summary['fps']} fps "
        f"({summary['duration_s']:.1f} s; episode length {lengths['min']}-{lengths['max']}), "
        f"{summary['size_bytes'] / 1e6:.1f} MB"
    )
    if summary["sources"]:
        print("  sources: " + ", ".join(f"{k} {v}" for k, v in summary["sources"].items()))
    print("  tasks:")
    for i, task in enumerate(summary["tasks"]):
        print(f"    {i}: {task}")
    print("  features:")
    for key, feat in summary["features"].items():
        codec = f"  codec {feat['codec']}" if feat.get("codec") else ""
        print(f"    {key:<40} {feat['dtype']:<8} {feat['shape']}{codec}")
    return 0
