"""LeRobotWriter: v3.0 layout, round trip through LeRobotDataset, resume, and SIGKILL durability."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from repo_paths import LEROBOT_FIXTURES, TESTS

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot.packing import FileSizes
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.video import available_encoders, default_codec
from robot_rl.data.lerobot.writer import LeRobotWriter

FIXTURE_V30 = LEROBOT_FIXTURES / "g1_pick_bottle_v30"
CAM = "observation.images.front"
H, W = 32, 48


def make_features(video: bool = True) -> dict:
    feats = {
        keys.STATE: {"dtype": "float32", "shape": [4], "names": None},
        keys.ACTION: {"dtype": "float32", "shape": [2], "names": None},
        keys.REWARD: {"dtype": "float32", "shape": [1], "names": None},
        keys.DONE: {"dtype": "bool", "shape": [1], "names": None},
        keys.SUCCESS: {"dtype": "bool", "shape": [1], "names": None},
        keys.INTERVENTION: {"dtype": "bool", "shape": [1], "names": None},
    }
    if video:
        feats[CAM] = {"dtype": "video", "shape": [H, W, 3], "names": ["height", "width", "channel"]}
    return feats


def make_frames(length: int, seed: int, video: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    frames = {
        keys.STATE: rng.normal(size=(length, 4)).astype(np.float32),
        keys.ACTION: rng.uniform(-1, 1, size=(length, 2)).astype(np.float32),
        keys.REWARD: rng.uniform(size=length).astype(np.float32),
        keys.DONE: np.arange(length) == length - 1,
        keys.SUCCESS: np.arange(length) == length - 1,
        keys.INTERVENTION: rng.uniform(size=(length, 1)) < 0.3,
    }
    if video:
        # smooth images (codec friendly) whose brightness encodes the frame number
        base = np.linspace(0, 60, W, dtype=np.float32)[None, None, :, None]
        level = (np.arange(length, dtype=np.float32) * 9 % 180)[:, None, None, None]
        frames[CAM] = np.broadcast_to(base + level + seed, (length, H, W, 3)).astype(np.uint8)
    return frames


def test_codec_default_is_best_available() -> None:
    found = available_encoders()
    assert found and default_codec() == found[0]
    if "libsvtav1" in found:
        assert default_codec() == "libsvtav1"


def test_round_trip_and_layout(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    eps = [make_frames(n, seed) for seed, n in enumerate((7, 5, 9))]
    with LeRobotWriter(root, fps=10, features=make_features(), robot_type="panda") as writer:
        for i, ep in enumerate(eps):
            assert writer.add_episode(ep, task="push" if i != 1 else "pull", source=keys.SOURCES[i]) == i
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 3 and info["total_frames"] == 21
    assert info["total_tasks"] == 2 and info["splits"] == {"train": "0:3"}
    for key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert key in info["features"]
    assert info["features"][CAM]["info"]["video.pix_fmt"] == "yuv420p"
    if FIXTURE_V30.is_dir():  # same info.json fields and episodes columns as LeRobot's own output
        ref = json.loads((FIXTURE_V30 / "meta/info.json").read_text())
        assert set(ref) == set(info)
        ref_cols = {
            c
            for c in pq.read_schema(FIXTURE_V30 / "meta/episodes/chunk-000/file-000.parquet").names
            if not c.startswith("stats/")
        }
        ref_cols = {c.replace("observation.images.cam_high", CAM) for c in ref_cols}
        ours = set(pq.read_schema(root / "meta/episodes/chunk-000/file-000.parquet").names)
        assert ref_cols <= ours and "source" in ours and f"stats/{keys.ACTION}/mean" in ours
        assert (
            pq.read_schema(root / "meta/tasks.parquet").names
            == pq.read_schema(FIXTURE_V30 / "meta/tasks.parquet").names
        )
    # packed as LeRobot packs: one data file and one mp4 holding the three episodes back to back
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "meta" not in p.parts)
    assert files == ["data/chunk-000/file-000.parquet", f"videos/{CAM}/chunk-000/file-000.mp4"]
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert episodes["data/file_index"] == [0, 0, 0]
    np.testing.assert_allclose(episodes[f"videos/{CAM}/from_timestamp"], [0.0, 0.7, 1.2])
    np.testing.assert_allclose(episodes[f"videos/{CAM}/to_timestamp"], [0.7, 1.2, 2.1])
    stats = json.loads((root / "meta/stats.json").read_text())
    all_actions = np.concatenate([e[keys.ACTION] for e in eps])
    np.testing.assert_allclose(stats[keys.ACTION]["mean"], all_actions.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats[keys.ACTION]["std"], all_actions.std(0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(stats[keys.ACTION]["max"], all_actions.max(0))
    assert np.array(stats[CAM]["mean"]).shape == (3, 1, 1)

    ds = LeRobotDataset(root, delta_timestamps={keys.ACTION: [0.0, 0.1, 0.2]})
    assert ds.num_episodes == 3 and len(ds) == 21 and ds.tasks == ["push", "pull"]
    assert ds.episode_sources == list(keys.SOURCES[:3])
    tab = ds.load_tabular()
    np.testing.assert_array_equal(tab[keys.STATE], np.concatenate([e[keys.STATE] for e in eps]))
    np.testing.assert_array_equal(tab[keys.REWARD], np.concatenate([e[keys.REWARD] for e in eps]))
    np.testing.assert_array_equal(
        tab[keys.INTERVENTION], np.concatenate([e[keys.INTERVENTION][:, 0] for e in eps])
    )
    item = ds[7 + 4]  # episode 1, last frame
    assert item["task"] == "pull" and item[f"{keys.ACTION}_is_pad"].tolist() == [False, True, True]
    np.testing.assert_array_equal(item[keys.ACTION].numpy(), eps[1][keys.ACTION][[4, 4, 4]])
    assert item[CAM].shape == (3, H, W)
    for ep, frames in enumerate(eps):
        video = ds.episode_video(ep, CAM)
        assert video.shape == frames[CAM].shape
        assert np.abs(video.astype(int) - frames[CAM]).mean() < 3  # lossy codec
        decoded = (ds[int(ds.episode_from[ep]) + 3][CAM].permute(1, 2, 0).numpy() * 255).round()
        assert np.abs(decoded - frames[CAM][3]).mean() < 3


def test_resume_appends(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    writer = LeRobotWriter(root, fps=10, features=make_features(video=False))
    writer.add_episode(make_frames(4, 0, video=False), task="a")
    del writer  # no close: a crash
    again = LeRobotWriter(root, fps=10, features=make_features(video=False))
    assert again.num_episodes == 1 and again.num_frames == 4
    assert again.add_episode(make_frames(3, 1, video=False), task="b", source="online") == 1
    again.close()
    ds = LeRobotDataset(root)
    assert (ds.num_episodes, len(ds), ds.tasks) == (2, 7, ["a", "b"])
    assert ds.load_tabular()[keys.INDEX].tolist() == list(range(7))
    with pytest.raises(DatasetError, match="fps"):
        LeRobotWriter(root, fps=20, features=make_features(video=False))
    with pytest.raises(DatasetError, match="features"):
        LeRobotWriter(root, fps=10, features=make_features(video=True))


def test_writer_rejects_bad_frames(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    writer = LeRobotWriter(root, fps=10, features=make_features())
    bad = make_frames(5, 0)
    bad[keys.ACTION] = bad[keys.ACTION][:, :1]
    with pytest.raises(DatasetError, match="'action'.*shape"):
        writer.add_episode(bad, task="t")
    nan = make_frames(5, 0)
    nan[keys.ACTION][2, 0] = np.nan
    with pytest.raises(DatasetError, match="'action'.*NaN"):
        writer.add_episode(nan, task="t")
    missing = make_frames(5, 0)
    del missing[keys.REWARD]
    with pytest.raises(DatasetError, match="'next.reward'"):
        writer.add_episode(missing, task="t")
    wrong_img = make_frames(5, 0)
    wrong_img[CAM] = wrong_img[CAM][:, :16]
    with pytest.raises(DatasetError, match=CAM):
        writer.add_episode(wrong_img, task="t")
    with pytest.raises(DatasetError, match="source"):
        writer.add_episode(make_frames(5, 0), task="t", source="teleport")
    assert writer.num_episodes == 0 and not (root / "data").exists()  # nothing was written
    with pytest.raises(DatasetError, match="dtype"):
        LeRobotWriter(tmp_path / "x", fps=10, features={"a": {"dtype": "complex", "shape": [1]}})


_CHILD = textwrap.dedent(
    """
    import sys
    sys.path[:0] = [{here!r}, {tests!r}]
    from test_data_writer import FileSizes, LeRobotWriter, make_features, make_frames
    writer = LeRobotWriter({root!r}, fps=10, features=make_features(), pack_every={pack_every},
                           file_sizes=FileSizes({data_mb}, {video_mb}))
    i = writer.num_episodes
    while True:
        writer.add_episode(make_frames(6 + i % 4, i), task="t%d" % (i % 2))
        print("done", i, flush=True)
        i += 1
    """
)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "meta" not in p.parts)


@pytest.mark.parametrize(
    ("pack_every", "data_mb", "video_mb", "kill_after"),
    [(10, 100, 200, 4), (1, 0.006, 0.006, 5), (1, 0.006, 0.006, 9), (2, 100, 200, 7)],
)
def test_sigkill_between_and_during_episodes(
    tmp_path: Path, pack_every, data_mb, video_mb, kill_after
) -> None:
    """A writer killed with SIGKILL keeps every episode whose add_episode returned; the dataset reads.
    With pack_every=1 most of the writer's time is spent packing files, so the kill lands in a pack."""
    root = tmp_path / "ds"
    code = _CHILD.format(
        here=str(Path(__file__).parent),
        tests=str(TESTS),
        root=str(root),
        pack_every=pack_every,
        data_mb=data_mb,
        video_mb=video_mb,
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    printed = 0
    try:
        for line in proc.stdout:
            printed += line.startswith("done")
            if printed == kill_after:
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        rest = proc.communicate()[0]
    printed += sum(line.startswith("done") for line in rest.splitlines())
    ds = LeRobotDataset(root)
    assert printed <= ds.num_episodes <= printed + 1
    lengths = [6 + i % 4 for i in range(ds.num_episodes)]
    assert len(ds) == sum(lengths)
    np.testing.assert_array_equal(ds.load_tabular()[keys.STATE][: lengths[0]], make_frames(6, 0)[keys.STATE])
    np.testing.assert_array_equal(
        ds.load_tabular()[keys.STATE][-lengths[-1] :], make_frames(lengths[-1], len(lengths) - 1)[keys.STATE]
    )
    for ep in range(ds.num_episodes):
        expected = make_frames(lengths[ep], ep)[CAM]
        assert np.abs(ds.episode_video(ep, CAM).astype(int) - expected).mean() < 3
    # resume after the crash: files no metadata points at are deleted, and writing goes on
    writer = LeRobotWriter(root, fps=10, features=make_features())
    n = writer.num_episodes
    writer.add_episode(make_frames(5, 99), task="after")
    writer.close()
    ds = LeRobotDataset(root)
    assert ds.num_episodes == n + 1 and ds.tasks[-1] == "after"
    assert ds.episode_video(n, CAM).shape == (5, H, W, 3)
    ds.verify_videos()
    rows = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    referenced = {f"data/chunk-000/file-{f:03d}.parquet" for f in rows["data/file_index"]}
    referenced |= {f"videos/{CAM}/chunk-000/file-{f:03d}.mp4" for f in rows[f"videos/{CAM}/file_index"]}
    assert _files(root) == sorted(referenced)  # no orphans, and numbered 0, 1, ... per stream
    assert sorted(set(rows["data/file_index"])) == list(range(len(set(rows["data/file_index"]))))


def test_packs_files_up_to_the_size_limit(tmp_path: Path) -> None:
    """Small file sizes make the writer roll over to new data and video files: few files, numbered in
    order, each episode addressed by its file and its span in the mp4; a resumed writer fills the last file
    on; ``FileSizes(0, 0)`` keeps one file per episode."""
    root = tmp_path / "ds"
    lengths = [6 + i % 4 for i in range(30)]
    sizes = FileSizes(data_mb=0.02, video_mb=0.01)
    with LeRobotWriter(root, fps=10, features=make_features(), file_sizes=sizes, pack_every=4) as writer:
        for i, n in enumerate(lengths[:20]):
            writer.add_episode(make_frames(n, i), task="t")
    with LeRobotWriter(
        root, fps=10, features=make_features(), pack_every=4
    ) as writer:  # sizes from info.json
        assert writer.sizes == sizes
        for i, n in enumerate(lengths[20:], start=20):
            writer.add_episode(make_frames(n, i), task="t")
    info = json.loads((root / "meta/info.json").read_text())
    assert (info["data_files_size_in_mb"], info["video_files_size_in_mb"]) == (0.02, 0.01)
    rows = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    data_files, video_files = rows["data/file_index"], rows[f"videos/{CAM}/file_index"]
    assert 1 < len(set(data_files)) < 15 and 1 < len(set(video_files)) < 15
    assert data_files == sorted(data_files) and set(data_files) == set(range(max(data_files) + 1))
    for f in set(data_files):
        assert (root / f"data/chunk-000/file-{f:03d}.parquet").stat().st_size < 0.02 * 1024**2
    assert len(_files(root)) == len(set(data_files)) + len(set(video_files))
    starts = rows[f"videos/{CAM}/from_timestamp"]
    for ep in range(1, 30):  # an episode starts where the previous one ended, unless it opens a file
        expected = (
            rows[f"videos/{CAM}/to_timestamp"][ep - 1] if video_files[ep] == video_files[ep - 1] else 0.0
        )
        assert starts[ep] == pytest.approx(expected)
    ds = LeRobotDataset(root)
    ds.verify_videos()
    np.testing.assert_array_equal(
        ds.load_tabular()[keys.ACTION],
        np.concatenate([make_frames(n, i)[keys.ACTION] for i, n in enumerate(lengths)]),
    )
    for ep in (0, 13, 29):
        assert np.abs(ds.episode_video(ep, CAM).astype(int) - make_frames(lengths[ep], ep)[CAM]).mean() < 3
    single = tmp_path / "single"
    with LeRobotWriter(single, fps=10, features=make_features(), file_sizes=FileSizes(0, 0)) as writer:
        for i in range(3):
            writer.add_episode(make_frames(5, i), task="t")
    assert len(_files(single)) == 6 and LeRobotDataset(single).num_episodes == 3


def test_resume_refuses_foreign_dataset(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    with LeRobotWriter(root, fps=10, features=make_features(video=False)) as writer:
        writer.add_episode(make_frames(4, 0, video=False), task="a")
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    pq.write_table(table.drop_columns([c for c in table.column_names if c.startswith("stats/")]), path)
    assert LeRobotDataset(root).num_episodes == 1  # still readable
    with pytest.raises(
        DatasetError, match="file-000.parquet.*only supported to datasets written by LeRobotWriter"
    ):
        LeRobotWriter(root, fps=10, features=make_features(video=False))


def test_dataloader_workers(tmp_path: Path) -> None:
    """Two DataLoader worker processes (spawned: the dataset pickles without open containers) each open
    their own video containers."""
    import torch

    root = tmp_path / "ds"
    with LeRobotWriter(root, fps=10, features=make_features()) as writer:
        for seed in range(2):
            writer.add_episode(make_frames(6, seed), task="t")
    ds = LeRobotDataset(root, delta_timestamps={keys.ACTION: [0.0, 0.1]})
    ds[3]  # open a container in the parent before forking
    # spawn, not fork: forking a process that runs decoder/zarr threads can deadlock the child
    loader = torch.utils.data.DataLoader(
        ds, batch_size=4, shuffle=True, num_workers=2, multiprocessing_context="spawn"
    )
    batches = list(loader)
    assert sum(len(b[keys.INDEX]) for b in batches) == 12
    assert batches[0][CAM].shape == (4, 3, H, W) and batches[0][f"{keys.ACTION}_is_pad"].shape == (4, 2)
    assert sorted(torch.cat([b[keys.INDEX] for b in batches]).tolist()) == list(range(12))


def test_episodes_metadata_rolls_over_files_and_resumes(tmp_path, monkeypatch) -> None:
    """Appending rewrites only the newest episodes file; a resumed writer reads every file back."""
    import robot_rl.data.lerobot.writer as writer_module

    monkeypatch.setattr(writer_module, "EPISODES_PER_META_FILE", 2)
    root = tmp_path / "ds"
    lengths = [5, 7, 4, 6, 3]
    with LeRobotWriter(root, fps=10, features=make_features(video=False)) as w:
        for i, n in enumerate(lengths[:3]):
            w.add_episode(make_frames(n, seed=i, video=False), task="pick")
    with LeRobotWriter(root, fps=10, features=make_features(video=False)) as w:  # resume across files
        assert w.num_episodes == 3
        for i, n in enumerate(lengths[3:], start=3):
            w.add_episode(make_frames(n, seed=i, video=False), task="pick")
    files = sorted((root / "meta" / "episodes" / "chunk-000").glob("file-*.parquet"))
    assert [f.name for f in files] == ["file-000.parquet", "file-001.parquet", "file-002.parquet"]
    assert [pq.read_table(f).num_rows for f in files] == [2, 2, 1]
    assert pq.read_table(files[1]).column("meta/episodes/file_index").to_pylist() == [1, 1]
    ds = LeRobotDataset(root)
    assert ds.num_episodes == 5 and len(ds) == sum(lengths)
    actions = np.concatenate(
        [make_frames(n, seed=i, video=False)[keys.ACTION] for i, n in enumerate(lengths)]
    )
    np.testing.assert_array_equal(ds.load_tabular()[keys.ACTION], actions)
    stats = json.loads((root / "meta" / "stats.json").read_text())[keys.ACTION]
    np.testing.assert_allclose(stats["mean"], actions.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["std"], actions.std(0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(stats["min"], actions.min(0))
    assert stats["count"] == [sum(lengths)]


def test_reader_keeps_only_the_episodes_the_metadata_places_in_a_file(tmp_path: Path) -> None:
    """A pack interrupted between two episodes-metadata files leaves a merged data file that also holds
    episodes the metadata still places in their old files: the reader counts each episode once."""
    root = tmp_path / "ds"
    with LeRobotWriter(root, fps=10, features=make_features(video=False), file_sizes=FileSizes(0, 0)) as w:
        for i in range(2):
            w.add_episode(make_frames(4 + i, i, video=False), task="t")
    first, second = (root / f"data/chunk-000/file-00{i}.parquet" for i in range(2))
    merged = pa.concat_tables([pq.read_table(first), pq.read_table(second)])
    pq.write_table(merged, second)  # file 1 now also holds episode 0, which the metadata places in file 0
    ds = LeRobotDataset(root)
    assert len(ds) == 9
    np.testing.assert_array_equal(
        ds.load_tabular()[keys.STATE], np.concatenate([make_frames(4 + i, i)[keys.STATE] for i in range(2)])
    )
