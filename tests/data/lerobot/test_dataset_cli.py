"""`robot-rl dataset info|validate|stats` on real files: the G1 fixtures, datasets we write, and datasets
we break on purpose (truncated mp4, missing columns, wrong totals, unknown codec, empty, NaN, time)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from repo_paths import LEROBOT_FIXTURES

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot.tools import dataset_summary, recompute_stats
from robot_rl.data.lerobot.validate import validate_dataset
from robot_rl.data.lerobot.writer import LeRobotWriter

FIXTURES = LEROBOT_FIXTURES
CAM = "observation.images.top"
DATA = "data/chunk-000/file-000.parquet"
VIDEO = f"videos/{CAM}/chunk-000/file-000.mp4"
LENGTHS = (12, 9)


def _write(root: Path, lengths=LENGTHS) -> Path:
    features = {
        keys.STATE: {"dtype": "float32", "shape": [3]},
        keys.ACTION: {"dtype": "float32", "shape": [2]},
        CAM: {"dtype": "video", "shape": [16, 24, 3]},
    }
    rng = np.random.default_rng(0)
    with LeRobotWriter(root, fps=10, features=features, robot_type="toy") as writer:
        for n in lengths:
            writer.add_episode(
                {
                    keys.STATE: rng.normal(size=(n, 3)).astype(np.float32),
                    keys.ACTION: rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                    CAM: rng.integers(0, 255, (n, 16, 24, 3), dtype=np.uint8),
                },
                task="stack the blocks",
            )
    return root


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def _edit_info(root: Path, edit) -> None:
    path = root / "meta" / "info.json"
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info))


@pytest.mark.parametrize("version", ["v21", "v30"])
def test_real_fixtures_are_valid(version):
    assert validate_dataset(FIXTURES / f"g1_pick_bottle_{version}") == []


def test_info_and_validate_cli_on_a_good_dataset(tmp_path):
    root = _write(tmp_path / "ds")
    proc = _cli("dataset", "validate", str(root))
    assert proc.returncode == 0 and "OK" in proc.stdout
    proc = _cli("dataset", "info", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["episodes"], info["frames"], info["fps"]) == (2, sum(LENGTHS), 10)
    assert info["tasks"] == ["stack the blocks"] and info["sources"] == {"demo": 2}
    assert info["features"][CAM]["shape"] == [16, 24, 3] and info["features"][keys.ACTION]["shape"] == [2]
    assert info["size_bytes"] > 0 and info == dataset_summary(root) | {"root": str(root)}
    text = _cli("dataset", "info", str(root))
    assert text.returncode == 0 and "stack the blocks" in text.stdout and CAM in text.stdout


def test_stats_recomputed_from_the_data(tmp_path):
    root = _write(tmp_path / "ds")
    written = json.loads((root / "meta" / "stats.json").read_text())
    out = tmp_path / "stats.json"
    proc = _cli("dataset", "stats", str(root), f"--out={out}")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(out.read_text())
    for key in (keys.STATE, keys.ACTION):
        np.testing.assert_allclose(stats[key]["mean"], written[key]["mean"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(stats[key]["max"], written[key]["max"])
        assert stats[key]["count"] == [sum(LENGTHS)]
    assert np.array(stats[CAM]["mean"]).shape == (3, 1, 1)
    assert 0.3 < np.mean(stats[CAM]["mean"]) < 0.7  # uniform random pixels, after AV1's lossy round trip
    assert recompute_stats(root) == root / "meta" / "stats.json"


def test_truncated_mp4_is_named(tmp_path):
    root = _write(tmp_path / "ds")
    video = root / VIDEO
    video.write_bytes(video.read_bytes()[: video.stat().st_size // 2])
    problems = validate_dataset(root)
    assert problems and all(VIDEO in p for p in problems), problems


def test_missing_columns_are_named(tmp_path):
    root = _write(tmp_path / "ds")
    table = pq.read_table(root / DATA)
    pq.write_table(table.drop_columns([keys.ACTION, keys.STATE]), root / DATA)
    problems = validate_dataset(root)
    assert any(DATA in p and "'action'" in p and "'observation.state'" in p for p in problems), problems


def test_mismatched_info_totals_are_named(tmp_path):
    root = _write(tmp_path / "ds")
    _edit_info(root, lambda info: info.update(total_frames=info["total_frames"] + 5))
    problems = validate_dataset(root)
    assert any("info.json" in p and "total_frames" in p and str(sum(LENGTHS)) in p for p in problems)


def test_unknown_codec_is_named(tmp_path):
    root = _write(tmp_path / "ds")
    _edit_info(root, lambda info: info["features"][CAM]["info"].update({"video.codec": "h266xyz"}))
    problems = validate_dataset(root)
    assert any("info.json" in p and CAM in p and "'h266xyz'" in p for p in problems), problems


def test_empty_dataset(tmp_path):
    root = _write(tmp_path / "ds", lengths=())
    problems = validate_dataset(root)
    assert any("empty" in p for p in problems), problems
    proc = _cli("dataset", "validate", str(root))
    assert proc.returncode == 1 and "empty" in proc.stderr


def test_missing_info_json_is_the_only_problem(tmp_path):
    root = _write(tmp_path / "ds")
    (root / "meta" / "info.json").unlink()
    problems = validate_dataset(root)
    assert len(problems) == 1 and "info.json" in problems[0]
    proc = _cli("dataset", "info", str(root))
    assert proc.returncode == 1 and "info.json" in proc.stderr


def test_validate_lists_every_problem_not_just_the_first(tmp_path):
    root = _write(tmp_path / "ds")
    table = pq.read_table(root / DATA)
    actions = np.asarray(table.column(keys.ACTION).to_pylist(), dtype=np.float32)
    actions[3, 1] = np.nan
    timestamps = table.column(keys.TIMESTAMP).to_numpy().copy()
    timestamps[5] = timestamps[4]  # episode 0 stalls at frame 5
    table = table.set_column(
        table.schema.get_field_index(keys.ACTION),
        keys.ACTION,
        pa.array(actions.tolist(), type=pa.list_(pa.float32())),
    )
    table = table.set_column(
        table.schema.get_field_index(keys.TIMESTAMP), keys.TIMESTAMP, pa.array(timestamps)
    )
    pq.write_table(table, root / DATA)
    _edit_info(root, lambda info: info.update(total_episodes=7))
    problems = validate_dataset(root)
    assert any("'action' has 1 NaN/inf" in p for p in problems), problems
    assert any("episode 0: timestamps are not increasing at frame 5" in p for p in problems), problems
    assert any("total_episodes is 7" in p for p in problems), problems
    proc = _cli("dataset", "validate", str(root))
    assert proc.returncode == 1
    assert f"{len(problems)} problem(s)" in proc.stderr and proc.stderr.count("  - ") == len(problems)


def test_stats_of_a_non_finite_feature_names_the_dataset_and_key(tmp_path):
    root = _write(tmp_path / "ds")
    table = pq.read_table(root / DATA)
    actions = np.asarray(table.column(keys.ACTION).to_pylist(), dtype=np.float32)
    actions[2, 0] = np.inf
    column = pa.array(actions.tolist(), type=pa.list_(pa.float32()))
    pq.write_table(
        table.set_column(table.schema.get_field_index(keys.ACTION), keys.ACTION, column), root / DATA
    )
    with pytest.raises(DatasetError, match=rf"{re.escape(str(root))}: feature 'action': .*NaN or inf"):
        recompute_stats(root)
    proc = _cli("dataset", "stats", str(root))
    assert proc.returncode == 1 and "feature 'action'" in proc.stderr


def test_dataset_command_rejects_stray_arguments(tmp_path):
    proc = _cli("dataset", "info", str(tmp_path), "--bc.steps=3")
    assert proc.returncode == 2 and "--bc.steps=3" in proc.stderr
