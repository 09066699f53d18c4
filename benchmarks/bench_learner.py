"""Learner throughput on CPU at batch 256: updates/s of QC (critic with a best-of-N target + flow BC; the
config's default N and the paper's N = 32) and QC-FQL (critic + BC + distillation + Q actor loss) against
plain flow-BC updates (baseline), all in one run. Sim-like state-only observations (state 22, env state 7),
action dim 4, h=5; default network sizes; per-step rewards in [0, 1] (``offline.reward_range``).

Run: python benchmarks/bench_learner.py [--time-per-case 6] [--threads N]
"""

from __future__ import annotations

import time

import torch
from torch_bench import start_torch, torch_parser

from robot_rl.config import BCConfig, OfflineRLConfig, PolicyConfig
from robot_rl.policies import build_agent
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_batch


def updates_per_s(agent, batch, budget_s: float, min_updates: int = 3) -> float:
    agent.update(batch)  # warm-up
    n, start = 0, time.perf_counter()
    while n < min_updates or time.perf_counter() - start < budget_s:
        agent.update(batch)
        n += 1
    return n / (time.perf_counter() - start)


def main() -> None:
    parser = torch_parser(__doc__, time_per_case=6.0)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    stats = start_torch(args)
    pcfg = PolicyConfig()
    batch = fake_batch(args.batch_size, pcfg.horizon, seed=0)
    print(
        f"learner updates, CPU, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"batch {args.batch_size}, h={pcfg.horizon} d={SIM_ACTION_DIM}; policy MLP {pcfg.hidden_dims}, "
        f"critic 2x{OfflineRLConfig().critic_hidden_dims}"
    )
    base = updates_per_s(
        build_agent("bc", pcfg, BCConfig(), SIM_OBS_SHAPES, SIM_ACTION_DIM, stats), batch, args.time_per_case
    )
    print(f"{'flow BC (baseline)':<28} {base:8.2f} updates/s   1.00x")
    default_n = OfflineRLConfig().best_of_n
    cases = (
        ("qc", default_n, f"QC best-of-{default_n} (default)"),
        ("qc", 32, "QC best-of-32 (paper)"),
        ("qc_fql", default_n, "QC-FQL"),
    )
    for method, n, label in cases:
        # the fake batch's rewards are in [0, 1]; training fills this range from the dataset's next.reward
        ocfg = OfflineRLConfig(method=method, best_of_n=n, reward_range=[0.0, 1.0])
        agent = build_agent(method, pcfg, ocfg, SIM_OBS_SHAPES, SIM_ACTION_DIM, stats)
        ups = updates_per_s(agent, batch, args.time_per_case)
        print(f"{label:<28} {ups:8.2f} updates/s   {ups / base:.3f}x of flow BC")


if __name__ == "__main__":
    main()
