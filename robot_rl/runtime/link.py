"""The actor <-> learner link: what crosses it, and its local transport (ZeroMQ on localhost or a LAN).

Operations (protocol :data:`PROTOCOL`), each a request from an actor (carrying ``token``, see below)
answered by the learner:

- ``hello {actor, client}`` -> ``{acked, version, status}`` plus ``spec`` (the policy's checkpoint
  ``config`` and normalisation ``stats``, as JSON) so the actor can build the same network;
- ``push {actor, client, episode, meta}`` + safetensors frames -> ``{acked, status}``: one recorded episode,
  stored durably before the reply (a resend of a stored episode is acknowledged and ignored); an episode
  whose values leave the run's ranges (:mod:`robot_rl.runtime.episode_guard`: actions outside the action
  box, rewards or observations far outside the data's) is acknowledged but not stored, and the reply adds
  ``rejected``: the one-line reason (the actor logs it and goes on; its own log keeps the episode);
- ``weights {have}`` -> ``{version, status}`` plus the model's safetensors bytes when newer than ``have``;
- ``bye {actor, client, fault}`` -> ``{status}``: the actor has stopped; ``fault`` (optional, a short text)
  says it stopped on a fault it cannot heal (a policy that keeps producing NaN/inf actions).

``status`` is ``{env_steps, updates, allowed_env_steps, caught_up, stop}`` (``caught_up``: the learner has
made every update its UTD ratio allows for the steps it holds). Nothing is pickled: headers are JSON,
arrays safetensors (docs/design.md §4). The Ray backend (:mod:`robot_rl.runtime.ray_backend`) carries the same
operations as Ray actor calls. The learner checks every argument before acting on it
(:mod:`robot_rl.runtime.messages`); with CURVE keys (:mod:`robot_rl.security`) the server also checks that
the actor id of hello, push and bye is the one the client's key is bound to.

Without CURVE keys every request must carry ``token``, the run's secret
(:func:`robot_rl.security.learner_token`: ``<run_dir>/online/<name>_seed<seed>/learner.token``, made by
the learner's first start and kept), on loopback too: any local process can connect to a loopback port,
but only the run's own user can read the file. A request without it, or with another, is refused with
:class:`LinkTokenError` (one line that names the file, never the token) before anything else reads it: no
actor is registered or unregistered, no fault recorded, no episode stored, no weights sent. With CURVE
keys the key stands in for the token (the handshake already admits listed clients only, and ``actorK``
may act only as actor K), so an actor on another machine needs its key files only.

``client`` is the actor's episode log id (:mod:`robot_rl.runtime.actor_claim`): an actor id belongs to the
first client that says hello or pushes as it until that client says bye, so a restarted actor (same log)
is taken back at once, while a second live actor with the same id is refused (:class:`ActorIdError`) and
changes nothing: the holder goes on.
"""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path
from typing import Any, Protocol

import zmq

