"""The discount of a critic-labelled dataset (``robot-rl label``), recorded with it and reconciled with the
learner that reads it.

Potential-based shaping F_t = gamma * Phi(s_{t+1}) - Phi(s_t) keeps the optimal policy only when gamma is
the learner's own discount (Ng, Harada & Russell 1999; docs/algorithms.md §9). A labelled dataset is written
with one gamma (``offline.gamma`` at labelling time), but may be read by a learner with another (online SAC's
``sac.gamma``). ``robot-rl label`` therefore writes ``meta/reward_labels.json``: the gamma and the config
key it came from, the reward mode and scale, the progress column and the critic it came from.

A learner with another gamma gets the rewards **relabelled on the fly**, which is exact and costs one
vector operation: the dataset keeps Phi (the ``progress`` column) and the rows that ended in a true
termination (``next.done``, the shaping's terminal rows), so for every row t that is not its episode's
last, ``r'_t = r_t + scale * (gamma' - gamma) * Phi_{t+1} * (1 - done_t)`` (terminal rows and the last
row of each episode carry no gamma term, :func:`robot_rl.rewards.shaping.shaping_terms`). The env reward
of 'shaped' mode and the done head's +1 of 'critic' mode do not depend on gamma and are kept. A dataset
labelled before the metadata existed (a ``progress`` column, no metadata) cannot be checked: it is read
as it is, with a warning.
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt

LABELS_FILE = "meta/reward_labels.json"
PROGRESS = "progress"  # the per-frame critic progress column robot-rl label writes
_FIELDS = ("gamma", "gamma_key", "mode", "scale", "progress_key", "critic")
log = logging.getLogger(__name__)


def write_labels_meta(root: str | Path, meta: dict) -> None:
    """Write ``meta`` (the fields of :data:`_FIELDS`: gamma float, gamma_key str, mode str, scale float,
    progress_key str, critic str) to ``<root>/meta/reward_labels.json`` atomically.

    Raises:
        ValueError: a field is missing.
    """
    missing = [f for f in _FIELDS if f not in meta]
    if missing:
        raise ValueError(f"reward label metadata lacks {missing}")
    fmt.atomic_write_json(Path(root) / LABELS_FILE, meta)


def read_labels_meta(root: str | Path) -> dict | None:
    """The label metadata of the dataset at ``root``, or None when it has none.

    Raises:
        DatasetError: the file is not JSON or lacks a field (names the file).
    """
    path = Path(root) / LABELS_FILE
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise DatasetError(f"{path}: unreadable reward label metadata: {err}") from err
    missing = [f for f in _FIELDS if f not in meta] if isinstance(meta, dict) else list(_FIELDS)
    if missing:
        raise DatasetError(f"{path}: reward label metadata lacks {missing}")
    return meta


def match_learner_gamma(root: str | Path, table: dict[str, np.ndarray], gamma: float, gamma_key: str) -> None:
    """Make the shaped ``next.reward`` of ``table`` (the dataset at ``root``, every frame in index order)
    use the learner's discount ``gamma`` (config key ``gamma_key``), in place (module docstring).

    Args:
        root: the dataset folder (its ``meta/reward_labels.json`` is read).
        table: columns (N, ...) of ``LeRobotDataset(root).load_tabular()``; ``next.reward`` (N,) float32 is
            replaced when the labelling gamma differs, using ``progress`` (N,), ``next.done`` (N,) and
            ``episode_index`` (N,).
        gamma: the learner's discount; gamma_key: the config key it comes from (for messages).

    A dataset that is not critic-labelled (no metadata, no ``progress`` column) is left alone; one with a
    ``progress`` column but no metadata (labelled by an older version) is left alone with a warning.

    Raises:
        DatasetError: the metadata is unreadable, or the progress column it names is missing (names the
            file).
    """
    meta = read_labels_meta(root)
    if meta is None:
        if PROGRESS in table:
            warnings.warn(
                f"{root}: a '{PROGRESS}' column but no {LABELS_FILE}; if its rewards are critic-labelled "
                f"their shaping discount is unknown and cannot be checked against {gamma_key}={gamma}; "
                "relabel with robot-rl label to record it",
                stacklevel=2,
            )
        return
    labelled = float(meta["gamma"])
    if np.isclose(labelled, gamma, rtol=0.0, atol=1e-12):
        return
    progress_key = meta["progress_key"]
    if progress_key not in table or keys.REWARD not in table:
        raise DatasetError(
            f"{Path(root) / LABELS_FILE}: labelled with {meta['gamma_key']}={labelled}, but the dataset "
            f"lacks the '{progress_key}' or '{keys.REWARD}' column needed to reshape for {gamma_key}={gamma}"
        )
    n = len(table[keys.REWARD])
    phi = np.asarray(table[progress_key], np.float64).reshape(n)
    done = np.asarray(table.get(keys.DONE, np.zeros(n, bool))).reshape(n).astype(bool)
    episode = np.asarray(table[keys.EPISODE_INDEX]).reshape(n)
    has_next = np.append(episode[1:] == episode[:-1], False)  # row t is not its episode's last
    successor = np.append(phi[1:], 0.0)
    delta = float(meta["scale"]) * (gamma - labelled) * successor * (has_next & ~done)
    reward = np.asarray(table[keys.REWARD], np.float64).reshape(n) + delta
    table[keys.REWARD] = reward.astype(np.float32)
    log.info(
        "%s: rewards shaped with %s=%g (critic %s) reshaped for the learner's %s=%g",
        root,
        meta["gamma_key"],
        labelled,
        meta["critic"],
        gamma_key,
        gamma,
    )
