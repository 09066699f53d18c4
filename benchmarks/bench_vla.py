"""VLA policy (policy.kind=vla) cost on CPU against the state flow policy measured in the same run:
per-chunk inference latency at batch 1 and 8 (K=10 Euler steps, one VLM pass per chunk) and flow-BC
training steps/s at batch 8. Backbones are randomly initialised Idefics3 (SmolVLM) models built from
config, no download: ``tiny`` (the tests' 2-layer model, one 32 px camera) and ``smolvlm256m``
(SmolVLM-256M-Instruct's architecture: SigLIP-B/16 at 512 px + a 30-layer 576-wide Llama, one camera
upscaled to 512 px by the processor). Sim-like state (22 + 7), action dim 4, h=5, the default expert
(4 layers, width 256); the VLA trains with the vision encoder frozen and the language model fine-tuned
(the defaults). Each VLA also runs with its expert's cross-attention K/V cache turned off (the plain
decoder at every flow step), inference only, for the cache's gain in the same run; with ``--compile`` also
with its cached flow step through ``torch.compile`` (``policy.vla.compile``; inference only, compiled in
the warm-up calls, whose time is printed). "peak MB" is the process's peak resident memory after the row
(``ru_maxrss``): cumulative, so a row's figure bounds what it needed together with every row before it.

Run: python benchmarks/bench_vla.py [--time-per-case 3] [--threads N] [--sizes tiny smolvlm256m] [--compile]
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch
from bench_policy import latency_ms
from torch_bench import start_torch, torch_parser

from robot_rl.algos import FlowBC
from robot_rl.config import BCConfig, PolicyConfig, VLAConfig
from robot_rl.policies import FlowChunkPolicy, build_agent
from robot_rl.policies.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_batch, fake_obs, fake_stats
from robot_rl.policies.vla import VLAPolicy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tiny_vlm import SMOLVLM_256M, TINY, random_idefics3  # noqa: E402

SIZES = {"tiny": (TINY, 32), "smolvlm256m": (SMOLVLM_256M, 64)}  # (VLM sizes, camera pixels)


def steps_per_s(agent, batch: dict, budget_s: float, min_steps: int = 3) -> float:
    """Training updates per second over as many as fit in ``budget_s`` (after 1 warm-up)."""
    agent.update(batch)
    times = []
    start = time.perf_counter()
    while len(times) < min_steps or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        agent.update(batch)
        times.append(time.perf_counter() - t0)
    return 1.0 / statistics.median(times)


def measure(name: str, agent, shapes: dict, budget_s: float, train: bool = True) -> dict[str, float]:
    out = {}
    agent.eval()
    for b in (1, 8):
        obs = fake_obs(b, shapes, seed=0)
        with torch.inference_mode():
            out[f"ms_b{b}"] = latency_ms(lambda obs=obs: agent.act(obs), budget_s, min_iters=3)
    out["train_steps_s"] = float("nan")
    if train:
        batch = fake_batch(8, 5, shapes, SIM_ACTION_DIM, seed=0)
        out["train_steps_s"] = steps_per_s(agent, batch, budget_s)
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    params = sum(p.numel() for p in agent.policy.parameters())
    trained = sum(p.numel() for p in agent.policy.parameters() if p.requires_grad)
    out["params_m"], out["trained_m"] = params / 1e6, trained / 1e6
    return out


def main() -> None:
    parser = torch_parser(__doc__, time_per_case=3.0)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--compile", action="store_true", help="add a row with policy.vla.compile")
    args = parser.parse_args()
    stats = start_torch(args)
    pcfg = PolicyConfig()
    print(
        f"CPU, torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"h={pcfg.horizon} K={pcfg.flow_steps}"
    )
    rows = {
        "state flow": measure(
            "flow",
            build_agent("bc", pcfg, BCConfig(), SIM_OBS_SHAPES, SIM_ACTION_DIM, stats),
            SIM_OBS_SHAPES,
            args.time_per_case,
        )
    }
    for size in args.sizes:
        sizes, pixels = SIZES[size]
        shapes = SIM_OBS_SHAPES | {"observation.images.front": (pixels, pixels, 3)}
        t0 = time.perf_counter()
        model, processor = random_idefics3(sizes)
        cfg = PolicyConfig(kind="vla", vla=VLAConfig(instruction="Pick up the cube and lift it."))
        policy = VLAPolicy(cfg, shapes, SIM_ACTION_DIM, fake_stats(shapes), model, processor)
        print(f"built {size} in {time.perf_counter() - t0:.1f} s")
        budget = args.time_per_case
        rows[f"VLA {size}"] = measure(size, FlowBC(policy, BCConfig()), shapes, budget)
        if args.compile:
            policy.expert.compile_sampling = True
            t0 = time.perf_counter()
            rows[f"VLA {size} compiled"] = measure(size, FlowBC(policy, BCConfig()), shapes, budget, False)
            print(f"compiled row of {size}: {time.perf_counter() - t0:.1f} s, compiles included")
            policy.expert.compile_sampling = False
        policy.velocity_field = partial(FlowChunkPolicy.velocity_field, policy)  # the plain decoder
        rows[f"VLA {size} no KV cache"] = measure(size, FlowBC(policy, BCConfig()), shapes, budget, False)
    base = rows["state flow"]
    head = ("policy", "params M", "trained M", "ms/chunk b=1", "ms/chunk b=8", "train steps/s b=8", "peak MB")
    columns = "{:<22} | {:>8} | {:>9} | {:>12} | {:>12} | {:>17} | {:>7} | "
    print(columns.format(*head) + "slower than state flow (b=1, b=8, train)")
    for name, r in rows.items():
        train = base["train_steps_s"] / r["train_steps_s"]
        ratio = f"x{r['ms_b1'] / base['ms_b1']:.0f}, x{r['ms_b8'] / base['ms_b8']:.0f}, " + (
            f"x{train:.0f}" if train == train else "-"
        )
        cells = (name, r["params_m"], r["trained_m"], r["ms_b1"], r["ms_b8"], r["train_steps_s"], r["rss_mb"])
        line = "{:<22} | {:>8.1f} | {:>9.1f} | {:>12.1f} | {:>12.1f} | {:>17.2f} | {:>7.0f} | ".format(*cells)
        print(line + (ratio if r is not base else "(baseline)"))
    for size in args.sizes:
        on, off = rows[f"VLA {size}"], rows[f"VLA {size} no KV cache"]
        gain = f"b=1 x{off['ms_b1'] / on['ms_b1']:.2f}, b=8 x{off['ms_b8'] / on['ms_b8']:.2f}"
        print(f"K/V cache speed-up per chunk, {size}: {gain}")
        if args.compile:
            c = rows[f"VLA {size} compiled"]
            print(
                f"torch.compile speed-up per chunk, {size}: b=1 x{on['ms_b1'] / c['ms_b1']:.2f}, "
                f"b=8 x{on['ms_b8'] / c['ms_b8']:.2f} (against the eager cached step)"
            )


if __name__ == "__main__":
    main()
