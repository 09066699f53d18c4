"""The MuJoCo-backed robot server: the simulated Panda (:class:`MujocoRobot`) in its own process, in real
time, behind a socket, so every hardware code path (driver, safety layer, ``RobotEnv``) runs in CI against
physics instead of mocks.

Run it with ``robot-rl hardware sim-server --address tcp://127.0.0.1:5570`` (or ``python -m
robot_rl.hardware.sim_server``); :class:`robot_rl.hardware.drivers.sim_server.SimServerRobot` and
``SimServerCamera`` are its clients, and :func:`serve_in_subprocess` starts one for tests and benchmarks.

Physics: a thread advances the scene at wall-clock rate, whole physics steps (``1/physics_hz`` s) every
``tick_s``; a command only sets the controller's target (it takes effect on the next physics step). If the
thread falls more than :data:`MAX_CATCH_UP_S` behind (a stalled machine), it skips the backlog rather
than running faster than real time, and counts an overrun. Renders run in a thread of their own (it owns
the GL context, made at the first render: about a second) on a copy of the state, so reads and commands
never wait for a frame.

Protocol (ZeroMQ ROUTER; one msgpack frame per message, :mod:`robot_rl.hardware.wire`): a request is a
map ``{"op", "id", "protocol", **fields}`` with exactly the fields of its op (:data:`FIELDS`); the reply
echoes ``id`` with ``ok: true`` and the op's result, or ``ok: false`` with ``error`` (message) and
``type`` (exception class name). Ops: ``hello`` (limits, modes, joint names, ``control_hz``, camera
names, largest image size, and ``kinematics``: reference joint positions and the end-effector position at
each, so a client can check that its copy of the scene gives the server's forward kinematics), ``read``
(a RobotState), ``command`` (mode, value, gripper), ``reset_scene`` (seed), ``render`` (camera, size:
uint8 (size, size, 3)), ``ping`` (server time and counters), ``set_boundary`` (low, high: (3,) m each, or
both None to clear). A message
that does not fit gets an error reply and changes nothing; the server keeps serving. Frames over
:data:`MAX_MESSAGE_BYTES` are refused by ZeroMQ before they are buffered. Off loopback the server needs
CURVE keys (``--keys``, :mod:`robot_rl.security`), as the learner and critic server do.

Robot-side TCP boundary (:mod:`robot_rl.hardware.tcp_boundary`): ``set_boundary`` sets a box that the
simulated arm's physics itself enforces every physics step (``MujocoRobot.set_tcp_boundary``), as a real
controller's safety boundary does (xArm's fence mode, UR's safety planes), so the measured arm stays in it
however late the client's commands are; :class:`~robot_rl.hardware.safety.SafeRobot` sets it from its
workspace box at connect. It is the server's configuration, like a controller's: it outlives the client
that set it and a ``reset_scene``.

Injected faults (:class:`SimServerFaults`, seeded): each request waits ``latency_ms`` plus a uniform
random ``[0, jitter_ms]`` before it is handled (so a command takes effect that much later and the round
trip grows by it), and is dropped with probability ``drop_prob`` (no effect, no reply), like a lost packet.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import os
import queue
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import zmq

from robot_rl.config import ConfigError
from robot_rl.hardware import wire
from robot_rl.hardware.errors import CommandRejected
from robot_rl.hardware.robot import Command, CommandMode
from robot_rl.hardware.sim_robot import MujocoRobot
from robot_rl.security import ServerKeys, check_address, load_server_keys
from robot_rl.sim.panda_pick_cube import CAMERAS
from robot_rl.transport import ProtocolError, RouterServer, split_envelope

PROTOCOL = 2
MAX_MESSAGE_BYTES = 64 * 1024
"""Largest request frame (bytes); requests are a few hundred bytes."""
MAX_CATCH_UP_S = 0.1
"""Largest physics backlog (s) run at once; beyond it the backlog is skipped and an overrun counted."""
MAX_PENDING = 1024
"""Most requests held back by injected latency at once; more are dropped (counted in ``dropped``)."""
MAX_RENDER_QUEUE = 16
"""Most render requests waiting for the render thread; more get a ``busy`` error reply."""
MAX_ID = 2**63 - 1
MAX_SEED = 2**32 - 1
_NONE = type(None)
FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "hello": {},
    "ping": {},
    "read": {},
    "command": {"mode": (str,), "value": (np.ndarray,), "gripper": (float, int, _NONE)},
    "reset_scene": {"seed": (int, _NONE)},
    "render": {"camera": (str,), "size": (int,)},
    "set_boundary": {"low": (np.ndarray, _NONE), "high": (np.ndarray, _NONE)},
}
"""Each op's fields and their allowed types (besides ``op``, ``id`` and ``protocol``; bool is no number)."""
READY = re.compile(r"sim-server listening on (\S+)")


