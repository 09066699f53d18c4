"""VLA policy (policy.kind=vla) cost against the state flow policy measured in the same run, on the CPU or
a GPU: per-chunk inference latency at each batch size (K=10 Euler steps, one VLM pass per chunk; the VLM's
processor, which runs on the CPU in every case, also timed alone) and flow-BC training steps/s. Backbones are
randomly initialised Idefics3 (SmolVLM) models built from config, no download: ``tiny`` (the tests' 2-layer
model, one 32 px camera), ``smolvlm256m`` (SmolVLM-256M-Instruct's architecture: SigLIP-B/16 at 512 px + a
30-layer 576-wide Llama, one camera upscaled to 512 px by the processor) and ``smolvlm500m``
(SmolVLM-500M-Instruct's: the same vision tower + a 32-layer 960-wide Llama). Sim-like state (22 + 7),
action dim 4, h=5, the default expert (4 layers, width 256); the VLA trains with the vision encoder frozen
and the language model fine-tuned (the defaults), its backbone in ``--dtype`` (the expert stays float32).
Each VLA also runs with its expert's cross-attention K/V cache turned off (the plain decoder at every flow
step), inference only, for the cache's gain in the same run; with ``--compile`` also with its cached flow
step through ``torch.compile`` (``policy.vla.compile``; inference only, compiled in the warm-up calls, whose
time is printed). "peak MB" on the CPU is the process's peak resident memory after the row (``ru_maxrss``,
cumulative: it bounds what the row needed together with every row before it); on a GPU it is the row's own
peak of allocated GPU memory (``torch.cuda.max_memory_allocated``). GPU times synchronise the device.

Run: python benchmarks/bench_vla.py [--time-per-case 3] [--threads N] [--sizes tiny smolvlm256m] [--compile]
     [--device cuda] [--dtype bfloat16] [--batches 1 8] [--train-batch 8]
"""

from __future__ import annotations

import gc
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
from robot_rl.policies.vla import VLAPolicy
from robot_rl.policies.vla import backbone as bb
from robot_rl.policies.vla.backbone import DTYPES
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_batch, fake_obs, fake_stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tiny_vlm import SMOLVLM_256M, SMOLVLM_500M, TINY, random_idefics3  # noqa: E402

SIZES = {"tiny": (TINY, 32), "smolvlm256m": (SMOLVLM_256M, 64), "smolvlm500m": (SMOLVLM_500M, 64)}
"""name -> (VLM sizes, camera pixels)"""


def steps_per_s(agent, batch: dict, budget_s: float, device: torch.device, min_steps: int = 3) -> float:
    """Training updates per second over as many as fit in ``budget_s`` (after 1 warm-up)."""
    agent.update(batch)
    _sync(device)
    times = []
    start = time.perf_counter()
    while len(times) < min_steps or time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        agent.update(batch)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return 1.0 / statistics.median(times)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _to(x, device: torch.device):
    """Tensors of a (nested) batch dict moved to ``device``."""
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x.to(device) if isinstance(x, torch.Tensor) else x


def processor_ms(policy: VLAPolicy, obs: dict, budget_s: float) -> float:
    """Median ms of the VLM processor alone (tokenising, image resize/normalise on the CPU, copy to the
    policy's device) for ``obs``: the part of a chunk no accelerator speeds up."""
    images = policy._images(obs)
    tasks = policy._tasks(obs, len(images[0]))
    per_sample = [[x[b].numpy() for x in images] for b in range(len(tasks))]
    device = policy.expert.action_out.weight.device

    def run():
        bb.processor_inputs(policy.processor, tasks, per_sample, device, policy.backbone.dtype)
        _sync(device)

    return latency_ms(run, budget_s, min_iters=3)


