"""Checks of everything an actor sends the learner, shared by the ZeroMQ link and the Ray backend.

:class:`~robot_rl.runtime.learner.Learner` runs them before it stores or counts anything, so a rejected
message changes nothing: no episode is stored, no env step counted, no metric updated, no actor
registered. A pushed episode must match the run's :func:`~robot_rl.runtime.replay.episode_spec` (per
frame) and :func:`~robot_rl.runtime.replay.final_spec` (once per episode: the final observation) exactly
(every key, dtype and shape, no other key), hold 1 to ``max_episode_steps`` frames, finite floats and
``next.done`` on the last frame only, and come with the meta :func:`episode_meta` computes from those
frames (only ``version`` is the actor's own). Ids are checked for type and range; whether an
actor may use an id is the link's business (:mod:`robot_rl.security`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from robot_rl import keys
from robot_rl.config import PipelineConfig
from robot_rl.runtime.metrics import episode_meta
from robot_rl.transport import ProtocolError

MAX_ACTOR = 2**31 - 1  # stored as int32
MAX_EPISODE = 2**62
MAX_VERSION = 2**62
META_TYPES: dict[str, tuple[type, ...]] = {
    "success": (bool,),
    "terminal": (bool,),
    "steps": (int,),
    "intervention_steps": (int,),
    "return": (float, int),
    "cycle_time_s": (float, int, type(None)),
    "version": (int,),
}
HEADER_BYTES = 1 << 20  # room for the JSON header and the safetensors index of one push


def max_episode_steps(cfg: PipelineConfig) -> int:
    """``online.max_episode_steps``, or ``env.max_episode_steps`` when it is 0."""
    return cfg.online.max_episode_steps or cfg.env.max_episode_steps


def _nbytes(spec: dict) -> int:
    return sum(
        int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for shape, dtype in spec.values()
    )


def max_push_bytes(spec: dict, once: dict, max_steps: int) -> int:
    """Bytes of the largest valid push frame: ``max_steps`` frames of ``spec``, one value per key of
    ``once``, plus :data:`HEADER_BYTES`."""
    return max_steps * _nbytes(spec) + _nbytes(once) + HEADER_BYTES


def check_int(value: Any, name: str, low: int, high: int) -> int:
    """``value`` as an int in [low, high].

    Raises:
        ProtocolError: not an int (bools and floats are refused) or out of range; names ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ProtocolError(f"{name} must be an integer, got {type(value).__name__} {value!r:.40}")
    if not low <= int(value) <= high:
        raise ProtocolError(f"{name}={value} is out of range [{low}, {high}]")
    return int(value)


MAX_FAULT_CHARS = 500


def check_fault(value: Any) -> str:
    """A ``bye``'s fault text: a str of at most :data:`MAX_FAULT_CHARS` characters ("" = no fault).

    Raises:
        ProtocolError: not a str, or too long.
    """
    if not isinstance(value, str):
        raise ProtocolError(f"fault must be a string, got {type(value).__name__}")
    if len(value) > MAX_FAULT_CHARS:
        raise ProtocolError(f"fault text has {len(value)} characters; at most {MAX_FAULT_CHARS}")
    return value


def _key_sets(what: str, missing: list[str], extra: list[str]) -> str:
    parts = ([f"missing {missing}"] if missing else []) + ([f"unexpected {extra}"] if extra else [])
    return f"{what}: {'; '.join(parts)}"