from robot_rl.security import (
    TOKEN_FILE,
    ClientKeys,
    ServerKeys,
    key_actor,
    learner_token,
    read_token,
    token_matches,
)
from robot_rl.transport import (
    PeerUnavailableError,
    ProtocolError,
    RouterServer,
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
MAX_CLIENT_CHARS = 64
log = logging.getLogger(__name__)
# the tokens of the servers this process runs, by address: a link made in the same process (tests, an
# embedded learner) finds its token here without being told
_SERVED_TOKENS: dict[str, str] = {}


class ActorIdError(RuntimeError):
    """Another actor already holds this actor id (on the learner, or the actor folder on this machine); the
    newcomer is refused and nothing it sent is stored."""


class LinkTokenError(ProtocolError):
    """A request without the learner's run token, or with another one; it was refused unread."""


class LearnerEndpoint(Protocol):
    """What the learner answers; :class:`robot_rl.runtime.learner.Learner` implements it (thread-safe).
    Every method checks its arguments (they come straight off the wire) and raises ProtocolError.
    ``dir`` is the learner's online folder, where the server keeps the run token."""

    max_message_bytes: int
    dir: Path

    def hello(self, actor: int) -> dict[str, Any]: ...

    def push(self, actor: int, episode: int, frames: dict, meta: dict) -> dict[str, Any]: ...

    def weights(self, have: int) -> tuple[dict[str, Any], bytes | None]: ...

    def bye(self, actor: int, fault: str = "") -> dict[str, Any]: ...


class LearnerLink(Protocol):
    """The actor's side of the link (ZeroMQ client or Ray handle). Every call is bounded in time and raises
    ``robot_rl.transport.PeerUnavailableError`` when the learner cannot be reached."""

    def bind_client(self, client: str) -> None:
        """Speak as ``client`` (the actor's episode log id) from now on."""

    def hello(self, actor: int) -> dict[str, Any]: ...

    def push(self, actor: int, episode: int, frames: dict, meta: dict) -> dict[str, Any]: ...

    def weights(self, have: int) -> tuple[dict[str, Any], bytes | None]: ...

    def bye(self, actor: int, fault: str = "") -> dict[str, Any]: ...


class LearnerServer:
    """Serves a :class:`LearnerEndpoint` on a ZeroMQ ROUTER socket from a background thread.

    Args:
        endpoint: the learner; its ``max_message_bytes`` caps every frame (``zmq.MAXMSGSIZE``).
        address: bind address such as ``tcp://127.0.0.1:5560`` (``tcp://*:5560`` for other machines, with
            keys).
        keys: CURVE keys (:mod:`robot_rl.security`); required off loopback. Only listed clients get an
            answer, and ``actor<K>`` may only say hello, push and bye as actor K. Without keys every request
            must carry the run token ``<endpoint.dir>/learner.token`` (read, or made on the first start).

    Raises:
        ConfigError: a non-loopback ``address`` without keys, or a damaged token file (names it).
        OSError: the address cannot be bound (in use, malformed), or the token file cannot be written.
    """

    def __init__(self, endpoint: LearnerEndpoint, address: str, keys: ServerKeys | None = None) -> None:
        self.endpoint = endpoint
        self.router = RouterServer(address, keys, endpoint.max_message_bytes, "online.address")
        self.address = self.router.address
        self.token_file = Path(endpoint.dir) / TOKEN_FILE
        try:
            self.token = None if keys is not None else learner_token(endpoint.dir)
        except Exception:
            self.router.close()
            raise
        if self.token is not None:
            _SERVED_TOKENS[self.address] = self.token
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="learner-server", daemon=True)
        self.holders: dict[int, str] = {}  # actor id -> the client that holds it (served thread only)

    def start(self) -> LearnerServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.router.close()
        _SERVED_TOKENS.pop(self.address, None)

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.router.sock.poll(POLL_MS, zmq.POLLIN):
                continue
            frames, user = self.router.recv()
            envelope, body = split_envelope(frames)
            request_id = None
            try:
                header = decode_header(body[0])
                request_id = header.get("id")
                reply, blob = self._handle(header, body[1:], user)
                frames = [encode_header({"ok": True, "id": request_id, **reply})]
                frames += [blob] if blob is not None else []
            except Exception as err:  # a bad request must never stop the learner
                log.warning("learner: error answering a request: %s", err)
                frames = [encode_header(error_header(err, request_id))]
            if not self.router.send([*envelope, *frames]):
                log.warning("learner: could not deliver a reply (actor gone)")

    def _handle(self, header: dict, rest: list[bytes], user: str | None) -> tuple[dict, bytes | None]:
        op = check_request(header, PROTOCOL, OPS, "learner")
        if self.token is not None and not token_matches(self.token, header.get("token")):
            raise LinkTokenError(
                f"refused {op}: the request lacks this learner's run token; an actor on this machine reads "
                f"it from {self.token_file} (start it with the learner's --run_dir, or copy that file), or "
                "use --security.keys"
            )
        if len(rest) != (1 if op == "push" else 0):
            raise ProtocolError(f"a {op} request needs [header{', frames' if op == 'push' else ''}] parts")
        if op == "weights":
            return self.endpoint.weights(header.get("have"))
        actor = header.get("actor")
        if user is not None and (key_actor(user) is None or key_actor(user) != actor):
            raise PermissionError(f"client key {user!r} may not act as actor {actor!r}")
        client = self._check_holder(actor, header.get("client"))
        if op == "hello":
            reply = self.endpoint.hello(actor)
        elif op == "push":
            frames = decode_arrays(rest[0])
            reply = self.endpoint.push(actor, header.get("episode"), frames, header.get("meta"))
        else:
            reply = self.endpoint.bye(actor, header.get("fault", ""))
            self.holders.pop(actor, None)
            return reply, None
        self.holders[actor] = client  # only once the endpoint accepted the request
        return reply, None

    def _check_holder(self, actor: object, client: object) -> str:
        """``client`` when it may act as ``actor``: it holds it or nobody does.

        Raises:
            ProtocolError: ``client`` is not a string of 1 to :data:`MAX_CLIENT_CHARS` characters.
            ActorIdError: another client holds ``actor`` (it has not said bye)."""
        if not isinstance(client, str) or not 0 < len(client) <= MAX_CLIENT_CHARS:
            raise ProtocolError(f"client must be a string of 1 to {MAX_CLIENT_CHARS} characters")
        holder = self.holders.get(actor) if isinstance(actor, int) else None
        if holder is not None and holder != client:
            # the holder's id stays here: in the reply it would tell a newcomer how to pass for the holder
            log.warning("learner: refused a second actor %s (client %s; held by %s)", actor, client, holder)
            raise ActorIdError(
                f"actor {actor} already belongs to another actor process (another episode log; it has "
                "not said bye); this one is refused and nothing it sent was stored: start it with another "
                "--actor-id, or stop the other one first"
            )
        return client


