"""The run directory: every stage reads and writes files here, so finished stages are skipped on a rerun.

A stage is finished when ``stages/<name>.json`` exists; that marker is written atomically, last.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class RunDir:
    """Paths and stage markers of one run. ``root`` is created on first use."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @property
    def dataset(self) -> Path:
        return self.root / "dataset"

    def checkpoint(self, algo: str, seed: int) -> Path:
        return self.root / "checkpoints" / f"{algo}_seed{seed}"

    def train_log(self, algo: str, seed: int) -> Path:
        return self.root / "logs" / f"{algo}_seed{seed}.csv"

    def val_log(self, algo: str, seed: int) -> Path:
        return self.root / "logs" / f"{algo}_seed{seed}_val.csv"

    def open_loop(self, algo: str, seed: int) -> Path:
        """Stem of the open-loop report (``.json`` and ``.png``) of a checkpoint on held-out episodes."""
        return self.root / "open_loop" / f"{algo}_seed{seed}"

    def eval_file(self, algo: str, seed: int, name: str = "") -> Path:
        """The eval JSON of a checkpoint; ``name`` (``eval.name``) names a variant of the evaluation."""
        return self.root / "eval" / f"{algo}_seed{seed}{'_' + name if name else ''}.json"

    @property
    def videos(self) -> Path:
        return self.root / "videos"

    def _marker(self, stage: str) -> Path:
        return self.root / "stages" / f"{stage}.json"

    def is_done(self, stage: str) -> bool:
        return self._marker(stage).is_file()

    def result(self, stage: str) -> dict:
        """The JSON a finished stage recorded. Raises FileNotFoundError naming the marker if not finished."""
        marker = self._marker(stage)
        if not marker.is_file():
            raise FileNotFoundError(f"stage {stage!r} has not finished: {marker} is missing")
        return json.loads(marker.read_text())

    def mark_done(self, stage: str, result: dict) -> None:
        write_json_atomic(self._marker(stage), result)

    def clear(self, stage: str) -> None:
        """Mark ``stage`` as not finished (its marker removed, if any), so the next run redoes it."""
        self._marker(stage).unlink(missing_ok=True)

    def check_writable(self) -> None:
        """Create ``root`` and write (then remove) a small probe file in it, so a read-only, full or
        forbidden run dir fails before a stage starts its work rather than when it saves its results.

        Raises:
            OSError: (EROFS, EACCES, ENOSPC, ...) with the path that could not be written.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        probe = self.root / f".write_probe.{os.getpid()}"
        try:
            with open(probe, "wb") as f:
                try:
                    f.write(b"robot_rl write probe\n")
                    f.flush()
                    os.fsync(f.fileno())
                except OSError as err:
                    raise OSError(err.errno, err.strerror, str(probe)) from err
        finally:
            probe.unlink(missing_ok=True)


def online_name(cfg) -> str:
    """Checkpoint, log and stage name of an online run: ``online_<method>`` (``cfg`` a PipelineConfig)."""
    return f"online_{cfg.online.method}"


def write_json_atomic(path: Path, obj) -> None:
    """Write JSON to ``path`` via a temporary file and ``os.replace`` so readers never see half a file.

    On failure (a full disk) the temporary file is removed and the OSError, naming ``path``, propagates.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=2))
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from err
