"""Who may talk to the learner and the critic server: ZeroMQ CURVE keys (``zmq.auth``) (``robot-rl keys``).

A key folder (``security.keys``) holds::

    server.key            the servers' public key (every client needs it)
    server.key_secret     the servers' secret key (learner and critic server machines only)
    clients/<name>.key    public keys of the clients the servers accept
    <name>.key_secret     each client's key pair (copy it, with server.key, to that client's machine)

A client named ``actor<K>`` may act as actor K of the learner and no other; any accepted client may
download weights and query the critic server. With keys, traffic is encrypted and a client whose key is
not in ``clients/`` gets no answer at all (the CURVE handshake fails before any message is read).
Without keys a server may only bind a loopback address (``127.0.0.1``, ``localhost``, ``::1``) or an
``ipc://`` / ``inproc://`` endpoint; binding ``tcp://*`` or a LAN address needs keys (:func:`check_address`).

Without keys, loopback is not trusted either: any local process can connect. The online learner then
answers only requests that carry its run token (:func:`learner_token`), a random secret kept in the run's
online folder (``<run_dir>/online/<name>_seed<seed>/learner.token``, mode 0600), which actors on the same
machine read from their shared run dir.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.utils import z85

from robot_rl.config import ConfigError

SERVER = "server"
CLIENTS = "clients"
ACTOR_PREFIX = "actor"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TOKEN_FILE = "learner.token"
_TOKEN = re.compile(r"^[0-9a-f]{64}$")


def actor_key_name(actor: int) -> str:
    """The key name that carries actor id ``actor`` (``actor3``)."""
    return f"{ACTOR_PREFIX}{actor}"


def key_actor(name: str | None) -> int | None:
    """The actor id a key name is bound to (``actor3`` -> 3), or None for any other name."""
    if name and name.startswith(ACTOR_PREFIX) and name[len(ACTOR_PREFIX) :].isdigit():
        return int(name[len(ACTOR_PREFIX) :])
    return None


def make_keys(folder: str | Path, names: list[str]) -> list[Path]:
    """Create the server key pair and one client key pair per name in ``folder`` (see the module doc).

    Existing keys are kept, never overwritten (replacing one would lock out its holders), so the command
    can be run again to add clients. Secret files are made readable by their owner only (0600).

    Returns:
        the files written.

    Raises:
        ConfigError: a name is not 1-64 letters, digits, ``_`` or ``-``, or is ``server``.
    """
    folder = Path(folder)
    for name in names:
        if not _NAME.match(name) or name == SERVER:
            raise ConfigError(f"key name {name!r}: use 1-64 letters, digits, '_' or '-' (and not {SERVER!r})")
    (folder / CLIENTS).mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    written: list[Path] = []
    if not (folder / f"{SERVER}.key_secret").is_file():
        written += [Path(p) for p in zmq.auth.create_certificates(folder, SERVER)]
    for name in names:
        if (folder / f"{name}.key_secret").is_file():
            continue
        public, secret = (Path(p) for p in zmq.auth.create_certificates(folder, name))
        public.replace(folder / CLIENTS / public.name)
        written += [folder / CLIENTS / public.name, secret]
    for path in written:
        if path.name.endswith(".key_secret"):
            os.chmod(path, 0o600)
    return written


def _load(path: Path, fix: str) -> tuple[bytes, bytes | None]:
    if not path.is_file():
        raise ConfigError(f"security.keys: {path} not found; {fix}")
    try:
        return zmq.auth.load_certificate(path)
    except Exception as err:  # pyzmq raises ValueError/IOError on a damaged file
        raise ConfigError(f"security.keys: {path} is not a ZeroMQ certificate: {err}") from err


@dataclass(frozen=True)
class ServerKeys:
    """A server's CURVE key pair (z85 bytes) and the clients it accepts: z85 public key -> key name."""

    public: bytes
    secret: bytes
    clients: dict[bytes, str]


@dataclass(frozen=True)
class ClientKeys:
    """A client's CURVE key pair and the server's public key (z85 bytes); ``name`` is the key's name."""

    name: str
    public: bytes
    secret: bytes
    server: bytes


def load_server_keys(folder: str | Path) -> ServerKeys:
    """The server pair and accepted client keys of a ``robot-rl keys`` folder.

    Raises:
        ConfigError: ``server.key_secret`` is missing or damaged, or ``clients/`` holds no key (names the
            path and the command that makes them).
    """
    folder = Path(folder)
    fix = f"make keys with: robot-rl keys {folder} --actors N"
    public, secret = _load(folder / f"{SERVER}.key_secret", fix)
    if secret is None:
        raise ConfigError(f"security.keys: {folder / f'{SERVER}.key_secret'} holds no secret key")
    clients = {_load(p, fix)[0]: p.stem for p in sorted((folder / CLIENTS).glob("*.key"))}
    if not clients:
        raise ConfigError(f"security.keys: no client keys in {folder / CLIENTS}; {fix}")
    return ServerKeys(public, secret, clients)


