"""``robot-rl dataset ACTION``: inspect, check, re-derive statistics of, merge, split, filter, convert and
visualize LeRobot datasets (v3.0 or v2.1) on local disk, with no simulator and no config.

Each action is one row of ``ACTIONS``: its help text, a function adding its arguments and a function
running it (returning the exit code).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from robot_rl.data.convert.hdf5 import hdf5_to_lerobot
from robot_rl.data.convert.rosbag import bag_to_lerobot, is_rosbag2
from robot_rl.data.convert.rosbag_export import lerobot_to_bag
from robot_rl.data.convert.zarr_buffers import lerobot_to_zarr, zarr_to_lerobot
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.episode_copy import copy_episodes
from robot_rl.data.lerobot.ops import convert_v21_to_v30, filter_success, merge, split
from robot_rl.data.lerobot.tools import dataset_summary, recompute_stats
from robot_rl.data.lerobot.validate import validate_dataset
from robot_rl.data.lerobot.visualize import write_episode_video, write_rerun
from robot_rl.rewards.evaluate import episode_vocs
from robot_rl.rewards.registry import load_critic

_PATH_HELP = "dataset root (the folder holding meta/info.json)"
_OVERWRITE_HELP = "replace the output if it exists (only a LeRobot dataset or a folder of them)"
_HDF5_SUFFIXES = (".hdf5", ".h5")


@dataclass(frozen=True)
class Action:
    """One ``robot-rl dataset`` action: help text, ``arguments(parser)`` adds its arguments, ``run(args)``
    runs it and returns the exit code."""

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the actions, each with its arguments, to the ``dataset`` subcommand's parser."""
    actions = parser.add_subparsers(dest="action", required=True)
    for name, action in ACTIONS.items():
        action.arguments(actions.add_parser(name, help=action.help, description=action.help))


def run(args: argparse.Namespace) -> int:
    """Run one dataset action; returns the exit code (1 on a bad dataset or bad input, with the problem,
    naming the file, on stderr)."""
    try:
        return ACTIONS[args.action].run(args)
    except (DatasetError, ValueError, OSError) as err:
        print(f"robot-rl dataset {args.action}: {err}", file=sys.stderr)
        return 1


# -- info | validate | stats -------------------------------------------------------------------------
def _info_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help=_PATH_HELP)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _info(args: argparse.Namespace) -> int:
    summary = dataset_summary(args.path)
    if args.json:
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


def _path_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help=_PATH_HELP)


def _validate(args: argparse.Namespace) -> int:
    problems = validate_dataset(args.path)
    if not problems:
        print(f"{args.path}: OK")
        return 0
    print(f"{args.path}: {len(problems)} problem(s)", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    return 1


def _stats_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help=_PATH_HELP)
    p.add_argument("--out", help="write here instead of <path>/meta/stats.json")


def _stats(args: argparse.Namespace) -> int:
    print(f"wrote {recompute_stats(args.path, args.out)}")
    return 0


# -- merge | split | filter | convert ----------------------------------------------------------------
def _wrote(path: str | Path) -> None:
    info = fmt.read_json(Path(path) / fmt.INFO)
    print(f"wrote {path}: {info['total_episodes']} episodes, {info['total_frames']} frames")


def _merge_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("sources", nargs="+", help="dataset roots (v3.0 or v2.1; same fps and features)")
    p.add_argument("--out", required=True, help="the merged v3.0 dataset's folder")
    p.add_argument("--overwrite", action="store_true", help=_OVERWRITE_HELP)
    p.add_argument(
        "--drop",
        nargs="+",
        default=[],
        metavar="KEY",
        help="features to leave out (e.g. observation.environment_state: its size differs per suite task)",
    )


def _merge(args: argparse.Namespace) -> int:
    _wrote(merge(args.sources, args.out, args.overwrite, args.drop))
    return 0


def parse_episodes(spec: str) -> list[int]:
    """``"0,2-4"`` -> ``[0, 2, 3, 4]`` (ranges inclusive, order kept). Raises ValueError on a bad spec."""
    out: list[int] = []
    for part in spec.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"bad episode list {spec!r}: expected ids and ranges like 0,2-4")
        out += list(range(int(lo), int(hi) + 1)) if dash else [int(lo)]
    return out


