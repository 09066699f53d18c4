"""Wire format of the policy server (``robot-rl serve``, :mod:`robot_rl.deploy.policy_server`) and its
client (:class:`robot_rl.deploy.remote_policy.RemotePolicy`), protocol 1. No pickle anywhere.

Every message is ZeroMQ multipart ``[header, body?]``, the envelope every robot_rl server speaks
(:mod:`robot_rl.transport`): ``header`` is UTF-8 JSON, ``body`` a msgpack map.

- ``{"op": "info"}`` -> header ``{"ok": true, "spec": {...}}``: the checkpoint's observation spec
  (:class:`PolicySpec` as a dict), horizon, action dim and model id.
- ``{"op": "infer", "token"?: str, "seed"?: int}`` + body ``{"<observation key>": <array>, ...,
  "task"?: str}``: one (unbatched) observation with LeRobot keys -> header ``{"ok": true, "horizon": h,
  "action_dim": d, "model_id": str, "inference_ms": float}`` + body ``{"chunk": <array (h, d) float32>}``
  in robot units. ``seed`` makes the chunk reproducible (the server seeds torch before sampling).
- Any error -> header ``{"ok": false, "error": message, "type": class name}`` and no body.

Bodies are :mod:`robot_rl.hardware.wire` messages, the robot server's format too: an array is the msgpack
map ``{"__ndarray__": true, "dtype": "<f4", "shape": [..], "data": <raw C-order bytes>}`` (openpi's
layout; bool, integer and float dtypes only). Any language with a msgpack library can speak this
protocol. msgpack rather than the critic server's safetensors blob: one self-describing map carries arrays
*and* the task string, with no header parsing of its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from robot_rl.hardware.wire import pack, unpack
from robot_rl.keys import TASK, is_image_key
from robot_rl.transport import ProtocolError

PROTOCOL = 1
OPS = ("info", "infer", "ping")
DEFAULT_ADDRESS = "tcp://127.0.0.1:5580"


class PolicyTokenError(PermissionError):
    """The policy server refused a request: it carries no token or the wrong one (``robot-rl serve
    --token``; the client's ``deploy.token``). Raised by the server in its error reply and re-raised by
    :class:`~robot_rl.deploy.remote_policy.RemotePolicy` with the address and the fix."""


class PolicyInputError(ValueError):
    """A request or a reply that does not fit the policy's spec or the wire format; the message names the
    key (or field), the expected and the received value."""


def encode_body(body: dict[str, Any]) -> bytes:
    """msgpack bytes of a map of str -> numpy array / str / int / float (:func:`robot_rl.hardware.wire.pack`).

    Raises:
        TypeError: a value msgpack cannot carry.
    """
    return pack(body)


def decode_body(blob: bytes) -> dict[str, Any]:
    """Inverse of :func:`encode_body` (:func:`robot_rl.hardware.wire.unpack`).

    Raises:
        PolicyInputError: not msgpack, not a map with string keys, or a malformed array.
    """
    try:
        return unpack(blob)
    except ProtocolError as err:
        raise PolicyInputError(f"body: {err}") from err


@dataclass(frozen=True)
class PolicySpec:
    """What a served checkpoint consumes and produces.

    ``obs_shapes``: observation key -> per-sample shape (images (H, W, 3) uint8, vectors float32);
    ``tasks``: the instruction vocabulary (empty: the policy ignores ``task``); ``horizon`` h and
    ``action_dim`` d of the (h, d) float32 chunk in robot units; ``model_id``: checkpoint folder name and
    the first 12 hex digits of the SHA-256 of its weights; ``prev_action_start``: the checkpoint's
    ``data.prev_action_start``, what the client feeds as ``observation.prev_action`` at an episode's first
    step when the policy reads it (``robot_rl.sources.PrevActionSource``); ``prev_action_steps``: the
    checkpoint's ``data.prev_action_steps`` k, how many past commands that input reads (k·d values: the
    last command and the k − 1 changes before it; 1 for a checkpoint or server that predates the key);
    ``open_vocabulary``: the policy reads free text (a VLA, ``policy.kind=vla``): any ``task`` string is
    passed to it (an instruction it cannot read, e.g. longer than its ``policy.vla.max_text_tokens``, gets
    an error reply) and ``tasks`` lists the ones it was trained on, for information; without it a ``task``
    outside ``tasks`` is refused.
    """

    obs_shapes: dict[str, tuple[int, ...]]
    tasks: tuple[str, ...]
    horizon: int
    action_dim: int
    model_id: str
    prev_action_start: str = "zeros"
    open_vocabulary: bool = False
    prev_action_steps: int = 1

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (tuples become lists)."""
        out = asdict(self)
        out["obs_shapes"] = {k: list(v) for k, v in self.obs_shapes.items()}
        out["tasks"] = list(self.tasks)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PolicySpec:
        """Inverse of :meth:`as_dict`.

        Raises:
            PolicyInputError: a field is missing or has the wrong type.
        """
        try:
            return cls(
                {str(k): tuple(int(s) for s in v) for k, v in d["obs_shapes"].items()},
                tuple(str(t) for t in d["tasks"]),
                int(d["horizon"]),
                int(d["action_dim"]),
                str(d["model_id"]),
                str(d.get("prev_action_start", "zeros")),
                bool(d.get("open_vocabulary", False)),
                int(d.get("prev_action_steps", 1)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise PolicyInputError(f"policy spec {d!r} is malformed: {err!r}") from err

    def expected_dtype(self, key: str) -> np.dtype:
        return np.dtype(np.uint8) if is_image_key(key) else np.dtype(np.float32)

    def check_observation(self, body: dict[str, Any]) -> tuple[dict[str, np.ndarray], str | None]:
        """Check one unbatched observation against the spec -> (arrays of the spec's keys, task or None).

        Keys the policy does not read are ignored (as :func:`robot_rl.policies.check_compatible` does).

        Raises:
            PolicyInputError: a key is missing or not an array, has another shape or dtype (images uint8,
                vectors float32), a vector holds NaN/inf, or ``task`` is missing, not a string or not in
                the vocabulary (when the policy has one); the message names the key and both values.
        """
        obs = {}
        for key, shape in self.obs_shapes.items():
            if key not in body:
                raise PolicyInputError(
                    f"observation {key!r} is missing; the policy reads {sorted(self.obs_shapes)}"
                )
            value = body[key]
            if not isinstance(value, np.ndarray):
                raise PolicyInputError(f"observation {key!r} must be an array, got {type(value).__name__}")
            if value.shape != shape:
                raise PolicyInputError(
                    f"observation {key!r} has shape {value.shape}; the policy expects {shape} (one "
                    "unbatched observation)"
                )
            want = self.expected_dtype(key)
            if value.dtype != want:
                raise PolicyInputError(f"observation {key!r} has dtype {value.dtype}; expected {want}")
            if want.kind == "f" and not np.isfinite(value).all():
                raise PolicyInputError(f"observation {key!r} holds NaN or inf")
            obs[key] = value
        task = body.get(TASK)
        if task is not None and not isinstance(task, str):
            raise PolicyInputError(f"'task' must be a string, got {type(task).__name__}")
        if self.tasks and not self.open_vocabulary and task not in self.tasks:
            raise PolicyInputError(
                f"'task' {task!r} is not one the policy was trained on: {list(self.tasks)}"
            )
        return obs, task

    def check_chunk(self, chunk: Any, where: str) -> np.ndarray:
        """A reply's chunk -> (h, d) float32, checked.

        Raises:
            PolicyInputError: not an array, another shape or dtype, or NaN/inf; names ``where`` (the
                server address) and both shapes.
        """
        want = (self.horizon, self.action_dim)
        if not isinstance(chunk, np.ndarray) or chunk.shape != want or chunk.dtype != np.float32:
            got = (chunk.shape, str(chunk.dtype)) if isinstance(chunk, np.ndarray) else type(chunk).__name__
            raise PolicyInputError(
                f"policy server {where} replied with a chunk {got}; expected shape {want} float32 "
                f"(horizon {self.horizon}, action dim {self.action_dim})"
            )
        if not np.isfinite(chunk).all():
            raise PolicyInputError(f"policy server {where} replied with NaN/inf actions; not executed")
        return chunk
