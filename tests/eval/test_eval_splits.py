"""The tuning protocol's seed split (issue 38): ``eval.split`` runs the episodes on validation or test env
seeds, files a validation look apart from the test result, and every output says which split it is."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from online_setup import copy_run, overrides
from repo_paths import ROOT

from robot_rl.cli.main import main
from robot_rl.config import ConfigError, load_config
from robot_rl.eval.report import write_report
from robot_rl.eval.splits import eval_variant, split_seeds
from robot_rl.stages.evaluate import evaluate


def test_validation_and_test_seeds_are_disjoint_and_filed_apart(tiny_offline_run, tmp_path, capsys):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    val = evaluate(load_config(None, overrides(run, "--eval.split=validation")), "bc", 0)
    assert val["split"] == "validation" and val["conditions"]["split"] == "validation"
    assert [e["env_seed"] for e in val["episodes"]] == split_seeds("validation", 2) == [1_500_000, 1_500_001]
    assert (run / "eval" / "bc_seed0_validation.json").is_file()
    assert not (run / "eval" / "bc_seed0.json").exists()  # a validation look is not the test result
    # the test split is its own stage: it runs (not answered with the validation result) on its own seeds
    assert main(["eval", *overrides(run), "--algo=bc", "--seed=0"]) == 0
    out = capsys.readouterr().out
    assert "eval bc seed 0 (test split): success" in out
    test = json.loads((run / "eval" / "bc_seed0.json").read_text())
    assert test["split"] == "test" and [e["env_seed"] for e in test["episodes"]] == [1_000_000, 1_000_001]
    assert eval_variant("para", "validation") == "para_validation" and eval_variant("para", "test") == "para"
    # the paired comparison reads one split and says which
    compare = [sys.executable, str(ROOT / "benchmarks" / "compare_evals.py"), f"bc={run}:bc", "--seeds", "0"]
    out = subprocess.run([*compare, "--split", "validation"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("validation split"), out.stderr[-2000:]
    saved = json.loads((run / "eval" / "bc_seed0.json").read_text())
    (run / "eval" / "bc_seed0.json").write_text(json.dumps({**saved, "split": "validation"}))
    out = subprocess.run(compare, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "holds the validation split, not test" in out.stderr


def test_report_says_the_split_and_a_bad_split_is_one_line(tmp_path):
    summary = {
        "success_rate": 0.5,
        "success_ci95": [0.2, 0.8],
        "success_rate_std_across_seeds": 0.0,
        "mean_return": 1.0,
        "cycle_time_s": None,
        "num_episodes": 4,
        "seeds": [0],
    }
    report = {
        "env_id": "robot_rl/PandaPickCube-v0",
        "dataset": {"path": "d", "num_episodes": 2},
        "eval_split": "validation",
        "methods": {"bc": summary},
        "gain_success_rate": 0.0,
        "wall_time_s": {"eval": 1.0},
    }
    write_report(tmp_path, report)
    assert (
        "Evaluated on the **validation** split (env seeds from 1,500,000"
        in (tmp_path / "report.md").read_text()
    )
    with pytest.raises(ConfigError, match=r"eval\.split='train'"):
        load_config(None, ["--eval.split=train"])
    with pytest.raises(ValueError, match=r"eval\.split='train'"):
        split_seeds("train", 3)
