"""Critic server: one process holds a ``ProgressCritic`` and scores pairs for many actors over ZeroMQ.

Wire format (protocol 1, no pickle). A request is a multipart message ``[header, arrays]``: ``header`` is
UTF-8 JSON ``{"op": "predict" | "info" | "stats" | "ping", "protocol": 1, "id": <int>, "tasks": [...]}``
and ``arrays`` (predict only) is a safetensors blob holding ``i/<key>`` and ``j/<key>`` for every key the
critic reads (images (B, H, W, 3) uint8, state (B, D) float32). A reply is ``[header, arrays]`` with
``{"ok": true, "id": <echoed>, ...}`` and, for predict, ``delta`` and ``done`` (B,) float32; or, on any
error, ``[{"ok": false, "id": ..., "error": "<message>", "type": "CriticInputError" | ...}]``. A bad
request is answered with an error to its sender only; the server keeps serving everyone else.

Dynamic batching: predict requests (B >= 1 pairs each) are gathered until ``max_batch`` pairs are pending
or ``max_wait_ms`` has passed since the first of them, scored with one ``critic.predict`` and the results
are split back to each sender. Clients are ``robot_rl.rewards.remote.RemoteCritic`` (DEALER sockets);
plain REQ sockets work too.

Run one with ``robot-rl critic serve`` or ``python -m robot_rl.rewards.server CHECKPOINT_DIR``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.rewards.base import CriticInputError, CriticOutput, ProgressCritic
from robot_rl.transport import (
    ProtocolError,
    check_request,
    decode_arrays,
    decode_header,
    encode_arrays,
    encode_header,
    error_header,
    split_envelope,
)

try:
    import zmq
except ImportError as _err:  # pragma: no cover - depends on the install
    raise ImportError("the critic server needs pyzmq: pip install 'robot-rl[critic]'") from _err

PROTOCOL = 1
OPS = ("predict", "info", "stats", "ping")
POLL_MS = 100  # how often an idle server checks its stop event
LATENCY_WINDOW = 1024  # requests kept for the latency percentiles

log = logging.getLogger(__name__)


def encode_pairs(obs_i: dict[str, np.ndarray], obs_j: dict[str, np.ndarray], keys: list[str]) -> bytes:
    """Safetensors blob with ``i/<key>`` and ``j/<key>`` for each of ``keys`` (arrays made C-contiguous)."""
    return encode_arrays({f"{p}/{key}": obs[key] for p, obs in (("i", obs_i), ("j", obs_j)) for key in keys})


def decode_pairs(blob: bytes) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Inverse of ``encode_pairs``: (obs_i, obs_j).

    Raises:
        ProtocolError: the blob is not safetensors, or holds a name without an ``i/`` or ``j/`` prefix.
    """
    arrays = decode_arrays(blob)
    obs: dict[str, dict[str, np.ndarray]] = {"i": {}, "j": {}}
    for name, value in arrays.items():
        prefix, _, key = name.partition("/")
        if prefix not in obs or not key:
            raise ProtocolError(f"request array {name!r}: names must be 'i/<key>' or 'j/<key>'")
        obs[prefix][key] = value
    return obs["i"], obs["j"]


@dataclass
class _Request:
    """One checked predict request waiting for the next batch."""

    envelope: list[bytes]  # routing frames to send the reply back
    request_id: Any
    obs_i: dict[str, np.ndarray]
    obs_j: dict[str, np.ndarray]
    tasks: list[str]
    pairs: int
    received: float  # time.perf_counter() when it arrived


class ServerStats:
    """Counters of a running server (all times in ms, measured server-side).

    ``requests``/``pairs``: predict requests and pairs answered successfully; ``errors``: error replies;
    ``batches``: ``critic.predict`` calls; ``forward_ms``: time inside them; ``latency_ms_*``: receipt of a
    predict request to its reply being sent (queueing + forward + encoding), over the last 1024 requests.
    """

    def __init__(self) -> None:
        self.requests = self.pairs = self.batches = self.errors = 0
        self.forward_s = 0.0
        self.latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)

    def as_dict(self) -> dict[str, float | int]:
        """JSON-ready summary, including means per batch and latency percentiles."""
        lat = np.asarray(self.latencies) * 1000.0 if self.latencies else np.zeros(1)
        batches = max(self.batches, 1)
        return {
            "requests": self.requests,
            "pairs": self.pairs,
            "batches": self.batches,
            "errors": self.errors,
            "mean_batch_pairs": self.pairs / batches,
            "mean_batch_requests": self.requests / batches,
            "forward_ms_total": 1000.0 * self.forward_s,
            "forward_ms_mean": 1000.0 * self.forward_s / batches,
            "latency_ms_mean": float(lat.mean()),
            "latency_ms_p50": float(np.percentile(lat, 50)),
            "latency_ms_p95": float(np.percentile(lat, 95)),
            "latency_ms_max": float(lat.max()),
        }


