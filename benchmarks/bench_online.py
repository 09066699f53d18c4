"""Online human-in-the-loop RL on the simulated pick-cube: QC (chunked, from the offline checkpoint) against
the HIL-SERL SAC recipe and HG-DAgger at the same env-step budget, all with the simulated human; then the
Ray runtime with 1 and 2 actors.

Needs a run directory holding ``dataset/`` and ``checkpoints/offline_seed<k>`` (the main job's
``robot-rl pipeline`` output). Each online run is followed by a 50-episode evaluation on the held-out env
seeds the pipeline uses (no human), so the offline start and each method are compared on the same seeds.

    python benchmarks/bench_online.py --from-run runs/panda_pick_cube --out runs/online_bench \
        --seeds 0 1 2 --env-steps 2000

Prints one row per method (success rate pooled over seeds with its Wilson interval, intervention rate and
cycle time during training, wall time, and the online stage's own wall time and env steps/s) and writes
``results.json`` in ``--out``. Config overrides pass through, e.g. batched actors (issue 19)::

    python benchmarks/bench_online.py --from-run runs/panda_pick_cube --out runs/online_n8 --seeds 0 \
        --methods qc --env-steps 1000 --online.envs_per_actor=8 --env.backend=mujoco_cpu
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from robot_rl.config import load_config
from robot_rl.eval.metrics import EpisodeResult, summarize_seeds
from robot_rl.run_dir import RunDir, online_name
from robot_rl.stages.evaluate import evaluate
from robot_rl.stages.online import online


def _prepare(src: Path, out: Path, seeds: list[int]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "dataset").exists():
        (out / "dataset").symlink_to((src / "dataset").resolve())
    for seed in seeds:
        dst = out / "checkpoints" / f"offline_seed{seed}"
        if not dst.exists():
            shutil.copytree(src / "checkpoints" / f"offline_seed{seed}", dst)


def _run(config: str | None, overrides: list[str], seeds: list[int], episodes: int) -> dict:
    cfg = load_config(config, overrides)
    per_seed, train = {}, []
    for seed in seeds:
        summary = online(cfg, seed)
        name = online_name(cfg)
        evaluated = evaluate(cfg, name, seed)
        per_seed[seed] = [EpisodeResult(**e) for e in evaluated["episodes"]]
        train.append(summary)
    return {"eval": summarize_seeds(per_seed), "train": train}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from-run", required=True, help="run dir with dataset/ and checkpoints/offline_seed<k>")
    p.add_argument("--out", required=True)
    p.add_argument("--config", default=None)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--env-steps", type=int, default=2000)
    p.add_argument("--methods", nargs="+", default=["qc", "sac", "hg_dagger"])
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--ray", action="store_true", help="also time Ray with 1 and 2 actors (qc, first seed)")
    p.add_argument("overrides", nargs="*", help="extra --a.b=value config overrides")
    args, extra = p.parse_known_args()  # --a.b=value overrides need no `--` before them
    unknown = [e for e in extra if not (e.startswith("--") and "=" in e and "." in e.split("=", 1)[0])]
    if unknown:
        p.error(f"unrecognized arguments: {' '.join(unknown)} (config overrides are --section.key=value)")
    args.overrides = [*args.overrides, *extra]
    out = Path(args.out)
    _prepare(Path(args.from_run), out, args.seeds)
    common = [
        f"--run_dir={out}",
        f"--online.env_steps={args.env_steps}",
        f"--eval.episodes_per_seed={args.episodes}",
        "--intervention.device=sim_human",
        "--online.address=tcp://127.0.0.1:0",
        *args.overrides,
    ]
    results = {}
    for method in args.methods:
        start = time.time()
        results[method] = _run(args.config, [*common, f"--online.method={method}"], args.seeds, args.episodes)
        results[method]["wall_time_s"] = time.time() - start
        json.dump(results, open(out / "results.json", "w"), indent=2)
    if args.ray:
        for actors in (1, 2):
            ray_out = out / f"ray_{actors}actors"
            _prepare(Path(args.from_run), ray_out, args.seeds[:1])
            start = time.time()
            cfg = load_config(
                args.config,
                [*common, f"--run_dir={ray_out}", "--online.runtime=ray", f"--online.num_actors={actors}"],
            )
            summary = online(cfg, args.seeds[0])
            results[f"ray_{actors}"] = {**summary, "wall_time_s": time.time() - start}
            json.dump(results, open(out / "results.json", "w"), indent=2)
    print(
        f"{'method':<12}{'success':>9}{'95% CI':>16}{'interv. rate':>14}{'train success':>15}{'wall s':>9}"
        f"{'online s':>10}{'env step/s':>12}"
    )
    for method in args.methods:
        r = results[method]
        ev, tr = r["eval"], r["train"]
        interv = sum(t["intervention_rate"] for t in tr) / len(tr)
        train_succ = sum(t["success_rate"] for t in tr) / len(tr)
        ci = "[{:.2f}, {:.2f}]".format(*ev["success_ci95"])
        online_s = sum(t["wall_time_s"] for t in tr)  # the online stages alone (learner start to summary)
        rate = sum(t["env_steps"] for t in tr) / online_s
        print(
            f"{method:<12}{ev['success_rate']:>9.3f}{ci:>16}{interv:>14.3f}{train_succ:>15.3f}{r['wall_time_s']:>9.0f}"
            f"{online_s:>10.0f}{rate:>12.1f}"
        )
    print(f"results: {out / 'results.json'}; per-run logs in {RunDir(out).root / 'logs'}")


if __name__ == "__main__":
    main()
