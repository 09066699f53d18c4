"""Paired comparison of evaluated methods: success rate (Wilson 95% CI, per seed) and the exact McNemar test
of each method against a baseline, pairing episodes by (training seed, env seed).

Each method is ``label=run_dir:algo`` (the eval files ``<run_dir>/eval/<algo>_seed<s>.json`` that
``robot-rl eval`` writes) or ``label=run_dir:algo@name`` for an evaluation run with ``--eval.name=name``
(``<algo>_seed<s>_<name>.json``); the first one is the baseline. ``--split validation`` compares the
validation evaluations (``--eval.split=validation``) instead of the test ones; the table says which split
it is, and a file of another split is refused (robot_rl.eval.splits).

    python benchmarks/compare_evals.py bc=runs/dense:bc qc=runs/qc_dense:offline --seeds 0 1 2
    python benchmarks/compare_evals.py bc=runs/mt20/vla:bc@push_to_target \
        corft=runs/mt20/vla:offline@push_to_target --seeds 0 1 2

(``--seeds`` after the methods: it takes every number that follows it.)

Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from robot_rl.eval.metrics import EpisodeResult, paired_comparison, summarize_seeds
from robot_rl.eval.splits import EVAL_SPLITS, eval_variant

_SEED_KEY = 10_000_000  # env seeds are < 1e7 above EVAL_SEED_OFFSET: (seed, env_seed) -> one int


def load(spec: str, seeds: list[int], split: str = "test") -> tuple[str, dict[int, list[EpisodeResult]]]:
    """``label=run_dir:algo[@name]`` -> (label, {seed: episodes}) of the ``split`` evaluations.

    Raises:
        FileNotFoundError: naming the missing evaluation file.
        ValueError: a file holds another split's episodes (names it).
    """
    label, where = spec.split("=", 1)
    run_dir, algo = where.rsplit(":", 1)
    algo, _, name = algo.partition("@")
    variant = eval_variant(name, split)
    suffix = f"_{variant}" if variant else ""
    per_seed = {}
    for seed in seeds:
        path = Path(run_dir) / "eval" / f"{algo}_seed{seed}{suffix}.json"
        if not path.is_file():
            raise FileNotFoundError(f"{label}: no evaluation at {path}")
        saved = json.loads(path.read_text())
        if saved.get("split", "test") != split:
            raise ValueError(f"{label}: {path} holds the {saved['split']} split, not {split}")
        per_seed[seed] = [EpisodeResult(**e) for e in saved["episodes"]]
    return label, per_seed


def _keyed(per_seed: dict[int, list[EpisodeResult]]) -> list[EpisodeResult]:
    return [
        EpisodeResult(s * _SEED_KEY + e.env_seed, e.success, e.episode_return, e.steps, e.cycle_time_s)
        for s, eps in per_seed.items()
        for e in eps
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--split", choices=EVAL_SPLITS, default="test", help="the evaluations' seed split")
    parser.add_argument("methods", nargs="+", help="label=run_dir:algo[@name]; the first is the baseline")
    args = parser.parse_args()
    runs = [load(spec, args.seeds, args.split) for spec in args.methods]
    base_label, base = runs[0]
    print(f"{args.split} split (robot_rl.eval.splits), training seeds {args.seeds}\n")
    print(f"| method | success | 95% CI | per seed | vs {base_label}: only this / only {base_label} | p |")
    print("|---|---|---|---|---|---|")
    for label, per_seed in runs:
        s = summarize_seeds(per_seed)
        lo, hi = s["success_ci95"]
        seeds = ", ".join(f"{v:.2f}" for v in s["success_rate_per_seed"].values())
        if label == base_label:
            cmp_txt, p_txt = "", ""
        else:
            c = paired_comparison(_keyed(per_seed), _keyed(base))
            cmp_txt, p_txt = f"{c['only_a']} / {c['only_b']}", f"{c['p_value']:.2g}"
        print(f"| {label} | {s['success_rate']:.3f} | [{lo:.2f}, {hi:.2f}] | {seeds} | {cmp_txt} | {p_txt} |")


if __name__ == "__main__":
    main()