class _Server:
    """State of one ``serve`` loop: the socket, the pending batch and the counters."""

    def __init__(self, critic: ProgressCritic, sock: zmq.Socket, max_batch: int, max_wait_ms: float) -> None:
        self.critic, self.sock = critic, sock
        self.max_batch, self.max_wait_s = max_batch, max_wait_ms / 1000.0
        self.keys = critic.input_keys
        self.pending: list[_Request] = []
        self.pending_pairs = 0
        self.deadline = 0.0
        self.stats = ServerStats()

    def info(self) -> dict[str, Any]:
        return {
            "protocol": PROTOCOL,
            "critic": type(self.critic).__name__,
            "image_keys": list(self.critic.image_keys),
            "image_size": list(self.critic.image_size),
            "state_key": self.critic.state_key,
            "max_batch": self.max_batch,
            "max_wait_ms": 1000.0 * self.max_wait_s,
            "stats": self.stats.as_dict(),
        }

    def send(self, envelope: list[bytes], header: dict[str, Any], blob: bytes | None = None) -> None:
        frames = [*envelope, encode_header(header)] + ([blob] if blob is not None else [])
        try:
            self.sock.send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:  # the client is gone or not reading; ROUTER drops rather than blocks
            log.warning("critic server: could not deliver a reply (client gone or its queue full)")

    def send_error(self, envelope: list[bytes], err: BaseException, request_id: Any) -> None:
        self.stats.errors += 1
        log.info("critic server: error reply %s: %s", type(err).__name__, err)
        self.send(envelope, error_header(err, request_id))

    def handle(self, frames: list[bytes]) -> None:
        """Answer an info/stats/ping request at once, or check a predict request and queue it."""
        received = time.perf_counter()
        envelope, body = split_envelope(frames)
        request_id = None
        try:
            if len(body) not in (1, 2):
                raise ProtocolError(f"expected [header, arrays] frames, got {len(body)} frames")
            header = decode_header(body[0])
            request_id = header.get("id")
            op = check_request(header, PROTOCOL, OPS, "server")
            if op == "ping":
                self.send(envelope, {"ok": True, "id": request_id})
            elif op == "info":
                self.send(envelope, {"ok": True, "id": request_id, **self.info()})
            elif op == "stats":
                self.send(envelope, {"ok": True, "id": request_id, "stats": self.stats.as_dict()})
            else:
                self.queue(self.check(envelope, request_id, header, body, received))
        except Exception as err:  # a bad request must never stop the server
            self.send_error(envelope, err, request_id)

    def check(
        self, envelope: list[bytes], request_id: Any, header: dict, body: list[bytes], received: float
    ) -> _Request:
        """Decode and check one predict request against the critic (before it joins a batch)."""
        if len(body) != 2:
            raise ProtocolError("a predict request needs [header, arrays] frames")
        obs_i, obs_j = decode_pairs(body[1])
        tasks = header.get("tasks")
        if not isinstance(tasks, list | str):
            raise CriticInputError(f"'tasks' must be a list of strings, got {type(tasks).__name__}")
        tasks = self.critic.check_pairs(obs_i, obs_j, tasks)
        if not tasks:
            raise CriticInputError("a predict request needs at least one observation pair")
        obs_i = {k: obs_i[k] for k in self.keys}
        obs_j = {k: obs_j[k] for k in self.keys}
        return _Request(envelope, request_id, obs_i, obs_j, tasks, len(tasks), received)

    def queue(self, request: _Request) -> None:
        if not self.pending:
            self.deadline = request.received + self.max_wait_s
        self.pending.append(request)
        self.pending_pairs += request.pairs

    def flush(self) -> None:
        """Score all pending requests with one ``predict`` and reply to each; on failure, retry each alone
        so that one request's error (e.g. a NaN score) reaches only its sender."""
        batch, self.pending, self.pending_pairs = self.pending, [], 0
        try:
            self.reply(batch, self.forward(batch))
            return
        except Exception as err:
            if len(batch) == 1:
                self.send_error(batch[0].envelope, err, batch[0].request_id)
                return
        for request in batch:
            try:
                out = self.forward([request])
            except Exception as err:
                self.send_error(request.envelope, err, request.request_id)
            else:
                self.reply([request], out)

    def forward(self, batch: list[_Request]) -> CriticOutput:
        """One ``critic.predict`` over the concatenation of ``batch``'s pairs."""
        if len(batch) == 1:
            obs_i, obs_j, tasks = batch[0].obs_i, batch[0].obs_j, batch[0].tasks
        else:
            obs_i = {k: np.concatenate([r.obs_i[k] for r in batch]) for k in self.keys}
            obs_j = {k: np.concatenate([r.obs_j[k] for r in batch]) for k in self.keys}
            tasks = [t for r in batch for t in r.tasks]
        start = time.perf_counter()
        out = self.critic.predict(obs_i, obs_j, tasks)
        self.stats.forward_s += time.perf_counter() - start
        self.stats.batches += 1
        return out

    def reply(self, batch: list[_Request], out: CriticOutput) -> None:
        """Split ``out`` back into each request's (B,) delta and done and send them."""
        offset = 0
        for r in batch:
            part = slice(offset, offset + r.pairs)
            offset += r.pairs
            blob = encode_arrays({"delta": out.delta[part], "done": out.done[part]})
            self.send(r.envelope, {"ok": True, "id": r.request_id, "pairs": r.pairs}, blob)
            self.stats.requests += 1
            self.stats.pairs += r.pairs
            self.stats.latencies.append(time.perf_counter() - r.received)

    def poll_timeout_ms(self) -> int:
        if not self.pending:
            return POLL_MS
        return max(0, int(np.ceil(1000.0 * (self.deadline - time.perf_counter()))))

    def drain(self) -> None:
        """Take every message already queued on the socket (up to a full batch)."""
        while self.pending_pairs < self.max_batch:
            try:
                frames = self.sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return
            self.handle(frames)

    def ready_to_flush(self) -> bool:
        return bool(self.pending) and (
            self.pending_pairs >= self.max_batch or time.perf_counter() >= self.deadline
        )


