"""Checkpoint folders (docs/design.md §3), no pickle anywhere (core: the runtime, training, eval and the
policies read and write them):

<path>/model.safetensors        every module's state dict, keys prefixed ``<module name>.``
<path>/config.json              the header (:class:`CheckpointHeader`): the full config dict + ``method``,
                                ``obs_shapes``, ``action_dim``, ``checkpoint_format``
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import draccus
import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from robot_rl.algos.registry import algorithm
from robot_rl.config import PolicyConfig, section_class
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


FORMAT_KEY = "checkpoint_format"
FORMAT_VERSION = 2
"""Checkpoint formats this version reads: 1, written before issue 36 (config.json without
``checkpoint_format``; same files; ``method`` defaults to ``bc``); 2, ``checkpoint_format`` set and
``method``, ``obs_shapes`` and ``action_dim`` always present."""


@dataclass(frozen=True)
class CheckpointHeader:
    """A checkpoint's ``config.json``, typed: what it was trained on and how to rebuild its agent.

    Attributes:
        method: the registered method (:mod:`robot_rl.algos.registry`) that rebuilds the agent.
        obs_shapes: observation key -> shape the networks read (no batch dim).
        action_dim: d.
        policy: the policy's architecture (``policy`` section).
        algo_configs: the method's config sections (PipelineConfig field -> dataclass), its own first.
        features: the dataset columns training used and ignored (``FeatureUse.to_json``), or None.
        fps: control rate of the training data (Hz), or None when unknown.
        config: the whole ``config.json`` dict (seed, data, obs_keys, ... as saved).
        format_version: :data:`FORMAT_VERSION` of the file it was read from.
    """

    method: str
    obs_shapes: dict[str, tuple[int, ...]]
    action_dim: int
    policy: PolicyConfig
    algo_configs: dict[str, Any]
    features: dict | None
    fps: float | None
    config: dict
    format_version: int = FORMAT_VERSION

    @classmethod
    def from_config(cls, config: dict, where: str | Path = CONFIG_FILE) -> CheckpointHeader:
        """The header of a ``config.json`` dict; ``where`` (the file) starts every error message.

        Raises:
            CheckpointError: one line naming ``where`` and the format version: a version this code does not
                read, ``obs_shapes``/``action_dim`` missing, an unknown ``method``, or a config section
                that does not decode.
        """
        version = config.get(FORMAT_KEY, 1)
        if version not in range(1, FORMAT_VERSION + 1) or isinstance(version, bool):
            raise CheckpointError(
                f"{where}: checkpoint format {version!r} is not one this robot_rl reads (formats 1-"
                f"{FORMAT_VERSION}); load it with the robot_rl version that wrote it"
            )
        missing = [k for k in ("obs_shapes", "action_dim") if k not in config]
        if missing:
            raise CheckpointError(
                f"{where}: checkpoint format {version} lacks {missing}; save it with obs_shapes and "
                "action_dim"
            )
        method = config.get("method", "bc")
        try:
            sections = algorithm(method).sections
        except ValueError as err:
            raise CheckpointError(f"{where}: checkpoint format {version}: {err}") from err
        return cls(
            method=method,
            obs_shapes={k: tuple(int(d) for d in v) for k, v in config["obs_shapes"].items()},
            action_dim=int(config["action_dim"]),
            policy=_decode_section(config, "policy", PolicyConfig, where),
            algo_configs={
                name: _decode_section(config, name, section_class(name), where) for name in sections
            },
            features=config.get("features"),
            fps=config.get("fps"),
            config=config,
            format_version=int(version),
        )

    @property
    def algo_config(self) -> Any:
        """The method's own config section (its agent's ``cfg``)."""
        return next(iter(self.algo_configs.values()))

    @property
    def obs_keys(self) -> list[str]:
        """The observation keys the agent is fed, in training's order (``obs_keys``; else sorted)."""
        return list(self.config.get("obs_keys") or sorted(self.obs_shapes))

    def to_config(self) -> dict:
        """The ``config.json`` dict to write (format :data:`FORMAT_VERSION`)."""
        return {
            **self.config,
            FORMAT_KEY: FORMAT_VERSION,
            "method": self.method,
            "obs_shapes": {k: list(v) for k, v in self.obs_shapes.items()},
            "action_dim": self.action_dim,
        }


def _decode_section(config: dict, name: str, kind: type, where: str | Path) -> Any:
    try:
        return draccus.decode(kind, config.get(name) or {})
    except draccus.utils.DecodingError as err:
        raise CheckpointError(f"{where}: section {name!r} does not decode: {err}") from err


