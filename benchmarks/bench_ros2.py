"""Round-trip latency observation -> action over ROS 2 DDS (loopback) vs in process (issues 17, 34).

A robot side publishes each control tick's observation as ROS 2 messages, as ``sim_robot_node`` does: one
``sensor_msgs/JointState`` and one ``sensor_msgs/Image`` (rgb8, H x W) per camera, all stamped with the
tick's time. A policy side, in another process, waits for every message of a tick, checks and decodes them
as the robot bridge does (:mod:`robot_rl.hardware.ros2.validate`), computes a trivial action from them and
publishes a ``geometry_msgs/TwistStamped`` carrying the tick's stamp, which the robot side receives. The
latency of a tick is the time from just before its messages are built to the action's arrival (one clock:
same host). In-process baseline: the same message building, checks, decoding and action, called directly
(no DDS, no serialisation, no second process). A tick whose action never arrives counts as lost (a
best-effort reader drops a sample whose fragments did not all arrive, or a newer one replaced it).

Both sides use one transport per row (``--transports``): ``cyclonedds`` (the project's plain-DDS transport)
or ``rclpy`` (ROS 2 Kilted's rclpy on ``rmw_fastrtps_cpp``, Fast DDS); the ratio column is each row's p50
over the in-process p50 of the same rate, cameras and size.

Rows: control rate 10/30 Hz x 1/2 cameras x 96x128/480x640 x transport; p50/p99 ms and lost ticks.
Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_ros2.py [--seconds 10] [--transports cyclonedds rclpy]``
(about 2 minutes per transport at 10 s).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

import numpy as np

from robot_rl.hardware.ros2 import msgs, validate
from robot_rl.hardware.ros2.node import parse_args
from robot_rl.hardware.ros2.transport import make_node

JOINTS = [f"joint{i}" for i in range(1, 8)]


def _flags(domain: int, transport: str) -> list[str]:
    return ["--ros-transport", transport, f"--domain-id={domain}", "--dds-loopback"]


def _observation(cameras: int, h: int, w: int, pixels: bytes) -> list:
    """The tick's messages (JointState, then one Image per camera), stamped now."""
    header = msgs.Header(msgs.stamp(), "base_link")
    joints = msgs.JointState(header, [*JOINTS, "gripper"], [0.1] * 8, [0.0] * 8, [])
    return [joints] + [msgs.Image(header, h, w, "rgb8", 0, 3 * w, pixels) for _ in range(cameras)]


def _action(joints: msgs.JointState, images: list[msgs.Image], h: int, w: int) -> np.ndarray:
    """Check and decode the observation as the robot bridge does, then a trivial action from it."""
    now = time.time()
    pos, _ = validate.joint_state(joints, JOINTS, now, 5.0)
    means = [validate.image(m, w, h, now, 5.0)[::16, ::16].mean() for m in images]
    return np.array([pos[0] * 1e-3, float(np.mean(means)) * 1e-6, 0.0])


def respond(domain: int, cameras: int, h: int, w: int, transport: str) -> None:
    """The policy side: for each complete tick, publish the action with the tick's stamp."""
    node = make_node("bench_policy", parse_args(_flags(domain, transport), "bench_policy"))
    pub = node.publisher(msgs.TwistStamped, "/bench/action")
    pending: dict[tuple[int, int], dict] = {}

    def on(kind, msg) -> None:
        key = (msg.header.stamp.sec, msg.header.stamp.nanosec)
        tick = pending.setdefault(key, {"images": []})
        if kind == "joints":
            tick["joints"] = msg
        else:
            tick["images"].append(msg)
        if "joints" in tick and len(tick["images"]) == cameras:
            del pending[key]
            a = _action(tick["joints"], tick["images"], h, w)
            pub.publish(msgs.TwistStamped(msg.header, msgs.Twist(msgs.Vector3(*a.tolist()))))
        for old in [k for k in pending if k < key][:-8]:  # drop ticks that will never complete
            del pending[old]

    node.subscribe(msgs.JointState, "/joint_states", lambda m: on("joints", m))
    for c in range(cameras):
        node.subscribe(msgs.Image, f"/camera/cam{c}/image_raw", lambda m: on("image", m), depth=2)
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    print("ready", flush=True)
    while not closed.is_set():  # until the parent closes our stdin
        node.spin_once(0.05)
    node.close()


