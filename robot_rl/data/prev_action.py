"""``observation.prev_action`` (``data.prev_action``): the action executed at the previous control step,
one definition for training and for every runtime that feeds it (robot_rl.sources.PrevActionSource).

At step t > 0 it is the action executed at t − 1 (a human's where one took over). At an episode's first
step no action has been executed yet; it is then the start value ``data.prev_action_start``: ``zeros``
(delta actions: "no motion") or an observation key of the action's shape, read at that first step (e.g.
``observation.state`` for absolute joint commands: the robot holds its current position). Training reads
the same start value from the recorded first frame, so a deployed policy sees at t = 0 what it was trained
on.
"""

from __future__ import annotations

import numpy as np

ZEROS = "zeros"


def prev_action_start(config: dict) -> str:
    """``data.prev_action_start`` of a checkpoint's config.json (``'zeros'`` when it predates the key)."""
    return str((config.get("data") or {}).get("prev_action_start", ZEROS))


def start_actions(start: str, obs: dict[str, np.ndarray], n: int, action_dim: int) -> np.ndarray:
    """The start value of ``n`` episode-first steps, (n, action_dim) float32.

    Args:
        start: ``'zeros'`` or an observation key (``data.prev_action_start``).
        obs: observations with a leading batch dimension of ``n`` (only ``obs[start]`` is read).

    Raises:
        KeyError: ``start`` is neither 'zeros' nor a key of ``obs`` (names ``data.prev_action_start``).
        ValueError: ``obs[start]`` is not (n, action_dim).
    """
    if start == ZEROS:
        return np.zeros((n, action_dim), np.float32)
    if start not in obs:
        raise KeyError(
            f"data.prev_action_start={start!r} is neither {ZEROS!r} nor an observation key "
            f"({sorted(k for k in obs if k.startswith('observation.'))})"
        )
    values = np.asarray(obs[start], np.float32).reshape(n, -1)
    if values.shape != (n, action_dim):
        raise ValueError(
            f"data.prev_action_start={start!r} has {values.shape[1]} values per step; the action has "
            f"{action_dim}"
        )
    return values


def previous_actions(actions: np.ndarray, episode_index: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The action of each frame's previous frame in its episode, (N, d) float32 from ``actions`` (N, d) and
    ``episode_index`` (N,) (episodes contiguous); an episode's first frame gets its row of ``starts``
    (N, d), the start value (:func:`start_actions` of the recorded frames)."""
    actions = np.asarray(actions, dtype=np.float32).reshape(len(actions), -1)
    episode_index = np.asarray(episode_index).reshape(-1)
    first = np.append(True, episode_index[1:] != episode_index[:-1])
    out = np.concatenate([actions[:1], actions[:-1]])
    out[first] = np.asarray(starts, np.float32).reshape(out.shape)[first]
    return out
