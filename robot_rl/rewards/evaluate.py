"""``robot-rl critic eval``: VOC on held-out successful demos, VOC and negative-delta rate on failed,
reversed and wrong-task episodes, done-detection AUC, and a plot of progress curves (docs/algorithms.md
§9)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.rewards.base import ProgressCritic
from robot_rl.rewards.episodes import CriticEpisode, critic_episodes
from robot_rl.rewards.metrics import done_auc, negative_delta_rate, voc
from robot_rl.rewards.pairs import DISTRACTOR_TASKS
from robot_rl.rewards.progress import reconstruct_progress

KINDS = ("success", "reversed", "failed", "wrong_task")


def score_episodes(critic: ProgressCritic, episodes: list[CriticEpisode], rule: str = "scale") -> dict:
    """Score every episode as it happened, and each successful one reversed and under a wrong task.

    Returns:
        {"summary": {kind: {"episodes", "voc_mean", "voc_min", "voc_anchor_mean", "final_progress_mean",
        "negative_delta_rate"}, "done_auc": float | None, "done_frames": int}, "episodes": [{"episode",
        "kind", "voc", "voc_anchor", "negative_delta_rate", "progress": [T], "anchored": [T]}]}.
        ``voc`` ranks the VLAC curve rebuilt from consecutive deltas (``episode_progress``); it starts at 0
        by construction, so on a reversed or wrong-task clip small positive noise still ranks upward, and
        ``final_progress_mean`` (near 0 there) is the better tell. ``voc_anchor`` ranks c(o_0, o_t), each
        frame against the first (GVL's 0% anchor), which goes negative on a reversed clip. Done AUC is over
        every frame of the as-recorded episodes, labelled 1 from the success step on (0 throughout a failed
        episode), each frame scored against the first one.
    """
    rows: list[dict] = []
    probs, labels = [], []
    for ep in episodes:
        runs = [("success" if ep.success_step is not None else "failed", ep.frames, ep.task)]
        if ep.success_step is not None:
            runs.append(("reversed", {k: v[::-1] for k, v in ep.frames.items()}, ep.task))
            runs.append(("wrong_task", ep.frames, next(t for t in DISTRACTOR_TASKS if t != ep.task)))
        for kind, frames, task in runs:
            row = _score(critic, ep.index, kind, frames, task, rule)
            done_prob = row.pop("done_prob")
            if kind in ("success", "failed"):  # as recorded
                probs.append(done_prob)
            rows.append(row)
        label = np.zeros(ep.length)
        if ep.success_step is not None:
            label[ep.success_step :] = 1
        labels.append(label)
    summary: dict = {}
    for kind in KINDS:
        sel = [r for r in rows if r["kind"] == kind]
        if sel:
            vocs = [r["voc"] for r in sel]
            summary[kind] = {
                "episodes": len(sel),
                "voc_mean": float(np.mean(vocs)),
                "voc_min": float(np.min(vocs)),
                "voc_anchor_mean": float(np.mean([r["voc_anchor"] for r in sel])),
                "final_progress_mean": float(np.mean([r["progress"][-1] for r in sel])),
                "negative_delta_rate": float(np.mean([r["negative_delta_rate"] for r in sel])),
            }
    all_probs = np.concatenate(probs) if probs else np.zeros(0)
    summary["done_auc"] = done_auc(all_probs, np.concatenate(labels)) if probs else None
    summary["done_frames"] = int(sum(lab.sum() for lab in labels))
    return {"summary": summary, "episodes": rows}


def episode_vocs(critic: ProgressCritic, root: str | Path) -> list[float]:
    """VOC of every episode of the dataset at ``root``: Spearman of c(o_0, o_t) against t (GVL's anchored
    form, which does not accumulate errors). Episodes are decoded one at a time."""
    return [
        voc(critic.against_first(ep.frames, ep.task).delta)
        for ep in critic_episodes(critic, root, success="episode_end")
    ]


def _score(critic: ProgressCritic, index: int, kind: str, frames: dict, task: str, rule: str) -> dict:
    deltas = critic.predict(
        {k: v[:-1] for k, v in frames.items()}, {k: v[1:] for k, v in frames.items()}, task
    ).delta
    progress = reconstruct_progress(deltas, rule)
    anchored = critic.against_first(frames, task)
    return {
        "episode": index,
        "kind": kind,
        "voc": voc(progress),
        "voc_anchor": voc(anchored.delta),
        "negative_delta_rate": negative_delta_rate(deltas),
        "progress": [round(float(p), 4) for p in progress],
        "anchored": [round(float(p), 4) for p in anchored.delta],
        "done_prob": anchored.done,
    }


def plot_progress(result: dict, path: str | Path, per_kind: int = 6) -> Path:
    """One panel per episode kind with up to ``per_kind`` progress curves (progress vs frame)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in KINDS if k in result["summary"]]
    fig, axes = plt.subplots(1, len(kinds), figsize=(4 * len(kinds), 3.2), squeeze=False, sharey=True)
    for ax, kind in zip(axes[0], kinds, strict=True):
        for row in [r for r in result["episodes"] if r["kind"] == kind][:per_kind]:
            ax.plot(row["progress"], label=f"ep {row['episode']} VOC {row['voc']:.2f}")
        s = result["summary"][kind]
        ax.set_title(f"{kind}: VOC {s['voc_mean']:.2f} (n={s['episodes']})")
        ax.set_xlabel("frame")
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("progress")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