@dataclass(frozen=True)
class SimServerFaults:
    """Faults the server injects (module doc).

    Attributes:
        latency_ms: fixed delay (ms) before each request is handled, >= 0.
        jitter_ms: extra uniform random delay in [0, jitter_ms] (ms), >= 0.
        drop_prob: probability in [0, 1) that a request is dropped (no effect, no reply).
        seed: seed of the jitter and drop draws.

    Raises:
        ValueError: a value out of range; names the ``--flag``.
    """

    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    drop_prob: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("latency_ms", "jitter_ms"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"--{name.replace('_', '-')}={value}: must be a finite number >= 0")
        if not 0.0 <= self.drop_prob < 1.0:
            raise ValueError(f"--drop-prob={self.drop_prob}: must be in [0, 1)")

    def flags(self) -> list[str]:
        """These faults as command-line flags of ``robot-rl hardware sim-server``."""
        return [f"--{k.replace('_', '-')}={v}" for k, v in asdict(self).items()]


@dataclass
class Stats:
    """Server counters (reported by ``ping`` and printed at exit); ``boundary_brakes``: physics steps at
    which the robot-side TCP boundary braked the arm."""

    requests: int = 0
    errors: int = 0
    dropped: int = 0
    physics_steps: int = 0
    overruns: int = 0
    boundary_brakes: int = 0
    started: float = field(default_factory=time.monotonic)


