"""with_columns on real files: the G1 fixtures (LeRobot's own v3.0 layout with one mp4 of five episodes, and
v2.1) and small datasets our writer makes. New values must come back exactly, in index order, everything
else unchanged and valid, and a refused call must leave nothing at the destination."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from repo_paths import LEROBOT_FIXTURES

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.columns import with_columns
from robot_rl.data.lerobot.packing import FileSizes
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.validate import validate_dataset
from robot_rl.data.lerobot.writer import LeRobotWriter

FIXTURES = LEROBOT_FIXTURES
V21, V30 = FIXTURES / "g1_pick_bottle_v21", FIXTURES / "g1_pick_bottle_v30"
G1_CAM, G1_FRAMES = "observation.images.cam_high", 1787
CAM = "observation.images.top"
FEATURES = {
    keys.STATE: {"dtype": "float32", "shape": [3]},
    keys.REWARD: {"dtype": "float32", "shape": [1]},
    keys.SUCCESS: {"dtype": "bool", "shape": [1]},
    CAM: {"dtype": "video", "shape": [16, 16, 3]},
}
LENGTHS = [5, 7, 6]


def _frames(n: int, seed: int, features: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {
        keys.STATE: rng.normal(size=(n, 3)).astype(np.float32),
        keys.REWARD: np.zeros(n, np.float32),
        keys.SUCCESS: np.arange(n) == n - 1,
    }
    if CAM in features:
        out[CAM] = np.broadcast_to(
            ((np.arange(n) * 30 + seed * 9) % 200).astype(np.uint8)[:, None, None, None], (n, 16, 16, 3)
        )
    return {k: v for k, v in out.items() if k in features}


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """Three episodes written by LeRobotWriter (one data file and one mp4 per episode), with a reward."""
    root = tmp_path_factory.mktemp("small") / "ds"
    with LeRobotWriter(root, fps=10, features=FEATURES, robot_type="toy") as writer:
        for i, n in enumerate(LENGTHS):
            writer.add_episode(_frames(n, i, FEATURES), task="stack")
    return root


def _tabular(root: Path) -> dict[str, np.ndarray]:
    ds = LeRobotDataset(root)
    try:
        return ds.load_tabular()
    finally:
        ds.close()


def _stats(root: Path) -> dict:
    return json.loads((root / fmt.STATS).read_text())


def _no_trace(dst: Path) -> bool:
    """Nothing at ``dst`` and no staging folder left beside it."""
    return not dst.exists() and not list(dst.parent.glob(f".{dst.name}*"))


# -- adding and replacing -------------------------------------------------------------------------------
def test_g1_v30_gets_new_columns_and_keeps_everything_else(tmp_path):
    n = G1_FRAMES
    progress = np.random.default_rng(0).uniform(0, 1, n).astype(np.float32)
    reward = (np.arange(n) % 11 == 0).astype(np.float32)
    vec = np.arange(2 * n, dtype=np.int64).reshape(n, 2)
    out = with_columns(V30, tmp_path / "g1", {"progress": progress, keys.REWARD: reward, "vec": vec})
    assert out == tmp_path / "g1" and validate_dataset(out) == []

    before, after = _tabular(V30), _tabular(out)
    assert list(after) == [*before, "progress", keys.REWARD, "vec"]
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)
    for key, values in (("progress", progress), (keys.REWARD, reward), ("vec", vec)):
        assert after[key].dtype == values.dtype
        np.testing.assert_array_equal(after[key], values, err_msg=key)

    features = json.loads((out / fmt.INFO).read_text())["features"]
    assert features["progress"] == {"dtype": "float32", "shape": [1], "names": None}
    assert features["vec"] == {"dtype": "int64", "shape": [2], "names": None}

    old, new = _stats(V30), _stats(out)
    assert {k: v for k, v in new.items() if k in old} == old  # untouched statistics, video ones included
    s = new["progress"]
    assert s["count"] == [n] and s["min"] == [progress.min()] and s["max"] == [progress.max()]
    np.testing.assert_allclose(s["mean"], [progress.mean()], rtol=1e-6)
    np.testing.assert_allclose(new["vec"]["max"], vec.max(0))

    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet")
    lo, hi = episodes["dataset_from_index"][2].as_py(), episodes["dataset_to_index"][2].as_py()
    assert episodes["stats/progress/max"][2].as_py() == [pytest.approx(progress[lo:hi].max())]
    assert episodes["stats/progress/count"][2].as_py() == [hi - lo]

    src_video = V30 / f"videos/{G1_CAM}/chunk-000/file-000.mp4"
    dst_video = out / f"videos/{G1_CAM}/chunk-000/file-000.mp4"
    assert dst_video.read_bytes() == src_video.read_bytes()
    a, b = LeRobotDataset(V30), LeRobotDataset(out)
    try:
        rows = np.array([0, 400, 401])  # the start of the file and the middle of episode 1
        np.testing.assert_array_equal(b.video_frames(G1_CAM, rows), a.video_frames(G1_CAM, rows))
        assert b[1000][keys.REWARD].item() == reward[1000] and b[7]["vec"].tolist() == vec[7].tolist()
    finally:
        a.close()
        b.close()


def test_replaced_reward_keeps_its_feature_and_the_writer_can_append(small, tmp_path):
    n = sum(LENGTHS)
    reward = np.linspace(-1, 1, n, dtype=np.float32)
    done = np.arange(n) % 2 == 0
    out = with_columns(small, tmp_path / "out", {keys.REWARD: reward, "next.done": done})
    assert validate_dataset(out) == []
    after = _tabular(out)
    np.testing.assert_array_equal(after[keys.REWARD], reward)
    np.testing.assert_array_equal(after["next.done"], done)
    info = json.loads((out / fmt.INFO).read_text())
    assert (
        info["features"][keys.REWARD] == json.loads((small / fmt.INFO).read_text())["features"][keys.REWARD]
    )
    assert info["features"]["next.done"]["dtype"] == "bool"
    assert _stats(out)[keys.REWARD]["min"] == [-1.0] and _stats(out)[keys.REWARD]["max"] == [1.0]
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet")
    assert episodes["stats/next.reward/max"].to_pylist() == [[reward[hi - 1]] for hi in np.cumsum(LENGTHS)]
    # the per-episode statistics are complete, so LeRobotWriter resumes the copy and appends to it
    features = {**FEATURES, "next.done": {"dtype": "bool", "shape": [1]}}
    with LeRobotWriter(out, fps=10, features=features) as writer:
        writer.add_episode({**_frames(4, 9, FEATURES), "next.done": np.ones(4, bool)}, task="stack")
    assert validate_dataset(out) == [] and _stats(out)["next.done"]["count"] == [n + 4]
    assert _tabular(small).keys() == {*after} - {"next.done"}  # the source is unchanged


def test_values_follow_the_index_not_the_row_order_of_the_files(tmp_path):
    src = tmp_path / "src"
    one_per_file = FileSizes(0, 0)  # episode 1 has a data file of its own
    with LeRobotWriter(
        src, fps=10, features={keys.STATE: FEATURES[keys.STATE]}, file_sizes=one_per_file
    ) as writer:
        for i, n in enumerate(LENGTHS):
            writer.add_episode(_frames(n, i, {keys.STATE: None}), task="stack")
    path = src / "data/chunk-000/file-001.parquet"  # episode 1, stored back to front
    table = pq.read_table(path)
    pq.write_table(table.take(pa.array(np.arange(table.num_rows)[::-1])), path)
    values = np.arange(sum(LENGTHS), dtype=np.int64) * 10
    out = with_columns(src, tmp_path / "out", {"step": values})
    np.testing.assert_array_equal(_tabular(out)["step"], values)
    stored = pq.read_table(out / "data/chunk-000/file-000.parquet")
    np.testing.assert_array_equal(stored["step"].to_numpy(), stored[keys.INDEX].to_numpy() * 10)


def test_a_v21_source_is_converted_to_v30(tmp_path):
    progress = np.linspace(0, 1, G1_FRAMES, dtype=np.float32)
    out = with_columns(V21, tmp_path / "g1", {"progress": progress})
    assert validate_dataset(out) == []
    assert json.loads((out / fmt.INFO).read_text())["codebase_version"] == "v3.0"
    np.testing.assert_array_equal(_tabular(out)["progress"], progress)
    np.testing.assert_array_equal(_tabular(out)[keys.ACTION], _tabular(V21)[keys.ACTION])


# -- refusals -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "values", "match"),
    [
        ("progress", np.zeros(sum(LENGTHS) - 1, np.float32), "shape"),
        ("progress", np.zeros((sum(LENGTHS), 2, 2), np.float32), "shape"),
        ("progress", np.full(sum(LENGTHS), np.nan, np.float32), "NaN"),
        ("progress", np.full(sum(LENGTHS), np.inf, np.float32), "NaN or inf"),
        ("progress", np.zeros(sum(LENGTHS)), "dtype float64"),
        (keys.INDEX, np.arange(sum(LENGTHS)), "index column"),
        (keys.TIMESTAMP, np.zeros(sum(LENGTHS), np.float32), "index column"),
        (CAM, np.zeros(sum(LENGTHS), np.float32), "video feature"),
        (keys.SUCCESS, np.zeros(sum(LENGTHS), np.float32), "do not fit"),  # float into a bool feature
        (keys.STATE, np.zeros(sum(LENGTHS), np.float32), "do not fit"),  # (N,) into shape [3]
    ],
)
def test_bad_columns_are_refused_naming_the_dataset_and_key(small, tmp_path, key, values, match):
    dst = tmp_path / "out"
    with pytest.raises(DatasetError, match=match) as err:
        with_columns(small, dst, {"ok": np.ones(sum(LENGTHS), bool), key: values})
    assert str(small) in str(err.value) and repr(key) in str(err.value)
    assert _no_trace(dst)


def test_an_existing_destination_needs_overwrite(small, tmp_path):
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "keep.txt").write_text("mine")
    ones = {"progress": np.ones(sum(LENGTHS), np.float32)}
    with pytest.raises(DatasetError, match="already exists"):
        with_columns(small, dst, ones)
    assert [p.name for p in dst.iterdir()] == ["keep.txt"]
    with pytest.raises(DatasetError, match="refusing to overwrite"):  # not a dataset: never replaced
        with_columns(small, dst, ones, overwrite=True)
    (dst / "keep.txt").unlink()
    with_columns(small, dst, ones, overwrite=True)
    np.testing.assert_array_equal(_tabular(dst)["progress"], ones["progress"])


def test_a_failure_while_writing_leaves_nothing(small, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(fmt, "stats_json_tree", broken)  # the last step, after the data files
    with pytest.raises(OSError, match="disk full"):
        with_columns(small, tmp_path / "out", {"progress": np.ones(sum(LENGTHS), np.float32)})
    assert _no_trace(tmp_path / "out")
    assert "progress" not in json.loads((small / fmt.INFO).read_text())["features"]