def _split_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help=_PATH_HELP)
    p.add_argument("--out", required=True, help="folder for the parts (selected/ and rest/, or task-NNN/)")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument(
        "--episodes", help="episode ids and ranges, e.g. 0,2-3: they go to selected/, the rest to rest/"
    )
    how.add_argument("--by-task", action="store_true", help="one dataset per task, task-NNN/")
    p.add_argument("--overwrite", action="store_true", help=_OVERWRITE_HELP)


def _split(args: argparse.Namespace) -> int:
    if args.by_task:
        parts = split(args.path, args.out, by="task", overwrite=args.overwrite)
    else:
        parts = split(args.path, args.out, episodes=parse_episodes(args.episodes), overwrite=args.overwrite)
    for label, path in parts.items():
        print(f"{label}:")
        _wrote(path)
    return 0


def _filter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help=_PATH_HELP)
    p.add_argument("--out", required=True, help="the filtered v3.0 dataset's folder")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument(
        "--success",
        action="store_true",
        help="keep episodes with next.success true at any frame (else next.reward > 0 at the last frame)",
    )
    how.add_argument(
        "--min-voc",
        type=float,
        help="keep episodes whose progress-critic VOC (each frame against the first, GVL) is at least this",
    )
    p.add_argument("--critic", help="trained critic checkpoint folder, for --min-voc")
    p.add_argument("--overwrite", action="store_true", help=_OVERWRITE_HELP)


def _filter(args: argparse.Namespace) -> int:
    if args.success:
        _wrote(filter_success(args.path, args.out, args.overwrite))
        return 0
    if not args.critic:
        raise ValueError("--min-voc needs --critic <trained critic checkpoint folder>")
    vocs = episode_vocs(load_critic(args.critic), args.path)
    keep = [ep for ep, v in enumerate(vocs) if v >= args.min_voc]
    print(f"VOC per episode: {[round(v, 3) for v in vocs]}; keeping {len(keep)} of {len(vocs)}")
    if not keep:
        raise DatasetError(f"{args.path}: no episode has VOC >= {args.min_voc}; nothing written")
    _wrote(copy_episodes([(args.path, keep)], args.out, args.overwrite))
    return 0


def _convert_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        help="a LeRobot dataset root, a *.zarr folder, an .hdf5/.h5 file or folder of them, or a rosbag2 "
        "folder (metadata.yaml + .db3/.mcap)",
    )
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument(
        "--to",
        choices=["v3.0", "zarr", "rosbag2"],
        default="v3.0",
        help="output format for a LeRobot input (zarr, HDF5 and rosbag2 inputs always become LeRobot v3.0)",
    )
    p.add_argument(
        "--fps", type=int, help="frame rate of a zarr or HDF5 input, or the rate a rosbag2 is resampled to"
    )
    p.add_argument(
        "--topics",
        help="topics YAML mapping ROS 2 topics to features (needed for a rosbag2 input; optional for --to "
        "rosbag2)",
    )
    p.add_argument("--episodes", default="0", help="--to rosbag2: episode ids and ranges (default: 0)")
    p.add_argument("--storage", choices=["sqlite3", "mcap"], default="sqlite3", help="--to rosbag2: storage")
    p.add_argument("--overwrite", action="store_true", help=_OVERWRITE_HELP + "; LeRobot v2.1 -> v3.0 only")


def _input_kind(path: Path) -> str:
    """``lerobot``, ``zarr``, ``hdf5`` or ``rosbag2``. Raises ValueError naming the path when it is none
    of them."""
    if not path.exists():
        raise ValueError(f"{path}: not found")
    if is_rosbag2(path):
        return "rosbag2"
    if path.is_dir() and (path / fmt.INFO).is_file():
        return "lerobot"
    if path.is_dir() and path.suffix == ".zarr":
        return "zarr"
    if path.suffix in _HDF5_SUFFIXES or (
        path.is_dir() and any(p.suffix in _HDF5_SUFFIXES for p in path.iterdir() if p.is_file())
    ):
        return "hdf5"
    raise ValueError(
        f"{path}: not a LeRobot dataset (no meta/info.json), a *.zarr folder, an HDF5 file or folder, or a "
        "rosbag2 folder (metadata.yaml with .db3 or .mcap files)"
    )


