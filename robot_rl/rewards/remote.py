"""``RemoteCritic``: a ``ProgressCritic`` whose scores come from a critic server (``rewards.server``).

Labelling, shaping and evaluation code takes any ``ProgressCritic``, so passing a ``RemoteCritic`` lets
several actors share one critic process. Inputs are checked client-side (``predict``) before anything is
sent; every round trip is bounded by ``timeout_s``, so a dead server raises instead of hanging.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import numpy as np
import zmq
from safetensors.numpy import load as st_load

from robot_rl.rewards.base import CriticInputError, CriticOutput, CriticScoreError, ProgressCritic
from robot_rl.rewards.server import (
    PROTOCOL,
    CriticProtocolError,
    decode_header,
    encode_header,
    encode_pairs,
)

# Server-side exception classes re-raised as themselves on the client; any other becomes a RuntimeError.
REMOTE_ERRORS: dict[str, type[Exception]] = {
    "CriticInputError": CriticInputError,
    "CriticScoreError": CriticScoreError,
    "CriticProtocolError": CriticProtocolError,
}


class CriticUnavailableError(ConnectionError):
    """The critic server did not answer within the timeout (not running, unreachable, or stuck)."""


class RemoteCritic(ProgressCritic):
    """Client of a critic server with the ``ProgressCritic`` interface.

    Args:
        address: the server's ZeroMQ endpoint, e.g. ``tcp://127.0.0.1:5555``.
        timeout_s: longest wait (s) for each reply, including the first ``info`` request.

    On construction it asks the server for ``info`` and takes ``image_keys``, ``image_size`` (H, W) and
    ``state_key`` from it. One instance may be shared by threads (calls are serialised); give each actor
    its own instance to let the server batch their requests.

    Raises:
        CriticInputError: ``address`` is not a ZeroMQ endpoint.
        CriticUnavailableError: no answer from ``address`` within ``timeout_s``.
        CriticProtocolError: the peer is not a critic server speaking this protocol version.
    """

    def __init__(self, address: str, timeout_s: float = 5.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.address, self.timeout_s = address, timeout_s
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._sock: zmq.Socket | None = None
        self._connect()
        try:
            info = self.info()
            if info.get("protocol") != PROTOCOL:
                raise CriticProtocolError(
                    f"critic server {address} speaks protocol {info.get('protocol')!r}, this client "
                    f"{PROTOCOL}"
                )
        except BaseException:
            self.close()
            raise
        self.image_keys = tuple(info["image_keys"])
        self.image_size = (int(info["image_size"][0]), int(info["image_size"][1]))
        self.state_key = info["state_key"]
        self.server_critic = str(info.get("critic", ""))

    def _connect(self) -> None:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDTIMEO, int(1000 * self.timeout_s))
        try:
            sock.connect(self.address)
        except zmq.ZMQError as err:
            sock.close()
            raise CriticInputError(
                f"critic address {self.address!r} is not a ZeroMQ endpoint like tcp://127.0.0.1:5555: {err}"
            ) from err
        self._sock = sock

    def _reset(self) -> None:
        """New socket (new identity) after a timeout, so a late reply to the old request is never read as
        the reply to the next one, and nothing stale stays queued for a restarted server."""
        if self._sock is not None:
            self._sock.close(linger=0)
        self._connect()

    def close(self) -> None:
        """Close the socket; the instance cannot be used afterwards."""
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def __del__(self) -> None:
        if getattr(self, "_sock", None) is not None:
            self.close()

    def __enter__(self) -> RemoteCritic:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, header: dict[str, Any], blob: bytes | None = None
    ) -> tuple[dict[str, Any], list[bytes]]:
        """One round trip: send ``[header (+ protocol, id), blob]``, return (reply header, extra frames).

        Raises:
            CriticUnavailableError: no reply within ``timeout_s`` (the socket is then recreated).
            CriticInputError, CriticScoreError, CriticProtocolError: the server's error of that class.
            RuntimeError: any other server-side error, with the server's message.
        """
        with self._lock:
            if self._sock is None:
                raise CriticUnavailableError(f"RemoteCritic for {self.address} was closed")
            request_id = next(self._ids)
            frames = [encode_header({**header, "protocol": PROTOCOL, "id": request_id})]
            if blob is not None:
                frames.append(blob)
            deadline = time.monotonic() + self.timeout_s
            try:
                self._sock.send_multipart(frames)
                while True:
                    left_ms = int(1000 * (deadline - time.monotonic()))
                    if left_ms <= 0 or not self._sock.poll(left_ms, zmq.POLLIN):
                        raise TimeoutError
                    reply = self._sock.recv_multipart()
                    head = decode_header(reply[0])
                    if head.get("id") == request_id:
                        break  # anything else is a stale reply to an earlier request
            except (TimeoutError, zmq.Again) as err:
                self._reset()
                raise CriticUnavailableError(
                    f"critic server {self.address} did not answer {header.get('op')!r} within "
                    f"{self.timeout_s:g} s; is it running (robot-rl critic serve --address {self.address})?"
                ) from err
        if not head.get("ok", False):
            kind = str(head.get("type", "RuntimeError"))
            message = f"critic server {self.address}: {head.get('error', 'unknown error')}"
            raise REMOTE_ERRORS.get(kind, RuntimeError)(
                message if kind in REMOTE_ERRORS else f"{message} ({kind})"
            )
        return head, reply[1:]

    def info(self) -> dict[str, Any]:
        """The server's critic description (image_keys, image_size, state_key, protocol, batching settings)
        and its ``stats``."""
        return self.request({"op": "info"})[0]

    def stats(self) -> dict[str, Any]:
        """The server's counters (see ``rewards.server.ServerStats``)."""
        return self.request({"op": "stats"})[0]["stats"]

    def ping(self) -> float:
        """Round-trip time in seconds of an empty request."""
        start = time.perf_counter()
        self.request({"op": "ping"})
        return time.perf_counter() - start

    def _score(
        self, obs_i: dict[str, np.ndarray], obs_j: dict[str, np.ndarray], tasks: list[str]
    ) -> CriticOutput:
        """Send the pairs (only the keys the critic reads) and return the server's (B,) scores."""
        blob = encode_pairs(obs_i, obs_j, self.input_keys)
        head, frames = self.request({"op": "predict", "tasks": list(tasks)}, blob)
        try:
            arrays = st_load(bytes(frames[0]))
            return CriticOutput(arrays["delta"], arrays["done"])
        except Exception as err:
            raise CriticProtocolError(
                f"critic server {self.address}: malformed predict reply: {err}"
            ) from err