def over_dds(
    rate: float, cameras: int, h: int, w: int, seconds: float, domain: int, transport: str
) -> tuple[list, int]:
    """Latencies (s) of the ticks whose action came back over DDS, and the number of ticks sent."""
    child = subprocess.Popen(
        [sys.executable, __file__, "--respond", str(domain), str(cameras), str(h), str(w), transport],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready"
    node = make_node("bench_robot", parse_args(_flags(domain, transport), "bench_robot"))
    pubs = [node.publisher(msgs.JointState, "/joint_states")]
    pubs += [node.publisher(msgs.Image, f"/camera/cam{c}/image_raw", depth=2) for c in range(cameras)]
    sent: dict[tuple[int, int], float] = {}
    latencies: list[float] = []
    node.subscribe(
        msgs.TwistStamped,
        "/bench/action",
        lambda m: (
            latencies.append(time.perf_counter() - sent[(m.header.stamp.sec, m.header.stamp.nanosec)])
            if (m.header.stamp.sec, m.header.stamp.nanosec) in sent
            else None
        ),
    )
    pixels = np.random.default_rng(0).integers(0, 255, h * w * 3, dtype=np.uint8).tobytes()
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            node.spin_once(0.005)

    def tick() -> None:
        t0 = time.perf_counter()
        messages = _observation(cameras, h, w, pixels)
        sent[(messages[0].header.stamp.sec, messages[0].header.stamp.nanosec)] = t0
        for pub, m in zip(pubs, messages, strict=True):
            pub.publish(m)

    # warm up until actions come back (discovery), then measure
    deadline = time.monotonic() + 30.0
    while not latencies and time.monotonic() < deadline:
        tick()
        node.spin_once(0.1)
    if not latencies:
        raise RuntimeError("no action came back over DDS in 30 s")
    thread = threading.Thread(target=spin, daemon=True)
    latencies.clear()
    sent.clear()
    thread.start()
    period, n = 1.0 / rate, int(seconds * rate)
    start = time.perf_counter()
    for i in range(n):
        time.sleep(max(0.0, start + i * period - time.perf_counter()))
        tick()
    time.sleep(0.5)
    stop.set()
    thread.join()
    child.stdin.close()
    child.wait(timeout=10)
    node.close()
    return list(latencies), n


def in_process(rate: float, cameras: int, h: int, w: int, seconds: float) -> list[float]:
    """Latencies (s) of the same ticks with the policy called directly."""
    pixels = np.random.default_rng(0).integers(0, 255, h * w * 3, dtype=np.uint8).tobytes()
    out = []
    period, n = 1.0 / rate, int(seconds * rate)
    start = time.perf_counter()
    for i in range(n):
        time.sleep(max(0.0, start + i * period - time.perf_counter()))
        t0 = time.perf_counter()
        messages = _observation(cameras, h, w, pixels)
        _action(messages[0], messages[1:], h, w)
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0, help="measured seconds per row")
    p.add_argument("--rates", type=float, nargs="+", default=[10.0, 30.0])
    p.add_argument("--cameras", type=int, nargs="+", default=[1, 2])
    p.add_argument("--sizes", nargs="+", default=["96x128", "480x640"], help="HxW")
    p.add_argument("--transports", nargs="+", default=["cyclonedds"], choices=["cyclonedds", "rclpy"])
    p.add_argument("--respond", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.respond:
        respond(*(int(v) for v in args.respond[:4]), args.respond[4])
        return
    # at most 101 (ROS 2's advice on Linux): higher ids put DDS ports in the ephemeral range, where other
    # processes' port-0 sockets can take them (tests/ros2_helpers.py)
    domain = 1 + os.getpid() % 101
    print(f"load average at start: {os.getloadavg()[0]:.2f} (cpu cores: {os.cpu_count()})")
    print(
        f"{'rate':>5} {'cams':>4} {'HxW':>8} | {'in-proc p50':>11} {'p99':>7} | {'transport':>10}"
        f" {'DDS p50':>8} {'p99':>7} {'lost':>9} | {'p50 ratio':>9}"
    )
    for size in args.sizes:
        h, w = (int(v) for v in size.split("x"))
        for cameras in args.cameras:
            for rate in args.rates:
                local = np.array(in_process(rate, cameras, h, w, min(args.seconds, 3.0))) * 1e3
                lp50, lp99 = np.percentile(local, [50, 99])
                for transport in args.transports:
                    dds, n = over_dds(rate, cameras, h, w, args.seconds, domain, transport)
                    dds = np.array(dds) * 1e3
                    dp50, dp99 = np.percentile(dds, [50, 99]) if len(dds) else (np.nan, np.nan)
                    print(
                        f"{rate:5.0f} {cameras:4d} {size:>8} | {lp50:8.2f} ms {lp99:7.2f} | {transport:>10}"
                        f" {dp50:5.2f} ms {dp99:7.2f} {n - len(dds):4d}/{n:<4d} | x{dp50 / lp50:8.1f}",
                        flush=True,
                    )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
