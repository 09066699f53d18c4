"""Policy server: round-trip latency per chunk against the same policy called in process (the baseline,
same run), and control-loop timing with the chunk fetched synchronously vs asynchronously
(AsyncChunkExecutor) at 10 Hz and 30 Hz.

A flow BC checkpoint (default network sizes, horizon --horizon) over the sim's state (22), env state (7)
and one 64x64 camera is served by ``robot-rl serve`` in a subprocess (1 torch thread, as the in-process
baseline). The control loop sleeps to absolute deadlines t_k = t_0 + k / hz, computes the step's action
and records its lateness r_k = (action ready) - t_k; a deadline miss is r_k > 1 / hz (the next tick
passed). The episode's first step is left out of the loop figures: its chunk is fetched synchronously in
both modes. ``--delay-ms`` adds a fixed time to each inference on the server, standing in for a bigger model
(a VLA takes ~100 ms on a GPU). The async lead k is the round trip's p99 in control steps, d, plus one.
``--checkpoint`` serves a trained checkpoint instead (a VLA's, say; random observations of its shapes, its
own horizon; the VLA gets its default instruction), ``--delays 0`` then measures the model as it is.

Run: python benchmarks/bench_policy_server.py [--horizon 10] [--seconds 10] [--delays 0 100]
     [--checkpoint runs/<run>/checkpoints/bc_seed0]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robot_rl.config import PipelineConfig, PolicyConfig, config_to_dict
from robot_rl.deploy.policy_server import ServedPolicy
from robot_rl.deploy.remote_policy import RemotePolicy
from robot_rl.executor import AsyncChunkExecutor, ChunkExecutor
from robot_rl.keys import image_key, is_image_key
from robot_rl.policies import build_agent_from_config, save_agent
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_stats

OBS_SHAPES = {**SIM_OBS_SHAPES, image_key("front"): (64, 64, 3)}


def make_checkpoint(folder: Path, horizon: int) -> Path:
    torch.manual_seed(0)
    cfg = PipelineConfig(policy=PolicyConfig(horizon=horizon))
    stats = fake_stats(OBS_SHAPES)
    agent = build_agent_from_config("bc", cfg, OBS_SHAPES, SIM_ACTION_DIM, stats)
    config = {**config_to_dict(cfg), "obs_keys": sorted(OBS_SHAPES)}
    return save_agent(folder / "bc", agent, config, stats, OBS_SHAPES, SIM_ACTION_DIM)


def observation(rng: np.random.Generator, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Random observation of ``shapes``: uint8 images for ``observation.images.*``, float32 vectors."""
    return {
        k: rng.integers(0, 256, s, dtype=np.uint8)
        if is_image_key(k)
        else rng.standard_normal(s).astype(np.float32)
        for k, s in shapes.items()
    }


def start_server(checkpoint: Path, delay_ms: float) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "robot_rl.cli.main", "serve", "--checkpoint", str(checkpoint)]
    cmd += ["--address", "tcp://127.0.0.1:0", "--threads", "1", "--delay-ms", str(delay_ms)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if not line.startswith("serving "):
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    return proc, line.split()[1]


def percentiles_ms(times: list[float]) -> str:
    t = 1000.0 * np.asarray(times)
    return f"p50 {np.percentile(t, 50):7.2f} ms  p99 {np.percentile(t, 99):7.2f} ms  max {t.max():7.2f} ms"


def latency(fn, obs_list, n: int) -> list[float]:
    for obs in obs_list[:3]:
        fn(obs)
    times = []
    for i in range(n):
        start = time.perf_counter()
        fn(obs_list[i % len(obs_list)])
        times.append(time.perf_counter() - start)
    return times


def control_loop(executor, remote: RemotePolicy, obs_list, hz: float, seconds: float) -> dict[str, float]:
    """Sleep to each deadline and compute the action; figures over the steps after the episode's first
    (whose chunk is fetched synchronously in both modes), lateness in ms."""
    period, steps = 1.0 / hz, int(seconds * hz)
    late, ready = [], []
    t0 = time.perf_counter() + 0.05
    for k in range(steps):
        deadline = t0 + k * period
        time.sleep(max(0.0, deadline - time.perf_counter()))
        obs = obs_list[k % len(obs_list)]
        executor.step(lambda obs=obs: remote.infer(obs))
        ready.append(time.perf_counter())
        late.append(ready[-1] - deadline)
    r = 1000.0 * np.asarray(late[1:])
    return {
        "rate": (steps - 2) / (ready[-1] - ready[1]),
        "p50": float(np.percentile(r, 50)),
        "p99": float(np.percentile(r, 99)),
        "max": float(r.max()),
        "misses": int((r > 1000.0 * period).sum()),
        "steps": steps - 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--horizon", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each control loop")
    parser.add_argument("--calls", type=int, default=300, help="round trips for the latency figures")
    parser.add_argument("--delays", type=float, nargs="+", default=[0.0, 100.0], help="server --delay-ms")
    parser.add_argument("--checkpoint", default="", help="serve this checkpoint (default: a fresh flow BC)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(args.checkpoint) if args.checkpoint else make_checkpoint(Path(tmp), args.horizon)
        local = ServedPolicy.load(checkpoint)
        args.horizon = local.spec.horizon
        obs_list = [observation(rng, local.spec.obs_shapes) for _ in range(16)]
        in_process = latency(lambda o: local.infer(*local.spec.check_observation(o)), obs_list, args.calls)
        shapes = ", ".join(f"{k} {tuple(v)}" for k, v in local.spec.obs_shapes.items())
        print(f"{checkpoint.name}, horizon {args.horizon}, obs: {shapes}; 1 torch thread each")
        print(f"in-process policy call : {percentiles_ms(in_process)}  (baseline)")
        for delay in args.delays:
            proc, address = start_server(checkpoint, delay)
            try:
                remote = RemotePolicy(address, timeout_s=5.0)
                trips = latency(remote.infer, obs_list, args.calls)
                ratio = np.median(trips) / np.median(in_process)
                print(f"\nserver --delay-ms {delay:g}")
                print(f"  round trip per chunk : {percentiles_ms(trips)}  (x{ratio:.2f} in-process p50)")
                for hz in (10.0, 30.0):
                    d = max(1, math.ceil(np.percentile(trips, 99) * hz))
                    lead = min(args.horizon - 1, d + 1)
                    ok = "" if 2 * d <= args.horizon else " (2d > h: stalls expected; raise --horizon)"
                    print(f"  {hz:g} Hz: round trip p99 = {d} control step(s), async lead k = {lead}{ok}")
                    for name in ("sync", "async"):
                        ex = (
                            ChunkExecutor(args.horizon)
                            if name == "sync"
                            else AsyncChunkExecutor(args.horizon, lead, blend=1)
                        )
                        r = control_loop(ex, remote, obs_list, hz, args.seconds)
                        stalls = f", stalls {ex.stalls}" if name == "async" else ""
                        misses = f"misses {r['misses']}/{r['steps']}{stalls}"
                        print(
                            f"    {name:5s}: rate {r['rate']:6.2f} Hz  lateness p50 {r['p50']:6.2f} ms  "
                            f"p99 {r['p99']:7.2f} ms  max {r['max']:7.2f} ms  {misses}"
                        )
                        if name == "async":
                            ex.close()
                remote.close()
            finally:
                proc.terminate()
                proc.wait(timeout=10)


if __name__ == "__main__":
    main()
