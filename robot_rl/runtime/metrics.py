"""Online-run metrics (docs/design.md §3 names) and where they go: console, CSV, TensorBoard, optionally
wandb.

Per recorded episode the actor reports ``success``, ``terminal``, ``steps``, ``intervention_steps``,
``return``, ``cycle_time_s`` (s to success, None on failure) and the weight ``version`` it acted with. The
learner keeps a rolling window of episodes and adds its own rates.
"""

from __future__ import annotations

import csv
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl import keys
from robot_rl.extras import MissingExtraError

WINDOW = 20  # episodes in the rolling success / intervention window


def episode_meta(frames: dict[str, np.ndarray], control_hz: float, version: int) -> dict[str, Any]:
    """Per-episode metrics from recorded frames: success, terminal (the episode ended on a ``next.done``
    frame: the env's success, or with ``reward.mode=critic`` the critic's done head), steps,
    intervention_steps, return, cycle_time_s (s from the first step to the first success, None without
    success) and the weight version."""
    success = np.asarray(frames[keys.SUCCESS]).astype(bool)
    first = int(np.argmax(success)) + 1 if success.any() else None
    return {
        "success": bool(success.any()),
        "terminal": bool(np.asarray(frames[keys.DONE]).astype(bool).any()),
        "steps": int(len(success)),
        "intervention_steps": int(np.asarray(frames[keys.INTERVENTION]).astype(bool).sum()),
        "return": float(np.asarray(frames[keys.REWARD]).sum()),
        "cycle_time_s": None if first is None else first / control_hz,
        "version": int(version),
    }


class EpisodeWindow:
    """Rolling statistics over the last ``size`` episodes plus run totals."""

    def __init__(self, size: int = WINDOW) -> None:
        self.recent: deque[dict] = deque(maxlen=size)
        self.episodes = self.successes = self.autonomous = self.steps = self.intervention_steps = 0

    def add(self, meta: dict, version_now: int) -> None:
        self.recent.append({**meta, "weight_lag": version_now - int(meta.get("version", version_now))})
        self.episodes += 1
        self.successes += bool(meta["success"])
        self.autonomous += bool(meta["success"]) and not meta["intervention_steps"]
        self.steps += int(meta["steps"])
        self.intervention_steps += int(meta["intervention_steps"])

    def totals(self) -> dict[str, float]:
        """Whole-run ``episodes``, ``success_rate``, ``autonomous_success_rate`` and ``intervention_rate``."""
        n = max(self.episodes, 1)
        return {
            "episodes": self.episodes,
            "success_rate": self.successes / n,
            "autonomous_success_rate": self.autonomous / n,
            "intervention_rate": self.intervention_steps / max(self.steps, 1),
        }

    def snapshot(self) -> dict[str, float]:
        """``success_rate``, ``autonomous_success_rate`` (successes without any human step),
        ``terminal_rate`` (episodes that ended on a terminal frame: with critic-only reward, those the
        critic's done head ended, which can stop an episode before the env counts a success),
        ``intervention_rate`` (share of steps a human drove), ``episode_return``,
        ``cycle_time_s`` (mean over successes) and ``weight_lag`` (publications) over the window."""
        if not self.recent:
            return {}
        eps = list(self.recent)
        steps = sum(e["steps"] for e in eps)
        cycles = [e["cycle_time_s"] for e in eps if e.get("cycle_time_s") is not None]
        return {
            "success_rate": float(np.mean([e["success"] for e in eps])),
            "autonomous_success_rate": float(
                np.mean([e["success"] and not e["intervention_steps"] for e in eps])
            ),
            "terminal_rate": float(np.mean([e["terminal"] for e in eps])),
            "intervention_rate": sum(e["intervention_steps"] for e in eps) / max(steps, 1),
            "episode_return": float(np.mean([e["return"] for e in eps])),
            "cycle_time_s": float(np.mean(cycles)) if cycles else float("nan"),
            "weight_lag": float(np.mean([e["weight_lag"] for e in eps])),
        }


class RateMeter:
    """Events per second between consecutive :meth:`rate` calls."""

    def __init__(self, start: int = 0) -> None:
        self.last_count, self.last_time = start, time.monotonic()

    def rate(self, count: int) -> float:
        now = time.monotonic()
        r = (count - self.last_count) / max(now - self.last_time, 1e-9)
        self.last_count, self.last_time = count, now
        return r


class MetricSinks:
    """Writes metric rows to ``csv_path`` (one row per call, the step as the first column), to TensorBoard
    event files under ``tensorboard_dir`` (when given) and to wandb (when ``wandb_project`` is given).

    Raises:
        MissingExtraError: TensorBoard or wandb is asked for and not installed (names the package to
            install).
    """

    def __init__(
        self,
        csv_path: Path,
        tensorboard_dir: Path | None = None,
        wandb_project: str | None = None,
        run_name: str = "",
        config: dict | None = None,
    ) -> None:
        self.csv_path = csv_path
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        self._fields: list[str] | None = None
        if csv_path.is_file():
            with open(csv_path) as f:
                self._fields = next(csv.reader(f), None)
        self.tb = None
        if tensorboard_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:
                raise MissingExtraError(
                    "online.tensorboard=true needs the tensorboard package: pip install tensorboard"
                ) from err
            self.tb = SummaryWriter(str(tensorboard_dir))
        self.wandb = None
        if wandb_project:
            try:
                import wandb
            except ImportError as err:
                raise MissingExtraError("online.wandb=true needs wandb: pip install wandb") from err
            self.wandb = wandb.init(project=wandb_project, name=run_name, config=config, resume="allow")

    def write(self, step: int, row: dict[str, Any]) -> None:
        """Record ``row`` at ``step`` (env steps). NaN values are kept in the CSV and skipped elsewhere."""
        row = {"env_steps": step, **row}
        new = [k for k in row if k not in (self._fields or [])]
        if new:  # first row, or new columns (agent losses appear after the first update): rewrite header
            rows = []
            if self._fields is not None:
                with open(self.csv_path, newline="") as f:
                    rows = list(csv.DictReader(f))
            self._fields = [*(self._fields or []), *new]
            with open(self.csv_path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=self._fields)
                writer.writeheader()
                writer.writerows(rows)
        with open(self.csv_path, "a", newline="") as f:
            csv.writer(f).writerow([row.get(k, "") for k in self._fields])
        finite = {k: float(v) for k, v in row.items() if k != "env_steps" and np.isfinite(float(v))}
        if self.tb is not None:
            for key, value in finite.items():
                self.tb.add_scalar(f"online/{key}", value, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(finite, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
