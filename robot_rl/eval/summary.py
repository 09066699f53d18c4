"""Short human summaries the CLI prints after ``train`` and ``eval`` (the JSON files keep every number)."""

from __future__ import annotations

from robot_rl.config import PipelineConfig
from robot_rl.eval.splits import eval_variant
from robot_rl.run_dir import RunDir


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _pairs(metrics: dict) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in metrics.items()) or "none"


def train_summary(algo: str, seed: int, result: dict, log: str, val_log: str | None = None) -> str:
    """A few lines: the steps and wall time, the last logged training metrics (losses first), the final
    validation metrics (``val_*``, when ``data.val_episodes`` held episodes out), the checkpoint and the
    log paths.

    Args:
        result: the ``train_<algo>_seed<s>`` stage result: ``checkpoint`` (path), ``final`` (metrics),
            ``wall_time_s`` (s) and ``steps``.
        log, val_log: the CSV logs (``val_log`` None without validation).
    """
    final = result.get("final", {})
    train = {k: v for k, v in final.items() if not k.startswith("val_")}
    train = {
        **{k: v for k, v in train.items() if "loss" in k},
        **{k: v for k, v in train.items() if "loss" not in k},
    }
    val = {k: v for k, v in final.items() if k.startswith("val_")}
    lines = [
        f"train {algo} seed {seed}: {result.get('steps', '?')} steps in "
        f"{result.get('wall_time_s', 0.0):.1f} s",
        f"  final training metrics: {_pairs(train)}",
    ]
    if val:
        lines.append(f"  validation (held-out episodes): {_pairs(val)}")
    lines.append(f"  checkpoint: {result['checkpoint']}")
    lines.append(f"  logs: {log}" + (f", {val_log}" if val and val_log else ""))
    return "\n".join(lines)


def eval_summary(algo: str, seed: int, summary: dict, path: str, groups: dict | None, split: str) -> str:
    """The ``split`` the episodes ran on (:mod:`robot_rl.eval.splits`), success rate with its 95% interval,
    mean return, mean cycle time and episode count; then, for each grouping in ``groups`` (``{"task":
    per_task, "instruction": per_instruction}`` of the eval JSON) with more than one group, a line per group
    (success, interval, episodes); then the eval JSON's path. ``summary`` and each group's value are
    :func:`robot_rl.eval.metrics.summarize`'s."""
    lo, hi = summary["success_ci95"]
    cycle = summary.get("cycle_time_s")
    cycle_text = f"{cycle:.2f} s" if cycle is not None else "n/a (no success)"
    lines = [
        f"eval {algo} seed {seed} ({split} split): success {summary['success_rate']:.0%} "
        f"(95% CI {lo:.0%}-{hi:.0%}) over {summary['num_episodes']} episodes, "
        f"mean return {summary['mean_return']:.4g}, cycle time {cycle_text}"
    ]
    shown: list[dict] = []
    for field, per in (groups or {}).items():
        if len(per) > 1 and per not in shown:  # per_instruction equals per_task without paraphrases
            shown.append(per)
            for name, s in per.items():
                glo, ghi = s["success_ci95"]
                lines.append(
                    f"  {field} {name!r}: success {s['success_rate']:.0%} ({glo:.0%}-{ghi:.0%}), "
                    f"{s['num_episodes']} episodes"
                )
    lines.append(f"  results: {path}")
    return "\n".join(lines)


def stage_eval_summary(cfg: PipelineConfig, algo: str, seed: int, result: dict, by_group: bool = True) -> str:
    """:func:`eval_summary` of an evaluation stage's ``result`` (``robot_rl.stages.evaluate.evaluate``): the
    split it ran on (its ``split``) and the eval JSON it wrote (``cfg``'s run dir, ``eval.name`` and
    ``eval.split``); with ``by_group``, a line per task and per instruction when there are several."""
    path = RunDir(cfg.run_dir).eval_file(algo, seed, eval_variant(cfg.eval.name, cfg.eval.split))
    groups = {"task": result.get("per_task", {}), "instruction": result.get("per_instruction", {})}
    split = result.get("split", cfg.eval.split)
    return eval_summary(algo, seed, result["summary"], str(path), groups if by_group else None, split)
