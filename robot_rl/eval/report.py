"""The run report: ``report.json``, ``report.md`` and ``curves.png`` (learning curves + success rates)."""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from robot_rl.eval.splits import SPLIT_SEED_OFFSETS  # noqa: E402
from robot_rl.run_dir import write_json_atomic  # noqa: E402

METHOD_TITLES = {
    "bc": "Flow BC",
    "offline": "Chunked offline RL",
    "online_qc": "Online HIL RL (QC)",
    "online_qc_fql": "Online HIL RL (QC-FQL)",
    "online_sac": "Online HIL-SERL SAC",
    "online_hg_dagger": "HG-DAgger",
}


def read_log(path: Path) -> dict[str, list[float]]:
    """Read a training CSV log (header row, then numeric rows) into columns."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {k: [float(r[k]) for r in rows if r[k] != ""] for k in (rows[0] if rows else {})}


def plot_curves(logs: dict[str, dict[int, Path]], summaries: dict[str, dict], out: Path) -> None:
    """Plot training curves per method and seed, and success rates with 95% intervals, into ``out``."""
    panels = [("bc", "bc_loss"), ("offline", "critic_loss"), ("offline", "q_mean")]
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(4.2 * (len(panels) + 1), 3.4))
    for ax, (method, column) in zip(axes, panels, strict=False):
        for seed, path in sorted(logs.get(method, {}).items()):
            cols = read_log(path)
            if column in cols:
                ax.plot(cols["step"][: len(cols[column])], cols[column], label=f"seed {seed}")
        ax.set_title(f"{METHOD_TITLES.get(method, method)}: {column}")
        ax.set_xlabel("gradient step")
        ax.legend(fontsize=7)
    ax = axes[-1]
    names = list(summaries)
    rates = [summaries[m]["success_rate"] for m in names]
    lo = [r - summaries[m]["success_ci95"][0] for r, m in zip(rates, names, strict=True)]
    hi = [summaries[m]["success_ci95"][1] - r for r, m in zip(rates, names, strict=True)]
    ax.bar([METHOD_TITLES.get(m, m) for m in names], rates, yerr=[lo, hi], capsize=6, color=["#888", "#2a7"])
    ax.set_ylim(0, 1)
    ax.set_title("success rate (95% CI)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_training(log: Path, val_log: Path | None, out: Path) -> None:
    """One panel per training metric of ``log`` (CSV), with the validation loss and open-loop action
    errors of ``val_log`` when given, against gradient steps, into ``out`` (PNG)."""
    train = read_log(log)
    val = read_log(val_log) if val_log is not None and val_log.is_file() else {}
    train_cols = [c for c in train if c != "step"]
    val_cols = [c for c in val if c not in ("step", "val_bc_loss")]
    panels = len(train_cols) + len(val_cols)
    fig, axes = plt.subplots(1, max(panels, 1), figsize=(3.6 * max(panels, 1), 3.0), squeeze=False)
    for ax, col in zip(axes[0], train_cols + val_cols, strict=False):
        source = train if col in train_cols else val
        ax.plot(source["step"], source[col], label="train" if source is train else "held-out")
        if col == "bc_loss" and "val_bc_loss" in val:
            ax.plot(val["step"], val["val_bc_loss"], label="held-out", marker=".")
        ax.set_title(col, fontsize=9)
        ax.set_xlabel("gradient step", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def _dataset_line(env_id: str, dataset: dict) -> str:
    """The report's first line: the env and the training data (collected scripted demos, or ``data.path``)."""
    rate = dataset.get("demo_success_rate")
    rate_text = f"episode success rate {rate:.2f}" if rate is not None else "no success column"
    if dataset.get("path"):
        n = dataset["num_episodes"]
        return f"Environment `{env_id}`, dataset `{dataset['path']}`: {n} episodes ({rate_text})."
    return (
        f"Environment `{env_id}`, {dataset['num_episodes']} demonstrations (scripted expert, noise "
        f"{dataset['expert_noise']}, demo success rate {rate:.2f})."
    )


def write_report(root: Path, report: dict) -> None:
    """Write ``report.json`` and a human-readable ``report.md`` into ``root``; the markdown says which eval
    split (``report["eval_split"]``, test when absent) the numbers come from."""
    write_json_atomic(root / "report.json", report)
    lines = ["# robot_rl run report", "", _dataset_line(report["env_id"], report["dataset"]), ""]
    split = report.get("eval_split", "test")
    first = SPLIT_SEED_OFFSETS[split]
    lines += [f"Evaluated on the **{split}** split (env seeds from {first:,}; robot_rl.eval.splits).", ""]
    lines += [
        "| method | success rate | 95% CI | std across seeds | mean return | cycle time (s) | episodes |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in report["methods"].items():
        ct = f"{s['cycle_time_s']:.2f}" if s["cycle_time_s"] is not None else "-"
        lines.append(
            f"| {METHOD_TITLES.get(name, name)} | {s['success_rate']:.3f} | "
            f"[{s['success_ci95'][0]:.3f}, {s['success_ci95'][1]:.3f}] | "
            f"{s['success_rate_std_across_seeds']:.3f} | {s['mean_return']:.3f} | {ct} | "
            f"{s['num_episodes']} ({len(s['seeds'])} seed{'s' if len(s['seeds']) != 1 else ''}) |"
        )
    lines += ["", f"Offline-RL gain over BC (success rate): {report['gain_success_rate']:+.3f}", ""]
    lines += ["Stage wall times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in report["wall_time_s"].items())]
    lines += ["", "![curves](curves.png)", ""]
    lines += [f"- video: `{v}`" for v in report.get("videos", [])]
    (root / "report.md").write_text("\n".join(lines) + "\n")
