"""Learner throughput on CPU at batch 256: updates/s of QC (critic with a best-of-N target + flow BC; the
config's default N and target reuse k, the same with k = 1 (QC's rule: a new target pick every update),
and the paper's N = 32 with k = 1) and QC-FQL (critic + BC + distillation + Q actor loss) against
plain flow-BC updates (baseline), all in one run. Sim-like state-only observations (state 22, env state 7),
action dim 4, h=5; default network sizes; per-step rewards in [0, 1] (``offline.reward_range``).

The cases are timed in interleaved rounds (``--rounds``), so a change in the machine's load during the run
weighs on every case alike and the ratios stay comparable. ``--float32`` adds QC best-of-N with
``offline.learner_dtype=float32`` and ``target_flow_steps=0`` (the policy's K = 10: the learner before
issue 38 but for its fused Adam and LayerNorm pass); ``--target-n 4 2`` adds QC best-of-N rows whose critic
target picks among that many samples (``offline.target_best_of_n``); ``--target-reuse 2 4`` adds QC rows
that keep each batch and its target picks for that many updates (``offline.target_reuse``). Every case is
fed 8 distinct batches in turn, each for its agent's ``batch_reuse`` updates, as training feeds them.
``--lerobot-python`` adds LeRobot 0.4.4's SAC learner (``lerobot_sac_peer.py`` in its side venv, run once
between the rounds) with the same network widths as QC (critic 2 x ``critic_hidden_dims``, actor
``policy.hidden_dims``), timed in each round too (its own process per round; start-up and warm-up are not
timed).

Run: python benchmarks/bench_learner.py [--time-per-case 6] [--threads N] [--float32] [--target-n 4 2]
     [--target-reuse 2 4]
     [--lerobot-python ~/.cache/robot_rl/lerobot044/bin/python [--lerobot-compile]]
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import torch
from torch_bench import start_torch, torch_parser

from robot_rl.config import BCConfig, OfflineRLConfig, PolicyConfig
from robot_rl.policies import build_agent
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_batch

HERE = Path(__file__).resolve().parent


def timed_updates(agent, batches: list[dict], budget_s: float, min_updates: int = 1) -> tuple[int, float]:
    """(updates, seconds) of ``agent.update`` for ``budget_s`` (at least ``min_updates``), fed as training
    feeds it: the distinct ``batches`` in turn, each for ``agent.batch_reuse`` updates in a row (so a case
    that keeps its target picks for a batch pays for a new pick whenever training would)."""
    n, start = 0, time.perf_counter()
    while n < min_updates or time.perf_counter() - start < budget_s:
        agent.update(batches[(n // agent.batch_reuse) % len(batches)])
        n += 1
    return n, time.perf_counter() - start


def lerobot_sac_round(
    args, pcfg: PolicyConfig, ocfg: OfflineRLConfig, budget_s: float
) -> tuple[int, float] | str:
    """(updates, seconds) of LeRobot 0.4.4 SAC's learner for ``budget_s`` from its side venv at QC's
    widths, or why it did not run."""
    if not Path(args.lerobot_python).is_file():
        return f"skipped: no LeRobot side venv at {args.lerobot_python} (../shared/peers/lerobot/setup.sh)"
    cmd = [args.lerobot_python, str(HERE / "lerobot_sac_peer.py"), "--batch-size", str(args.batch_size)]
    cmd += ["--critic-hidden", *map(str, ocfg.critic_hidden_dims)]
    cmd += ["--actor-hidden", *map(str, pcfg.hidden_dims)]
    cmd += ["--time-per-case", str(budget_s), "--threads", str(torch.get_num_threads())]
    cmd += ["--compile" if args.lerobot_compile else "--no-compile"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return f"failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
    out = json.loads(lines[-1])
    return int(out["updates"]), float(out["seconds"])


def main() -> None:
    parser = torch_parser(__doc__, time_per_case=6.0)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the cases")
    parser.add_argument("--float32", action="store_true", help="also time QC with learner_dtype=float32")
    parser.add_argument(
        "--target-n",
        type=int,
        nargs="*",
        default=[],
        help="also time QC best-of-N with these target_best_of_n",
    )
    parser.add_argument(
        "--target-reuse",
        type=int,
        nargs="*",
        default=[],
        help="also time QC best-of-N with these offline.target_reuse (k updates per batch and pick)",
    )
    parser.add_argument("--lerobot-python", default="", help="the LeRobot side venv's python (peer row)")
    parser.add_argument("--lerobot-compile", action="store_true", help="SAC's default torch.compile on")
    args = parser.parse_args()
    stats = start_torch(args)
    pcfg = PolicyConfig()
    batches = [fake_batch(args.batch_size, pcfg.horizon, seed=i) for i in range(8)]
    default = OfflineRLConfig()
    print(
        f"learner updates, CPU, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"batch {args.batch_size}, h={pcfg.horizon} d={SIM_ACTION_DIM}; policy MLP {pcfg.hidden_dims}, "
        f"critic 2x{default.critic_hidden_dims}, learner_dtype {default.learner_dtype}, "
        f"target_flow_steps {default.target_flow_steps}, target_reuse {default.target_reuse}"
    )
    bc = build_agent("bc", pcfg, BCConfig(), SIM_OBS_SHAPES, SIM_ACTION_DIM, stats)
    agents = {"flow BC (baseline)": bc}
    # (label, OfflineRLConfig fields over the default's); the fake batch's rewards are in [0, 1] (training
    # fills reward_range from the dataset's next.reward)
    base = {
        "best_of_n": default.best_of_n,
        "learner_dtype": default.learner_dtype,
        "reward_range": [0.0, 1.0],
    }
    cases = [
        (f"QC best-of-{default.best_of_n} (default)", {"method": "qc"}),
        (f"QC best-of-{default.best_of_n}, k=1 (QC's rule)", {"method": "qc", "target_reuse": 1}),
        ("QC best-of-32 (paper)", {"method": "qc", "best_of_n": 32, "target_reuse": 1}),
        ("QC-FQL", {"method": "qc_fql"}),
    ]
    if args.float32:  # the learner before issue 38: float32 products, the policy's K target steps
        f32 = {"method": "qc", "learner_dtype": "float32", "target_flow_steps": 0, "target_reuse": 1}
        cases.append((f"QC best-of-{default.best_of_n} f32, K=10", f32))
    for target_n in args.target_n:
        label = f"QC best-of-{default.best_of_n}, target N={target_n}"
        cases.append((label, {"method": "qc", "target_best_of_n": target_n}))
    for reuse in args.target_reuse:
        label = f"QC best-of-{default.best_of_n}, reuse k={reuse}"
        cases.append((label, {"method": "qc", "target_reuse": reuse}))
    for label, fields in cases:
        ocfg = OfflineRLConfig(**{**base, **fields})
        agents[label] = build_agent(ocfg.method, pcfg, ocfg, SIM_OBS_SHAPES, SIM_ACTION_DIM, stats)
    for agent in agents.values():
        agent.update(batches[-1])  # warm-up
    totals = {label: [0, 0.0] for label in agents}
    peer_label, peer_error = "LeRobot 0.4.4 SAC (peer)", ""
    rounds = max(1, args.rounds)
    for _ in range(rounds):
        for label, agent in agents.items():
            n, seconds = timed_updates(agent, batches, args.time_per_case / rounds)
            totals[label][0] += n
            totals[label][1] += seconds
        if args.lerobot_python and not peer_error:
            got = lerobot_sac_round(args, pcfg, default, args.time_per_case / rounds)
            if isinstance(got, str):
                peer_error = got
            else:
                totals.setdefault(peer_label, [0, 0.0])
                totals[peer_label][0] += got[0]
                totals[peer_label][1] += got[1]
    rates = {label: n / seconds for label, (n, seconds) in totals.items()}
    base = rates["flow BC (baseline)"]
    for label, ups in rates.items():
        print(f"{label:<28} {ups:8.2f} updates/s   {ups / base:.3f}x of flow BC")
    if peer_label in rates:
        qc = rates[cases[0][0]]
        print(
            f"QC best-of-{default.best_of_n} (default) is {qc / rates[peer_label]:.2f}x LeRobot's SAC learner"
        )
    elif peer_error:
        print(f"{peer_label}: {peer_error}")


if __name__ == "__main__":
    main()
