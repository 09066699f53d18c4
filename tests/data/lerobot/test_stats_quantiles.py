"""stats.json carries LeRobot's full quantile set (q01, q10, q50, q90, q99, as ``compute_stats`` writes
them), through the writer, merge/split/filter and the reader, on real files: the G1 fixture (written by
LeRobot's converter, whose stats.json has no quantiles) and datasets written by robot_rl."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from repo_paths import LEROBOT_FIXTURES

from robot_rl import keys
from robot_rl.data.lerobot.ops import filter_success, merge, split
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.data.normalize import FeatureStats, PooledStats, load_stats, save_stats

G1 = LEROBOT_FIXTURES / "g1_pick_bottle_v30"
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


def _write(root: Path, lengths: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    """A small dataset (state, action, success); returns its per-frame state and action."""
    feats = {
        keys.STATE: {"dtype": "float32", "shape": [3]},
        keys.ACTION: {"dtype": "float32", "shape": [2]},
        keys.SUCCESS: {"dtype": "bool", "shape": [1]},
    }
    rng = np.random.default_rng(seed)
    eps = []
    with LeRobotWriter(root, fps=10, features=feats) as writer:
        for i, n in enumerate(lengths):
            ep = {
                keys.STATE: rng.normal(size=(n, 3)).astype(np.float32) * (i + 1),
                keys.ACTION: rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                keys.SUCCESS: np.arange(n) == n - 1 if i % 2 == 0 else np.zeros(n, bool),
            }
            writer.add_episode(ep, task="t")
            eps.append(ep)
    return {k: [ep[k] for ep in eps] for k in (keys.STATE, keys.ACTION)}


def _pooled_quantiles(per_episode: list[np.ndarray]) -> dict[str, np.ndarray]:
    """LeRobot's aggregate_stats: the count-weighted mean of each episode's quantiles."""
    counts = np.array([len(x) for x in per_episode], dtype=np.float64)
    out = {}
    for name, q in QUANTILES.items():
        values = np.stack([np.quantile(x.astype(np.float64), q, axis=0) for x in per_episode])
        out[name] = (values * counts[:, None]).sum(0) / counts.sum()
    return out


def test_writer_records_every_lerobot_quantile_per_episode_and_pooled(tmp_path: Path) -> None:
    data = _write(tmp_path / "ds", [12, 7, 20])
    tree = json.loads((tmp_path / "ds/meta/stats.json").read_text())
    for key in (keys.STATE, keys.ACTION):
        assert {"min", "max", "mean", "std", "count", *QUANTILES} <= set(tree[key]), key
        want = _pooled_quantiles(data[key])
        for name in QUANTILES:
            np.testing.assert_allclose(tree[key][name], want[name], rtol=1e-5, atol=1e-6)
    rows = pq.read_table(next((tmp_path / "ds/meta/episodes").rglob("*.parquet"))).to_pylist()
    for row, state in zip(rows, data[keys.STATE], strict=True):
        np.testing.assert_allclose(row[f"stats/{keys.STATE}/q10"], np.quantile(state, 0.1, axis=0), rtol=1e-5)
    stats = LeRobotDataset(tmp_path / "ds").stats()
    np.testing.assert_allclose(stats[keys.STATE].q90, tree[keys.STATE]["q90"], rtol=1e-6)


@pytest.mark.parametrize("op", ["merge", "split", "filter"])
def test_merge_split_filter_write_the_full_quantile_set(tmp_path: Path, op: str) -> None:
    if op == "filter":
        data = _write(tmp_path / "src", [9, 6, 11, 8])
        dst = filter_success(tmp_path / "src", tmp_path / "out")
        kept = [0, 2]  # even episodes succeed
    elif op == "split":
        data = _write(tmp_path / "src", [9, 6, 11, 8])
        dst = split(tmp_path / "src", tmp_path / "parts", episodes=[3, 1])["selected"]
        kept = [3, 1]
    else:
        a, b = _write(tmp_path / "a", [9, 6], seed=1), _write(tmp_path / "b", [11], seed=2)
        data = {k: a[k] + b[k] for k in a}
        dst = merge([tmp_path / "a", tmp_path / "b"], tmp_path / "out")
        kept = [0, 1, 2]
    tree = json.loads((Path(dst) / "meta/stats.json").read_text())
    want = _pooled_quantiles([data[keys.STATE][e] for e in kept])
    for name in QUANTILES:
        np.testing.assert_allclose(tree[keys.STATE][name], want[name], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not G1.is_dir(), reason="G1 fixture not present")
def test_split_of_a_lerobot_dataset_adds_quantiles_for_vectors_and_video(tmp_path: Path) -> None:
    out = split(G1, tmp_path / "parts", episodes=[1, 3])["selected"]
    tree = json.loads((out / "meta/stats.json").read_text())
    for key in (keys.STATE, keys.ACTION, "observation.images.cam_high"):
        assert set(QUANTILES) <= set(tree[key]), key
    assert np.asarray(tree["observation.images.cam_high"]["q50"]).shape == (3, 1, 1)
    q = np.asarray(tree[keys.ACTION]["q10"]), np.asarray(tree[keys.ACTION]["q90"])
    assert q[0].shape == (26,) and np.all(q[0] <= q[1])


def test_reader_keeps_quantiles_from_the_file_and_fills_missing_ones(tmp_path: Path) -> None:
    data = _write(tmp_path / "ds", [10, 14])
    path = tmp_path / "ds/meta/stats.json"
    tree = json.loads(path.read_text())
    tree[keys.STATE]["q50"] = [7.0, 8.0, 9.0]  # LeRobot's histogram estimate differs: the file's wins
    for name in ("q10", "q50", "q90"):  # an older file: computed from the data
        del tree[keys.ACTION][name]
    path.write_text(json.dumps(tree))
    stats = LeRobotDataset(tmp_path / "ds").stats()
    np.testing.assert_array_equal(stats[keys.STATE].q50, [7.0, 8.0, 9.0])
    actions = np.concatenate(data[keys.ACTION]).astype(np.float64)
    np.testing.assert_allclose(stats[keys.ACTION].q10, np.quantile(actions, 0.1, axis=0), rtol=1e-5)


def test_pooling_and_json_round_trip_tolerate_files_without_the_new_quantiles(tmp_path: Path) -> None:
    full = FeatureStats.from_array(np.arange(20, dtype=np.float32).reshape(10, 2))
    old = FeatureStats(**{n: getattr(full, n) for n in ("mean", "std", "min", "max", "q01", "q99")})
    pooled = PooledStats()
    pooled.add({"x": full}, 10)
    pooled.add({"x": old}, 10)  # an episode recorded before q10/q50/q90: they are left out, as LeRobot
    result = pooled.result()["x"]
    assert result.q10 is None and result.q01 is not None
    save_stats({"x": full, "y": old}, tmp_path / "normalization.json")
    back = load_stats(tmp_path / "normalization.json")
    np.testing.assert_array_equal(back["x"].q50, full.q50)
    assert back["y"].q50 is None
