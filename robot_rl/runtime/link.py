"""The actor <-> learner link: what crosses it, and its local transport (ZeroMQ on localhost or a LAN).

Operations (protocol :data:`PROTOCOL`), each a request from an actor answered by the learner:

- ``hello {actor}`` -> ``{acked, version, status}`` plus ``spec`` (the policy's checkpoint ``config`` and
  normalisation ``stats``, as JSON) so the actor can build the same network;
- ``push {actor, episode, meta}`` + safetensors frames -> ``{acked, status}``: one recorded episode, stored
  durably before the reply (a resend of a stored episode is acknowledged and ignored);
- ``weights {have}`` -> ``{version, status}`` plus the model's safetensors bytes when newer than ``have``;
- ``bye {actor}`` -> ``{status}``: the actor has stopped.

``status`` is ``{env_steps, updates, allowed_env_steps, stop}``. Nothing is pickled: headers are JSON, arrays
safetensors (DESIGN.md §4). The Ray backend (:mod:`robot_rl.runtime.ray_backend`) carries the same
operations as Ray actor calls.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

import zmq

from robot_rl.transport import (
    ProtocolError,
    RpcClient,
    check_request,
    decode_arrays,
    decode_header,
    encode_arrays,
    encode_header,
    error_header,
    split_envelope,
)

PROTOCOL = 1
OPS = ("hello", "push", "weights", "bye")
POLL_MS = 100
log = logging.getLogger(__name__)


class LearnerEndpoint(Protocol):
    """What the learner answers; :class:`robot_rl.runtime.learner.Learner` implements it (thread-safe)."""

    def hello(self, actor: int) -> dict[str, Any]: ...

    def push(self, actor: int, episode: int, frames: dict, meta: dict) -> dict[str, Any]: ...

    def weights(self, have: int) -> tuple[dict[str, Any], bytes | None]: ...

    def bye(self, actor: int) -> dict[str, Any]: ...


class LearnerLink(Protocol):
    """The actor's side of the link (ZeroMQ client or Ray handle). Every call is bounded in time and raises
    ``robot_rl.transport.PeerUnavailableError`` when the learner cannot be reached."""

    def hello(self, actor: int) -> dict[str, Any]: ...

    def push(self, actor: int, episode: int, frames: dict, meta: dict) -> dict[str, Any]: ...

    def weights(self, have: int) -> tuple[dict[str, Any], bytes | None]: ...

    def bye(self, actor: int) -> dict[str, Any]: ...


class LearnerServer:
    """Serves a :class:`LearnerEndpoint` on a ZeroMQ ROUTER socket from a background thread.

    Args:
        endpoint: the learner.
        address: bind address such as ``tcp://127.0.0.1:5560`` (``tcp://*:5560`` for other machines).

    Raises:
        zmq.ZMQError: the address cannot be bound (in use, malformed).
    """

    def __init__(self, endpoint: LearnerEndpoint, address: str) -> None:
        self.endpoint = endpoint
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(address)
        self.address = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="learner-server", daemon=True)

    def start(self) -> LearnerServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.sock.close(linger=0)

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.sock.poll(POLL_MS, zmq.POLLIN):
                continue
            frames = self.sock.recv_multipart()
            envelope, body = split_envelope(frames)
            request_id = None
            try:
                header = decode_header(body[0])
                request_id = header.get("id")
                reply, blob = self._handle(header, body[1:])
                frames = [encode_header({"ok": True, "id": request_id, **reply})]
                frames += [blob] if blob is not None else []
            except Exception as err:  # a bad request must never stop the learner
                log.warning("learner: error answering a request: %s", err)
                frames = [encode_header(error_header(err, request_id))]
            try:
                self.sock.send_multipart([*envelope, *frames], flags=zmq.NOBLOCK)
            except zmq.Again:
                log.warning("learner: could not deliver a reply (actor gone)")

    def _handle(self, header: dict, rest: list[bytes]) -> tuple[dict, bytes | None]:
        op = check_request(header, PROTOCOL, OPS, "learner")
        if op == "hello":
            return self.endpoint.hello(int(header["actor"])), None
        if op == "push":
            if len(rest) != 1:
                raise ProtocolError("a push request needs [header, frames] parts")
            frames = decode_arrays(rest[0])
            return self.endpoint.push(
                int(header["actor"]), int(header["episode"]), frames, header["meta"]
            ), None
        if op == "weights":
            return self.endpoint.weights(int(header["have"]))
        return self.endpoint.bye(int(header["actor"])), None


class ZmqLearnerLink:
    """:class:`LearnerLink` over ZeroMQ to a :class:`LearnerServer` at ``address``; each call waits at most
    ``timeout_s`` (s), longer (``push_timeout_s``) for pushes, which write to disk before answering."""

    def __init__(self, address: str, timeout_s: float = 2.0, push_timeout_s: float = 30.0) -> None:
        self.client = RpcClient(address, PROTOCOL, timeout_s, name="learner")
        self.push_timeout_s = push_timeout_s

    def hello(self, actor: int) -> dict[str, Any]:
        return self.client.request({"op": "hello", "actor": actor})[0]

    def push(self, actor: int, episode: int, frames: dict, meta: dict) -> dict[str, Any]:
        header = {"op": "push", "actor": actor, "episode": episode, "meta": meta}
        return self.client.request(header, encode_arrays(frames), timeout_s=self.push_timeout_s)[0]

    def weights(self, have: int) -> tuple[dict[str, Any], bytes | None]:
        head, rest = self.client.request({"op": "weights", "have": have})
        return head, (bytes(rest[0]) if rest else None)

    def bye(self, actor: int) -> dict[str, Any]:
        return self.client.request({"op": "bye", "actor": actor})[0]

    def close(self) -> None:
        self.client.close()
