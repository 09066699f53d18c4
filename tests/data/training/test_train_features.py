"""`robot-rl train` says which dataset columns it feeds the policy and which it ignores (printed and saved
in the checkpoint's config.json), and `data.features` adds any numeric column as an input; through the
real CLI on a real dataset with an extra `gripper_force` column."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.cli.main import main
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.run_dir import RunDir

TINY = ["--policy.hidden_dims=[16,16]", "--bc.steps=2", "--bc.batch_size=8", "--data.num_workers=0"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("feat") / "ds"
    feats = {
        keys.STATE: {"dtype": "float32", "shape": [3]},
        keys.ACTION: {"dtype": "float32", "shape": [2]},
        "gripper_force": {"dtype": "float32", "shape": [1]},
        keys.SUCCESS: {"dtype": "bool", "shape": [1]},
    }
    rng = np.random.default_rng(0)
    with LeRobotWriter(root, fps=10, features=feats) as writer:
        for _ in range(2):
            writer.add_episode(
                {
                    keys.STATE: rng.normal(size=(12, 3)).astype(np.float32),
                    keys.ACTION: rng.normal(size=(12, 2)).astype(np.float32),
                    "gripper_force": rng.uniform(0, 5, 12).astype(np.float32),
                    keys.SUCCESS: np.arange(12) == 11,
                },
                task="grip",
            )
    return root


def _train(run: Path, dataset: Path, *extra: str) -> int:
    return main(
        ["train", "--algo", "bc", "--seed", "0", f"--run_dir={run}", f"--data.path={dataset}", *TINY, *extra]
    )


def _features_saved(run: Path) -> dict:
    return json.loads((RunDir(str(run)).checkpoint("bc", 0) / "config.json").read_text())["features"]


def test_train_reports_used_and_ignored_columns(dataset, tmp_path, capsys) -> None:
    assert _train(tmp_path / "run", dataset) == 0
    out = capsys.readouterr().out
    assert "policy inputs: observation.state (3,)" in out
    assert "trained on: action" in out
    assert "ignored: gripper_force (not an observation.* column; add it with data.features)" in out
    assert "ignored: next.success (behaviour cloning ignores it)" in out  # a label of the next step
    saved = _features_saved(tmp_path / "run")
    assert saved["inputs"] == {keys.STATE: [3]} and saved["targets"] == [keys.ACTION]
    assert "gripper_force" in saved["ignored"]


def test_data_features_adds_a_numeric_column_as_an_input(dataset, tmp_path, capsys) -> None:
    assert _train(tmp_path / "run", dataset, "--data.features=[gripper_force]") == 0
    out = capsys.readouterr().out
    assert "policy inputs: gripper_force (1,), observation.state (3,)" in out
    assert "ignored: gripper_force" not in out
    saved = _features_saved(tmp_path / "run")
    assert saved["inputs"] == {"gripper_force": [1], keys.STATE: [3]}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[grip_force]", "data.features: 'grip_force' is not a column of"),
        ("[next.reward_x, action]", "data.features: 'next.reward_x' is not a column of"),
        ("[action]", "data.features: 'action' of"),
    ],
)
def test_bad_data_features_is_a_one_line_config_error(dataset, tmp_path, capsys, value, message) -> None:
    assert _train(tmp_path / "run", dataset, f"--data.features={value}") == 2
    err = capsys.readouterr().err.strip()
    assert message in err and str(dataset) in err and len(err.splitlines()) == 1, err
