"""Checkpoint folders (DESIGN.md §3), no pickle anywhere:

<path>/model.safetensors        every module's state dict, keys prefixed ``<module name>.``
<path>/config.json              the full config dict + ``obs_shapes`` + ``action_dim``
<path>/normalization.json       FeatureStats per key (LeRobot stats.json layout)
<path>/extra_state.safetensors  (optional) tensors of ``extra_state`` (optimizer state, ...)
<path>/extra_state.json         (optional) the rest of ``extra_state``, tensors replaced by references
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from robot_rl.data.normalize import FeatureStats, load_stats, save_stats

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
NORM_FILE = "normalization.json"
STATE_TENSORS_FILE = "extra_state.safetensors"
STATE_JSON_FILE = "extra_state.json"


class CheckpointError(ValueError):
    """A checkpoint file is corrupt, or its shapes do not fit the config/data/env it is used with; the
    message names the file (or the key) and both values."""


def _read_tensors(file: Path) -> dict[str, torch.Tensor]:
    """``load_file`` with a :class:`CheckpointError` naming ``file`` when it is not a valid safetensors file
    (empty, truncated, overwritten)."""
    try:
        return load_file(str(file))
    except SafetensorError as err:
        raise CheckpointError(
            f"{file} is corrupt or truncated ({err}); retrain it or restore the file from a backup"
        ) from err


@contextmanager
def _writing(file: Path) -> Iterator[Path]:
    """Re-raise an OSError of the block (``write_text`` leaves ``filename`` empty) naming ``file``."""
    try:
        yield file
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(file)) from err


def _write_tensors(tensors: dict[str, torch.Tensor], file: Path) -> None:
    """``save_file``; an I/O failure (safetensors reports e.g. a full disk as ``SafetensorError ... (os error
    28)``) becomes the OSError it is, naming ``file``."""
    try:
        save_file(tensors, str(file))
    except SafetensorError as err:
        code = re.search(r"os error (\d+)", str(err))
        if code is None:
            raise
        raise OSError(int(code[1]), os.strerror(int(code[1])), str(file)) from err


def load_module_state(module: nn.Module, state: dict[str, torch.Tensor], where: str | Path) -> None:
    """``module.load_state_dict(state, strict=True)``, with a :class:`CheckpointError` from
    :func:`weights_mismatch` when the weights do not fit."""
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise weights_mismatch(err, where) from err


def weights_mismatch(err: RuntimeError, where: str | Path) -> CheckpointError:
    """The error for a failed strict ``load_state_dict``: names ``where`` (the checkpoint file and module) and
    the first mismatched tensor with both shapes."""
    lines = [line.strip() for line in str(err).splitlines()[1:] if line.strip()]
    detail = lines[0] if lines else str(err)
    more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
    return CheckpointError(f"{where}: weights do not fit the network its config describes: {detail}{more}")


def _encode(x: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    """Nested dict/list/tuple with tensors -> JSON-able tree; tensors go to ``tensors`` by path."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if isinstance(x, torch.Tensor):
        tensors[path] = x.detach().cpu().contiguous().clone()
        return {"__tensor__": path}
    if isinstance(x, dict):
        for k in x:
            if not isinstance(k, str | int):
                raise TypeError(f"extra_state key {k!r} at {path or '<root>'} must be str or int")
        return {"__dict__": [[k, _encode(v, tensors, f"{path}/{k}")] for k, v in x.items()]}
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v, tensors, f"{path}/{i}") for i, v in enumerate(x)]}
    if isinstance(x, list):
        return [_encode(v, tensors, f"{path}/{i}") for i, v in enumerate(x)]
    if x is None or isinstance(x, bool | int | float | str):
        return x
    raise TypeError(f"extra_state value at {path or '<root>'} has unsupported type {type(x).__name__}")


