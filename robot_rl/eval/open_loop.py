"""Open-loop evaluation on held-out episodes: predict an action chunk at recorded frames and compare it
with the actions the demonstrator took, with no environment (the standard offline check for real-robot
datasets, as in LeRobot's and openpi's validation).

Metrics, in the dataset's action units (rad, m, or normalised hand joints), over valid chunk steps only:
``val_action_mae`` mean |â − a|, ``val_action_rmse`` sqrt(mean (â − a)²), ``val_first_action_mae`` the first
step of each chunk only, and ``val_bc_loss`` the flow-matching loss (docs/algorithms.md §2) at fixed noise.
For scale, ``val_hold_action_mae`` is the MAE of the no-learning baseline that repeats the previously
recorded action a[t−1] over the whole chunk (a[t] at an episode's first frame).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from robot_rl.algos.base import prepare_actions  # noqa: E402
from robot_rl.algos.batch import batch_to_torch  # noqa: E402
from robot_rl.data.lerobot.tools import evenly_spaced  # noqa: E402
from robot_rl.data.training.training_set import Split, TrainingSet  # noqa: E402


@dataclass
class OpenLoopResult:
    """``metrics`` (floats, see module doc); ``rows`` scored dataset rows (N,); ``predicted`` and
    ``recorded`` chunks (N, h, d) float32 in action units; ``valid`` (N, h) float32."""

    metrics: dict[str, float]
    rows: np.ndarray
    predicted: np.ndarray
    recorded: np.ndarray
    valid: np.ndarray

    def per_step_mae(self) -> np.ndarray:
        """MAE at each chunk step (h,), over valid chunks."""
        err = np.abs(self.predicted - self.recorded).mean(-1) * self.valid
        return err.sum(0) / np.maximum(self.valid.sum(0), 1)


@torch.no_grad()
def open_loop_eval(
    agent,
    data: TrainingSet,
    split: Split,
    max_frames: int,
    device: str = "cpu",
    batch_size: int = 256,
    seed: int = 0,
) -> OpenLoopResult:
    """Score up to ``max_frames`` evenly spaced frames of ``split`` with ``agent.act`` (B, h, d).

    Noise is drawn from ``seed`` inside a forked torch RNG, so repeated calls on the same weights give the
    same numbers and the training RNG stream is untouched.
    """
    n = len(split.rows)
    indices = evenly_spaced(0, n, max_frames)
    preds, recs, valids, losses = [], [], [], []
    was_training = agent.policy.training
    agent.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for lo in range(0, len(indices), batch_size):
            batch = batch_to_torch(data.batch(split, indices[lo : lo + batch_size]), device)
            obs, actions, valid = batch["observations"], batch["actions"], batch["valid"]
            target = prepare_actions(agent.policy, actions, valid, obs)
            losses.append(float(agent.policy.bc_loss(obs, target, valid)) * len(actions))
            preds.append(agent.act(obs).cpu().numpy())
            recs.append(actions.cpu().numpy())
            valids.append(valid.cpu().numpy())
    agent.train(was_training)
    pred, rec, valid = np.concatenate(preds), np.concatenate(recs), np.concatenate(valids)
    err = (pred - rec) * valid[..., None]
    count = max(valid.sum() * pred.shape[-1], 1.0)
    episodes = data.dataset.episode_of(split.rows)
    prev = np.where(
        (indices > 0) & (episodes[np.maximum(indices - 1, 0)] == episodes[indices]), indices - 1, indices
    )
    hold = (split.sampler.actions[prev][:, None, :] - rec) * valid[..., None]
    first = np.abs(pred[:, 0] - rec[:, 0]).mean()
    metrics = {
        "val_bc_loss": sum(losses) / len(indices),
        "val_action_mae": float(np.abs(err).sum() / count),
        "val_action_rmse": float(np.sqrt((err**2).sum() / count)),
        "val_first_action_mae": float(first),
        "val_hold_action_mae": float(np.abs(hold).sum() / count),
    }
    return OpenLoopResult(metrics, split.rows[indices], pred, rec, valid)


def plot_open_loop(result: OpenLoopResult, out: Path, names: list[str] | None = None, dims: int = 6) -> None:
    """Recorded vs predicted first chunk action over the scored frames for the ``dims`` dimensions with the
    largest recorded range, plus MAE per chunk step, into ``out`` (PNG)."""
    rec, pred = result.recorded[:, 0], result.predicted[:, 0]
    order = np.argsort(-(rec.max(0) - rec.min(0)))[:dims]
    fig, axes = plt.subplots(1, len(order) + 1, figsize=(3.2 * (len(order) + 1), 2.8))
    for ax, d in zip(axes, order, strict=False):
        ax.plot(result.rows, rec[:, d], label="recorded", color="#444")
        ax.plot(result.rows, pred[:, d], label="predicted", color="#2a7", alpha=0.8)
        ax.set_title(names[d] if names and d < len(names) else f"action[{d}]", fontsize=8)
        ax.set_xlabel("dataset row", fontsize=7)
    axes[0].legend(fontsize=6)
    ax = axes[-1]
    ax.bar(np.arange(result.predicted.shape[1]), result.per_step_mae(), color="#2a7")
    ax.set_title("MAE per chunk step", fontsize=8)
    ax.set_xlabel("step in chunk", fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def command_change_split(
    predicted: np.ndarray, recorded: np.ndarray, prev: np.ndarray, tol: float = 1e-3
) -> dict[str, float]:
    """First-step error on frames where the command changes against frames where it holds: the copycat
    check for policies fed the last command (Wen et al. 2020, "Fighting Copycat Agents").

    Args:
        predicted, recorded: chunks (N, h, d) float32 in action units; only step 0 is used.
        prev: the last command the policy saw, a[t−1] (N, d), in action units.
        tol: a frame "holds" when mean_d |a[t] − a[t−1]| <= ``tol`` (action units per frame), else "changes".

    Returns ``first_mae_changed`` / ``first_mae_held`` (the policy) and ``hold_mae_changed`` /
    ``hold_mae_held`` (repeating a[t−1]) over each group, ``copy_ratio_changed`` = policy / hold on the
    changing frames (1 = no better than copying the last command) and ``frac_changed``. A group with no
    frames gives NaN.
    """
    step = np.abs(recorded[:, 0] - prev).mean(-1)
    changed = step > tol
    policy = np.abs(predicted[:, 0] - recorded[:, 0]).mean(-1)

    def mean(x: np.ndarray, mask: np.ndarray) -> float:
        return float(x[mask].mean()) if mask.any() else float("nan")

    out = {
        "first_mae_changed": mean(policy, changed),
        "first_mae_held": mean(policy, ~changed),
        "hold_mae_changed": mean(step, changed),
        "hold_mae_held": mean(step, ~changed),
        "frac_changed": float(changed.mean()) if len(changed) else float("nan"),
    }
    out["copy_ratio_changed"] = out["first_mae_changed"] / out["hold_mae_changed"]
    return out
