"""``observation.prev_action`` (``data.prev_action``): the actions executed at the last k control steps
(``data.prev_action_steps``, default 1), one definition for training and for every runtime that feeds it
(robot_rl.sources.PrevActionSource).

At step t it holds the last command a[t−1], then the k − 1 changes before it, a[t−1] − a[t−2], ...,
a[t−k+1] − a[t−k] (:func:`history_feature`), flattened to (k·d,) float32 (a human's action where one took
over). The same information as the k commands themselves, but each change gets its own normalisation
scale: on the G1 fixture a one-step change is ~50× smaller than the joint range the commands are
normalised by (median over joints), and a policy fed the raw a[t−2] next to a[t−1] did not learn their
difference in 2,000 steps (docs/results.md, G1 section).

Before an episode's first step no action has been executed; each missing command (all k at t = 0, the last
k − t at t < k) is the start value ``data.prev_action_start``: ``zeros`` (delta actions: "no motion") or an
observation key of the action's shape, read at the episode's first step (e.g. ``observation.state`` for
absolute joint commands: the robot holds its current position), so the changes before the episode are 0.
Training reads the same start value from the recorded first frame, so a deployed policy sees what it was
trained on. With k = 1 it is the single last command (the definition before the key existed); a
relative-action policy (``policy.action_reference: observation.prev_action``) takes its first d values,
a[t−1], as the reference; with ``policy.action_reference_velocity`` (k >= 2) the reference is the
constant-velocity extrapolation a[t−1] + (i + 1)(a[t−1] − a[t−2]) at chunk step i (:func:`chunk_reference`).
"""

from __future__ import annotations

import numpy as np

ZEROS = "zeros"


def prev_action_start(config: dict) -> str:
    """``data.prev_action_start`` of a checkpoint's config.json (``'zeros'`` when it predates the key)."""
    return str((config.get("data") or {}).get("prev_action_start", ZEROS))


def prev_action_steps(config: dict) -> int:
    """``data.prev_action_steps`` of a checkpoint's config.json (1 when it predates the key)."""
    return int((config.get("data") or {}).get("prev_action_steps", 1))


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


def history_feature(past: np.ndarray) -> np.ndarray:
    """The feature of the last k commands ``past`` (..., k, d), most recent first: (..., k·d) float32 holding
    a[t−1], then a[t−1] − a[t−2], ..., a[t−k+1] − a[t−k] (the module's definition)."""
    past = np.asarray(past, np.float32)
    out = past.copy()
    out[..., 1:, :] = past[..., :-1, :] - past[..., 1:, :]
    return out.reshape(*past.shape[:-2], -1)


def previous_actions(
    actions: np.ndarray, episode_index: np.ndarray, starts: np.ndarray, steps: int = 1
) -> np.ndarray:
    """``observation.prev_action`` of each frame, (N, k·d) float32 (:func:`history_feature` of the last
    ``steps`` (k) actions before it in its episode) from ``actions`` (N, d) and ``episode_index`` (N,)
    (episodes contiguous). Commands before an episode's first frame are that first frame's row of
    ``starts`` (N, d), the start value (:func:`start_actions` of the recorded frames). Raises ValueError for
    ``steps`` < 1."""
    if steps < 1:
        raise ValueError(f"data.prev_action_steps={steps}: expected >= 1")
    actions = np.asarray(actions, dtype=np.float32).reshape(len(actions), -1)
    episode_index = np.asarray(episode_index).reshape(-1)
    starts = np.asarray(starts, np.float32).reshape(actions.shape)
    rows = np.arange(len(actions))
    first = np.append(True, episode_index[1:] != episode_index[:-1])
    begin = np.maximum.accumulate(np.where(first, rows, 0))  # each frame's episode's first row
    out = np.empty((len(actions), steps, actions.shape[1]), np.float32)
    for j in range(steps):
        source = rows - 1 - j
        out[:, j] = np.where((source >= begin)[:, None], actions[np.maximum(source, 0)], starts[begin])
    return history_feature(out)


def chunk_reference(history, action_dim: int, horizon: int, velocity: bool):
    """The reference of a relative-action chunk from ``observation.prev_action`` (:func:`history_feature`,
    (B, k·d)): a[t−1] at every chunk step, (B, 1, d) broadcast (then k = 1 is enough); with ``velocity``
    (``policy.action_reference_velocity``), a[t−1] + (i + 1)(a[t−1] − a[t−2]) at chunk step i < ``horizon``,
    (B, h, d). NumPy arrays or torch tensors; the result is of the same kind and dtype.

    A residual on the constant-velocity model: on the G1 fixture continuing the last change predicts the next
    command 33 % better than holding it, and the policy learns the rest (docs/results.md, G1 section).

    Raises:
        ValueError: ``velocity`` and fewer than 2·d values (names ``data.prev_action_steps``).
    """
    latest = history[:, None, :action_dim]
    if not velocity:
        return latest
    if history.shape[-1] < 2 * action_dim:
        raise ValueError(
            f"policy.action_reference_velocity needs the last change of command: data.prev_action_steps >= 2 "
            f"(observation.prev_action has {history.shape[-1]} values for a {action_dim}-d action)"
        )
    steps = np.arange(1, horizon + 1, dtype=np.float32)[:, None]
    if hasattr(history, "new_tensor"):  # a torch tensor: its dtype and device
        steps = history.new_tensor(steps)
    return latest + steps * history[:, None, action_dim : 2 * action_dim]