def check_frames(frames: Any, spec: dict, once: dict, max_steps: int, where: str) -> dict[str, np.ndarray]:
    """``frames`` checked against ``spec`` (key -> (per-frame shape, dtype), arrays (T, *shape)) and
    ``once`` (key -> (shape, dtype), one value per episode); returns them.

    Raises:
        ProtocolError: not a dict of arrays, a missing or extra key, a wrong dtype or shape, keys with
            different lengths, a length outside [1, ``max_steps``], NaN/inf in a float key, or
            ``next.done`` before the last frame. The message names ``where`` and the key.
    """
    if not isinstance(frames, dict):
        raise ProtocolError(f"{where}: frames must be a dict of arrays, got {type(frames).__name__}")
    wanted = {**spec, **once}
    missing, extra = sorted(set(wanted) - set(frames)), sorted(set(frames) - set(wanted))
    if missing or extra:
        raise ProtocolError(f"{where}: {_key_sets('frames', missing, extra)}")
    length = None
    for key, (shape, dtype) in wanted.items():
        arr, per_frame = frames[key], key in spec
        if not isinstance(arr, np.ndarray):
            raise ProtocolError(f"{where}: {key!r} must be an array, got {type(arr).__name__}")
        want = ("(T, *{})" if per_frame else "{}").format(tuple(shape))
        if (
            arr.dtype != np.dtype(dtype)
            or (arr.shape[1:] if per_frame else arr.shape) != tuple(shape)
            or (per_frame and arr.ndim != 1 + len(shape))
        ):
            raise ProtocolError(
                f"{where}: {key!r} must be {np.dtype(dtype)} {want}, got {arr.dtype} {arr.shape}"
            )
        if per_frame:
            length = arr.shape[0] if length is None else length
            if arr.shape[0] != length:
                raise ProtocolError(f"{where}: {key!r} has {arr.shape[0]} frames, the other keys {length}")
        if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
            raise ProtocolError(f"{where}: {key!r} holds NaN or inf")
    if not 1 <= (length or 0) <= max_steps:
        raise ProtocolError(
            f"{where}: {length} frames; an episode has 1 to {max_steps} (online.max_episode_steps, 0 = "
            "env.max_episode_steps)"
        )
    if frames[keys.DONE][:-1].any():
        raise ProtocolError(f"{where}: {keys.DONE!r} is set before the last frame")
    return frames


def check_meta(meta: Any, frames: dict[str, np.ndarray], control_hz: float, where: str) -> dict[str, Any]:
    """The episode's meta, checked against what :func:`episode_meta` computes from ``frames``; returns the
    computed meta (the actor's ``version`` is the only field taken from the message).

    Raises:
        ProtocolError: not a dict with exactly the :data:`META_TYPES` fields of those types, a version out
            of range, or a field that disagrees with the frames (names it and both values).
    """
    if not isinstance(meta, dict):
        raise ProtocolError(f"{where}: meta must be a dict, got {type(meta).__name__}")
    missing, extra = sorted(set(META_TYPES) - set(meta)), sorted(set(meta) - set(META_TYPES))
    if missing or extra:
        raise ProtocolError(f"{where}: {_key_sets('meta', missing, extra)}")
    for name, types in META_TYPES.items():
        value = meta[name]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise ProtocolError(f"{where}: meta {name!r} must be {'/'.join(t.__name__ for t in types)}")
    version = check_int(meta["version"], f"{where}: meta 'version'", -1, MAX_VERSION)
    expected = episode_meta(frames, control_hz, version)
    for name, want in expected.items():
        got = meta[name]
        same = (
            got == want
            if want is None or got is None or isinstance(want, bool | int)
            else math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)
        )
        if not same:
            raise ProtocolError(f"{where}: meta {name!r} is {got!r} but the frames give {want!r}")
    return expected


def check_push(
    actor: Any,
    episode: Any,
    frames: Any,
    meta: Any,
    spec: dict,
    once: dict,
    max_steps: int,
    control_hz: float,
) -> tuple[int, int, dict[str, np.ndarray], dict[str, Any]]:
    """One pushed episode checked completely (module doc): (actor, episode, frames, meta from the frames).

    Raises:
        ProtocolError: anything that does not fit; the message names the actor, episode and field.
    """
    actor = check_int(actor, "actor", 0, MAX_ACTOR)
    episode = check_int(episode, "episode", 0, MAX_EPISODE)
    where = f"actor {actor} episode {episode}"
    frames = check_frames(frames, spec, once, max_steps, where)
    return actor, episode, frames, check_meta(meta, frames, control_hz, where)