def check_request(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(op, fields)`` of a decoded request after checking its protocol, op, id and fields.

    Raises:
        ProtocolError: another protocol version, an unknown op, a missing or unexpected field, or a field of
            the wrong type (the message names it).
    """
    if message.get("protocol") != PROTOCOL:
        raise ProtocolError(
            f"protocol {message.get('protocol')!r:.20} not supported; this sim server speaks {PROTOCOL}"
        )
    op = message.get("op")
    if op not in FIELDS:
        raise ProtocolError(f"unknown op {op!r:.40}; expected one of {sorted(FIELDS)}")
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int) or not 0 <= request_id <= MAX_ID:
        raise ProtocolError(f"id must be an integer in [0, 2**63), got {request_id!r:.40}")
    wanted = FIELDS[op]
    given = set(message) - {"op", "id", "protocol"}
    missing, extra = sorted(set(wanted) - given), sorted(given - set(wanted))
    if missing or extra:
        raise ProtocolError(f"{op}: missing fields {missing}, unexpected fields {extra}")
    for name, types in wanted.items():
        value = message[name]
        if isinstance(value, bool) or not isinstance(value, types):
            allowed = "/".join("None" if t is _NONE else t.__name__ for t in types)
            raise ProtocolError(f"{op}: {name!r} must be {allowed}, got {type(value).__name__}")
    return op, {name: message[name] for name in wanted}


class SimServer:
    """A real-time :class:`MujocoRobot` served on ``address`` (module doc).

    Args:
        address: ZeroMQ endpoint to bind (``tcp://127.0.0.1:0`` picks a free port; see :attr:`address`).
        faults: injected latency, jitter and drops.
        control_hz: the control rate reported to clients (Hz).
        physics_hz: MuJoCo rate (Hz), a whole multiple of ``control_hz``.
        lift_height_m: cube lift (m) that sets ``extra["lifted"]``.
        scene_seed: seed of the first cube placement.
        keys: CURVE server keys; required unless ``address`` is loopback.
        tick_s: period (s) of the physics thread.

    Raises:
        ConfigError: a non-loopback address without keys.
        OSError: the address cannot be bound (names it).
        ValueError: bad rates.
    """

    def __init__(
        self,
        address: str = "tcp://127.0.0.1:5570",
        faults: SimServerFaults | None = None,
        control_hz: float = 10.0,
        physics_hz: float = 500.0,
        lift_height_m: float = 0.1,
        scene_seed: int | None = None,
        keys: ServerKeys | None = None,
        tick_s: float = 0.002,
    ) -> None:
        if not tick_s > 0:
            raise ValueError(f"--tick-ms must be > 0, got {1000 * tick_s}")
        check_address(address, keys, "--address", bind=True)  # before the slow scene build
        self.faults = faults or SimServerFaults()
        self.physics_error: Exception | None = None
        self.robot = MujocoRobot(
            control_hz, physics_hz, lockstep=False, lift_height_m=lift_height_m, seed=scene_seed
        )
        self.robot.connect()
        self.cameras = dict(CAMERAS)
        self.tick_s = tick_s
        self.stats = Stats()
        self._lock = threading.Lock()
        self._rng = np.random.default_rng(self.faults.seed)
        self._renderer = None  # made, used and closed by the render thread only
        self._render_error: str | None = None
        self._scratch = None
        self._render_jobs: queue.Queue = queue.Queue(MAX_RENDER_QUEUE)
        self._render_inproc = f"inproc://sim-render-{id(self)}"
        self._stats_lock = threading.Lock()
        self._router = RouterServer(address, keys, MAX_MESSAGE_BYTES, "--address")
        self.address = self._router.address

    # -- physics ---------------------------------------------------------------------------------------
    def _physics(self, stop: threading.Event) -> None:
        try:
            self._run_physics(stop)
        except Exception as err:  # noqa: BLE001 - a dead physics thread must stop the server, not freeze it
            self.physics_error = err
            stop.set()

    def _run_physics(self, stop: threading.Event) -> None:
        hz = self.robot.env.physics_hz
        start, done = time.monotonic(), 0
        while not stop.wait(self.tick_s):
            due = int((time.monotonic() - start) * hz) - done
            if due <= 0:
                continue
            if due > MAX_CATCH_UP_S * hz:
                skipped = due - int(MAX_CATCH_UP_S * hz)
                start += skipped / hz
                due -= skipped
                self.stats.overruns += 1
            with self._lock:  # the TCP boundary runs every physics step inside (MujocoRobot.advance)
                self.robot.advance(due / hz)
            self.stats.boundary_brakes = self.robot.brake.brakes
            done += due
            self.stats.physics_steps += due

    # -- requests --------------------------------------------------------------------------------------
    def _hello(self) -> dict[str, Any]:
        lim, vis = self.robot.limits, self.robot.env.model.vis.global_
        return {
            "name": self.robot.name,
            "protocol": PROTOCOL,
            "modes": [str(m) for m in self.robot.modes],
            "joint_names": list(lim.joint_names),
            "control_hz": lim.control_hz,
            "physics_hz": self.robot.env.physics_hz,
            "limits": {
                "joint_low": lim.joint_low,
                "joint_high": lim.joint_high,
                "joint_vel_max": lim.joint_vel_max,
                "joint_acc_max": lim.joint_acc_max,
                "ee_low": lim.ee_low,
                "ee_high": lim.ee_high,
                "ee_step_max": float(lim.ee_step_max),
            },
            "cameras": sorted(self.cameras),
            "max_image_size": int(min(vis.offwidth, vis.offheight)),
            "faults": asdict(self.faults),
            "kinematics": self.robot.kinematics.samples(lim.joint_low, lim.joint_high),
        }

    def _read(self) -> dict[str, Any]:
        with self._lock:
            state = self.robot.read()
            sim_time = float(self.robot.env.data.time)
        return {
            "joint_pos": state.joint_pos,
            "joint_vel": state.joint_vel,
            "ee_pos": state.ee_pos,
            "ee_quat": state.ee_quat,
            "gripper": state.gripper,
            "extra": state.extra,
            "server_time": state.timestamp,
            "sim_time": sim_time,
        }

    def _command(self, mode: str, value: np.ndarray, gripper: float | int | None) -> dict[str, Any]:
        modes = [str(m) for m in self.robot.modes]
        if mode not in modes:
            raise CommandRejected(f"{self.robot.name}: mode {mode!r:.40} not supported (supported: {modes})")
        if value.dtype.kind not in "iuf":
            raise CommandRejected(f"{self.robot.name}: command value must be numeric, got {value.dtype}")
        cmd = Command(CommandMode(mode), value, None if gripper is None else float(gripper), time.monotonic())
        with self._lock:
            self.robot.command(cmd)  # checks everything before it changes anything
        return {}

    def _render(self, camera: str, size: int) -> dict[str, Any]:
        import mujoco

        if camera not in self.cameras:
            raise ValueError(f"unknown camera {camera!r:.40}; available: {sorted(self.cameras)}")
        model = self.robot.env.model
        if self._renderer is None:
            from robot_rl.sim.render import OffscreenRenderer, RendererError

            if self._render_error is not None:  # do not probe GL again on every request
                raise RendererError(self._render_error)
            try:
                self._renderer = OffscreenRenderer(model)
            except RendererError as err:
                self._render_error = str(err)
                raise
            self._scratch = mujoco.MjData(model)
        if not 0 < size <= self._renderer.max_size:
            raise ValueError(f"image size {size} must be in [1, {self._renderer.max_size}]")
        with self._lock:  # copy the state, render outside the lock so physics keeps running
            mujoco.mj_copyData(self._scratch, model, self.robot.env.data)
            stamp = time.monotonic()
        image = self._renderer.render(self._scratch, self.cameras[camera], size)
        return {"image": image, "server_time": stamp}

    def _reset_scene(self, seed: int | None) -> dict[str, Any]:
        if seed is not None and not 0 <= seed <= MAX_SEED:
            raise ValueError(f"seed {seed} must be in [0, 2**32)")
        with self._lock:
            self.robot.reset_scene(seed)
        return {}

    def _set_boundary(self, low: np.ndarray | None, high: np.ndarray | None) -> dict[str, Any]:
        with self._lock:
            self.robot.set_tcp_boundary(low, high)  # ValueError names bad values
        return {}

    def _ping(self) -> dict[str, Any]:
        return {"server_time": time.monotonic(), "stats": asdict(self.stats)}

    def _error(self, err: Exception, request_id: int | None) -> dict[str, Any]:
        with self._stats_lock:
            self.stats.errors += 1
        return {"ok": False, "id": request_id, "error": str(err), "type": type(err).__name__}

    def handle(self, envelope: list[bytes], body: list[bytes]) -> dict[str, Any] | None:
        """The reply to one request's frames (``body``, after the ROUTER ``envelope``), or None when it
        is a render, queued for the render thread (which replies itself). Never raises for bad input."""
        request_id = None
        try:
            if len(body) != 1:
                raise ProtocolError(f"a request is one msgpack frame, got {len(body)} frames")
            message = wire.unpack(body[0])
            rid = message.get("id")
            request_id = rid if isinstance(rid, int) and not isinstance(rid, bool) else None
            op, fields = check_request(message)
            if op == "render":
                try:
                    self._render_jobs.put_nowait((envelope, request_id, fields))
                except queue.Full:
                    raise RuntimeError(f"busy: {MAX_RENDER_QUEUE} renders already queued") from None
                return None
            handler = {
                "hello": self._hello,
                "ping": self._ping,
                "read": self._read,
                "command": self._command,
                "reset_scene": self._reset_scene,
                "set_boundary": self._set_boundary,
            }[op]
            return {"ok": True, "id": request_id, **handler(**fields)}
        except Exception as err:  # noqa: BLE001 - every bad request gets an error reply; the server goes on
            return self._error(err, request_id)

    def _render_worker(self, stop: threading.Event) -> None:
        """Render queued requests in this thread (it owns the GL context) and hand each reply to the serve
        loop over an inproc socket, so reads and commands never wait for a frame."""
        push = self._router.context.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        push.connect(self._render_inproc)
        try:
            while not stop.is_set():
                try:
                    envelope, request_id, fields = self._render_jobs.get(timeout=0.1)
                except queue.Empty:
                    continue
                try:
                    reply = {"ok": True, "id": request_id, **self._render(**fields)}
                except Exception as err:  # noqa: BLE001 - a bad render request gets an error reply
                    reply = self._error(err, request_id)
                push.send_multipart(envelope + [wire.pack(reply)])
        finally:
            push.close()
            if self._renderer is not None:
                self._renderer.close()

    def _delay(self) -> float:
        jitter = self._rng.uniform(0.0, self.faults.jitter_ms) if self.faults.jitter_ms else 0.0
        return (self.faults.latency_ms + jitter) / 1000.0

    def serve(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set, then close the socket. Runs the physics and render threads."""
        rendered = self._router.context.socket(zmq.PULL)
        rendered.setsockopt(zmq.LINGER, 0)
        rendered.bind(self._render_inproc)
        threads = [
            threading.Thread(target=self._physics, args=(stop,), name="sim-physics", daemon=True),
            threading.Thread(target=self._render_worker, args=(stop,), name="sim-render", daemon=True),
        ]
        for thread in threads:
            thread.start()
        poller = zmq.Poller()
        poller.register(self._router.sock, zmq.POLLIN)
        poller.register(rendered, zmq.POLLIN)
        pending: list[tuple[float, int, list[bytes], list[bytes]]] = []  # (due time, seq, envelope, body)
        seq = itertools.count()
        try:
            while not stop.is_set():
                wait_s = 0.1 if not pending else max(0.0, pending[0][0] - time.monotonic())
                ready = dict(poller.poll(int(1000 * min(wait_s, 0.1)) if wait_s > 0 else 0))
                if rendered in ready:
                    self._router.send(rendered.recv_multipart())
                if self._router.sock in ready:
                    frames, _ = self._router.recv()
                    self.stats.requests += 1
                    dropped = self.faults.drop_prob and self._rng.random() < self.faults.drop_prob
                    if dropped or len(pending) >= MAX_PENDING:
                        self.stats.dropped += 1
                        continue
                    envelope, body = split_envelope(frames)
                    heapq.heappush(pending, (time.monotonic() + self._delay(), next(seq), envelope, body))
                while pending and pending[0][0] <= time.monotonic():
                    _, _, envelope, body = heapq.heappop(pending)
                    reply = self.handle(envelope, body)
                    if reply is not None:
                        self._router.send(envelope + [wire.pack(reply)])
        finally:
            stop.set()
            for thread in threads:
                thread.join()
            rendered.close()
            self._router.close()


# -- command line --------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The server's flags (shared by ``robot-rl hardware sim-server`` and ``python -m``)."""
    parser.add_argument(
        "--address",
        default="tcp://127.0.0.1:5570",
        help="ZeroMQ bind address; port 0 picks a free one (printed); off loopback it needs --keys",
    )
    parser.add_argument("--keys", default="", help="CURVE key folder made by `robot-rl keys` (off loopback)")
    parser.add_argument("--control-hz", type=float, default=10.0, help="control rate reported to clients")
    parser.add_argument("--physics-hz", type=float, default=500.0, help="MuJoCo rate, a multiple of it")
    parser.add_argument("--lift-height-m", type=float, default=0.1, help="cube lift that counts as lifted")
    parser.add_argument("--scene-seed", type=int, default=None, help="seed of the first cube placement")
    parser.add_argument("--tick-ms", type=float, default=2.0, help="period of the real-time physics thread")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="fault: delay before each request")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="fault: extra uniform [0, J] ms delay")
    parser.add_argument("--drop-prob", type=float, default=0.0, help="fault: drop a request (no reply)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the jitter and drop draws")


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit code (2 for a bad flag or address, 1 if it cannot
    bind or the physics thread failed). Prints ``sim-server listening on ADDRESS`` once serving, and the
    counters at exit."""
    try:
        faults = SimServerFaults(args.latency_ms, args.jitter_ms, args.drop_prob, args.seed)
        keys = load_server_keys(args.keys) if args.keys else None
        server = SimServer(
            args.address,
            faults,
            args.control_hz,
            args.physics_hz,
            args.lift_height_m,
            args.scene_seed,
            keys,
            args.tick_ms / 1000.0,
        )
    except (ConfigError, ValueError) as err:
        hint = " (here: --keys FOLDER)" if "security.keys" in str(err) else ""
        print(f"robot-rl hardware sim-server: {err}{hint}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"robot-rl hardware sim-server: {err}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"sim-server listening on {server.address}", flush=True)
    server.serve(stop)
    print(f"sim-server stopped: {asdict(server.stats)}", flush=True)
    if server.physics_error is not None:
        print(
            f"robot-rl hardware sim-server: physics thread failed: {server.physics_error!r}", file=sys.stderr
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m robot_rl.hardware.sim_server [flags]``."""
    parser = argparse.ArgumentParser(prog="python -m robot_rl.hardware.sim_server", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


# -- for tests and benchmarks --------------------------------------------------------------------------
@dataclass
class ServerProcess:
    """A running server subprocess: its bound ``address`` and the ``process`` (to kill it in tests)."""

    address: str
    process: subprocess.Popen


@contextlib.contextmanager
def serve_in_subprocess(
    faults: SimServerFaults | None = None,
    extra_args: tuple[str, ...] = (),
    address: str = "tcp://127.0.0.1:0",
    startup_timeout_s: float = 60.0,
) -> Iterator[ServerProcess]:
    """Start ``python -m robot_rl.hardware.sim_server`` on ``address`` (default: a free localhost port),
    wait until it listens, yield its :class:`ServerProcess`, and stop it (SIGTERM, then SIGKILL) on exit.

    ``extra_args`` are more server flags (``--control-hz=30``). The child inherits the environment (set
    ``MUJOCO_GL`` first for renders).

    Raises:
        RuntimeError: the server exited or did not print its address within ``startup_timeout_s``; the
            message holds its stderr.
    """
    flags = (faults or SimServerFaults()).flags()
    cmd = [sys.executable, "-m", "robot_rl.hardware.sim_server", f"--address={address}", *flags, *extra_args]
    with tempfile.TemporaryFile() as err_file:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err_file, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        try:
            bound = _wait_ready(proc, startup_timeout_s)
            if bound is None:
                err_file.seek(0)
                tail = err_file.read().decode(errors="replace")[-2000:]
                raise RuntimeError(
                    f"sim server {' '.join(cmd)} did not start within {startup_timeout_s:g} s "
                    f"(exit code {proc.poll()}): {tail}"
                )
            yield ServerProcess(bound, proc)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            proc.stdout.close()


def _wait_ready(proc: subprocess.Popen, timeout_s: float) -> str | None:
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                return None
            line = proc.stdout.readline().decode(errors="replace")
            if not line:
                return None  # the server exited
            match = READY.search(line)
            if match:
                return match.group(1)
    return None


if __name__ == "__main__":
    sys.exit(main())
