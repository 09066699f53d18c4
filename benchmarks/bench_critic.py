"""Progress-critic latency on CPU: in-process ``predict`` vs through the critic server (ZeroMQ, its own
process), against a 10 Hz control budget (100 ms). Random-init compact critic (latency does not depend on
training), one 64x64 camera, one task string (as within an episode).

Columns: ms/call is the median latency of one call (for the actors row: one actor's round trip while all
run); ms/pair is ms/call / pairs (for the actors row: wall time / pairs scored by all actors); x call and
x pair divide them by the in-process 1-pair latency of the same run.

Run: python benchmarks/bench_critic.py [--quick] [--time-per-case 2] [--threads N] [--actors 8]
     [--max-wait-ms 2]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch
from bench_policy import latency_ms
from torch_bench import torch_parser

from robot_rl.config import RewardModelConfig
from robot_rl.rewards.compact import CompactProgressCritic
from robot_rl.rewards.remote import RemoteCritic

SIZE = 64
TASK = "pick up the cube"
BUDGET_MS = 100.0  # one control step at 10 Hz


def pairs(batch: int, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(obs_i, obs_j) of ``batch`` random 64x64 RGB uint8 frames from camera ``front``."""
    rng = np.random.default_rng(seed)
    key = "observation.images.front"
    return tuple({key: rng.integers(0, 256, (batch, SIZE, SIZE, 3), dtype=np.uint8)} for _ in range(2))


def start_server(checkpoint: Path, threads: int, max_wait_ms: float) -> tuple[subprocess.Popen, str]:
    """The critic server in its own process, with the same torch thread count; returns (process, endpoint)."""
    address = "tcp://127.0.0.1:*"
    proc = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.rewards.server", str(checkpoint), "--address", address]
        + ["--max-wait-ms", str(max_wait_ms)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": str(threads)},
    )
    line = proc.stdout.readline()
    if not line.startswith("serving "):
        proc.kill()
        raise RuntimeError(f"critic server did not start (exit code {proc.wait()})")
    return proc, line.split()[1]


def concurrent_round_trips(endpoint: str, actors: int, budget_s: float) -> tuple[float, float]:
    """``actors`` threads, each with its own RemoteCritic, score 1 pair per call back to back for
    ``budget_s``. Returns (median round trip ms, wall ms per pair over all actors)."""
    clients = [RemoteCritic(endpoint) for _ in range(actors)]
    obs_i, obs_j = pairs(1)
    for c in clients:
        c.predict(obs_i, obs_j, TASK)
    times: list[float] = []
    barrier = threading.Barrier(actors + 1)

    def actor(client: RemoteCritic) -> None:
        barrier.wait()
        end = time.perf_counter() + budget_s
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            client.predict(obs_i, obs_j, TASK)
            times.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=actor, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    for c in clients:
        c.close()
    return 1000.0 * statistics.median(times), 1000.0 * wall / len(times)


def main() -> None:
    parser = torch_parser(__doc__, time_per_case=2.0)
    parser.add_argument("--quick", action="store_true", help="0.5 s per case")
    parser.add_argument("--actors", type=int, default=8, help="concurrent clients in the batching case")
    parser.add_argument("--max-wait-ms", type=float, default=2.0, help="the server's batching window")
    args = parser.parse_args()
    budget = 0.5 if args.quick else args.time_per_case
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    critic = CompactProgressCritic(RewardModelConfig(cameras=["front"], image_size=SIZE))
    rows: list[tuple[str, float, float, str]] = []  # (case, ms per call, ms per pair, note)
    for batch in (1, 64):
        obs = pairs(batch)
        ms = latency_ms(lambda obs=obs: critic.predict(*obs, TASK), budget)
        rows.append((f"in-process, {batch} pair(s)", ms, ms / batch, ""))
    with tempfile.TemporaryDirectory() as tmp:
        proc, endpoint = start_server(critic.save(Path(tmp) / "critic"), threads, args.max_wait_ms)
        try:
            remote = RemoteCritic(endpoint)
            for batch in (1, 64):
                obs = pairs(batch)
                ms = latency_ms(lambda obs=obs: remote.predict(*obs, TASK), budget)
                rows.append((f"server, {batch} pair(s)", ms, ms / batch, ""))
            ping = 1000.0 * statistics.median(remote.ping() for _ in range(200))
            before = remote.stats()
            trip_ms, per_pair_ms = concurrent_round_trips(endpoint, args.actors, budget)
            after = remote.stats()
            remote.close()
        finally:
            proc.terminate()
            proc.wait()
    merged = (after["requests"] - before["requests"]) / max(after["batches"] - before["batches"], 1)
    note = f"({merged:.1f} requests merged per forward)"
    rows.append((f"server, {args.actors} actors x 1 pair", trip_ms, per_pair_ms, note))
    print(
        f"progress critic, CPU, torch {torch.__version__}, {threads} threads (server process too); compact "
        f"critic, 1 camera {SIZE}x{SIZE}; server max_wait_ms={args.max_wait_ms:g}; 10 Hz control budget "
        f"{BUDGET_MS:.0f} ms; empty round trip (ping) {ping:.2f} ms"
    )
    print(
        f"{'case':<30} | {'ms/call':>8} | {'ms/pair':>8} | {'x call':>7} | {'x pair':>7} | every 10 Hz step"
    )
    base = rows[0][1]
    for case, ms, per_pair, note in rows:
        fits = "yes" if ms <= BUDGET_MS else "no "
        ratios = f"{ms / base:7.2f} | {per_pair / base:7.3f}"
        print(f"{case:<30} | {ms:8.2f} | {per_pair:8.3f} | {ratios} | {fits} {note}")


if __name__ == "__main__":
    main()
