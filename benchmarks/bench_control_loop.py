"""Control-loop timing of RobotEnv on the real-time path at 10 Hz and 30 Hz: achieved rate, wake-up jitter
(p50/p99 lateness past each deadline), deadline misses and robot I/O latency, against a bare
``time.sleep(period)`` loop measured in the same run.

The robot is a **stand-in for the MuJoCo robot server** (not on this branch yet): the in-process
``MujocoRobot`` with ``lockstep=False``, its physics advanced in real time by a background thread (5 ms
ticks) under a lock shared with ``read``/``command``, so RobotEnv's loop sleeps to its deadlines exactly as
against a real robot. The policy is a zero action (no inference cost), so the figures are the loop's own.

Bare-sleep baseline: ``time.sleep(period)`` each step; its lateness is measured against the grid it
intends (start + k * period), so its drift accumulates into jitter and a lower achieved rate; its
per-step overrun (each period's excess over ``period``) is printed too.

Run: python benchmarks/bench_control_loop.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

from robot_rl.config import EnvConfig, RobotConfig
from robot_rl.hardware.robot_env import RobotEnv
from robot_rl.hardware.sim_robot import MujocoRobot

PHYSICS_HZ = 600.0  # a whole multiple of 10 and 30 Hz
TICK_S = 0.005


class ThreadedSimRobot(MujocoRobot):
    """The sim robot in real time: a thread advances physics every ``TICK_S``; every access holds a lock."""

    def __init__(self, control_hz: float) -> None:
        super().__init__(control_hz=control_hz, physics_hz=PHYSICS_HZ, lockstep=False, seed=0)
        self.lock = threading.RLock()  # connect() calls reset_scene()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def connect(self) -> None:
        with self.lock:
            super().connect()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        deadline = time.monotonic()
        while not self._stop.is_set():
            with self.lock:
                self.advance(TICK_S)
            deadline += TICK_S
            time.sleep(max(0.0, deadline - time.monotonic()))

    def disconnect(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        super().disconnect()

    def read(self):
        with self.lock:
            return super().read()

    def command(self, cmd) -> None:
        with self.lock:
            super().command(cmd)

    def reset_scene(self, seed=None) -> None:
        with self.lock:
            super().reset_scene(seed)


def bare_sleep(hz: float, steps: int) -> dict[str, float]:
    period = 1.0 / hz
    late = []
    start = time.monotonic()
    for k in range(1, steps + 1):
        time.sleep(period)
        late.append(time.monotonic() - (start + k * period))
    elapsed = time.monotonic() - start
    late_ms = np.asarray(late) * 1e3
    step_ms = np.diff(np.concatenate([[0.0], late_ms]))  # each step's own overrun of its period
    return {
        "hz_achieved": steps / elapsed,
        "step_p99_ms": float(np.percentile(step_ms, 99)),
        "jitter_p50_ms": float(np.percentile(late_ms, 50)),
        "jitter_p99_ms": float(np.percentile(late_ms, 99)),
        "misses": int(np.sum(np.diff(np.concatenate([[0.0], late_ms])) > period * 1e3)),
    }


def robot_env(hz: float, steps: int) -> dict[str, float]:
    cfg = EnvConfig(control_hz=hz, max_episode_steps=10**9, robot=RobotConfig(driver="sim", reset="scene"))
    env = RobotEnv(ThreadedSimRobot(hz), {}, cfg)
    try:
        env.reset(seed=0)
        for _ in range(steps):
            env.step(np.zeros(4, np.float32))
        return env.control_stats()
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="run time per case (s)")
    args = parser.parse_args()
    for hz in (10.0, 30.0):
        steps = int(args.seconds * hz)
        base = bare_sleep(hz, steps)
        loop = robot_env(hz, steps)
        print(
            f"{hz:4.0f} Hz bare time.sleep : {base['hz_achieved']:7.3f} Hz achieved, jitter p50 "
            f"{base['jitter_p50_ms']:6.2f} ms p99 {base['jitter_p99_ms']:6.2f} ms (vs the ideal grid; "
            f"per-step overrun p99 {base['step_p99_ms']:.2f} ms), misses {base['misses']}"
        )
        print(
            f"{hz:4.0f} Hz RobotEnv loop   : {loop['hz_achieved']:7.3f} Hz achieved, jitter p50 "
            f"{loop['jitter_p50_ms']:6.2f} ms p99 {loop['jitter_p99_ms']:6.2f} ms, misses {loop['misses']}, "
            f"robot I/O p50 {loop['latency_p50_ms']:.2f} ms p99 {loop['latency_p99_ms']:.2f} ms, "
            f"rate x{loop['hz_achieved'] / base['hz_achieved']:.3f} vs bare sleep ({steps} steps)"
        )


if __name__ == "__main__":
    main()