def measure(agent, shapes: dict, budget_s: float, batches: list[int], train_batch: int, train: bool = True):
    """Latency per chunk (ms) at each batch, train steps/s, peak MB, parameters (M)."""
    device = agent.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    out = {}
    agent.eval()
    for b in batches:
        obs = {k: v.to(device) for k, v in fake_obs(b, shapes, seed=0).items()}

        def act(obs=obs):
            agent.act(obs)
            _sync(device)

        with torch.inference_mode():
            out[f"ms_b{b}"] = latency_ms(act, budget_s, min_iters=3)
    out["train_steps_s"] = float("nan")
    if train:
        batch = fake_batch(train_batch, 5, shapes, SIM_ACTION_DIM, seed=0)
        batch = _to(batch, device)
        out["train_steps_s"] = steps_per_s(agent, batch, budget_s, device)
    if device.type == "cuda":
        out["peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    params = sum(p.numel() for p in agent.policy.parameters())
    trained = sum(p.numel() for p in agent.policy.parameters() if p.requires_grad)
    out["params_m"], out["trained_m"] = params / 1e6, trained / 1e6
    return out


class Table:
    """Prints each row as soon as it is measured (a run cut short keeps its rows), ratios against the
    first row (the state flow policy)."""

    def __init__(self, batches: list[int], train_batch: int) -> None:
        self.batches, self.base = batches, None
        b1, bn = batches[0], batches[-1]
        head = ("policy", "params M", "trained M", *(f"ms/chunk b={b}" for b in batches))
        head += (f"train steps/s b={train_batch}", "peak MB")
        print(" | ".join(head) + f" | slower than state flow (b={b1}, b={bn}, train)", flush=True)

    def row(self, name: str, r: dict[str, float]) -> dict[str, float]:
        base = self.base = self.base or r
        b1, bn = self.batches[0], self.batches[-1]
        train = base["train_steps_s"] / r["train_steps_s"]
        ratio = f"x{r[f'ms_b{b1}'] / base[f'ms_b{b1}']:.0f}, x{r[f'ms_b{bn}'] / base[f'ms_b{bn}']:.0f}, " + (
            f"x{train:.0f}" if train == train else "-"
        )
        cells = [name, f"{r['params_m']:.1f}", f"{r['trained_m']:.1f}"]
        cells += [f"{r[f'ms_b{b}']:.1f}" for b in self.batches]
        cells += [f"{r['train_steps_s']:.2f}", f"{r['peak_mb']:.0f}"]
        print(" | ".join(cells) + " | " + (ratio if r is not base else "(baseline)"), flush=True)
        return r


def main() -> None:
    parser = torch_parser(__doc__, time_per_case=3.0)
    parser.add_argument("--sizes", nargs="+", default=["tiny", "smolvlm256m"], choices=list(SIZES))
    parser.add_argument("--compile", action="store_true", help="add a row with policy.vla.compile")
    parser.add_argument("--device", default="cpu", help="torch device of every policy (cpu, cuda)")
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES), help="the VLM backbone's dtype")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8], help="inference batch sizes")
    parser.add_argument("--train-batch", type=int, default=8)
    args = parser.parse_args()
    stats = start_torch(args)
    device = torch.device(args.device)
    pcfg = PolicyConfig()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"{where}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads; "
        f"h={pcfg.horizon} K={pcfg.flow_steps}; backbone {args.dtype}",
        flush=True,
    )
    run = partial(measure, budget_s=args.time_per_case, batches=args.batches, train_batch=args.train_batch)
    table = Table(args.batches, args.train_batch)
    flow = build_agent("bc", pcfg, BCConfig(), SIM_OBS_SHAPES, SIM_ACTION_DIM, stats, device=device)
    table.row("state flow", run(flow, SIM_OBS_SHAPES))
    notes = []
    for size in args.sizes:
        sizes, pixels = SIZES[size]
        shapes = SIM_OBS_SHAPES | {"observation.images.front": (pixels, pixels, 3)}
        t0 = time.perf_counter()
        model, processor = random_idefics3(sizes)
        vla = VLAConfig(instruction="Pick up the cube and lift it.", dtype=args.dtype)
        cfg = PolicyConfig(kind="vla", vla=vla)
        policy = VLAPolicy(cfg, shapes, SIM_ACTION_DIM, fake_stats(shapes), model, processor).to(device)
        built = time.perf_counter() - t0
        print(f"built {size} in {built:.1f} s; backbone {policy.backbone.dtype}", flush=True)
        on = table.row(f"VLA {size}", run(FlowBC(policy, BCConfig()), shapes))
        proc = []
        for b in args.batches:
            obs = {k: v.to(device) for k, v in fake_obs(b, shapes, seed=0).items()}
            proc.append(f"b={b} {processor_ms(policy, obs, args.time_per_case / 2):.1f}")
        notes.append(f"VLM processor alone (CPU), {size}, ms: " + ", ".join(proc))
        if args.compile:
            policy.expert.compile_sampling = True
            t0 = time.perf_counter()
            c = table.row(f"VLA {size} compiled", run(FlowBC(policy, BCConfig()), shapes, train=False))
            print(f"compiled row of {size}: {time.perf_counter() - t0:.1f} s, compiles included")
            policy.expert.compile_sampling = False
            gain = ", ".join(f"b={b} x{on[f'ms_b{b}'] / c[f'ms_b{b}']:.2f}" for b in args.batches)
            notes.append(f"torch.compile speed-up per chunk, {size}: {gain} (against the eager cached step)")
        policy.velocity_field = partial(FlowChunkPolicy.velocity_field, policy)  # the plain decoder
        off = table.row(f"VLA {size} no KV cache", run(FlowBC(policy, BCConfig()), shapes, train=False))
        gain = ", ".join(f"b={b} x{off[f'ms_b{b}'] / on[f'ms_b{b}']:.2f}" for b in args.batches)
        notes.append(f"K/V cache speed-up per chunk, {size}: {gain}")
        del policy, model  # velocity_field's partial is a reference cycle: collect it before freeing memory
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print("\n".join(notes))


if __name__ == "__main__":
    main()
