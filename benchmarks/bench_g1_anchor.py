"""Real-data anchor on the G1 fixture (issue 38 item 4): open-loop action error on held-out episode(s) of
hold-last-command, constant-velocity extrapolation, flow BC, the small VLA and LeRobot 0.4.4's ACT, all
trained on the same episodes for the same number of steps in one run and scored by the same code.

    python benchmarks/bench_g1_anchor.py                      # hold, extrapolate, flow BC, ACT; 2,000 steps
    python benchmarks/bench_g1_anchor.py --vla                # + the small VLA (camera: ~1.5 h on 2 cores)
    python benchmarks/bench_g1_anchor.py --curve 1,2,3        # learning curve (1..3 training episodes)
    python benchmarks/bench_g1_anchor.py --prev_action_steps 2 3   # one flow BC per k last commands
    python benchmarks/bench_g1_anchor.py --test 3 --curve 3 --prev_action_steps 2 3   # validation: train 0-2
    python benchmarks/bench_g1_anchor.py --tiny               # smoke run: a few steps, no VLA

Metrics (robot_rl.eval.open_loop's formulas, in action units: rad for arms, normalised hand joints):
chunk MAE over valid chunk steps, first-step MAE, and the copycat split
(:func:`robot_rl.eval.open_loop.command_change_split`). Every model is scored by :func:`score` on the
same frames; ACT's predictions come back from the side venv as a file. "Hold" repeats the last command
a[t−1] the policies see (``observation.prev_action``; the state at an episode's first frame);
"extrapolate" continues its last change, a[t−1] + (k+1)(a[t−1] − a[t−2]), a no-learning reference for
what two past commands tell. ``--curve 1,2,3,4`` trains on the first n of the non-test episodes.
``--prev_action_steps 2 3`` trains one flow BC per k (``data.prev_action_steps``: the last k commands as
input; default the config's; k = 1 needs ``--flow_set policy.action_reference_velocity=false``, since the
config's reference continues the last change); ``--test 3 --curve 3`` is the validation split for
choosing settings (train on 0-2, score on 3, episode 4 unused), so the test episode 4 is scored once with
the chosen one.
Trained models are kept under ``--run_dir`` by setting (tag) and reused by a rerun. ACT runs in a
subprocess of the LeRobot side venv (``$ROBOT_RL_LEROBOT_VENV``, default ``~/.cache/robot_rl/lerobot044``;
its ``lerobot.policies`` import needs ``pyserial``, which ``/work/shared/peers/lerobot/setup.sh`` leaves
out) and trains while flow BC does; without that venv its row is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

from robot_rl.config import load_config
from robot_rl.data.training.training_set import TrainingSet
from robot_rl.eval.open_loop import command_change_split, open_loop_eval
from robot_rl.policies import factory as agents
from robot_rl.run_dir import RunDir
from robot_rl.training.loop import train_agent

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(os.environ.get("ROBOT_RL_FIXTURES", ROOT.parent / "shared" / "fixtures")) / "lerobot"
CONFIG = ROOT / "configs" / "g1_pick_bottle.yaml"
ACT_VENV = Path(os.environ.get("ROBOT_RL_LEROBOT_VENV", Path.home() / ".cache" / "robot_rl" / "lerobot044"))
ACT_PYTHON = ACT_VENV / "bin" / "python"
VLA = [
    "--data.images=true",
    "--policy.kind=vla",
    "--policy.vla.backbone=small",
    "--policy.vla.expert_width=64",
    "--policy.vla.expert_layers=2",
]


def load_frames(root: Path) -> dict[str, np.ndarray]:
    """``state``, ``action`` (N, d) float32, ``episode`` (N,) int64 of a LeRobot v3.0 dataset's rows, and
    ``prev_action`` (N, d): a[t−1], the state at an episode's first frame (the config's
    ``prev_action_start``). Raises FileNotFoundError naming the parquet file."""
    path = root / "data" / "chunk-000" / "file-000.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"G1 fixture data not found: {path}")
    table = pq.read_table(path, columns=["observation.state", "action", "episode_index", "index"])
    if not np.array_equal(np.asarray(table["index"]), np.arange(table.num_rows)):
        raise ValueError(f"{path}: rows are not in index order")
    state = np.asarray(table["observation.state"].to_pylist(), np.float32)
    action = np.asarray(table["action"].to_pylist(), np.float32)
    episode = np.asarray(table["episode_index"], np.int64)
    first = np.r_[True, episode[1:] != episode[:-1]]
    prev = np.concatenate([state[:1], action[:-1]])
    prev[first] = state[first]
    return {"state": state, "action": action, "episode": episode, "prev_action": prev}


def score(pred: np.ndarray, rec: np.ndarray, valid: np.ndarray, prev: np.ndarray) -> dict[str, float]:
    """Chunk and first-step MAE (open_loop_eval's formulas) and the copycat split, for chunks (N, h, d)."""
    err = (pred - rec) * valid[..., None]
    count = max(valid.sum() * pred.shape[-1], 1.0)
    out = {
        "chunk_mae": float(np.abs(err).sum() / count),
        "first_mae": float(np.abs(pred[:, 0] - rec[:, 0]).mean()),
    }
    return {**out, **command_change_split(pred, rec, prev)}


def train_flow(
    tag: str, run_root: Path, test: list[int], unused: list[int], steps: int, extra: list[str], seed: int = 0
):
    """Train flow BC (``configs/g1_pick_bottle.yaml`` + ``extra``, training seed ``seed``) without ``unused``
    episodes and return its open-loop result on every held-out frame, training seconds and the result's
    rows."""
    run = run_root / tag
    cfg = load_config(
        CONFIG,
        [
            f"--run_dir={run}",
            f"--data.path={FIXTURE / 'g1_pick_bottle_v30'}",
            f"--data.val_episodes={sorted(test + unused)}",
            f"--data.val_every={steps}",
            f"--data.cache_dir={run_root / 'frame_cache'}",
            f"--bc.steps={steps}",
            f"--checkpoint_every={steps}",
            "--threads=1",
            *extra,
        ],
    )
    timing = run / "bench_train_s.json"  # a finished model is reused by a rerun (same tag = same settings)
    if not timing.is_file():
        start = time.time()
        train_agent(cfg, "bc", seed, RunDir(cfg.run_dir), None, agents)
        timing.write_text(json.dumps(time.time() - start))
    seconds = json.loads(timing.read_text())
    agent, _ = agents.load_agent(RunDir(cfg.run_dir).checkpoint("bc", seed), "cpu", evaluate=True, seed=seed)
    data = TrainingSet(
        Path(cfg.data.path),
        cfg.data,
        cfg.policy.horizon,
        cfg.offline.gamma,
        run_root / "frame_cache",
        for_rl=False,
        action_reference=cfg.policy.action_reference,
        reference_velocity=cfg.policy.action_reference_velocity,
    )
    return open_loop_eval(agent, data, data.val, 10**6), seconds


def run_act(
    run_root: Path, tag: str, frames: dict, train_rows: np.ndarray, score_rows: np.ndarray, args
) -> tuple[subprocess.Popen, Path]:
    """Export the frames and start ``g1_act_peer.py`` in the LeRobot venv (it trains while flow BC does);
    returns (process, path of its predictions)."""
    data = run_root / f"{tag}_in.npz"
    out = run_root / f"{tag}_out.npz"
    if out.is_file():  # trained by an earlier run with the same tag (same settings): reuse
        return subprocess.Popen([sys.executable, "-c", ""]), out
    np.savez(data, **frames, train_rows=train_rows, score_rows=score_rows)
    cmd = [
        str(args.act_python),
        str(ROOT / "benchmarks" / "g1_act_peer.py"),
        f"--data={data}",
        f"--out={out}",
        f"--steps={args.steps}",
        f"--lr={args.act_lr}",
        f"--dim_model={args.act_dim}",
        f"--dim_feedforward={4 * args.act_dim}",
        f"--layers={args.act_layers}",
        "--inputs=state+prev",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, env=env), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="smoke run: 3 steps, small ACT, no VLA")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--test", type=int, nargs="+", default=[4], help="held-out test episode(s)")
    parser.add_argument("--curve", default="4", help="numbers of training episodes, e.g. 1,2,3,4")
    parser.add_argument(
        "--prev_action_steps",
        type=int,
        nargs="+",
        default=None,
        help="flow BC fed the last k commands (data.prev_action_steps), one model per k (default: config's)",
    )
    parser.add_argument(
        "--flow_set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides for flow BC (e.g. bc.lr=3e-4); part of its model tag",
    )
    parser.add_argument("--seed", type=int, default=0, help="training seed of flow BC and the VLA")
    parser.add_argument("--vla", action="store_true", help="also train the small VLA (camera; slow)")
    parser.add_argument("--act_python", type=Path, default=ACT_PYTHON)
    parser.add_argument("--act_dim", type=int, default=128)
    parser.add_argument("--act_layers", type=int, default=2)
    parser.add_argument("--act_lr", type=float, default=1e-4)
    parser.add_argument("--run_dir", type=Path, default=ROOT / "runs" / "bench_g1_anchor")
    parser.add_argument("--json", type=Path, default=None, help="write the table here as JSON")
    args = parser.parse_args()
    if args.tiny:
        args.steps, args.act_dim, args.act_layers, args.vla = 3, 16, 1, False
    if args.prev_action_steps is None:
        args.prev_action_steps = [load_config(CONFIG).data.prev_action_steps]
    torch.set_num_threads(1)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    frames = load_frames(FIXTURE / "g1_pick_bottle_v30")
    pool = [e for e in np.unique(frames["episode"]).tolist() if e not in args.test]
    has_act = args.act_python.is_file()
    if not has_act:
        print(f"ACT skipped: no LeRobot side venv at {args.act_python} (/work/shared/peers/lerobot/setup.sh)")
    rows_out = []
    for n in [int(x) for x in args.curve.split(",")]:
        train_eps, unused = pool[:n], pool[n:]
        test_tag = "" if args.test == [4] else "_test" + "-".join(map(str, args.test))
        tag = f"n{n}_s{args.steps}{test_tag}" + ("_tiny" if args.tiny else "")
        set_tag = "".join(
            "_" + "".join(c if c.isalnum() or c in "-." else "-" for c in kv) for kv in args.flow_set
        )
        seed_tag = f"_seed{args.seed}" if args.seed else ""  # flow BC / VLA only: ACT keeps its own seed
        train_rows = np.flatnonzero(np.isin(frames["episode"], train_eps))
        test_rows = np.flatnonzero(np.isin(frames["episode"], args.test))
        act_tag = f"act_{tag}_d{args.act_dim}_l{args.act_layers}_lr{args.act_lr:g}"
        act = run_act(args.run_dir, act_tag, frames, train_rows, test_rows, args) if has_act else None
        flows = {}
        for k in args.prev_action_steps:  # k = 1 keeps the tag of the runs before the key existed
            name = f"flow BC (configs/g1_pick_bottle.yaml, last {k} command{'s' if k > 1 else ''})"
            name += "".join(f" {kv}" for kv in args.flow_set)
            bc_tag = f"bc_{tag}" + (f"_k{k}" if k > 1 else "") + set_tag + seed_tag
            extra = [f"--data.prev_action_steps={k}", *(f"--{kv}" for kv in args.flow_set)]
            flows[name] = train_flow(bc_tag, args.run_dir, args.test, unused, args.steps, extra, args.seed)
        bc = next(iter(flows.values()))[0]
        keep = np.isin(frames["episode"][bc.rows], args.test)
        rows, rec, valid = bc.rows[keep], bc.recorded[keep], bc.valid[keep]
        if not np.array_equal(rows, test_rows) or not np.allclose(rec[:, 0], frames["action"][rows]):
            raise RuntimeError("scored frames do not line up with the dataset rows")
        prev = frames["prev_action"][rows]
        before = frames["prev_action"][np.maximum(rows - 1, 0)]
        before[rows == 0] = prev[rows == 0]
        same = frames["episode"][np.maximum(rows - 1, 0)] == frames["episode"][rows]
        before[~same] = prev[~same]
        k = np.arange(1, rec.shape[1] + 1)[None, :, None]
        preds = {
            "hold a[t-1]": np.repeat(prev[:, None], rec.shape[1], 1),
            "extrapolate a[t-1]+k(a[t-1]-a[t-2])": prev[:, None] + k * (prev - before)[:, None],
        }
        seconds = {}
        for name, (result, train_s) in flows.items():
            if not np.array_equal(result.rows, bc.rows):
                raise RuntimeError(f"{name}: scored frames differ from the first flow BC's")
            preds[name], seconds[name] = result.predicted[keep], train_s
        if args.vla:
            vla, vla_s = train_flow(
                f"vla_{tag}{seed_tag}", args.run_dir, args.test, unused, args.steps, VLA, args.seed
            )
            preds["small VLA (camera 96x128)"] = vla.predicted[
                np.isin(frames["episode"][vla.rows], args.test)
            ]
            seconds["small VLA (camera 96x128)"] = vla_s
        if act is not None:
            proc, out = act
            if proc.wait() != 0:
                raise RuntimeError(f"ACT peer failed (exit {proc.returncode}); see its output above")
            name = f"ACT (LeRobot 0.4.4, state+last command, dim {args.act_dim}, {args.act_layers} layers)"
            result = np.load(out)
            preds[name], seconds[name] = result["predicted"], float(result["seconds"])
        for name, pred in preds.items():
            metrics = score(pred, rec, valid, prev)
            rows_out.append(
                {"train_episodes": n, "model": name, "train_s": seconds.get(name, 0.0), **metrics}
            )
    hold = {r["train_episodes"]: r for r in rows_out if r["model"].startswith("hold")}
    print(f"G1 open loop, test episode(s) {args.test}, {args.steps} steps at batch 64 per model")
    print(
        f"{'n':>2} {'model':<66} {'chunk':>8} {'vs hold':>8} {'first':>8} {'vs hold':>8} "
        f"{'1st chg':>8} {'1st held':>8} {'copy':>5} {'train s':>7}"
    )
    for r in rows_out:
        h = hold[r["train_episodes"]]
        print(
            f"{r['train_episodes']:>2} {r['model']:<66} {r['chunk_mae']:8.5f} "
            f"{100 * (r['chunk_mae'] / h['chunk_mae'] - 1):+7.1f}% {r['first_mae']:8.5f} "
            f"{100 * (r['first_mae'] / h['first_mae'] - 1):+7.1f}% {r['first_mae_changed']:8.5f} "
            f"{r['first_mae_held']:8.5f} {r['copy_ratio_changed']:5.2f} {r['train_s']:7.0f}"
        )
    frac = rows_out[0]["frac_changed"]
    print(
        f"command changes (mean |a[t]-a[t-1]| > 1e-3) on {100 * frac:.0f}% of test frames; "
        "copy = policy / hold first-step MAE on those frames"
    )
    if args.json:
        args.json.write_text(json.dumps(rows_out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
