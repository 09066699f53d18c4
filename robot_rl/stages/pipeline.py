"""The main job: collect -> train (bc, offline) -> [online] -> eval -> report, every stage for every seed.

Each stage reads and writes files in the run directory and records a marker when it finishes, so a rerun
skips finished stages and a killed run resumes (training resumes from its last periodic checkpoint).
"""

from __future__ import annotations

from robot_rl.config import ConfigError, PipelineConfig, config_to_dict, save_config
from robot_rl.eval.metrics import EpisodeResult, summarize_seeds
from robot_rl.eval.report import plot_curves, write_report
from robot_rl.run_dir import RunDir, online_name
from robot_rl.sim import resolve_control_hz
from robot_rl.stages.collect import collect, given_dataset
from robot_rl.stages.evaluate import evaluate
from robot_rl.stages.online import online
from robot_rl.stages.train import train
from robot_rl.stages.videos import record_videos


def pipeline(cfg: PipelineConfig) -> dict:
    """Run every stage for every seed, then write report.json, report.md, curves.png and videos.

    With ``data.path`` set, that dataset is the training data and nothing is collected (any env, also a
    foreign one through ``env.adapter``); else ``collect`` records scripted demos of the built-in task.
    """
    if cfg.deploy.server:
        raise ConfigError(
            f"deploy.server={cfg.deploy.server!r}: pipeline evaluates every trained checkpoint in process; "
            "evaluate a served policy with `robot-rl eval --deploy.server=...`"
        )
    run = RunDir(cfg.run_dir)
    run.check_writable()
    save_config(cfg, run.root / "config.yaml")
    collected = given_dataset(cfg) if cfg.data.path else collect(cfg)
    cfg = resolve_control_hz(cfg, dataset_fps=collected.get("fps"))  # a foreign env's own rate (videos)
    walls = {"collect": collected["wall_time_s"], "train": 0.0, "eval": 0.0}
    algos = ["bc", "offline"] + ([online_name(cfg)] if cfg.online.in_pipeline else [])
    per_method: dict[str, dict[int, list[EpisodeResult]]] = {algo: {} for algo in algos}
    for seed in cfg.seeds:
        for algo in algos:
            if algo.startswith("online"):
                walls["online"] = walls.get("online", 0.0) + online(cfg, seed)["wall_time_s"]
            else:
                walls["train"] += train(cfg, algo, seed)["wall_time_s"]
            evaluated = evaluate(cfg, algo, seed)
            walls["eval"] += evaluated["wall_time_s"]
            per_method[algo][seed] = [EpisodeResult(**e) for e in evaluated["episodes"]]
    summaries = {algo: summarize_seeds(eps) for algo, eps in per_method.items()}
    videos = record_videos(cfg, run, seed=cfg.seeds[0])
    logs = {algo: {s: run.train_log(algo, s) for s in cfg.seeds} for algo in per_method}
    plot_curves(logs, summaries, run.root / "curves.png")
    report = {
        "env_id": cfg.env.id,
        "config": config_to_dict(cfg),
        "dataset": collected,
        "eval_split": cfg.eval.split,
        "methods": summaries,
        "gain_success_rate": summaries["offline"]["success_rate"] - summaries["bc"]["success_rate"],
        "wall_time_s": walls,
        "videos": [str(v.relative_to(run.root)) for v in videos],
    }
    write_report(run.root, report)
    print((run.root / "report.md").read_text())
    return report
