"""Shared set-up of the torch benchmarks (bench_policy, bench_learner): command line, threads, seed."""

from __future__ import annotations

import argparse

import torch

from robot_rl.data.normalize import FeatureStats
from robot_rl_testing.fakes import fake_stats


def torch_parser(doc: str, time_per_case: float) -> argparse.ArgumentParser:
    """Parser with ``--time-per-case`` (s) and ``--threads`` (0: torch's default)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--time-per-case", type=float, default=time_per_case)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    return parser


def start_torch(args: argparse.Namespace) -> dict[str, FeatureStats]:
    """Apply ``--threads``, seed torch with 0 and return sim-like normalisation statistics."""
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    return fake_stats()