class ZmqLearnerLink:
    """:class:`LearnerLink` over ZeroMQ to a :class:`LearnerServer` at ``address``; each call waits at most
    ``timeout_s`` (s), longer (``push_timeout_s``) for pushes, which write to disk before answering.
    ``keys``: this actor's CURVE keys, required when the server has keys or is not on loopback (then no
    token is sent). ``token``: the run token, or the ``learner.token`` file that holds it, read when first
    needed (so an actor may start before its learner); None: the token of a :class:`LearnerServer` this
    process serves at ``address``, if any. Who it is (``client_id``, sent with hello, push and bye) is a new
    random id until :meth:`bind_client` (the :class:`robot_rl.runtime.actor.Actor` binds its episode log's
    id).

    Raises (from every call):
        PeerUnavailableError: the learner did not answer in time, or the token file does not exist yet.
        ConfigError: the token file is damaged.
        LinkTokenError: the learner refused the token (another run's, or none).
        ActorIdError (from hello, push, bye): another client holds the actor id."""

    def __init__(
        self,
        address: str,
        timeout_s: float = 2.0,
        push_timeout_s: float = 30.0,
        keys: ClientKeys | None = None,
        token: str | Path | None = None,
    ) -> None:
        errors = {"ActorIdError": ActorIdError, "LinkTokenError": LinkTokenError}
        self.client = RpcClient(address, PROTOCOL, timeout_s, errors, name="learner", keys=keys)
        self.push_timeout_s = push_timeout_s
        self.client_id = uuid.uuid4().hex
        self._token = None if keys is not None else _SERVED_TOKENS.get(address) if token is None else token

    def missing_token_file(self) -> Path | None:
        """The token file this link was given and has not found yet; None once read, or if it has none."""
        return self._token if isinstance(self._token, Path) else None

    def _request(
        self, header: dict[str, Any], blob: bytes | None = None, timeout_s: float | None = None
    ) -> tuple[dict[str, Any], list[bytes]]:
        if isinstance(self._token, Path):
            try:
                self._token = read_token(self._token)
            except FileNotFoundError as err:
                raise PeerUnavailableError(
                    f"learner {self.client.address}: no run token yet: {self._token} does not exist (the "
                    "learner makes it when it starts on this run dir)"
                ) from err
        if self._token is not None:
            header = {**header, "token": self._token}
        return self.client.request(header, blob, timeout_s)

    def bind_client(self, client: str) -> None:
        """Speak as ``client`` (at most :data:`MAX_CLIENT_CHARS` characters) from now on."""
        self.client_id = client

    def hello(self, actor: int) -> dict[str, Any]:
        return self._request({"op": "hello", "actor": actor, "client": self.client_id})[0]

    def push(self, actor: int, episode: int, frames: dict, meta: dict) -> dict[str, Any]:
        header = {"op": "push", "actor": actor, "client": self.client_id, "episode": episode, "meta": meta}
        return self._request(header, encode_arrays(frames), timeout_s=self.push_timeout_s)[0]

    def weights(self, have: int) -> tuple[dict[str, Any], bytes | None]:
        head, rest = self._request({"op": "weights", "have": have})
        return head, (bytes(rest[0]) if rest else None)

    def bye(self, actor: int, fault: str = "") -> dict[str, Any]:
        header = {"op": "bye", "actor": actor, "client": self.client_id}
        header.update({"fault": fault} if fault else {})
        return self._request(header)[0]

    def close(self) -> None:
        self.client.close()
