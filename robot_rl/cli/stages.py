"""``robot-rl collect | train | eval | open-loop | pipeline``: the main job's stages (robot_rl.stages), each
run for the config and, where it trains or evaluates, for each training seed, with a summary printed."""

from __future__ import annotations

import argparse

from robot_rl.config import PipelineConfig, parse_overrides
from robot_rl.eval.inference import check_trained_values, given_inference
from robot_rl.eval.summary import stage_eval_summary, train_summary
from robot_rl.run_dir import RunDir, online_name
from robot_rl.stages.collect import collect as collect_stage
from robot_rl.stages.evaluate import evaluate as evaluate_stage
from robot_rl.stages.pipeline import pipeline as pipeline_stage
from robot_rl.stages.train import open_loop as open_loop_stage
from robot_rl.stages.train import train as train_stage
from robot_rl.threads import set_threads


def train_arguments(p: argparse.ArgumentParser) -> None:
    """``--algo`` of ``train`` and ``open-loop``."""
    p.add_argument("--algo", choices=["bc", "offline"], default="bc")


def eval_arguments(p: argparse.ArgumentParser) -> None:
    """``--algo`` of ``eval``: a trained method of the run."""
    p.add_argument("--algo", choices=["bc", "offline", "online", "ppo"], default="bc")


def _seeds(args: argparse.Namespace, cfg: PipelineConfig) -> list[int]:
    return [args.seed] if args.seed is not None else list(cfg.seeds)


def collect(args: argparse.Namespace, cfg: PipelineConfig, overrides: list[str]) -> None:
    """``robot-rl collect`` (:func:`robot_rl.stages.collect.collect`)."""
    set_threads(cfg.threads)
    collect_stage(cfg)


def pipeline(args: argparse.Namespace, cfg: PipelineConfig, overrides: list[str]) -> None:
    """``robot-rl pipeline`` (:func:`robot_rl.stages.pipeline.pipeline`); prints report.md."""
    set_threads(cfg.threads)
    pipeline_stage(cfg)


def train(args: argparse.Namespace, cfg: PipelineConfig, overrides: list[str]) -> None:
    """``robot-rl train --algo A``: train each seed and print its summary and log paths."""
    set_threads(cfg.threads)
    run = RunDir(cfg.run_dir)
    for seed in _seeds(args, cfg):
        result = train_stage(cfg, args.algo, seed)
        val_log = run.val_log(args.algo, seed)
        log = str(run.train_log(args.algo, seed))
        print(
            train_summary(args.algo, seed, result, log, str(val_log) if val_log.is_file() else None),
            flush=True,
        )


def open_loop(args: argparse.Namespace, cfg: PipelineConfig, overrides: list[str]) -> None:
    """``robot-rl open-loop --algo A``: print each seed's open-loop action error."""
    set_threads(cfg.threads)
    for seed in _seeds(args, cfg):
        print(open_loop_stage(cfg, args.algo, seed))


def evaluate(args: argparse.Namespace, cfg: PipelineConfig, overrides: list[str]) -> None:
    """``robot-rl eval --algo A``: evaluate each seed's checkpoint (or the served policy) and print its
    summary. Inference knobs given as overrides are set on the agent (robot_rl.eval.inference).

    Raises:
        ConfigError: a knob given on the command line differs from the checkpoint's trained value where it
            must not (:func:`robot_rl.eval.inference.check_trained_values`).
    """
    set_threads(cfg.threads)
    algo = {"online": online_name(cfg), "ppo": f"ppo_{cfg.ppo.method}"}.get(args.algo, args.algo)
    given = parse_overrides(overrides)
    run = RunDir(cfg.run_dir)
    for seed in _seeds(args, cfg):
        if not cfg.deploy.server:  # a served policy acts with its checkpoint's values
            check_trained_values(cfg, given, run.checkpoint(algo, seed))
        result = evaluate_stage(cfg, algo, seed, given_inference(cfg, given))
        print(stage_eval_summary(cfg, algo, seed, result), flush=True)
