"""``RemoteCritic``: a ``ProgressCritic`` whose scores come from a critic server (``rewards.server``).

Labelling, shaping and evaluation code takes any ``ProgressCritic``, so passing a ``RemoteCritic`` lets
several actors share one critic process. Inputs are checked client-side (``predict``) before anything is
sent, and a call is split into requests that fit the server's ``max_pairs`` and ``max_message_bytes``;
every round trip is bounded by ``timeout_s``, so a dead server raises instead of hanging.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from robot_rl.rewards.base import CriticInputError, CriticOutput, CriticScoreError, ProgressCritic
from robot_rl.rewards.server import PROTOCOL, encode_pairs
from robot_rl.security import ClientKeys
from robot_rl.transport import PeerUnavailableError, ProtocolError, RpcClient, decode_arrays

# Server-side exception classes re-raised as themselves on the client; any other becomes a RuntimeError.
REMOTE_ERRORS: dict[str, type[Exception]] = {
    "CriticInputError": CriticInputError,
    "CriticScoreError": CriticScoreError,
}

CriticUnavailableError = PeerUnavailableError
"""The critic server did not answer within the timeout (not running, unreachable, or stuck)."""


class RemoteCritic(ProgressCritic):
    """Client of a critic server with the ``ProgressCritic`` interface.

    Args:
        address: the server's ZeroMQ endpoint, e.g. ``tcp://127.0.0.1:5555``.
        timeout_s: longest wait (s) for each reply, including the first ``info`` request.
        keys: CURVE client keys (``robot_rl.security.load_client_keys(folder, name)``); required when the
            server has keys, which it must off loopback.

    On construction it asks the server for ``info`` and takes ``image_keys``, ``image_size`` (H, W) and
    ``state_key`` from it. One instance may be shared by threads (calls are serialised); give each actor
    its own instance to let the server batch their requests.

    Raises:
        CriticInputError: ``address`` is not a ZeroMQ endpoint, or is not loopback and no keys are given.
        CriticUnavailableError: no answer from ``address`` within ``timeout_s`` (also what a client whose
            key the server does not accept sees).
        ProtocolError: the peer is not a critic server speaking this protocol version.
    """

    def __init__(self, address: str, timeout_s: float = 5.0, keys: ClientKeys | None = None) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.address, self.timeout_s = address, timeout_s
        try:
            self._client = RpcClient(
                address, PROTOCOL, timeout_s, REMOTE_ERRORS, name="critic server", keys=keys
            )
        except ValueError as err:
            raise CriticInputError(str(err)) from err
        try:
            info = self.info()
            if info.get("protocol") != PROTOCOL:
                raise ProtocolError(
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
        self.max_pairs = int(info.get("max_pairs", 2**31))
        self.max_message_bytes = int(info.get("max_message_bytes", 2**62))

    def close(self) -> None:
        """Close the socket; the instance cannot be used afterwards."""
        self._client.close()

    def __enter__(self) -> RemoteCritic:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, header: dict[str, Any], blob: bytes | None = None
    ) -> tuple[dict[str, Any], list[bytes]]:
        """One round trip (see :meth:`robot_rl.transport.RpcClient.request`).

        Raises:
            CriticUnavailableError: no reply within ``timeout_s`` (the socket is then recreated).
            CriticInputError, CriticScoreError, ProtocolError: the server's error of that class.
            RuntimeError: any other server-side error, with the server's message.
        """
        return self._client.request(header, blob)

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
        """Send the pairs (only the keys the critic reads), in requests that fit the server's limits, and
        return the server's (B,) scores."""
        keys = self.input_keys
        pair_bytes = sum(obs_i[k][0].nbytes + obs_j[k][0].nbytes for k in keys)
        step = min(self.max_pairs, max(1, (self.max_message_bytes - (1 << 16)) // max(pair_bytes, 1)))
        outs = []
        for s in range(0, len(tasks), step):
            part = slice(s, s + step)
            blob = encode_pairs({k: obs_i[k][part] for k in keys}, {k: obs_j[k][part] for k in keys}, keys)
            head, frames = self.request({"op": "predict", "tasks": list(tasks[part])}, blob)
            try:
                arrays = decode_arrays(frames[0])
                outs.append(CriticOutput(arrays["delta"], arrays["done"]))
            except Exception as err:
                raise ProtocolError(f"critic server {self.address}: malformed predict reply: {err}") from err
        if len(outs) == 1:
            return outs[0]
        return CriticOutput(np.concatenate([o.delta for o in outs]), np.concatenate([o.done for o in outs]))
