"""Request/reply messaging over ZeroMQ with no pickle: a JSON header frame plus an optional safetensors blob.

Used by the critic server (``robot_rl.rewards.server``) and the online learner link
(``robot_rl.runtime.link``). A request is ``[header, blob?]`` where ``header`` is UTF-8 JSON carrying
``op``, ``protocol`` and a request ``id``; the reply echoes the ``id`` with ``ok`` true, or ``ok`` false
with ``error`` and ``type``. Arrays travel as safetensors (numpy) bytes, so a peer on another machine
never unpickles anything. Servers bind a :class:`RouterServer`: CURVE-authenticated when given keys
(:mod:`robot_rl.security`; required off loopback) and refusing any frame over its size cap before it is
buffered.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any

import numpy as np
import zmq
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from robot_rl.security import (
    ClientKeys,
    ServerKeys,
    check_address,
    secure_client_socket,
    secure_server_socket,
)


class ProtocolError(RuntimeError):
    """A message that does not follow the wire protocol (garbage, unknown op, other version)."""


class PeerUnavailableError(ConnectionError):
    """The peer did not answer within the timeout (not running, unreachable, or stuck)."""


def encode_header(header: dict[str, Any]) -> bytes:
    """UTF-8 JSON bytes of a header dict."""
    return json.dumps(header).encode()


def decode_header(frame: bytes) -> dict[str, Any]:
    """Parse a JSON header frame.

    Raises:
        ProtocolError: not UTF-8 JSON, or not a JSON object.
    """
    try:
        header = json.loads(bytes(frame).decode())
    except (UnicodeDecodeError, ValueError) as err:
        raise ProtocolError(f"header is not UTF-8 JSON: {err}") from err
    if not isinstance(header, dict):
        raise ProtocolError(f"header must be a JSON object, got {type(header).__name__}")
    return header


def error_header(err: BaseException, request_id: Any = None) -> dict[str, Any]:
    """Error reply header: ``{"ok": false, "id", "error": message, "type": exception class name}``."""
    return {"ok": False, "id": request_id, "error": str(err), "type": type(err).__name__}


def encode_arrays(arrays: dict[str, np.ndarray]) -> bytes:
    """Safetensors bytes of named numpy arrays (made C-contiguous; bool is kept as bool)."""
    return st_save({k: np.ascontiguousarray(v) for k, v in arrays.items()})


def decode_arrays(blob: bytes) -> dict[str, np.ndarray]:
    """Inverse of :func:`encode_arrays`.

    Raises:
        ProtocolError: the blob is not safetensors.
    """
    try:
        return st_load(bytes(blob))
    except Exception as err:  # safetensors raises its own error type on garbage
        raise ProtocolError(f"payload is not a safetensors blob: {err}") from err


def check_request(header: dict[str, Any], protocol: int, ops: tuple[str, ...], server: str) -> str:
    """The request's ``op`` after checking its protocol version and op name.

    Raises:
        ProtocolError: another protocol version, or an op not in ``ops``.
    """
    version = header.get("protocol")
    if version != protocol:
        raise ProtocolError(f"protocol {version!r} not supported; this {server} speaks protocol {protocol}")
    op = header.get("op")
    if op not in ops:
        raise ProtocolError(f"unknown op {op!r}; expected one of {list(ops)}")
    return op


def split_envelope(frames: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """ROUTER frames -> (envelope, body): the sender identity, plus the empty delimiter a REQ peer adds."""
    split = 2 if len(frames) > 1 and frames[1] == b"" else 1
    return frames[:split], frames[split:]


class RouterServer:
    """A server's bound ROUTER socket, in its own ZeroMQ context.

    Args:
        address: endpoint to bind, e.g. ``tcp://127.0.0.1:5560`` (``:*`` or ``:0`` picks a free port).
        keys: CURVE keys (:mod:`robot_rl.security`): only clients whose keys the folder lists get through
            the handshake, and each message carries its client's key name. Required unless ``address``
            is loopback.
        max_message_bytes: ``zmq.MAXMSGSIZE``: a peer sending a larger frame is disconnected by ZeroMQ as
            the frame's size arrives, before it is buffered; nothing reaches the server.
        setting: the config key or flag that set ``address``, for messages.

    Raises:
        ConfigError: a non-loopback ``address`` without keys.
        OSError: the address cannot be bound (in use, malformed); names the address.
    """

    def __init__(self, address: str, keys: ServerKeys | None, max_message_bytes: int, setting: str) -> None:
        check_address(address, keys, setting, bind=True)
        self.secure = keys is not None
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, int(max_message_bytes))
        self.auth = secure_server_socket(self.context, self.sock, keys) if keys is not None else None
        try:
            self.sock.bind(address)
        except zmq.ZMQError as err:
            self.close()
            raise OSError(f"{setting}: cannot bind {address!r}: {err}") from err
        self.address = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def recv(self, flags: int = 0) -> tuple[list[bytes], str | None]:
        """One message: (frames, the sender's key name; None without keys).

        Raises:
            zmq.Again: ``flags`` has NOBLOCK and nothing is queued.
        """
        frames = self.sock.recv_multipart(flags=flags, copy=False)
        user = frames[-1].get("User-Id") if self.secure else None
        return [f.bytes for f in frames], user

    def send(self, frames: list[bytes]) -> bool:
        """Send without blocking; False when the peer is gone or not reading (the reply is dropped)."""
        try:
            self.sock.send_multipart(frames, flags=zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def close(self) -> None:
        self.sock.close(linger=0)
        if self.auth is not None:
            self.auth.stop()
        self.context.term()


class RpcClient:
    """A DEALER socket doing one bounded request/reply round trip at a time.

    Args:
        address: the server's ZeroMQ endpoint, e.g. ``tcp://127.0.0.1:5560``.
        protocol: protocol version stamped on every request.
        timeout_s: longest wait (s) for each reply.
        errors: server-side exception class names re-raised as these classes on the client; any other
            error type becomes a RuntimeError carrying the server's message.
        name: what the peer is, for messages (``"critic server"``, ``"learner"``).
        keys: CURVE client keys (:mod:`robot_rl.security`); required for a non-loopback address.

    One instance may be shared by threads (calls are serialised). After a timeout the socket is replaced
    (a new identity), so a late reply to an old request is never taken for the reply to the next one. A
    request also ends at once when the connection it went out on closes (the server process died or was
    restarted: a ZeroMQ monitor's ``EVENT_DISCONNECTED``), instead of waiting out its timeout.

    Raises:
        ValueError: ``timeout_s`` <= 0 or ``address`` is not a ZeroMQ endpoint.
        ConfigError: a non-loopback ``address`` without keys (a server there requires them).
    """

    def __init__(
        self,
        address: str,
        protocol: int,
        timeout_s: float = 5.0,
        errors: dict[str, type[Exception]] | None = None,
        name: str = "server",
        keys: ClientKeys | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        check_address(address, keys, f"{name} address", bind=False)
        self.address, self.protocol, self.timeout_s, self.name = address, protocol, timeout_s, name
        self.keys = keys
        self.errors = {"ProtocolError": ProtocolError, **(errors or {})}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._sock: zmq.Socket | None = None
        self._monitor: zmq.Socket | None = None
        self._connect()

    def _connect(self) -> None:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDTIMEO, int(1000 * self.timeout_s))
        if self.keys is not None:
            secure_client_socket(sock, self.keys)
        try:
            sock.connect(self.address)
        except zmq.ZMQError as err:
            sock.close()
            raise ValueError(
                f"{self.name} address {self.address!r} is not a ZeroMQ endpoint like tcp://127.0.0.1:5560: "
                f"{err}"
            ) from err
        self._sock = sock
        self._monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)

    def _drop(self) -> None:
        """Close the socket and its monitor."""
        if self._monitor is not None:
            if self._sock is not None:
                self._sock.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def _disconnected(self) -> bool:
        """Drain the monitor; whether a connection closed since it was last drained."""
        seen = False
        while self._monitor.poll(0, zmq.POLLIN):
            self._monitor.recv_multipart()
            seen = True
        return seen

    def reset(self) -> None:
        """A fresh socket: nothing stale stays queued for a restarted server."""
        self._drop()
        self._connect()

    def close(self) -> None:
        """Close the socket; the client cannot be used afterwards."""
        self._drop()

    def __del__(self) -> None:
        if getattr(self, "_sock", None) is not None:
            self.close()

    def request(
        self, header: dict[str, Any], blob: bytes | None = None, timeout_s: float | None = None
    ) -> tuple[dict[str, Any], list[bytes]]:
        """One round trip: send ``[header (+ protocol, id), blob]``; return (reply header, extra frames).

        Raises:
            PeerUnavailableError: no reply within the timeout, or the connection closed while waiting (the
                socket is then recreated).
            ProtocolError or a class of ``errors``: the server's error of that class.
            RuntimeError: any other server-side error, with the server's message.
        """
        timeout = self.timeout_s if timeout_s is None else timeout_s
        with self._lock:
            if self._sock is None:
                raise PeerUnavailableError(f"client of {self.name} {self.address} was closed")
            request_id = next(self._ids)
            frames = [encode_header({**header, "protocol": self.protocol, "id": request_id})]
            if blob is not None:
                frames.append(blob)
            deadline = time.monotonic() + timeout
            self._disconnected()  # events of earlier connections are not this request's
            poller = zmq.Poller()
            poller.register(self._sock, zmq.POLLIN)
            poller.register(self._monitor, zmq.POLLIN)
            try:
                self._sock.send_multipart(frames)
                while True:
                    left_ms = int(1000 * (deadline - time.monotonic()))
                    ready = dict(poller.poll(left_ms)) if left_ms > 0 else {}
                    if self._monitor in ready and self._disconnected():
                        raise ConnectionResetError
                    if self._sock not in ready:
                        if left_ms <= 0 or not ready:
                            raise TimeoutError
                        continue
                    reply = self._sock.recv_multipart()
                    head = decode_header(reply[0])
                    if head.get("id") == request_id:
                        break  # anything else is a stale reply to an earlier request
            except ConnectionResetError as err:
                self.reset()
                raise PeerUnavailableError(
                    f"{self.name} {self.address} closed the connection before answering {header.get('op')!r}"
                ) from err
            except (TimeoutError, zmq.Again) as err:
                self.reset()
                raise PeerUnavailableError(
                    f"{self.name} {self.address} did not answer {header.get('op')!r} within {timeout:g} s"
                ) from err
        if not head.get("ok", False):
            kind = str(head.get("type", "RuntimeError"))
            message = f"{self.name} {self.address}: {head.get('error', 'unknown error')}"
            raise self.errors.get(kind, RuntimeError)(
                message if kind in self.errors else f"{message} ({kind})"
            )
        return head, reply[1:]