def _convert(args: argparse.Namespace) -> int:
    src = Path(args.path)
    kind = _input_kind(src)
    if kind == "lerobot" and args.fps is not None:
        raise ValueError(
            f"{src}: --fps is for zarr and HDF5 inputs (and resampling a rosbag2); a LeRobot dataset "
            "records its own fps"
        )
    if kind == "rosbag2" and not args.topics:
        raise ValueError(
            f"{src}: a rosbag2 input needs --topics topics.yaml (see configs/ros2/rosbag_topics.yaml)"
        )
    if args.topics and kind != "rosbag2" and args.to != "rosbag2":
        raise ValueError(f"{src}: --topics is for rosbag2 inputs and --to rosbag2")
    if kind != "lerobot" and args.to != "v3.0":
        raise ValueError(f"{src}: a {kind} input converts to LeRobot v3.0 only, not --to {args.to}")
    if args.overwrite and (kind != "lerobot" or args.to != "v3.0"):
        raise ValueError(f"{src}: --overwrite is supported for LeRobot v2.1 -> v3.0 only")
    if kind == "lerobot" and args.to == "v3.0":
        _wrote(convert_v21_to_v30(src, args.out, args.overwrite))
        return 0
    try:
        if kind == "rosbag2":
            _wrote(bag_to_lerobot(src, args.out, args.topics, fps=args.fps))
            return 0
        if args.to == "rosbag2":
            episodes = parse_episodes(args.episodes)
            print(f"wrote {lerobot_to_bag(src, args.out, args.topics, episodes, args.storage)}")
            return 0
        if kind == "lerobot":
            print(f"wrote {lerobot_to_zarr(src, args.out)}")
            return 0
        if kind == "zarr":
            _wrote(zarr_to_lerobot(src, args.out, fps=args.fps))
            return 0
        _wrote(hdf5_to_lerobot(src, args.out, fps=args.fps))
        return 0
    except ModuleNotFoundError as err:
        raise ValueError(
            f"{src}: converting {kind} needs the module {err.name!r}, which is not installed"
        ) from err


# -- visualize ---------------------------------------------------------------------------------------
def _visualize_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help=_PATH_HELP)
    p.add_argument(
        "--out",
        required=True,
        help="FILE.mp4 (grid: cameras over state/action curves) or FILE.rrd (rerun; needs robot-rl[viz])",
    )
    p.add_argument("--episodes", default="0", help="episode ids and ranges, e.g. 0,2-3 (default: 0)")
    p.add_argument("--max-frames", type=int, help="show at most this many frames of each episode")


def _visualize(args: argparse.Namespace) -> int:
    out = Path(args.out)
    writers = {".mp4": write_episode_video, ".rrd": write_rerun}
    if out.suffix not in writers:
        raise ValueError(f"{out}: --out must end in .mp4 (video grid) or .rrd (rerun recording)")
    try:
        print(f"wrote {writers[out.suffix](args.path, out, parse_episodes(args.episodes), args.max_frames)}")
    except ImportError as err:  # rerun-sdk missing: the message names the extra to install
        raise ValueError(str(err)) from err
    return 0


ACTIONS: dict[str, Action] = {
    "info": Action("features, episodes, fps, tasks and size of a dataset", _info_args, _info),
    "validate": Action(
        "check schema, timestamps, video frame counts and NaNs; list every problem (exit 1 if any)",
        _path_args,
        _validate,
    ),
    "stats": Action(
        "recompute normalisation statistics into meta/stats.json (or --out)", _stats_args, _stats
    ),
    "merge": Action(
        "merge datasets (v3.0 or v2.1, same fps and features) into one v3.0 dataset; video is not re-encoded",
        _merge_args,
        _merge,
    ),
    "split": Action(
        "split a dataset by episode ids (--episodes) or by task (--by-task) into v3.0 datasets",
        _split_args,
        _split,
    ),
    "filter": Action(
        "keep the successful episodes (--success), or those a progress critic ranks in order (--min-voc), "
        "in a new v3.0 dataset",
        _filter_args,
        _filter,
    ),
    "convert": Action(
        "LeRobot v2.1 -> v3.0 (videos copied), LeRobot -> zarr (--to zarr) or rosbag2 (--to rosbag2), zarr, "
        "HDF5 or rosbag2 (--topics) -> LeRobot v3.0",
        _convert_args,
        _convert,
    ),
    "visualize": Action(
        "write an MP4 grid of episodes (cameras over state/action curves) or a rerun .rrd recording",
        _visualize_args,
        _visualize,
    ),
}