def load_client_keys(folder: str | Path, name: str) -> ClientKeys:
    """Client ``name``'s pair and the server's public key from a ``robot-rl keys`` folder.

    Raises:
        ConfigError: ``<name>.key_secret`` or ``server.key`` is missing or damaged (names the path).
    """
    folder = Path(folder)
    public, secret = _load(
        folder / f"{name}.key_secret", f"make it with: robot-rl keys {folder} --clients {name}"
    )
    if secret is None:
        raise ConfigError(f"security.keys: {folder / f'{name}.key_secret'} holds no secret key")
    server, _ = _load(folder / f"{SERVER}.key", f"copy it from the folder made by robot-rl keys to {folder}")
    return ClientKeys(name, public, secret, server)


def is_loopback(address: str) -> bool:
    """Whether a ZeroMQ endpoint stays on this machine: ``tcp://`` on 127.0.0.0/8, ``localhost`` or
    ``::1``, or an ``ipc://`` / ``inproc://`` endpoint. ``tcp://*``, ``0.0.0.0``, interface names and LAN
    addresses are not."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        return False
    if scheme in ("ipc", "inproc"):
        return True
    if ";" in rest:  # a source;destination pair: refuse to guess
        return False
    host = rest.rsplit(":", 1)[0] if ":" in rest else rest
    return is_loopback_host(host.removeprefix("[").removesuffix("]"))


def is_loopback_host(host: str) -> bool:
    """Whether a host name or IP address is this machine: ``localhost``, 127.0.0.0/8 or ``::1``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_address(
    address: str,
    keys: ServerKeys | ClientKeys | None,
    setting: str,
    bind: bool,
    keys_setting: str = "security.keys",
) -> None:
    """Refuse to serve on (``bind``) or connect to a non-loopback ``address`` without keys.

    Raises:
        ConfigError: one line naming ``setting``, the address and ``keys_setting`` (where keys go).
    """
    if keys is None and "://" in address and not is_loopback(address):
        verb = "binds" if bind else "connects to"
        raise ConfigError(
            f"{setting}={address} {verb} a non-loopback address: set {keys_setting} to a folder made by "
            "`robot-rl keys` (ZeroMQ CURVE), or use tcp://127.0.0.1"
        )


class _Clients:
    """ZAP credentials provider: a client is accepted when its public key is in ``clients``."""

    def __init__(self, clients: dict[bytes, str]) -> None:
        self.clients = clients

    def callback(self, domain: str, key: bytes) -> bool:
        return key in self.clients


class _Authenticator:
    """A ZAP handler thread for one server context; names each accepted client by its key's name."""

    def __init__(self, context: zmq.Context, keys: ServerKeys) -> None:
        from zmq.auth.thread import ThreadAuthenticator

        names = keys.clients

        class Named(ThreadAuthenticator):
            def curve_user_id(self, client_public_key: bytes) -> str:
                return names.get(z85.encode(client_public_key), "")

        self.thread = Named(context)
        self.thread.start()
        self.thread.configure_curve_callback("*", _Clients(names))

    def stop(self) -> None:
        self.thread.stop()


def secure_server_socket(context: zmq.Context, sock: zmq.Socket, keys: ServerKeys) -> _Authenticator:
    """Make ``sock`` (before it binds) a CURVE server that accepts ``keys.clients`` only; returns the
    authenticator to ``stop()`` when the server closes. Messages from a client carry its key name as the
    ``User-Id`` frame property."""
    auth = _Authenticator(context, keys)
    sock.curve_secretkey, sock.curve_publickey = keys.secret, keys.public
    sock.curve_server = True
    return auth


def secure_client_socket(sock: zmq.Socket, keys: ClientKeys) -> None:
    """Make ``sock`` (before it connects) a CURVE client of the server whose public key is ``keys.server``."""
    sock.curve_secretkey, sock.curve_publickey, sock.curve_serverkey = keys.secret, keys.public, keys.server


def learner_token(folder: str | Path) -> str:
    """The run token kept in ``folder/learner.token``: read, or made when absent (64 random hex digits,
    mode 0600, written to a private temporary file and linked into place, so a reader never sees half of
    it and two learners starting at once share one). Kept across restarts, so actors reconnect.

    Raises:
        ConfigError: the file is damaged (names it and the fix).
        OSError: the file cannot be written (a read-only or full run dir; names the path).
    """
    path = Path(folder) / TOKEN_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{TOKEN_FILE}.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        try:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
                out.write(secrets.token_hex(32) + "\n")
            os.link(tmp, path)
        except FileExistsError:
            pass  # another learner made it first: share it
        except OSError as err:  # a full disk's error carries no file name of its own
            raise OSError(err.errno, err.strerror, str(path)) from err
        finally:
            tmp.unlink(missing_ok=True)
    return read_token(path)


def read_token(path: str | Path) -> str:
    """The run token in ``path`` (a ``learner.token`` file made by :func:`learner_token`).

    Raises:
        FileNotFoundError: there is no such file (the learner has not started on this run dir yet).
        ConfigError: the file is not a token (names it and the fix).
    """
    token = Path(path).read_text(errors="replace").strip()
    if not _TOKEN.match(token):
        raise ConfigError(
            f"{path} is not a learner token (64 hex digits): delete it, restart the learner (it makes a new "
            "one) and copy the new file to every actor that holds a copy"
        )
    return token


def token_matches(expected: str, given: object) -> bool:
    """Whether ``given`` (off the wire: any JSON value) is the token ``expected``, compared in constant
    time."""
    return isinstance(given, str) and hmac.compare_digest(expected.encode(), given.encode(errors="replace"))
