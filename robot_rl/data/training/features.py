"""Which dataset columns a training run feeds the policy, which it trains on as targets, and which it
ignores, with the reason: ``train`` prints it and saves it in the checkpoint's config (``features``).

By default the policy's inputs are every ``observation.*`` vector column and the selected cameras; any
other numeric column (a ``gripper_force`` recorded next to them, say) is ignored unless ``data.features``
names it, which adds it as an input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.config import ConfigError
from robot_rl.data.lerobot.layout import DEFAULT_FEATURES

NUMERIC_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")


def extra_inputs(names: list[str], features: dict[str, dict], video_keys: list[str], root: Path) -> list[str]:
    """The columns ``data.features`` adds as policy inputs, checked against the dataset's ``features``
    (info.json). Returns them sorted, without the ``observation.*`` vectors already fed by default.

    Raises ConfigError (one line, naming ``data.features`` and the dataset) for an unknown column, a camera
    (cameras are chosen with ``data.cameras``), a non-numeric column, or a bookkeeping/target column.
    """
    out = []
    for name in names:
        spec = features.get(name)
        where = f"data.features: {name!r}"
        if spec is None:
            numeric = sorted(k for k, v in features.items() if v.get("dtype") in NUMERIC_DTYPES)
            raise ConfigError(f"{where} is not a column of {root}; its numeric columns are {numeric}")
        if name in video_keys:
            raise ConfigError(f"{where} is a camera of {root}; choose cameras with data.cameras")
        if spec.get("dtype") not in NUMERIC_DTYPES:
            dtype = spec.get("dtype")
            raise ConfigError(f"{where} of {root} has dtype {dtype!r}; only numeric columns can be inputs")
        if name in DEFAULT_FEATURES or name in (keys.ACTION, keys.REWARD, keys.DONE, keys.SUCCESS):
            raise ConfigError(f"{where} of {root} is a bookkeeping or target column, not an input")
        if not name.startswith("observation.") and name not in out:
            out.append(name)
    return sorted(out)


@dataclass
class FeatureUse:
    """What a training run does with each dataset column.

    ``inputs``: ``{key: per-sample shape}`` fed to the policy (vectors, cameras at the training size,
    derived ``observation.prev_action``, ``task`` for a multi-task dataset). ``targets``: columns trained
    on (``action``; ``next.reward``/``next.done`` and interventions for offline RL; ``next.success`` for
    RECAP, :meth:`read_labels`). ``ignored``:
    ``{key: reason}`` for every other non-bookkeeping column.
    """

    inputs: dict[str, list[int]]
    targets: list[str]
    ignored: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        features: dict[str, dict],
        obs_shapes: dict[str, tuple[int, ...]],
        video_keys: list[str],
        images: bool,
        for_rl: bool,
        multi_task: bool,
    ) -> FeatureUse:
        """Sort the dataset's ``features`` (info.json) against the policy inputs ``obs_shapes``."""
        inputs = {k: [int(d) for d in shape] for k, shape in obs_shapes.items()}
        if multi_task:
            inputs[keys.TASK] = []
        targets = [keys.ACTION]
        if for_rl:
            targets += [k for k in (keys.REWARD, keys.DONE, keys.INTERVENTION) if k in features]
        ignored = {}
        for key in sorted(features):
            if key in inputs or key in targets or key in DEFAULT_FEATURES:
                continue
            if key in video_keys:
                ignored[key] = "camera not in data.cameras" if images else "data.images is false"
            elif key in (keys.REWARD, keys.DONE, keys.INTERVENTION):
                ignored[key] = "behaviour cloning trains on actions only"
            elif key == keys.SUCCESS:  # a label of the next step, never an input
                ignored[key] = (
                    "only offline.method=recap reads it" if for_rl else "behaviour cloning ignores it"
                )
            elif features[key].get("dtype") in NUMERIC_DTYPES:
                ignored[key] = "not an observation.* column; add it with data.features"
            else:
                ignored[key] = f"dtype {features[key].get('dtype')!r} is not numeric"
        return cls(inputs, targets, ignored)

    def read_labels(self, names: list[str]) -> None:
        """Record that the training method also reads the label columns ``names`` (RECAP: ``next.success``):
        those present move from ``ignored`` to ``targets``."""
        for name in names:
            if name in self.ignored:
                del self.ignored[name]
                self.targets.append(name)

    def lines(self) -> list[str]:
        """Human-readable lines: inputs with shapes, targets, ignored columns with reasons."""
        shown = ", ".join(f"{k} {tuple(v)}" if v else k for k, v in self.inputs.items())
        out = [f"policy inputs: {shown}", f"trained on: {', '.join(self.targets)}"]
        out += [f"ignored: {k} ({why})" for k, why in self.ignored.items()]
        return out

    def to_json(self) -> dict:
        """``{"inputs": {key: shape}, "targets": [...], "ignored": {key: reason}}``."""
        return {"inputs": dict(self.inputs), "targets": list(self.targets), "ignored": dict(self.ignored)}


def as_input_column(values: np.ndarray) -> np.ndarray:
    """A column added by ``data.features`` as float32 (N, d): scalars become (N, 1)."""
    values = np.asarray(values)
    return values.reshape(len(values), -1).astype(np.float32)
