"""``RemotePolicy``: the client of a policy server (``robot-rl serve``), usable wherever the in-process
policy is: it is a :class:`robot_rl.rollout.ChunkSource` like :class:`robot_rl.sources.AgentSource`
(``reset(env_id, env_seed)``, ``__call__(obs, env_ids) -> (k, h, d)``), so the rollout loop, the online
actor and a ``RobotEnv`` control loop run unchanged on a policy served from another process or machine.
Its :meth:`RemotePolicy.infer` (one observation -> one (h, d) chunk) is what an asynchronous executor
(:class:`robot_rl.executor.AsyncChunkExecutor`) calls in its worker thread.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from robot_rl.config import ConfigError
from robot_rl.security import ClientKeys, load_client_keys
from robot_rl.transport import PeerUnavailableError, RpcClient

from .policy_protocol import (
    DEFAULT_ADDRESS,
    PROTOCOL,
    PolicyInputError,
    PolicySpec,
    PolicyTokenError,
    decode_body,
    encode_body,
)


class PolicyServerUnavailable(PeerUnavailableError):
    """No answer from the policy server within the timeout: not running, unreachable, stuck, or a CURVE
    key it does not accept. The message names the address."""


class RemotePolicy:
    """Client of one policy server.

    Args:
        address: the server's endpoint (``tcp://127.0.0.1:5580``); off loopback ``keys`` are required.
        token: the server's shared token (``robot-rl serve --token``), or empty.
        timeout_s: longest wait for each reply; the first call waits for the server's spec (``info``).
        keys: CURVE client keys (:func:`robot_rl.security.load_client_keys`).
        low, high: optional action box (d,) in robot units: every chunk is clipped to it, as
            :class:`robot_rl.sources.AgentSource` clips to the env's action space.
        seed: when set, each request carries a seed made of ``seed``, the episode's env seed (from
            ``reset(env_id, env_seed)``) and the request's index in the episode, so an episode's chunks
            depend on its env seed only (as with the in-process source); None: the server's own RNG.

    The server is reached lazily; a restarted server is found again on the next call (ZeroMQ reconnects,
    and after a timeout the socket is replaced). Not thread-safe beyond one call at a time (calls are
    serialised).

    Raises (calls):
        PolicyServerUnavailable: no reply within ``timeout_s`` (message: address and timeout).
        PolicyInputError (a ValueError): the server refused the observation (names the key), or replied
            with a chunk of the wrong shape/dtype or with NaN/inf.
        PolicyTokenError (a PermissionError): the server wants a token and this one is missing or wrong
            (names the address and ``deploy.token``).
    """

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        token: str = "",
        timeout_s: float = 2.0,
        keys: ClientKeys | None = None,
        low: np.ndarray | None = None,
        high: np.ndarray | None = None,
        seed: int | None = None,
    ) -> None:
        errors: dict[str, type[Exception]] = {
            "PolicyInputError": PolicyInputError,
            "PolicyTokenError": PolicyTokenError,
            "PermissionError": PolicyTokenError,  # servers before PolicyTokenError
            "ValueError": ValueError,
        }
        self.client = RpcClient(address, PROTOCOL, timeout_s, errors, "policy server", keys)
        self.address, self.token, self.seed = address, token, seed
        self.low, self.high = low, high
        self._spec: PolicySpec | None = None
        self._episodes: dict[int, list[int]] = {}  # env id -> [env seed, requests so far]
        self.last_reply: dict[str, Any] = {}

    @classmethod
    def from_config(
        cls, cfg, low: np.ndarray | None = None, high: np.ndarray | None = None, seed: int | None = None
    ) -> RemotePolicy:
        """From a PipelineConfig: ``deploy.server`` / ``token`` / ``timeout_s``, and the client key
        ``deploy.client_key`` of ``security.keys`` when set; ``low``, ``high`` and ``seed`` as in the
        constructor.

        Raises:
            ConfigError: ``deploy.server`` is empty, or the key files are missing (names the path).
        """
        d = cfg.deploy
        if not d.server:
            raise ConfigError("deploy.server is empty: set it to the address of `robot-rl serve`")
        keys = load_client_keys(cfg.security.keys, d.client_key) if cfg.security.keys else None
        return cls(d.server, d.token, d.timeout_s, keys, low, high, seed)

    def _request(self, header: dict[str, Any], blob: bytes | None = None) -> tuple[dict, list[bytes]]:
        if self.token:
            header = {**header, "token": self.token}
        try:
            return self.client.request(header, blob)
        except PolicyTokenError as err:
            given = "a wrong token" if self.token else "no token"
            raise PolicyTokenError(
                f"policy server {self.address} refused the request: it sent {given}; set deploy.token to "
                "the token the server was started with (robot-rl serve --token / $ROBOT_RL_SERVE_TOKEN)"
            ) from err
        except PeerUnavailableError as err:
            raise PolicyServerUnavailable(
                f"{err}: is `robot-rl serve` running there (and reachable with these keys)?"
            ) from err

    @property
    def spec(self) -> PolicySpec:
        """The served checkpoint's :class:`PolicySpec` (asked once, then cached)."""
        if self._spec is None:
            head, _ = self._request({"op": "info"})
            self._spec = PolicySpec.from_dict(head.get("spec") or {})
        return self._spec

    @property
    def horizon(self) -> int:
        return self.spec.horizon

    def infer(self, obs: dict[str, Any], seed: int | None = None) -> np.ndarray:
        """One unbatched observation (LeRobot keys -> arrays, plus ``task``) -> chunk (h, d) float32 in
        robot units, clipped to [low, high] when given. ``last_reply`` keeps the reply's metadata
        (horizon, action_dim, model_id, inference_ms)."""
        spec = self.spec
        body = {k: np.asarray(v) for k, v in obs.items() if k in spec.obs_shapes}
        if "task" in obs:
            body["task"] = str(obs["task"])
        header: dict[str, Any] = {"op": "infer"}
        if seed is not None:
            header["seed"] = int(seed)
        head, frames = self._request(header, encode_body(body))
        if len(frames) != 1:
            raise PolicyInputError(f"policy server {self.address} sent {len(frames)} body frames; expected 1")
        chunk = spec.check_chunk(decode_body(frames[0]).get("chunk"), self.address)
        self.last_reply = {k: head.get(k) for k in ("horizon", "action_dim", "model_id", "inference_ms")}
        if self.low is not None and self.high is not None:
            chunk = np.clip(chunk, self.low, self.high)
        return np.array(chunk, dtype=np.float32)

    # --- ChunkSource (robot_rl.rollout) ---------------------------------------------------------------
    def reset(self, env_id: int, env_seed: int) -> None:
        """Start an episode in sub-env ``env_id`` (restarts its request seeds)."""
        self._episodes[int(env_id)] = [int(env_seed), 0]

    def _next_seed(self, env_id: int) -> int | None:
        if self.seed is None:
            return None
        episode = self._episodes.setdefault(int(env_id), [0, 0])
        episode[1] += 1
        return (self.seed * 1_000_003 + episode[0] * 1009 + episode[1] - 1) % 2**31

    def chunk(self, env_id: int, obs: dict[str, Any]) -> np.ndarray:
        """The next chunk (h, d) of sub-env ``env_id``'s episode for one unbatched observation: :meth:`infer`
        with the episode's next request seed (what an executor's worker calls)."""
        return self.infer(obs, self._next_seed(int(env_id)))

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        """Batched observations (k, ...) of sub-envs ``env_ids`` -> chunks (k, h, d) float32, one request
        per row."""
        rows = [
            self.chunk(int(env_id), {key: value[j] for key, value in obs.items()})
            for j, env_id in enumerate(env_ids)
        ]
        return np.stack(rows)

    def close(self) -> None:
        self.client.close()