def serve(
    critic: ProgressCritic,
    address: str = "tcp://127.0.0.1:5555",
    max_batch: int = 64,
    max_wait_ms: float = 2.0,
    stop: threading.Event | None = None,
    ready: Callable[[str], Any] | None = None,
) -> None:
    """Serve ``critic`` on a ZeroMQ ROUTER socket until ``stop`` is set (blocking).

    Args:
        critic: any ProgressCritic; it is only called from this thread.
        address: ZeroMQ endpoint to bind, e.g. ``tcp://127.0.0.1:5555``, ``tcp://0.0.0.0:5555`` (all
            interfaces) or ``tcp://127.0.0.1:*`` (a free port; ``ready`` receives the one chosen).
        max_batch: a batch closes as soon as it holds this many pairs or more (a single larger request is
            scored whole, never split).
        max_wait_ms: longest wait, after the first pending request, for more requests to join a batch.
        stop: set it to make the loop return within about 0.1 s; None serves until interrupted.
        ready: called once with the bound endpoint (str, port resolved) when the server accepts requests.

    Raises:
        ValueError: ``max_batch`` < 1 or ``max_wait_ms`` < 0.
        OSError: the address cannot be bound (in use, or not a valid ZeroMQ endpoint); names the address.
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if max_wait_ms < 0:
        raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
    stop = stop or threading.Event()
    sock = zmq.Context.instance().socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.bind(address)
    except zmq.ZMQError as err:
        sock.close()
        raise OSError(f"critic server cannot bind {address!r}: {err}") from err
    endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    server = _Server(critic, sock, max_batch, max_wait_ms)
    log.info("critic server: %s on %s", type(critic).__name__, endpoint)
    try:
        if ready is not None:
            ready(endpoint)
        while not stop.is_set():
            if sock.poll(server.poll_timeout_ms(), zmq.POLLIN):
                server.drain()
            if server.ready_to_flush():
                server.flush()
    finally:
        sock.close(linger=0)


def main(argv: list[str] | None = None) -> None:
    """``python -m robot_rl.rewards.server CHECKPOINT_DIR [--address ...]``: serve a saved critic.

    Prints ``serving <endpoint>`` once it accepts requests; SIGTERM or Ctrl-C stops it.
    """
    parser = argparse.ArgumentParser(description="Serve a trained progress critic over ZeroMQ.")
    parser.add_argument("checkpoint", help="critic checkpoint folder (robot-rl critic train)")
    parser.add_argument("--address", default="tcp://127.0.0.1:5555")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    args = parser.parse_args(argv)
    serve_checkpoint(args.checkpoint, args.address, args.device, args.max_batch, args.max_wait_ms)


def serve_checkpoint(
    checkpoint: str | Path, address: str, device: str = "cpu", max_batch: int = 64, max_wait_ms: float = 2.0
) -> None:
    """Load a saved critic and ``serve`` it; prints ``serving <endpoint> ...`` once it accepts requests,
    and returns on SIGTERM or Ctrl-C. Used by ``robot-rl critic serve`` and by this module's ``main``."""
    from robot_rl.rewards.registry import load_critic

    critic = load_critic(checkpoint, device)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def ready(endpoint: str) -> None:
        print(f"serving {endpoint} (max batch {max_batch}); Ctrl-C or SIGTERM stops it", flush=True)

    try:
        serve(critic, address, max_batch, max_wait_ms, stop, ready=ready)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
