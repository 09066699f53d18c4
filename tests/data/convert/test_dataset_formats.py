"""zarr (diffusion-policy ReplayBuffer) and HDF5 (robomimic, ALOHA/ACT) import, LeRobot -> zarr export, on
real files built here: keys mapped as documented, values kept, frames within codec tolerance, and every bad
input named by file and key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr
from repo_paths import LEROBOT_FIXTURES

from robot_rl import keys
from robot_rl.data.convert.hdf5 import ALOHA_NAMES, hdf5_to_lerobot
from robot_rl.data.convert.zarr_buffers import lerobot_to_zarr, zarr_to_lerobot
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.validate import validate_dataset
from robot_rl.data.lerobot.writer import LeRobotWriter

FIXTURE_V21 = LEROBOT_FIXTURES / "g1_pick_bottle_v21"
LENGTHS = (7, 5, 9)
PIXEL_TOLERANCE = 12.0  # mean abs error of a lossy-coded 16x16 smooth frame, in 0..255 levels


def _frames(n: int, h: int = 16, w: int = 16, phase: float = 0.0) -> np.ndarray:
    """Smooth moving colour gradients (T, H, W, 3) uint8: what a video codec keeps well."""
    t, y, x, c = np.meshgrid(np.arange(n), np.arange(h), np.arange(w), np.arange(3), indexing="ij")
    return (127 + 100 * np.sin(x / 4 + y / 5 + t / 3 + 2 * c + phase)).astype(np.uint8)


def _close(decoded: np.ndarray, original: np.ndarray) -> None:
    assert decoded.shape == original.shape
    assert np.abs(decoded.astype(float) - original).mean() < PIXEL_TOLERANCE


def _episodes(ds: LeRobotDataset) -> list[slice]:
    return [slice(int(a), int(b)) for a, b in zip(ds.episode_from, ds.episode_to, strict=True)]


# -- zarr ----------------------------------------------------------------------------------------------
def _replay_buffer(path: Path, lengths=LENGTHS, fps: int | None = None) -> dict[str, np.ndarray]:
    """A diffusion-policy-style ReplayBuffer (zarr format 2); returns the arrays written."""
    n = sum(lengths)
    rng = np.random.default_rng(0)
    arrays = {
        "action": rng.normal(size=(n, 2)).astype(np.float32),
        "agent_pos": rng.normal(size=(n, 2)).astype(np.float32),
        "robot_eef_pose": rng.normal(size=(n, 6)).astype(np.float64),
        "keypoint": rng.normal(size=(n, 3, 2)).astype(np.float32),
        "timestamp": 1.7e9 + np.arange(n) / 10.0,
        "reward": rng.uniform(size=n).astype(np.float32),
        "done": np.isin(np.arange(n), np.cumsum(lengths) - 1),
        "img": _frames(n),
        "camera0_rgb": _frames(n, 16, 24, phase=1.0).astype(np.float32),  # PushT keeps float pixels
        "depth": rng.uniform(size=(n, 16, 16, 1)).astype(np.float32),
    }
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    for name, arr in arrays.items():
        root.require_group("data").create_array(name, data=arr)
    meta = root.require_group("meta")
    meta.create_array("episode_ends", data=np.cumsum(lengths).astype(np.int64))
    if fps is not None:
        meta.attrs["fps"] = fps
    return arrays


def test_zarr_import_maps_keys_and_keeps_values(tmp_path):
    arrays = _replay_buffer(tmp_path / "pusht.zarr")
    with pytest.warns(UserWarning, match=r"data/depth"):
        dst = zarr_to_lerobot(tmp_path / "pusht.zarr", tmp_path / "ds", fps=10, task="push the T")
    assert validate_dataset(dst) == []
    ds = LeRobotDataset(dst)
    assert (ds.fps, ds.num_episodes, ds.num_frames, ds.tasks) == (10, 3, sum(LENGTHS), ["push the T"])
    assert ds.features[keys.STATE]["names"] == ["agent_pos_0", "agent_pos_1"] + [
        f"robot_eef_pose_{i}" for i in range(6)
    ]
    assert set(ds.video_keys) == {"observation.images.img", "observation.images.camera0_rgb"}
    assert "observation.depth" not in ds.features and "observation.images.depth" not in ds.features
    data = ds.load_tabular()
    state = np.concatenate([arrays["agent_pos"], arrays["robot_eef_pose"].astype(np.float32)], axis=1)
    np.testing.assert_array_equal(data[keys.STATE], state)
    np.testing.assert_array_equal(data[keys.ACTION], arrays["action"])
    np.testing.assert_array_equal(data[keys.REWARD], arrays["reward"])
    np.testing.assert_array_equal(data[keys.DONE], arrays["done"])
    np.testing.assert_array_equal(data["observation.keypoint"], arrays["keypoint"])
    assert data["observation.timestamp"].dtype == np.float64
    np.testing.assert_array_equal(data["observation.timestamp"], arrays["timestamp"])
    for ep, rows in enumerate(_episodes(ds)):
        _close(ds.episode_video(ep, "observation.images.img"), arrays["img"][rows])
        _close(ds.episode_video(ep, "observation.images.camera0_rgb"), arrays["camera0_rgb"][rows])
    ds.close()


def test_zarr_zip_fps_from_meta_attrs(tmp_path):
    _replay_buffer(tmp_path / "store.zarr", lengths=(4, 6), fps=15)
    shutil.make_archive(str(tmp_path / "store.zarr"), "zip", tmp_path / "store.zarr")
    with pytest.warns(UserWarning):
        dst = zarr_to_lerobot(tmp_path / "store.zarr.zip", tmp_path / "ds")
    ds = LeRobotDataset(dst)
    assert (ds.fps, ds.num_frames, ds.tasks) == (15, 10, ["store"])
    with pytest.raises(DatasetError, match=r"store\.zarr.*fps is 15.*30"):
        zarr_to_lerobot(tmp_path / "store.zarr", tmp_path / "other", fps=30)


def test_zarr_without_fps_asks_for_it(tmp_path):
    _replay_buffer(tmp_path / "a.zarr")
    with pytest.raises(DatasetError, match=r"a\.zarr.*--fps"):
        zarr_to_lerobot(tmp_path / "a.zarr", tmp_path / "ds")


@pytest.mark.filterwarnings("ignore:.*arrays not imported")
def test_bad_zarr_stores_are_named(tmp_path):
    src = tmp_path / "a.zarr"
    _replay_buffer(src)
    shutil.rmtree(src / "meta" / "episode_ends")
    with pytest.raises(DatasetError, match=r"a\.zarr.*meta/episode_ends"):
        zarr_to_lerobot(src, tmp_path / "ds", fps=10)

    _replay_buffer(src, fps=10)
    root = zarr.open_group(str(src), mode="r+")
    root["meta"]["episode_ends"][-1] = sum(LENGTHS) - 2
    with pytest.raises(DatasetError, match=r"a\.zarr.*'data/action' has 21 frames.*episode_ends.*19"):
        zarr_to_lerobot(src, tmp_path / "ds")
    root["meta"]["episode_ends"][:] = [7, 7, sum(LENGTHS)]
    with pytest.raises(DatasetError, match=r"a\.zarr.*episode_ends.*increase"):
        zarr_to_lerobot(src, tmp_path / "ds")

    with pytest.raises(DatasetError, match=r"nothing\.zarr"):
        zarr_to_lerobot(tmp_path / "nothing.zarr", tmp_path / "ds", fps=10)
    _replay_buffer(src, fps=10)
    (tmp_path / "earlier").mkdir()
    with pytest.raises(DatasetError, match=r"earlier.*already exists"):
        zarr_to_lerobot(src, tmp_path / "earlier")


def _lerobot(root: Path) -> tuple[Path, dict[str, np.ndarray]]:
    features = {
        keys.STATE: {"dtype": "float32", "shape": [3], "names": ["x", "y", "z"]},
        keys.ACTION: {"dtype": "float32", "shape": [2]},
        keys.REWARD: {"dtype": "float32", "shape": [1]},
        keys.SUCCESS: {"dtype": "bool", "shape": [1]},
        "observation.images.front": {"dtype": "video", "shape": [16, 24, 3]},
    }
    rng = np.random.default_rng(1)
    episodes = []
    with LeRobotWriter(root, fps=12, features=features, robot_type="toy") as writer:
        for i, n in enumerate(LENGTHS):
            frames = {
                keys.STATE: rng.normal(size=(n, 3)).astype(np.float32),
                keys.ACTION: rng.normal(size=(n, 2)).astype(np.float32),
                keys.REWARD: rng.uniform(size=n).astype(np.float32),
                keys.SUCCESS: np.arange(n) == n - 1,
                "observation.images.front": _frames(n, 16, 24, phase=i),
            }
            writer.add_episode(frames, task=f"task {i % 2}", source="online" if i else "demo")
            episodes.append(frames)
    return root, {k: np.concatenate([e[k] for e in episodes]) for k in features}


def test_lerobot_zarr_lerobot_round_trip(tmp_path):
    src, written = _lerobot(tmp_path / "src")
    store = lerobot_to_zarr(src, tmp_path / "out.zarr")
    root = zarr.open_group(str(store), mode="r")
    assert root.metadata.zarr_format == 2 and sorted(root["data"].array_keys()) == [
        "action",
        "front",
        "reward",
        "state",
        "success",
    ]
    np.testing.assert_array_equal(root["meta"]["episode_ends"][:], np.cumsum(LENGTHS))
    meta = dict(root["meta"].attrs)
    assert meta["fps"] == 12 and meta["tasks"] == ["task 0", "task 1"]
    assert meta["episode_task_index"] == [0, 1, 0] and meta["episode_sources"] == ["demo", "online", "online"]
    assert root["data"]["front"].chunks == (1, 16, 24, 3) and root["data"]["front"].dtype == np.uint8
    src_ds = LeRobotDataset(src)
    np.testing.assert_array_equal(
        root["data"]["front"][LENGTHS[0] :][:5], src_ds.episode_video(1, "observation.images.front")[:5]
    )

    dst = zarr_to_lerobot(store, tmp_path / "back")
    assert validate_dataset(dst) == []
    ds = LeRobotDataset(dst)
    assert (ds.fps, ds.tasks, ds.episode_sources, ds.info["robot_type"]) == (
        12,
        ["task 0", "task 1"],
        ["demo", "online", "online"],
        "toy",
    )
    assert ds.features[keys.STATE]["names"] == ["x", "y", "z"]
    before, after = src_ds.load_tabular(), ds.load_tabular()
    assert set(before) == set(after)
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=key)
    for ep, rows in enumerate(_episodes(ds)):
        _close(ds.episode_video(ep, "observation.images.front"), written["observation.images.front"][rows])


def test_v21_dataset_exports(tmp_path):
    """The LeRobot-written v2.1 fixture, cut to its first 24 frames so the test stays quick."""
    src = tmp_path / "v21"
    for rel in ("meta/info.json", "meta/tasks.jsonl", "data/chunk-000/episode_000000.parquet"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURE_V21 / rel, src / rel)
    video = "videos/chunk-000/observation.images.cam_high/episode_000000.mp4"
    (src / video).parent.mkdir(parents=True)
    shutil.copy(FIXTURE_V21 / video, src / video)
    table = pq.read_table(src / "data/chunk-000/episode_000000.parquet").slice(0, 24)
    pq.write_table(table, src / "data/chunk-000/episode_000000.parquet")
    (src / "meta/episodes.jsonl").write_text(json.dumps({"episode_index": 0, "tasks": ["t"], "length": 24}))
    info = json.loads((src / "meta/info.json").read_text())
    info.update(total_episodes=1, total_frames=24)
    (src / "meta/info.json").write_text(json.dumps(info))

    store = lerobot_to_zarr(src, tmp_path / "g1.zarr")
    root = zarr.open_group(str(store), mode="r")
    ds = LeRobotDataset(src)
    np.testing.assert_array_equal(root["data"]["state"][:], ds.load_tabular()[keys.STATE])
    assert root["data"]["cam_high"].shape == (24, 480, 640, 3)
    np.testing.assert_array_equal(
        root["data"]["cam_high"][20], ds.video_frames("observation.images.cam_high", np.array([20]))[0]
    )
    assert root["meta"].attrs["fps"] == 30 and root["data"]["state"].attrs["lerobot_key"] == keys.STATE


# -- HDF5 ----------------------------------------------------------------------------------------------
ROBOMIMIC_DEMOS = {"demo_0": 6, "demo_2": 4, "demo_10": 5}  # numeric order: 0, 2, 10


def _robomimic(path: Path, demos=ROBOMIMIC_DEMOS) -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(2)
    out = {}
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        env_args = {"env_name": "Lift", "type": 1, "env_kwargs": {"control_freq": 20, "robots": ["Panda"]}}
        data.attrs["env_args"] = json.dumps(env_args)
        for i, (name, n) in enumerate(demos.items()):
            arrays = {
                "actions": rng.uniform(-1, 1, (n, 7)),
                "rewards": (np.arange(n) == n - 1).astype(np.float64),
                "dones": (np.arange(n) == n - 1).astype(np.int64),
                "obs/robot0_eef_pos": rng.normal(size=(n, 3)),
                "obs/robot0_gripper_qpos": rng.normal(size=(n, 2)),
                "obs/object": rng.normal(size=(n, 10)),
                "obs/agentview_image": _frames(n, phase=i),
                "obs/agentview_depth": rng.uniform(size=(n, 16, 16, 1)).astype(np.float32),
            }
            for key, arr in arrays.items():
                data.create_dataset(f"{name}/{key}", data=arr)
            data[name].attrs["num_samples"] = n
            out[name] = arrays
    return out


def test_robomimic_import(tmp_path):
    demos = _robomimic(tmp_path / "lift.hdf5")
    with pytest.warns(UserWarning, match=r"lift\.hdf5.*obs/agentview_depth"):
        dst = hdf5_to_lerobot(tmp_path / "lift.hdf5", tmp_path / "ds")
    assert validate_dataset(dst) == []
    ds = LeRobotDataset(dst)
    assert (ds.fps, ds.tasks, ds.info["robot_type"]) == (20, ["Lift"], "Panda")
    assert (ds.episode_to - ds.episode_from).tolist() == [6, 4, 5]
    assert ds.features[keys.STATE]["names"] == [f"robot0_eef_pos_{i}" for i in range(3)] + [
        "robot0_gripper_qpos_0",
        "robot0_gripper_qpos_1",
    ]
    assert ds.video_keys == ["observation.images.agentview"]
    data = ds.load_tabular()
    for rows, demo in zip(_episodes(ds), ("demo_0", "demo_2", "demo_10"), strict=True):
        arrays = demos[demo]
        np.testing.assert_array_equal(data[keys.ACTION][rows], arrays["actions"].astype(np.float32))
        state = np.concatenate([arrays["obs/robot0_eef_pos"], arrays["obs/robot0_gripper_qpos"]], axis=1)
        np.testing.assert_array_equal(data[keys.STATE][rows], state.astype(np.float32))
        np.testing.assert_array_equal(data[keys.ENV_STATE][rows], arrays["obs/object"].astype(np.float32))
        np.testing.assert_array_equal(data[keys.REWARD][rows], arrays["rewards"].astype(np.float32))
        np.testing.assert_array_equal(data[keys.DONE][rows], arrays["dones"].astype(bool))
        _close(
            ds.video_frames("observation.images.agentview", np.arange(rows.start, rows.stop)),
            arrays["obs/agentview_image"],
        )
    with pytest.warns(UserWarning, match="agentview_depth"):
        given = LeRobotDataset(hdf5_to_lerobot(tmp_path / "lift.hdf5", tmp_path / "ds2", fps=10, task="lift"))
    assert (given.fps, given.tasks) == (10, ["lift"])


def _aloha(folder: Path, lengths=(5, 4, 6)) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    folder.mkdir()
    out = []
    for i, n in zip((0, 2, 10), lengths, strict=True):
        arrays = {
            "action": rng.normal(size=(n, 14)).astype(np.float32),
            "observations/qpos": rng.normal(size=(n, 14)),
            "observations/qvel": rng.normal(size=(n, 14)),
            "observations/images/top": _frames(n, phase=i),
            "observations/images/left_wrist": _frames(n, phase=i + 1),
        }
        with h5py.File(folder / f"episode_{i}.hdf5", "w") as f:
            f.attrs["sim"] = True
            for key, arr in arrays.items():
                f.create_dataset(key, data=arr)
        out.append(arrays)
    return out


def test_aloha_import(tmp_path):
    episodes = _aloha(tmp_path / "sim_transfer_cube")
    dst = hdf5_to_lerobot(tmp_path / "sim_transfer_cube", tmp_path / "ds")
    assert validate_dataset(dst) == []
    ds = LeRobotDataset(dst)
    assert (ds.fps, ds.tasks, ds.info["robot_type"]) == (50, ["sim_transfer_cube"], "aloha")
    assert (ds.episode_to - ds.episode_from).tolist() == [5, 4, 6]  # episode_10 after episode_2
    assert sorted(ds.video_keys) == ["observation.images.left_wrist", "observation.images.top"]
    assert ds.features[keys.STATE]["names"] == ALOHA_NAMES == ds.features[keys.ACTION]["names"]
    data = ds.load_tabular()
    for ep, (rows, arrays) in enumerate(zip(_episodes(ds), episodes, strict=True)):
        np.testing.assert_array_equal(data[keys.ACTION][rows], arrays["action"])
        np.testing.assert_array_equal(data[keys.STATE][rows], arrays["observations/qpos"].astype(np.float32))
        np.testing.assert_array_equal(
            data["observation.velocity"][rows], arrays["observations/qvel"].astype(np.float32)
        )
        _close(ds.episode_video(ep, "observation.images.top"), arrays["observations/images/top"])
    one = LeRobotDataset(hdf5_to_lerobot(tmp_path / "sim_transfer_cube" / "episode_2.hdf5", tmp_path / "one"))
    assert (one.num_frames, one.fps, one.tasks) == (4, 50, ["episode_2"])


@pytest.mark.filterwarnings("ignore:.*datasets not imported")
def test_bad_hdf5_inputs_are_named(tmp_path):
    _robomimic(tmp_path / "a.hdf5")
    with h5py.File(tmp_path / "a.hdf5", "r+") as f:
        del f["data/demo_2/actions"]
    with pytest.raises(DatasetError, match=r"a\.hdf5.*data/demo_2.*robomimic.*'actions'"):
        hdf5_to_lerobot(tmp_path / "a.hdf5", tmp_path / "ds")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.hdf5"]  # demo_0 was written, then removed

    _robomimic(tmp_path / "b.hdf5")
    with h5py.File(tmp_path / "b.hdf5", "r+") as f:
        del f["data/demo_0/actions"]
    with pytest.raises(DatasetError, match=r"b\.hdf5.*data/demo_0.*robomimic.*'actions'"):
        hdf5_to_lerobot(tmp_path / "b.hdf5", tmp_path / "ds")

    _robomimic(tmp_path / "c.hdf5")
    with h5py.File(tmp_path / "c.hdf5", "r+") as f:
        short = f["data/demo_10/obs/robot0_eef_pos"][:-1]
        del f["data/demo_10/obs/robot0_eef_pos"]
        f["data/demo_10/obs/robot0_eef_pos"] = short
    with pytest.raises(
        DatasetError, match=r"c\.hdf5.*demo_10.*obs/robot0_eef_pos' has 4 frames.*'actions' has 5"
    ):
        hdf5_to_lerobot(tmp_path / "c.hdf5", tmp_path / "ds")

    with h5py.File(tmp_path / "d.hdf5", "w") as f:
        f["foo"] = np.zeros(3)
    with pytest.raises(DatasetError, match=r"d\.hdf5.*unknown HDF5 layout.*'foo'.*robomimic.*ALOHA"):
        hdf5_to_lerobot(tmp_path / "d.hdf5", tmp_path / "ds")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match=r"empty.*unknown HDF5 layout"):
        hdf5_to_lerobot(tmp_path / "empty", tmp_path / "ds")
    (tmp_path / "e.hdf5").write_text("not hdf5")
    with pytest.raises(DatasetError, match=r"e\.hdf5.*not a readable HDF5"):
        hdf5_to_lerobot(tmp_path / "e.hdf5", tmp_path / "ds")

    _aloha(tmp_path / "aloha")
    with h5py.File(tmp_path / "aloha" / "episode_10.hdf5", "r+") as f:
        del f["observations/qpos"]
    with pytest.raises(DatasetError, match=r"episode_10\.hdf5.*ALOHA.*'observations/qpos'"):
        hdf5_to_lerobot(tmp_path / "aloha", tmp_path / "ds")
