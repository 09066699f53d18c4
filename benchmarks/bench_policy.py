"""Policy inference latency per chunk on CPU: flow sampling (K=10 Euler steps, the baseline) vs QC
best-of-N (flow samples N chunks + critic ensemble picks the argmax) at the config's default N and at the
paper's N = 32. Sim-like state-only observations (state 22, env state 7), action dim 4, h=5; default network
sizes from robot_rl.config; the critic's ``offline.reward_range`` is the fake batch's [0, 1] (acting does not
read it, but ``reward_norm: max`` refuses to build without one).

Run: python benchmarks/bench_policy.py [--time-per-case 3] [--threads N]
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import torch
from torch_bench import start_torch, torch_parser

from robot_rl.config import BCConfig, OfflineRLConfig, PolicyConfig
from robot_rl.policies import build_agent
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_obs


def latency_ms(fn, budget_s: float, min_iters: int = 5) -> float:
    """Median wall time of ``fn()`` in ms over as many calls as fit in ``budget_s`` (after 2 warm-ups)."""
    fn()
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < min_iters or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)


def main() -> None:
    parser = torch_parser(__doc__, time_per_case=3.0)
    args = parser.parse_args()
    stats = start_torch(args)
    pcfg = PolicyConfig()
    ocfg = OfflineRLConfig(reward_range=[0.0, 1.0])
    n_default = ocfg.best_of_n
    flow = build_agent("bc", pcfg, BCConfig(), SIM_OBS_SHAPES, SIM_ACTION_DIM, stats).eval()
    qcs = {
        f"QC best-of-{n} ({why})": build_agent(
            "qc", pcfg, replace(ocfg, best_of_n=n), SIM_OBS_SHAPES, SIM_ACTION_DIM, stats
        ).eval()
        for n, why in ((n_default, "default"), (32, "paper"))
    }
    print(
        f"policy inference, CPU, torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"h={pcfg.horizon} d={SIM_ACTION_DIM} K={pcfg.flow_steps} policy MLP {pcfg.hidden_dims}, "
        f"critic {ocfg.num_critics}x{ocfg.critic_hidden_dims}"
    )
    print(
        f"{'batch':>5} | {'flow K=10 (ms/chunk batch)':>27} | "
        + " | ".join(f"{name} (ms), x flow" for name in qcs)
    )
    for batch in (1, 64):
        obs = fake_obs(batch, seed=0)
        with torch.inference_mode():
            t_flow = latency_ms(lambda obs=obs: flow.act(obs), args.time_per_case)
            t_qc = [latency_ms(lambda obs=obs, qc=qc: qc.act(obs), args.time_per_case) for qc in qcs.values()]
        cells = " | ".join(
            f"{t:>{len(name) + 5}.2f}, {t / t_flow:.1f}x" for name, t in zip(qcs, t_qc, strict=True)
        )
        print(f"{batch:>5} | {t_flow:>27.2f} | {cells}")


if __name__ == "__main__":
    main()