def _decode(x: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(x, dict):
        if "__tensor__" in x:
            return tensors[x["__tensor__"]]
        if "__dict__" in x:
            return {k: _decode(v, tensors) for k, v in x["__dict__"]}
        if "__tuple__" in x:
            return tuple(_decode(v, tensors) for v in x["__tuple__"])
        return {k: _decode(v, tensors) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(v, tensors) for v in x]
    return x


def save_checkpoint(
    path: str | Path,
    modules: dict[str, nn.Module],
    config: dict,
    stats: dict[str, FeatureStats],
    extra_state: dict | None = None,
    obs_shapes: dict[str, tuple[int, ...]] | None = None,
    action_dim: int | None = None,
) -> Path:
    """Write a checkpoint folder (created if needed; files overwritten).

    Raises OSError naming the file being written when the disk is full, read-only or not writable.

    ``obs_shapes``/``action_dim`` are stored in config.json (they may instead already be in ``config``);
    they are needed to rebuild the agent (:func:`robot_rl.policies.load_agent`) and for
    :func:`check_compatible`, so always pass them for checkpoints meant for evaluation or deployment.
    """
    path = Path(path)
    cfg = dict(config)
    if obs_shapes is not None:
        cfg["obs_shapes"] = {k: [int(s) for s in v] for k, v in obs_shapes.items()}
    if action_dim is not None:
        cfg["action_dim"] = int(action_dim)
    path.mkdir(parents=True, exist_ok=True)
    flat: dict[str, torch.Tensor] = {}
    for name, module in modules.items():
        for key, value in module.state_dict().items():
            flat[f"{name}.{key}"] = value.detach().cpu().contiguous().clone()
    _write_tensors(flat, path / MODEL_FILE)
    with _writing(path / CONFIG_FILE) as f:
        f.write_text(json.dumps(cfg, indent=2))
    with _writing(path / NORM_FILE) as f:
        save_stats(stats, f)
    if extra_state is not None:
        tensors: dict[str, torch.Tensor] = {}
        tree = _encode(extra_state, tensors, "")
        _write_tensors(tensors, path / STATE_TENSORS_FILE)
        with _writing(path / STATE_JSON_FILE) as f:
            f.write_text(json.dumps(tree))
    return path


def _require(path: Path, name: str) -> Path:
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint folder not found: {path}")
    f = path / name
    if not f.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {f}")
    return f


def load_checkpoint(
    path: str | Path,
) -> tuple[dict[str, dict[str, torch.Tensor]], dict, dict[str, FeatureStats]]:
    """Read a checkpoint folder -> (module name -> state dict, config dict, stats).

    Raises:
        FileNotFoundError: the folder or one of its files is missing (message names it).
        CheckpointError: a file is corrupt: not safetensors (empty, truncated, random bytes) or not JSON.
    """
    path = Path(path)
    model_f, cfg_f, norm_f = (_require(path, n) for n in (MODEL_FILE, CONFIG_FILE, NORM_FILE))
    flat = _read_tensors(model_f)
    state_dicts: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in flat.items():
        name, _, rest = key.partition(".")
        state_dicts.setdefault(name, {})[rest] = value
    config = read_config(cfg_f)
    try:
        stats = load_stats(norm_f)
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{err}; the checkpoint is corrupt") from err
    return state_dicts, config, stats


def read_config(file: Path) -> dict:
    """A checkpoint's ``config.json`` as a dict.

    Raises:
        CheckpointError: ``file`` is not valid JSON (truncated, binary); the message names it.
    """
    try:
        return json.loads(Path(file).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{file}: not valid JSON ({err}); the checkpoint is corrupt") from err


def load_extra_state(path: str | Path) -> dict | None:
    """The ``extra_state`` saved with the checkpoint, or None when it has none."""
    path = Path(path)
    if not (path / STATE_JSON_FILE).is_file():
        return None
    tensors = _read_tensors(_require(path, STATE_TENSORS_FILE))
    return _decode(json.loads((path / STATE_JSON_FILE).read_text()), tensors)


def require_shapes(config: dict) -> None:
    """Raises CheckpointError when ``config`` (a checkpoint's config.json) lacks obs_shapes/action_dim."""
    missing = [k for k in ("obs_shapes", "action_dim") if k not in config]
    if missing:
        raise CheckpointError(
            f"checkpoint config.json lacks {missing}; save it with obs_shapes and action_dim"
        )


def check_compatible(
    config: dict,
    obs_shapes: dict[str, tuple[int, ...]],
    action_dim: int,
    where: str | Path = "",
    horizon: int | None = None,
) -> None:
    """Check a dataset's/env's features against a checkpoint's config.json.

    Every observation key the checkpoint was trained on must be present with the same shape (extra keys
    are fine, they are ignored), and the action dim must match; with ``horizon`` the checkpoint's
    ``policy.horizon`` must equal it. ``where`` (the checkpoint folder) starts the message.

    Raises:
        CheckpointError (a ValueError): naming the key and both values.
    """
    prefix = f"{where}: " if str(where) else ""
    require_shapes(config)
    saved = {k: tuple(v) for k, v in config["obs_shapes"].items()}
    for key, shape in saved.items():
        if key not in obs_shapes:
            raise CheckpointError(
                f"{prefix}observation {key!r} (shape {shape} in the checkpoint) is missing from the data"
            )
        got = tuple(int(s) for s in obs_shapes[key])
        if got != shape:
            raise CheckpointError(
                f"{prefix}observation {key!r} has shape {got} in the data but {shape} in the checkpoint"
            )
    if int(action_dim) != int(config["action_dim"]):
        raise CheckpointError(
            f"{prefix}'action' has shape ({action_dim},) in the data but ({config['action_dim']},) in the "
            "checkpoint"
        )
    saved_h = (config.get("policy") or {}).get("horizon")
    if horizon is not None and saved_h is not None and int(saved_h) != int(horizon):
        raise CheckpointError(
            f"{prefix}policy.horizon is {saved_h} in the checkpoint but {horizon} in the config; set "
            f"--policy.horizon={saved_h} (or data.horizon_s to match) or retrain the checkpoint"
        )