@dataclass
class Checkpoint:
    """A checkpoint folder in memory (module docstring): header, weights, normalisation, extra state.

    Attributes:
        header: the typed ``config.json``.
        weights: module name -> its state dict (tensors on the CPU).
        stats: normalisation statistics per feature.
        extra_state: optimizer state and the like (tensors inside), or None.
    """

    header: CheckpointHeader
    weights: dict[str, dict[str, torch.Tensor]]
    stats: dict[str, FeatureStats]
    extra_state: dict | None = None

    def save(self, path: str | Path) -> Path:
        """Write the folder ``path`` (created if needed; files overwritten); returns it.

        Raises:
            OSError: naming the file being written (disk full, read-only, not writable).
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        flat = {
            f"{name}.{key}": value for name, state in self.weights.items() for key, value in state.items()
        }
        _write_tensors(flat, path / MODEL_FILE)
        with _writing(path / CONFIG_FILE) as f:
            f.write_text(json.dumps(self.header.to_config(), indent=2))
        with _writing(path / NORM_FILE) as f:
            save_stats(self.stats, f)
        if self.extra_state is not None:
            tensors: dict[str, torch.Tensor] = {}
            tree = _encode(self.extra_state, tensors, "")
            _write_tensors(tensors, path / STATE_TENSORS_FILE)
            with _writing(path / STATE_JSON_FILE) as f:
                f.write_text(json.dumps(tree))
        return path

    def load_modules(
        self, modules: dict[str, nn.Module], where: str | Path, skip_missing: bool = False
    ) -> None:
        """Load each module's weights (strict) from :attr:`weights`; ``where`` (the folder) names errors.

        Raises:
            CheckpointError: a module has no weights (unless ``skip_missing``), or its weights do not fit
                (names the file, the module and the first mismatched tensor).
        """
        model_file = Path(where) / MODEL_FILE
        for name, module in modules.items():
            if name not in self.weights:
                if skip_missing:
                    continue
                raise CheckpointError(f"{model_file} has no weights for module {name!r}")
            load_module_state(module, self.weights[name], f"{model_file} ({name})")


def save_checkpoint(
    path: str | Path,
    modules: dict[str, nn.Module],
    config: dict,
    stats: dict[str, FeatureStats],
    extra_state: dict | None = None,
    obs_shapes: dict[str, tuple[int, ...]] | None = None,
    action_dim: int | None = None,
) -> Path:
    """Write the modules' weights (copied to the CPU) with ``config`` (the full config dict, ``method``
    included) as a :class:`Checkpoint` to ``path``; ``obs_shapes``/``action_dim`` go into the header (they may
    instead already be in ``config``).

    Raises:
        CheckpointError: ``config`` lacks obs_shapes/action_dim or names an unknown method.
        OSError: naming the file being written when the disk is full, read-only or not writable.
    """
    cfg = {**config, FORMAT_KEY: FORMAT_VERSION}  # written now: this version's layout, whatever it came from
    if obs_shapes is not None:
        cfg["obs_shapes"] = {k: [int(s) for s in v] for k, v in obs_shapes.items()}
    if action_dim is not None:
        cfg["action_dim"] = int(action_dim)
    weights = {
        name: {k: v.detach().cpu().contiguous().clone() for k, v in module.state_dict().items()}
        for name, module in modules.items()
    }
    header = CheckpointHeader.from_config(cfg, Path(path) / CONFIG_FILE)
    return Checkpoint(header, weights, stats, extra_state).save(path)


def _require(path: Path, name: str) -> Path:
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint folder not found: {path}")
    f = path / name
    if not f.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {f}")
    return f


def load_checkpoint(path: str | Path, extra_state: bool = False) -> Checkpoint:
    """Read a checkpoint folder (any format this code reads, :data:`FORMAT_VERSION`); with ``extra_state``
    also its extra state (None when it has none).

    Raises:
        FileNotFoundError: the folder or one of its files is missing (message names it).
        CheckpointError: a file is corrupt (not safetensors, not JSON), or the header does not read
            (:meth:`CheckpointHeader.from_config`: one line naming the file and the format version).
    """
    path = Path(path)
    model_f, _, norm_f = (_require(path, n) for n in (MODEL_FILE, CONFIG_FILE, NORM_FILE))
    header = read_header(path)
    flat = _read_tensors(model_f)
    weights: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in flat.items():
        name, _, rest = key.partition(".")
        weights.setdefault(name, {})[rest] = value
    try:
        stats = load_stats(norm_f)
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{err}; the checkpoint is corrupt") from err
    return Checkpoint(header, weights, stats, load_extra_state(path) if extra_state else None)


def read_header(path: str | Path) -> CheckpointHeader:
    """The header of the checkpoint folder ``path`` (its ``config.json`` only, no weights).

    Raises:
        FileNotFoundError: the folder or its config.json is missing; CheckpointError: as
            :func:`load_checkpoint`.
    """
    file = _require(Path(path), CONFIG_FILE)
    return CheckpointHeader.from_config(read_config(file), file)


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
