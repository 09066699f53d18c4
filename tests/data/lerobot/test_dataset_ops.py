"""robot-rl dataset merge|split|filter|convert on real files: the G1 fixtures (v2.1 per-episode mp4s, v3.0
one mp4 of five episodes), small datasets we write, and ones we break on purpose. Video must come out
bit-exact wherever it is copied or remuxed, and a failed write must leave nothing at the destination."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from repo_paths import LEROBOT_FIXTURES

from robot_rl import keys
from robot_rl.cli.main import main
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot.episode_copy import copy_episodes
from robot_rl.data.lerobot.ops import convert_v21_to_v30, filter_success, merge, split
from robot_rl.data.lerobot.packing import FileSizes
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.validate import validate_dataset
from robot_rl.data.lerobot.video import encode_video
from robot_rl.data.lerobot.writer import LeRobotWriter

FIXTURES = LEROBOT_FIXTURES
V21, V30 = FIXTURES / "g1_pick_bottle_v21", FIXTURES / "g1_pick_bottle_v30"
G1_CAM = "observation.images.cam_high"
G1_LENGTHS = [290, 421, 372, 342, 362]
CAM = "observation.images.top"
FPS = 10


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    return convert_v21_to_v30(V21, tmp_path_factory.mktemp("conv") / "g1")


def _features(video: bool = True, state_dim: int = 3, success: bool = True, reward: bool = True) -> dict:
    feats = {
        keys.STATE: {"dtype": "float32", "shape": [state_dim]},
        keys.ACTION: {"dtype": "float32", "shape": [2]},
    }
    if success:
        feats[keys.SUCCESS] = {"dtype": "bool", "shape": [1]}
    if reward:
        feats[keys.REWARD] = {"dtype": "float32", "shape": [1]}
    if video:
        feats[CAM] = {"dtype": "video", "shape": [16, 16, 3]}
    return feats


def _frames(n: int, seed: int, feats: dict, succeed: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {
        keys.STATE: rng.normal(size=(n, feats[keys.STATE]["shape"][0])).astype(np.float32),
        keys.ACTION: rng.uniform(-1, 1, (n, 2)).astype(np.float32),
    }
    if keys.SUCCESS in feats:
        out[keys.SUCCESS] = (np.arange(n) == n // 2) & succeed  # success mid-episode, not at the end
    if keys.REWARD in feats:
        out[keys.REWARD] = np.where(np.arange(n) == n - 1, float(succeed), 0.0).astype(np.float32)
    if CAM in feats:
        level = (np.arange(n) * 20 + seed * 7) % 200  # smooth frames whose brightness encodes the frame
        out[CAM] = np.broadcast_to(
            level[:, None, None, None] + np.arange(16)[None, None, :, None], (n, 16, 16, 3)
        )
        out[CAM] = out[CAM].astype(np.uint8)
    return out


def _write(
    root: Path, lengths, feats: dict, fps: int = FPS, succeed=(), sources=None, tasks=None, sizes=None
) -> Path:
    with LeRobotWriter(root, fps=fps, features=feats, robot_type="toy", file_sizes=sizes) as writer:
        for i, n in enumerate(lengths):
            writer.add_episode(
                _frames(n, i, feats, succeed=i in succeed),
                task=(tasks or ["stack"] * len(lengths))[i],
                source=(sources or ["demo"] * len(lengths))[i],
            )
    return root


def _episode_rows(ds: LeRobotDataset, ep: int, offsets) -> np.ndarray:
    return int(ds.episode_from[ep]) + np.asarray(offsets)


def _same_frames(a: LeRobotDataset, ep_a: int, b: LeRobotDataset, ep_b: int, key: str) -> None:
    """First, second, a middle and the last frame of the two episodes are bit-identical."""
    n = int(a.episode_to[ep_a] - a.episode_from[ep_a])
    assert n == int(b.episode_to[ep_b] - b.episode_from[ep_b])
    offsets = [0, 1, n // 2, n - 1]
    frames_a = a.video_frames(key, _episode_rows(a, ep_a, offsets))
    frames_b = b.video_frames(key, _episode_rows(b, ep_b, offsets))
    np.testing.assert_array_equal(frames_a, frames_b)


def _episode_table(ds: LeRobotDataset, ep: int) -> dict[str, np.ndarray]:
    lo, hi = int(ds.episode_from[ep]), int(ds.episode_to[ep])
    skip = (keys.INDEX, keys.EPISODE_INDEX, keys.TASK_INDEX)
    return {k: v[lo:hi] for k, v in ds.load_tabular().items() if k not in skip}


def _assert_episode_equal(a: LeRobotDataset, ep_a: int, b: LeRobotDataset, ep_b: int) -> None:
    ta, tb = _episode_table(a, ep_a), _episode_table(b, ep_b)
    assert ta.keys() == tb.keys()
    for key in ta:
        np.testing.assert_array_equal(ta[key], tb[key], err_msg=key)


# -- conversion ---------------------------------------------------------------------------------------
def test_v21_to_v30_matches_lerobots_own_conversion(converted):
    assert validate_dataset(converted) == []
    info = json.loads((converted / "meta" / "info.json").read_text())
    assert (info["codebase_version"], info["total_episodes"], info["total_frames"]) == ("v3.0", 5, 1787)
    ours, lerobot, source = LeRobotDataset(converted), LeRobotDataset(V30), LeRobotDataset(V21)
    try:
        assert ours.tasks == lerobot.tasks and ours.fps == 30
        assert (ours.episode_to - ours.episode_from).tolist() == G1_LENGTHS
        mine, theirs = ours.load_tabular(), lerobot.load_tabular()
        assert mine.keys() == theirs.keys()
        for key in mine:
            np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)
        for ep in (0, 4):
            _same_frames(ours, ep, source, ep, G1_CAM)
        stats = json.loads((converted / "meta" / "stats.json").read_text())
        assert stats[keys.STATE]["count"] == [1787] and len(stats[G1_CAM]["mean"]) == 3
        np.testing.assert_allclose(stats[keys.ACTION]["mean"], theirs[keys.ACTION].mean(0), atol=1e-5)
    finally:
        for ds in (ours, lerobot, source):
            ds.close()
    # packed as LeRobot packs: one mp4 holding the five per-episode files' packets, copied, never re-encoded
    assert [p.name for p in (converted / "videos" / G1_CAM).rglob("*.mp4")] == ["file-000.mp4"]
    copied = [_packets(V21 / f"videos/chunk-000/{G1_CAM}/episode_{ep:06d}.mp4") for ep in range(5)]
    assert _packets(converted / f"videos/{G1_CAM}/chunk-000/file-000.mp4") == sum(copied, [])


def _packets(path: Path) -> list[bytes]:
    with av.open(str(path)) as container:
        return [bytes(p) for p in container.demux(video=0) if p.size]


def test_convert_refuses_a_v30_source(tmp_path):
    with pytest.raises(DatasetError, match="already v3.0") as err:
        convert_v21_to_v30(V30, tmp_path / "out")
    assert str(V30) in str(err.value) and not (tmp_path / "out").exists()


# -- split and merge ----------------------------------------------------------------------------------
def test_split_of_a_multi_episode_mp4_remuxes_each_episode_exactly(tmp_path):
    parts = split(V30, tmp_path / "parts", episodes=[3, 1])
    assert parts == {"selected": tmp_path / "parts/selected", "rest": tmp_path / "parts/rest"}
    for path in parts.values():
        assert validate_dataset(path) == []
    src, sel, rest = LeRobotDataset(V30), LeRobotDataset(parts["selected"]), LeRobotDataset(parts["rest"])
    try:
        assert (sel.num_episodes, rest.num_episodes) == (2, 3)
        assert sel.num_frames + rest.num_frames == src.num_frames
        np.testing.assert_array_equal(sel.load_tabular()[keys.INDEX], np.arange(sel.num_frames))
        for out, picked in ((sel, [3, 1]), (rest, [0, 2, 4])):
            for new_ep, old_ep in enumerate(picked):
                _assert_episode_equal(out, new_ep, src, old_ep)
                _same_frames(out, new_ep, src, old_ep, G1_CAM)
    finally:
        for ds in (src, sel, rest):
            ds.close()
    # each part's episodes are packed into one mp4
    assert sorted(p.name for p in (parts["selected"] / "videos" / G1_CAM).rglob("*.mp4")) == ["file-000.mp4"]


def test_split_then_merge_gives_back_the_original(converted, tmp_path):
    parts = split(converted, tmp_path / "parts", episodes=[0, 1])
    merged = merge([parts["selected"], parts["rest"]], tmp_path / "merged")
    assert validate_dataset(merged) == []
    original, back = LeRobotDataset(V30), LeRobotDataset(merged)
    try:
        assert back.num_frames == original.num_frames == 1787 and back.tasks == original.tasks
        mine, theirs = back.load_tabular(), original.load_tabular()
        for key in theirs:
            np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)
        _same_frames(back, 2, original, 2, G1_CAM)
    finally:
        original.close()
        back.close()


def test_split_by_task_and_merge_of_v21_with_v30(tmp_path):
    feats = _features(video=False)
    src = _write(tmp_path / "src", [4, 5, 6], feats, tasks=["pick", "place", "pick"])
    parts = split(src, tmp_path / "by_task", by="task")
    assert list(parts) == ["pick", "place"]
    pick, place = LeRobotDataset(parts["pick"]), LeRobotDataset(parts["place"])
    try:
        assert (pick.num_episodes, place.num_episodes, pick.tasks, place.tasks) == (2, 1, ["pick"], ["place"])
        assert set(pick.load_tabular()[keys.TASK_INDEX]) == {0}
    finally:
        pick.close()
        place.close()
    merged = merge([V21, V30], tmp_path / "g1x2")  # v2.1 and v3.0 sources together
    assert validate_dataset(merged) == []
    ds = LeRobotDataset(merged)
    try:
        assert (ds.num_episodes, ds.num_frames, ds.tasks) == (
            10,
            2 * 1787,
            ["Pick up the yellow bottle on the table."],
        )
    finally:
        ds.close()


def test_episode_not_starting_on_a_keyframe_is_reencoded_only_itself(tmp_path):
    """A v3.0 mp4 holding episodes of 5 and 4 frames (keyframe every 2 frames): episode 0 is remuxed
    (bit-exact), episode 1 starts on frame 5, not a keyframe, so it alone is decoded and re-encoded."""
    feats = _features()
    src = _write(tmp_path / "src", [5, 4], feats, sizes=FileSizes(0, 0))
    frames = np.concatenate([_frames(5, 0, feats)[CAM], _frames(4, 1, feats)[CAM]])
    videos = src / "videos" / CAM / "chunk-000"
    encode_video(videos / "file-000.mp4", frames, FPS)
    (videos / "file-001.mp4").unlink()
    meta = src / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(meta).to_pylist()
    table[1].update({f"videos/{CAM}/file_index": 0, f"videos/{CAM}/from_timestamp": 5 / FPS})
    pq.write_table(pa.Table.from_pylist(table), meta)
    assert validate_dataset(src) == []

    out = copy_episodes([(src, [1, 0])], tmp_path / "out")
    assert validate_dataset(out) == []
    a, b = LeRobotDataset(src), LeRobotDataset(out)
    try:
        _same_frames(b, 1, a, 0, CAM)  # remuxed: identical
        new = b.video_frames(CAM, np.arange(4)).astype(int)
        old = a.video_frames(CAM, np.arange(5, 9)).astype(int)
        assert np.abs(new - old).mean() < 8  # re-encoded: close, the brightness ramp survives
        _assert_episode_equal(b, 0, a, 1)
    finally:
        a.close()
        b.close()


# -- filter ---------------------------------------------------------------------------------------------
def test_filter_keeps_exactly_the_successful_episodes_and_the_writer_can_append(tmp_path):
    feats = _features()
    sources = ["demo", "online", "eval", "intervention"]
    src = _write(tmp_path / "src", [6, 7, 5, 8], feats, succeed=(1, 3), sources=sources)
    out = filter_success(src, tmp_path / "ok")
    assert validate_dataset(out) == []
    a, b = LeRobotDataset(src), LeRobotDataset(out)
    try:
        assert b.num_episodes == 2 and b.episode_sources == ["online", "intervention"]
        for new_ep, old_ep in enumerate([1, 3]):
            _assert_episode_equal(b, new_ep, a, old_ep)
            _same_frames(b, new_ep, a, old_ep, CAM)
    finally:
        a.close()
        b.close()
    with LeRobotWriter(out, fps=FPS, features=feats) as writer:  # the output is in the writer's layout
        assert writer.add_episode(_frames(3, 9, feats, succeed=True), task="stack") == 2
    assert validate_dataset(out) == []
    filter_success(out, out, overwrite=True)  # in place: linked videos outlive the replaced folder
    assert validate_dataset(out) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["ok", "src"]


def test_filter_by_final_reward_without_a_success_column(tmp_path):
    src = _write(tmp_path / "src", [4, 5, 6], _features(video=False, success=False), succeed=(0, 2))
    out = filter_success(src, tmp_path / "ok")
    ds = LeRobotDataset(out)
    try:
        assert (ds.episode_to - ds.episode_from).tolist() == [4, 6]
    finally:
        ds.close()


# -- bad inputs -----------------------------------------------------------------------------------------
def test_merge_refuses_mismatched_fps_and_features(tmp_path):
    a = _write(tmp_path / "a", [3], _features(video=False))
    b = _write(tmp_path / "b", [3], _features(video=False), fps=15)
    c = _write(tmp_path / "c", [3], _features(video=False, state_dim=4))
    with pytest.raises(DatasetError, match="fps") as err:
        merge([a, b], tmp_path / "ab")
    assert str(a) in str(err.value) and str(b) in str(err.value)
    with pytest.raises(DatasetError, match=keys.STATE) as err:
        merge([a, c], tmp_path / "ac")
    assert str(a) in str(err.value) and str(c) in str(err.value)
    d = _write(tmp_path / "d", [3], _features(video=False), fps=30)
    with pytest.raises(DatasetError, match="feature") as err:
        merge([d, V30], tmp_path / "d30")
    assert str(d) in str(err.value) and str(V30) in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c", "d"]


def test_merge_drops_the_features_the_sources_disagree_on(tmp_path):
    """``drop`` leaves a feature out of the merge (its column, video and statistics): sources whose state
    sizes differ merge into a dataset that validates and holds every frame of what was kept."""
    a = _write(tmp_path / "a", [3], _features())
    c = _write(tmp_path / "c", [4], _features(state_dim=4))
    out = merge([a, c], tmp_path / "ac", drop=[keys.STATE, CAM])
    assert validate_dataset(out) == []
    ds, src = LeRobotDataset(out), LeRobotDataset(c)
    try:
        assert keys.STATE not in ds.features and CAM not in ds.features and not ds.video_keys
        assert not (out / "videos").exists()
        assert ds.num_episodes == 2 and ds.num_frames == 7
        assert keys.STATE not in json.loads((out / "meta" / "stats.json").read_text())
        np.testing.assert_array_equal(ds.load_tabular()[keys.ACTION][3:], src.load_tabular()[keys.ACTION])
    finally:
        ds.close()
        src.close()
    with pytest.raises(DatasetError, match="cannot drop 'timestamp': every LeRobot dataset has it"):
        merge([a, c], tmp_path / "x", drop=["timestamp"])
    with pytest.raises(DatasetError, match="cannot drop 'observation.nope': no source has it") as err:
        merge([a, c], tmp_path / "x", drop=["observation.nope"])
    assert str(a) in str(err.value) and not (tmp_path / "x").exists()


def test_filter_without_success_or_reward_names_the_file(tmp_path):
    with pytest.raises(DatasetError, match="next.success") as err:
        filter_success(V30, tmp_path / "out")
    assert str(V30 / "meta" / "info.json") in str(err.value)
    none_ok = _write(tmp_path / "src", [3, 3], _features(video=False))
    with pytest.raises(DatasetError, match="no successful episodes"):
        filter_success(none_ok, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_existing_destination_and_out_of_range_episodes(tmp_path):
    src = _write(tmp_path / "src", [3, 4], _features(video=False))
    dst = copy_episodes([(src, [1])], tmp_path / "dst")
    with pytest.raises(DatasetError, match="already exists") as err:
        copy_episodes([(src, None)], dst)
    assert str(dst) in str(err.value)
    copy_episodes([(src, None)], dst, overwrite=True)
    assert json.loads((dst / "meta/info.json").read_text())["total_episodes"] == 2
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(DatasetError, match="refusing to overwrite"):
        copy_episodes([(src, None)], precious, overwrite=True)
    assert (precious / "notes.txt").read_text() == "keep me"
    for bad in ([2], [-1]):
        with pytest.raises(DatasetError, match=f"episode {bad[0]} out of range") as err:
            copy_episodes([(src, bad)], tmp_path / "x")
        assert str(src) in str(err.value)
    with pytest.raises(DatasetError, match="episode 5 out of range"):
        split(V30, tmp_path / "parts", episodes=[0, 5])
    with pytest.raises(DatasetError, match="more than once"):
        split(V30, tmp_path / "parts", episodes=[0, 0])
    assert not (tmp_path / "x").exists() and not (tmp_path / "parts").exists()


def test_failure_mid_write_leaves_no_destination(tmp_path):
    src = _write(tmp_path / "src", [3, 3, 3], _features(), sizes=FileSizes(0, 0))
    missing = src / "videos" / CAM / "chunk-000" / "file-002.mp4"
    missing.unlink()
    with pytest.raises(DatasetError, match="video file not found") as err:
        copy_episodes([(src, None)], tmp_path / "dst")
    assert str(missing) in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no dst, no hidden partial folder
    old = copy_episodes([(src, [0])], tmp_path / "dst")
    with pytest.raises(DatasetError):
        copy_episodes([(src, None)], old, overwrite=True)
    assert json.loads((old / "meta/info.json").read_text())["total_episodes"] == 1  # the old one stands
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "src"]


# -- CLI ------------------------------------------------------------------------------------------------
def test_cli_merge_split_filter_convert(tmp_path, capsys):
    feats = _features(video=False)
    src = _write(tmp_path / "src", [3, 4, 5], feats, succeed=(2,))
    assert main(["dataset", "split", str(src), "--out", str(tmp_path / "parts"), "--episodes", "0,2-2"]) == 0
    assert "2 episodes, 8 frames" in capsys.readouterr().out
    parts = [str(tmp_path / "parts" / name) for name in ("selected", "rest")]
    assert main(["dataset", "merge", *parts, "--out", str(tmp_path / "merged")]) == 0
    assert "3 episodes, 12 frames" in capsys.readouterr().out
    assert main(["dataset", "filter", str(src), "--out", str(tmp_path / "ok"), "--success"]) == 0
    assert "1 episodes, 5 frames" in capsys.readouterr().out
    assert main(["dataset", "split", str(src), "--out", str(tmp_path / "tasks"), "--by-task"]) == 0
    assert (tmp_path / "tasks" / "task-000" / "meta" / "info.json").is_file()
    assert main(["dataset", "convert", str(V21), "--out", str(tmp_path / "v30")]) == 0
    assert validate_dataset(tmp_path / "v30") == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["merge", "{src}", "{nowhere}", "--out", "{tmp}/m"], "{nowhere}/meta/info.json: file not found"),
        (["merge", "{src}", "{src}", "--out", "{tmp}/m", "--drop", "index"], "cannot drop 'index'"),
        (["split", "{src}", "--out", "{tmp}/p", "--episodes", "0,x"], "bad episode list '0,x'"),
        (["split", "{src}", "--out", "{tmp}/p", "--episodes", "7"], "{src}: episode 7 out of range"),
        (["filter", "{src}", "--out", "{src}", "--success"], "{src}: destination already exists"),
        (["convert", "{nowhere}", "--out", "{tmp}/c"], "{nowhere}: not found"),
        (["convert", "{tmp}", "--out", "{tmp}/c"], "{tmp}: not a LeRobot dataset"),
        (["convert", "{src}", "--out", "{tmp}/c", "--fps", "30"], "--fps is for zarr and HDF5 inputs"),
    ],
)
def test_cli_bad_input_exits_1_naming_the_file(tmp_path, capsys, argv, message):
    src = _write(tmp_path / "src", [3], _features(video=False, success=True), succeed=(0,))
    names = {"src": str(src), "tmp": str(tmp_path), "nowhere": str(tmp_path / "nowhere")}
    assert main(["dataset", *(a.format(**names) for a in argv)]) == 1
    assert message.format(**names) in capsys.readouterr().err


def test_cli_convert_routes_zarr_both_ways(tmp_path, capsys):
    pytest.importorskip("robot_rl.data.convert.zarr_buffers")
    src = _write(tmp_path / "src", [3, 4], _features(video=False))
    zarr_dir = str(tmp_path / "buffer.zarr")
    assert main(["dataset", "convert", str(src), "--out", zarr_dir, "--to", "zarr"]) == 0
    assert main(["dataset", "convert", zarr_dir, "--out", str(tmp_path / "back"), "--fps", "10"]) == 0
    assert "2 episodes, 7 frames" in capsys.readouterr().out
    assert validate_dataset(tmp_path / "back") == []
    assert main(["dataset", "convert", zarr_dir, "--out", str(tmp_path / "z2"), "--to", "zarr"]) == 1
    assert "converts to LeRobot v3.0 only" in capsys.readouterr().err
