"""Policy server: one process holds a trained checkpoint and answers action-chunk requests over ZeroMQ
(``robot-rl serve --checkpoint DIR``), so the robot's control loop can run on a small computer, or in
another Python environment, while the policy runs on a GPU machine. Wire format:
:mod:`robot_rl.deploy.policy_protocol`; client: :class:`robot_rl.deploy.remote_policy.RemotePolicy`.

In the spirit of openpi's websocket policy server (``scripts/serve_policy.py``), with these choices:

- ZeroMQ, not websockets: pyzmq is already a dependency, and it gives the project's CURVE authentication
  and encryption (:mod:`robot_rl.security`, the same keys as the learner and the critic server),
  ``MAXMSGSIZE`` enforced before a frame is buffered, and automatic reconnection of the client after a
  server restart. A websocket server would need a new dependency and its own TLS and auth set-up.
- It binds loopback by default; any other address needs a CURVE key folder. An optional shared token
  (``--token``) guards a loopback server against other local users and processes.
- Every request is checked against the checkpoint's spec (keys, shapes, dtypes, finite values, task
  vocabulary) before the model sees it; a bad request gets an error reply naming the key, and the server
  keeps serving.
- Requests are answered one at a time in arrival order (one robot per server; inference is the cost).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zmq

from robot_rl.data.prev_action import prev_action_start, prev_action_steps
from robot_rl.policies.factory import load_agent
from robot_rl.policies.vla import InstructionError
from robot_rl.security import ServerKeys
from robot_rl.transport import (
    ProtocolError,
    RouterServer,
    check_request,
    decode_header,
    encode_header,
    error_header,
    split_envelope,
)

from .policy_protocol import (
    OPS,
    PROTOCOL,
    PolicyInputError,
    PolicySpec,
    PolicyTokenError,
    decode_body,
    encode_body,
)

POLL_MS = 100  # how often an idle server checks its stop event
log = logging.getLogger(__name__)


def model_id(checkpoint: str | Path) -> str:
    """``<folder name>@<first 12 hex digits of the SHA-256 of model.safetensors>``: which weights answer."""
    path = Path(checkpoint)
    digest = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()[:12]
    return f"{path.resolve().name}@{digest}"


class ServedPolicy:
    """A loaded agent in eval mode and its :class:`PolicySpec`; :meth:`infer` maps one checked observation
    to one chunk (h, d) float32 in robot units (``agent.act``, docs/algorithms.md §2-4)."""

    def __init__(self, agent, spec: PolicySpec, device: str = "cpu") -> None:
        self.agent, self.spec, self.device = agent, spec, device

    @classmethod
    def load(cls, checkpoint: str | Path, device: str = "cpu") -> ServedPolicy:
        """Rebuild the agent saved in ``checkpoint`` (any method: bc, qc, qc_fql, sac).

        Raises:
            FileNotFoundError / CheckpointError: as :func:`robot_rl.policies.load_agent` (names the file).
        """
        agent, header = load_agent(checkpoint, device=device, evaluate=True)  # SAC: the mean action
        config = header.config
        keys = config.get("obs_keys") or sorted(config["obs_shapes"])
        policy_cfg = config.get("policy") or {}
        spec = PolicySpec(
            {k: tuple(int(s) for s in config["obs_shapes"][k]) for k in keys},
            tuple(policy_cfg.get("tasks") or ()),
            int(agent.policy.horizon),
            int(config["action_dim"]),
            model_id(checkpoint),
            prev_action_start(config),
            open_vocabulary=policy_cfg.get("kind") == "vla",
            prev_action_steps=prev_action_steps(config),
        )
        return cls(agent, spec, device)

    @torch.no_grad()
    def infer(
        self, obs: dict[str, np.ndarray], task: str | None = None, seed: int | None = None
    ) -> np.ndarray:
        """One observation (checked by :meth:`PolicySpec.check_observation`) -> chunk (h, d) float32.

        ``seed``: seeds torch's global generator first, so the chunk equals an in-process
        ``torch.manual_seed(seed); agent.act(obs)``.

        Raises:
            ValueError: the policy produced NaN/inf (never sent).
            PolicyInputError: a VLA cannot read the instruction (longer than it reads, or none).
        """
        batch: dict[str, Any] = {k: torch.from_numpy(np.array(v)[None]) for k, v in obs.items()}
        batch = {k: v.to(self.device) for k, v in batch.items()}
        if self.spec.tasks or (self.spec.open_vocabulary and task is not None):
            batch["task"] = [task]  # a VLA without one reads its policy.vla.instruction
        if seed is not None:
            torch.manual_seed(seed)
        try:
            return self.agent.act(batch)[0].float().cpu().numpy()
        except ValueError as err:
            if self.spec.open_vocabulary:  # a VLA that cannot read the instruction: the client's to fix
                if isinstance(err, InstructionError):
                    raise PolicyInputError(str(err)) from err
            raise


class _Handler:
    """Answers one request at a time: checks the token, the op and the observation, runs the policy."""

    def __init__(self, policy: ServedPolicy, token: str, delay_s: float) -> None:
        self.policy, self.token, self.delay_s = policy, token, delay_s
        self.requests = self.errors = 0

    def __call__(self, body_frames: list[bytes]) -> list[bytes]:
        request_id = None
        try:
            if len(body_frames) not in (1, 2):
                raise ProtocolError(f"expected [header, body] frames, got {len(body_frames)} frames")
            header = decode_header(body_frames[0])
            request_id = header.get("id")
            op = check_request(header, PROTOCOL, OPS, "policy server")
            if self.token and not hmac.compare_digest(str(header.get("token", "")), self.token):
                raise PolicyTokenError("refused: missing or wrong token (robot-rl serve --token)")
            if op == "ping":
                return [encode_header({"ok": True, "id": request_id})]
            if op == "info":
                return [encode_header({"ok": True, "id": request_id, "spec": self.policy.spec.as_dict()})]
            return self.infer(header, body_frames, request_id)
        except Exception as err:  # a bad request must never stop the server
            self.errors += 1
            log.info("policy server: error reply %s: %s", type(err).__name__, err)
            return [encode_header(error_header(err, request_id))]

    def infer(self, header: dict, body_frames: list[bytes], request_id: Any) -> list[bytes]:
        if len(body_frames) != 2:
            raise ProtocolError("an infer request needs [header, body] frames")
        seed = header.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise PolicyInputError(f"'seed' must be an integer >= 0, got {seed!r}")
        obs, task = self.policy.spec.check_observation(decode_body(body_frames[1]))
        start = time.perf_counter()
        chunk = self.policy.infer(obs, task, seed)
        if self.delay_s:
            time.sleep(self.delay_s)
        elapsed_ms = 1000.0 * (time.perf_counter() - start)
        spec = self.policy.spec
        self.requests += 1
        reply = {"ok": True, "id": request_id, "horizon": spec.horizon, "action_dim": spec.action_dim}
        reply.update(model_id=spec.model_id, inference_ms=elapsed_ms)
        return [encode_header(reply), encode_body({"chunk": chunk})]


def serve_policy(
    policy: ServedPolicy,
    address: str = "tcp://127.0.0.1:5580",
    keys: ServerKeys | None = None,
    token: str = "",
    max_message_mb: float = 64.0,
    delay_ms: float = 0.0,
    stop: threading.Event | None = None,
    ready: Callable[[str], Any] | None = None,
) -> dict[str, int]:
    """Serve ``policy`` on a ZeroMQ ROUTER socket until ``stop`` is set (blocking); returns
    ``{"chunks": chunks served, "errors": error replies}``.

    Args:
        address: endpoint to bind; ``tcp://127.0.0.1:0`` picks a free port (``ready`` receives it).
        keys: CURVE keys (:mod:`robot_rl.security`); only listed clients get through. Required unless
            ``address`` is loopback.
        token: when non-empty, every request must carry it (``hmac.compare_digest``); others are refused
            with a :class:`PolicyTokenError` (a PermissionError) reply.
        max_message_mb: ``zmq.MAXMSGSIZE`` in MiB: a larger frame disconnects its sender before it is
            buffered (no reply).
        delay_ms: added to every inference (testing and benchmarks: an artificially slow policy).
        stop: set it to return within about 0.1 s; None serves until interrupted.
        ready: called once with the bound endpoint when the server accepts requests.

    Raises:
        ValueError: ``max_message_mb`` < 1 or ``delay_ms`` < 0.
        ConfigError: a non-loopback ``address`` without keys.
        OSError: the address cannot be bound (names it).
    """
    if max_message_mb < 1 or delay_ms < 0:
        raise ValueError(f"max_message_mb ({max_message_mb}) must be >= 1 and delay_ms ({delay_ms}) >= 0")
    stop = stop or threading.Event()
    router = RouterServer(address, keys, int(max_message_mb * 2**20), "policy server address")
    handler = _Handler(policy, token, delay_ms / 1000.0)
    log.info("policy server: %s on %s", policy.spec.model_id, router.address)
    try:
        if ready is not None:
            ready(router.address)
        while not stop.is_set():
            if not router.sock.poll(POLL_MS, zmq.POLLIN):
                continue
            frames, _ = router.recv()
            envelope, body = split_envelope(frames)
            if not router.send([*envelope, *handler(body)]):
                log.warning("policy server: could not deliver a reply (client gone)")
    finally:
        router.close()
    return {"chunks": handler.requests, "errors": handler.errors}
