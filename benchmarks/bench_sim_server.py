"""The MuJoCo-backed robot server (issue 16 §3): round-trip latency of ``read``/``command``/``render``
through the socket against the same calls on an in-process :class:`MujocoRobot` (the same-run baseline),
with and without injected faults, and how closely the server's physics keeps to wall-clock time while a
client runs a control loop against it.

For each server case a client runs ``--steps`` control steps at ``--hz``: each step reads the state, sends
an ``ee_delta`` command (a small circle, gripper open) and, with ``--camera``, renders that camera at
``--size`` pixels; the rest of the period it sleeps. Reported per call: p50/p99 round trip (ms) and the
ratio of the p50 to the in-process call; per case: requests that timed out (dropped), the server's
physics steps over wall time (1.00 = real time) and its overruns (backlogs over 0.1 s it skipped).

    python benchmarks/bench_sim_server.py                           # 10 Hz, 100 steps, front camera 64 px
    python benchmarks/bench_sim_server.py --hz 30 --steps 300 --camera ""
    python benchmarks/bench_sim_server.py --cases "drop 5%"                # one server case
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from robot_rl.hardware.drivers.sim_server import SimServerCamera, SimServerRobot
from robot_rl.hardware.errors import RobotTimeoutError
from robot_rl.hardware.robot import Command, CommandMode
from robot_rl.hardware.sim_robot import MujocoRobot
from robot_rl.hardware.sim_server import SimServerFaults, serve_in_subprocess

CASES = {
    "no faults": SimServerFaults(),
    "latency 20 ms + jitter 10 ms": SimServerFaults(latency_ms=20, jitter_ms=10, seed=0),
    "drop 5%": SimServerFaults(drop_prob=0.05, seed=0),
}


def _command(step: int) -> Command:
    angle = 2 * np.pi * step / 40
    return Command(CommandMode.EE_DELTA, 0.01 * np.array([np.cos(angle), np.sin(angle), 0.0]), gripper=0.0)


def _timed(fn, times: list[float]) -> bool:
    start = time.perf_counter()
    try:
        fn()
    except RobotTimeoutError:
        return False
    times.append(time.perf_counter() - start)
    return True


def in_process(steps: int, camera: str, size: int) -> dict[str, list[float]]:
    """The same calls on an in-process MujocoRobot (not lock-step: physics is not advanced by them)."""
    from robot_rl.sim.panda_pick_cube import CAMERAS
    from robot_rl.sim.render import OffscreenRenderer

    times: dict[str, list[float]] = {"read": [], "command": [], "render": []}
    with MujocoRobot(lockstep=False, seed=0) as robot:
        renderer = OffscreenRenderer(robot.env.model) if camera else None
        for step in range(steps):
            _timed(robot.read, times["read"])
            _timed(lambda s=step: robot.command(_command(s)), times["command"])
            if renderer is not None:
                _timed(lambda: renderer.render(robot.env.data, CAMERAS[camera], size), times["render"])
            robot.advance(0.01)
        if renderer is not None:
            renderer.close()
    return times


def served(faults: SimServerFaults, steps: int, hz: float, camera: str, size: int) -> dict:
    """The control loop against a server subprocess with ``faults``."""
    times: dict[str, list[float]] = {"read": [], "command": [], "render": []}
    lost = 0
    with serve_in_subprocess(faults) as srv:
        robot = SimServerRobot(srv.address, timeout_s=0.25)
        while True:
            try:
                robot.connect()
                break
            except RobotTimeoutError:
                pass
        cam = SimServerCamera(camera, srv.address, camera, size) if camera else None
        if cam is not None:
            while True:
                try:
                    cam.connect(timeout_s=0.25)
                    cam.read(timeout_s=10.0)  # GL initialisation, not timed
                    break
                except Exception:  # noqa: BLE001 - a dropped hello or first frame: try again
                    cam.disconnect()
        before, wall0 = robot.ping()["stats"], time.monotonic()
        next_t = time.monotonic()
        for step in range(steps):
            lost += not _timed(robot.read, times["read"])
            lost += not _timed(lambda s=step: robot.command(_command(s)), times["command"])
            if cam is not None:
                start = time.perf_counter()
                try:
                    cam.read(timeout_s=0.25)
                    times["render"].append(time.perf_counter() - start)
                except Exception:  # noqa: BLE001 - CameraError wrapping a dropped request
                    lost += 1
            next_t += 1.0 / hz
            time.sleep(max(0.0, next_t - time.monotonic()))
        while True:
            try:
                after, wall = robot.ping()["stats"], time.monotonic() - wall0
                break
            except RobotTimeoutError:
                pass
        robot.disconnect()
        if cam is not None:
            cam.disconnect()
    physics_hz = 500.0
    return {
        "times": times,
        "lost": lost,
        "realtime": (after["physics_steps"] - before["physics_steps"]) / physics_hz / wall,
        "overruns": after["overruns"] - before["overruns"],
    }


def _ms(values: list[float], q: float) -> float:
    return 1000 * float(np.quantile(values, q)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--hz", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--camera", default="front", help="'' for no camera")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument(
        "--cases", nargs="+", default=list(CASES), choices=list(CASES), help="server cases to run"
    )
    args = parser.parse_args()

    base = in_process(args.steps, args.camera, args.size)
    base_p50 = {op: _ms(t, 0.5) for op, t in base.items()}
    print(f"{args.steps} steps at {args.hz:g} Hz, camera {args.camera or '-'} {args.size} px")
    head = ("case".ljust(30), "call   ", " p50 ms", " p99 ms", "  x p50", "lost", "realtime", "overruns")
    print(" | ".join(head))
    rows = [("in-process", base, 0, float("nan"), 0)]
    for name in args.cases:
        out = served(CASES[name], args.steps, args.hz, args.camera, args.size)
        rows.append((name, out["times"], out["lost"], out["realtime"], out["overruns"]))
    for name, times, lost, realtime, overruns in rows:
        for op, values in times.items():
            if not values:
                continue
            p50 = _ms(values, 0.5)
            print(
                f"{name:30s} | {op:7s} | {p50:7.2f} | {_ms(values, 0.99):7.2f} | {p50 / base_p50[op]:7.1f} | "
                f"{lost:4d} | {realtime:8.3f} | {overruns:8d}"
            )


if __name__ == "__main__":
    main()
