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
are split back to each sender. A forward pass takes at most ``max_batch`` pairs, newest requests first:
a big request is scored in slices, and between two slices the server reads its socket, answers
info/stats/ping and lets requests that arrived meanwhile into the next pass, so one slow request never
blocks the others. A request of more than ``max_pairs`` pairs is refused at once, and a frame larger
than ``max_message_mb`` is dropped by ZeroMQ before it is buffered (the sender is disconnected and gets
no reply). With CURVE keys (:mod:`robot_rl.security`, required off loopback) only listed clients are
answered. Clients are ``robot_rl.rewards.remote.RemoteCritic`` (DEALER sockets; it splits calls to fit
the server's limits); plain REQ sockets work too.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.rewards.base import CriticInputError, CriticOutput, ProgressCritic
from robot_rl.rewards.registry import load_critic
from robot_rl.security import ServerKeys, check_address, load_server_keys
from robot_rl.transport import (
    ProtocolError,
    RouterServer,
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
DRAIN_MESSAGES = 256  # most messages read between two forward passes
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


@dataclass(eq=False)  # compared by identity: the queue removes exactly this request
class _Request:
    """One checked predict request, scored in slices of at most ``max_batch`` pairs."""

    envelope: list[bytes]  # routing frames to send the reply back
    request_id: Any
    obs_i: dict[str, np.ndarray]
    obs_j: dict[str, np.ndarray]
    tasks: list[str]
    pairs: int
    received: float  # time.perf_counter() when it arrived
    scored: int = 0  # pairs scored so far
    outputs: list[CriticOutput] = field(default_factory=list)  # their scores, in order

    def take(self, n: int) -> tuple[dict, dict, list[str]]:
        """The next ``n`` unscored pairs (obs_i, obs_j, tasks)."""
        part = slice(self.scored, self.scored + n)
        return (
            {k: v[part] for k, v in self.obs_i.items()},
            {k: v[part] for k, v in self.obs_j.items()},
            self.tasks[part],
        )


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
    """State of one ``serve`` loop: the socket, the pending requests and the counters."""

    def __init__(
        self,
        critic: ProgressCritic,
        router: RouterServer,
        max_batch: int,
        max_wait_ms: float,
        max_pairs: int,
        max_message_bytes: int,
    ) -> None:
        self.critic, self.router = critic, router
        self.max_batch, self.max_wait_s = max_batch, max_wait_ms / 1000.0
        self.max_pairs, self.max_message_bytes = max_pairs, max_message_bytes
        self.keys = critic.input_keys
        self.pending: list[_Request] = []
        self.pending_pairs = 0  # pairs still to score
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
            "max_pairs": self.max_pairs,
            "max_message_bytes": self.max_message_bytes,
            "stats": self.stats.as_dict(),
        }

    def send(self, envelope: list[bytes], header: dict[str, Any], blob: bytes | None = None) -> None:
        frames = [*envelope, encode_header(header)] + ([blob] if blob is not None else [])
        if not self.router.send(frames):  # the client is gone or not reading; ROUTER drops, never blocks
            log.warning("critic server: could not deliver a reply (client gone or its queue full)")

    def send_error(self, envelope: list[bytes], err: BaseException, request_id: Any) -> None:
        self.stats.errors += 1
        log.info("critic server: error reply %s: %s", type(err).__name__, err)
        self.send(envelope, error_header(err, request_id))

    def handle(self, frames: list[bytes]) -> int:
        """Answer an info/stats/ping request at once, or check a predict request and queue it. Returns
        the pairs queued (0 for anything else)."""
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
                request = self.check(envelope, request_id, header, body, received)
                self.queue(request)
                return request.pairs
        except Exception as err:  # a bad request must never stop the server
            self.send_error(envelope, err, request_id)
        return 0

    def check(
        self, envelope: list[bytes], request_id: Any, header: dict, body: list[bytes], received: float
    ) -> _Request:
        """Decode and check one predict request against the critic and ``max_pairs`` (before it queues)."""
        if len(body) != 2:
            raise ProtocolError("a predict request needs [header, arrays] frames")
        obs_i, obs_j = decode_pairs(body[1])
        tasks = header.get("tasks")
        if not isinstance(tasks, list | str):
            raise CriticInputError(f"'tasks' must be a list of strings, got {type(tasks).__name__}")
        tasks = self.critic.check_pairs(obs_i, obs_j, tasks)
        if not tasks:
            raise CriticInputError("a predict request needs at least one observation pair")
        if len(tasks) > self.max_pairs:
            raise CriticInputError(
                f"{len(tasks)} pairs in one request; this server scores at most {self.max_pairs} per "
                "request (reward_model.serve_max_pairs): split it"
            )
        obs_i = {k: obs_i[k] for k in self.keys}
        obs_j = {k: obs_j[k] for k in self.keys}
        return _Request(envelope, request_id, obs_i, obs_j, tasks, len(tasks), received)

    def queue(self, request: _Request) -> None:
        if not self.pending:
            self.deadline = request.received + self.max_wait_s
        self.pending.append(request)
        self.pending_pairs += request.pairs

    def flush(self) -> None:
        """Score up to ``max_batch`` pending pairs with one ``predict``, requests with the fewest pairs
        scored first (so a request that arrived during a big one's slices goes next), and reply to each
        request whose pairs are all scored. On failure, retry each request's slice alone so that one
        request's error (e.g. a NaN score) reaches only its sender, and drop that request."""
        parts: list[tuple[_Request, int]] = []
        room = self.max_batch
        for request in sorted(self.pending, key=lambda r: r.scored):  # stable: first come first
            if room <= 0:
                break
            n = min(request.pairs - request.scored, room)
            parts.append((request, n))
            room -= n
        try:
            self.collect(parts, self.forward(parts))
        except Exception as err:
            if len(parts) == 1:
                self.drop(parts[0][0], err)
            else:
                for part in parts:
                    try:
                        out = self.forward([part])
                    except Exception as part_err:
                        self.drop(part[0], part_err)
                    else:
                        self.collect([part], out)

    def forward(self, parts: list[tuple[_Request, int]]) -> CriticOutput:
        """One ``critic.predict`` over the next ``n`` pairs of each (request, n) of ``parts``."""
        taken = [request.take(n) for request, n in parts]
        if len(taken) == 1:
            obs_i, obs_j, tasks = taken[0]
        else:
            obs_i = {k: np.concatenate([t[0][k] for t in taken]) for k in self.keys}
            obs_j = {k: np.concatenate([t[1][k] for t in taken]) for k in self.keys}
            tasks = [task for t in taken for task in t[2]]
        start = time.perf_counter()
        out = self.critic.predict(obs_i, obs_j, tasks)
        self.stats.forward_s += time.perf_counter() - start
        self.stats.batches += 1
        return out

    def collect(self, parts: list[tuple[_Request, int]], out: CriticOutput) -> None:
        """Hand each request its share of ``out``; reply to those now complete with their (B,) delta and
        done."""
        offset = 0
        for request, n in parts:
            part = slice(offset, offset + n)
            offset += n
            request.outputs.append(CriticOutput(out.delta[part], out.done[part]))
            request.scored += n
            self.pending_pairs -= n
            if request.scored < request.pairs:
                continue
            self.pending.remove(request)
            delta = np.concatenate([o.delta for o in request.outputs])
            done = np.concatenate([o.done for o in request.outputs])
            blob = encode_arrays({"delta": delta, "done": done})
            self.send(request.envelope, {"ok": True, "id": request.request_id, "pairs": request.pairs}, blob)
            self.stats.requests += 1
            self.stats.pairs += request.pairs
            self.stats.latencies.append(time.perf_counter() - request.received)

    def drop(self, request: _Request, err: BaseException) -> None:
        """Answer ``request`` with ``err`` and forget the rest of its pairs."""
        self.pending.remove(request)
        self.pending_pairs -= request.pairs - request.scored
        self.send_error(request.envelope, err, request.request_id)

    def poll_timeout_ms(self) -> int:
        if not self.pending:
            return POLL_MS
        return max(0, int(np.ceil(1000.0 * (self.deadline - time.perf_counter()))))

    def drain(self) -> None:
        """Take the messages already queued on the socket, until a batch's worth of new pairs is in (or
        :data:`DRAIN_MESSAGES` messages were read: a flood of pings cannot hold up scoring)."""
        added = 0
        for _ in range(DRAIN_MESSAGES):
            if added >= self.max_batch:
                return
            try:
                frames, _ = self.router.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            added += self.handle(frames)

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
    keys: ServerKeys | None = None,
    max_pairs: int = 1024,
    max_message_mb: float = 64.0,
) -> None:
    """Serve ``critic`` on a ZeroMQ ROUTER socket until ``stop`` is set (blocking).

    Args:
        critic: any ProgressCritic; it is only called from this thread.
        address: ZeroMQ endpoint to bind, e.g. ``tcp://127.0.0.1:5555``, ``tcp://0.0.0.0:5555`` (all
            interfaces, with ``keys``) or ``tcp://127.0.0.1:*`` (a free port; ``ready`` receives the one
            chosen).
        max_batch: most pairs per forward pass; a batch closes as soon as this many are pending, and a
            bigger request is scored in slices of this size, interleaved with the other requests.
        max_wait_ms: longest wait, after the first pending request, for more requests to join a batch.
        stop: set it to make the loop return within about 0.1 s; None serves until interrupted.
        ready: called once with the bound endpoint (str, port resolved) when the server accepts requests.
        keys: CURVE keys (:mod:`robot_rl.security`): only listed clients are answered. Required unless
            ``address`` is loopback.
        max_pairs: a request of more pairs is refused with a CriticInputError.
        max_message_mb: ``zmq.MAXMSGSIZE`` in MiB: a client sending a larger frame is disconnected
            before the frame is buffered, without a reply.

    Raises:
        ValueError: ``max_batch``, ``max_pairs`` or ``max_message_mb`` < 1, or ``max_wait_ms`` < 0.
        ConfigError: a non-loopback ``address`` without keys.
        OSError: the address cannot be bound (in use, or not a valid ZeroMQ endpoint); names the address.
    """
    if max_batch < 1 or max_pairs < 1 or max_message_mb < 1:
        raise ValueError(
            f"max_batch ({max_batch}), max_pairs ({max_pairs}) and max_message_mb ({max_message_mb}) must "
            "be >= 1"
        )
    if max_wait_ms < 0:
        raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms}")
    stop = stop or threading.Event()
    max_bytes = int(max_message_mb * 2**20)
    router = RouterServer(address, keys, max_bytes, "critic server address")
    server = _Server(critic, router, max_batch, max_wait_ms, max_pairs, max_bytes)
    log.info("critic server: %s on %s", type(critic).__name__, router.address)
    try:
        if ready is not None:
            ready(router.address)
        while not stop.is_set():
            if router.sock.poll(server.poll_timeout_ms(), zmq.POLLIN):
                server.drain()
            if server.ready_to_flush():
                server.flush()
    finally:
        router.close()


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
    parser.add_argument("--keys", default="", help="CURVE key folder (robot-rl keys); needed off loopback")
    parser.add_argument("--max-pairs", type=int, default=1024, help="most pairs per request")
    parser.add_argument("--max-message-mb", type=float, default=64.0, help="largest frame accepted (MiB)")
    args = parser.parse_args(argv)
    serve_checkpoint(
        args.checkpoint,
        args.address,
        args.device,
        args.max_batch,
        args.max_wait_ms,
        args.keys,
        args.max_pairs,
        args.max_message_mb,
    )


def serve_checkpoint(
    checkpoint: str | Path,
    address: str,
    device: str = "cpu",
    max_batch: int = 64,
    max_wait_ms: float = 2.0,
    keys: str | Path = "",
    max_pairs: int = 1024,
    max_message_mb: float = 64.0,
) -> None:
    """Load a saved critic and ``serve`` it (with the CURVE keys of folder ``keys``, if given); prints
    ``serving <endpoint> ...`` once it accepts requests, and returns on SIGTERM or Ctrl-C. Used by
    ``robot-rl critic serve`` and by this module's ``main``.

    Raises:
        ConfigError: a non-loopback ``address`` without ``keys``, or a bad key folder (before loading)."""
    server_keys = load_server_keys(keys) if keys else None
    check_address(address, server_keys, "critic server address", bind=True)
    critic = load_critic(checkpoint, device)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def ready(endpoint: str) -> None:
        print(f"serving {endpoint} (max batch {max_batch}); Ctrl-C or SIGTERM stops it", flush=True)

    try:
        serve(
            critic,
            address,
            max_batch,
            max_wait_ms,
            stop,
            ready=ready,
            keys=server_keys,
            max_pairs=max_pairs,
            max_message_mb=max_message_mb,
        )
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
