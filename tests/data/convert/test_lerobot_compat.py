"""LeRobot itself reads what robot_rl writes, and robot_rl reads what LeRobot's tools write.

LeRobot 0.4.4 runs in a side venv (built by ``../shared/peers/lerobot/setup.sh``; ``.ci/run`` builds it
and sets ``ROBOT_RL_LEROBOT_VENV``) through ``tests/lerobot_peer.py``, so none of its imports enter our venv.
For datasets written by ``collect`` (two cameras), ``convert`` (LeRobot v2.1 -> v3.0, zarr, HDF5),
``merge``, ``split`` and ``filter``, ``LeRobotDataset`` must give every non-video column exactly as our
reader does, items (``delta_timestamps`` chunks and their ``_is_pad`` padding included) equal to ours,
and decoded frames within a codec-decoder tolerance. LeRobot's ``delete_episodes``, ``split_dataset`` and
``merge_datasets`` run on our packed collect dataset and our reader reads their output back.

Without the side venv the tests skip, except under CI (``CI=true``), where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from repo_paths import LEROBOT_FIXTURES, TESTS
from test_dataset_formats import _aloha, _replay_buffer

from robot_rl import keys
from robot_rl.data.convert.hdf5 import hdf5_to_lerobot
from robot_rl.data.convert.zarr_buffers import zarr_to_lerobot
from robot_rl.data.lerobot.ops import convert_v21_to_v30, filter_success, merge, split
from robot_rl.data.lerobot.packing import FileSizes
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.writer import LeRobotWriter

VENV_VAR = "ROBOT_RL_LEROBOT_VENV"
PEER = TESTS / "lerobot_peer.py"
V21 = LEROBOT_FIXTURES / "g1_pick_bottle_v21"
CAMS = ("observation.images.front", "observation.images.wrist")
PIXEL_TOLERANCE = 3 / 255  # largest difference between LeRobot's torchcodec and our PyAV decode of a frame


def _peer_python() -> Path:
    venv = os.environ.get(VENV_VAR, "")
    python = Path(venv) / "bin" / "python"
    if venv and python.is_file():
        return python
    reason = (
        f"the LeRobot 0.4.4 side venv is missing: set {VENV_VAR} to a venv built by "
        f"../shared/peers/lerobot/setup.sh (got {venv!r})"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason + "; CI must run this test (.ci/run builds the venv)")
    pytest.skip(reason)


def _collect(run: Path) -> Path:
    """Three episodes of ``robot-rl collect`` in the simulator with two 32 px cameras, through the CLI."""
    args = [
        "collect",
        f"--run_dir={run}",
        "--collect.num_episodes=3",
        "--env.num_envs=1",
        "--env.cameras=[front,wrist]",
        "--env.image_size=32",
        "--env.max_episode_steps=8",
    ]
    code = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return run / "dataset"


def _written(root: Path) -> Path:
    """Five episodes with two cameras and success on episodes 1 and 3, written to many small files (so
    LeRobot reads episodes spread over several data and video files)."""
    rng = np.random.default_rng(5)
    features = {
        keys.STATE: {"dtype": "float32", "shape": [3]},
        keys.ACTION: {"dtype": "float32", "shape": [2]},
        keys.SUCCESS: {"dtype": "bool", "shape": [1]},
        **{cam: {"dtype": "video", "shape": [16, 24, 3]} for cam in CAMS},
    }
    sizes = FileSizes(data_mb=0.008, video_mb=0.004)
    with LeRobotWriter(root, fps=10, features=features, file_sizes=sizes, pack_every=2) as writer:
        for ep, n in enumerate((6, 4, 7, 5, 6)):
            level = (np.arange(n) * 25 + 40 * ep) % 200
            image = level[:, None, None, None] + np.arange(24)[None, None, :, None]
            frames = {
                keys.STATE: rng.normal(size=(n, 3)).astype(np.float32),
                keys.ACTION: rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                keys.SUCCESS: (np.arange(n) == n - 1) & (ep in (1, 3)),
                CAMS[0]: np.broadcast_to(image, (n, 16, 24, 3)).astype(np.uint8),
                CAMS[1]: np.broadcast_to(255 - image, (n, 16, 24, 3)).astype(np.uint8),
            }
            writer.add_episode(frames, task=f"task {ep % 2}", source="demo" if ep % 2 else "online")
    return root


def _deltas(ds: LeRobotDataset) -> dict[str, list[float]]:
    """An action chunk reaching past both episode ends, and two frames of the first camera."""
    step = 1 / ds.fps
    deltas = {keys.ACTION: [-step, 0.0, step, 2 * step]}
    if ds.video_keys:
        deltas[ds.video_keys[0]] = [-step, 0.0]
    return deltas


def _indices(ds: LeRobotDataset) -> list[int]:
    """Every frame of a small dataset; the first, second and last frame of each episode of a big one."""
    if ds.num_frames <= 60:
        return list(range(ds.num_frames))
    picks = np.concatenate([ds.episode_from, ds.episode_from + 1, ds.episode_to - 1])
    return sorted(set(picks.tolist()))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Every dataset under test, LeRobot's view of each, and LeRobot's tools' outputs (one peer run)."""
    python = _peer_python()
    tmp = tmp_path_factory.mktemp("compat")
    collected = _collect(tmp / "run")
    written = _written(tmp / "written")
    _replay_buffer(tmp / "buffer.zarr")
    _aloha(tmp / "aloha")
    with pytest.warns(UserWarning, match="depth"):
        from_zarr = zarr_to_lerobot(tmp / "buffer.zarr", tmp / "from_zarr", fps=10, task="push")
    parts = split(written, tmp / "split", episodes=[3, 0])
    datasets = {
        "collect": collected,
        "convert_v21": convert_v21_to_v30(V21, tmp / "from_v21"),
        "convert_zarr": from_zarr,
        "convert_hdf5": hdf5_to_lerobot(tmp / "aloha", tmp / "from_hdf5"),
        "merge": merge([written, parts["selected"]], tmp / "merged"),
        "split": parts["rest"],
        "filter": filter_success(written, tmp / "filtered"),
    }
    jobs, deltas, indices = [], {}, {}
    for name, root in datasets.items():
        ds = LeRobotDataset(root)
        deltas[name], indices[name] = _deltas(ds), _indices(ds)
        ds.close()
        jobs.append(
            {
                "op": "load",
                "root": str(root),
                "out": str(tmp / f"{name}.npz"),
                "indices": indices[name],
                "delta_timestamps": deltas[name],
            }
        )
    tools = {"delete": tmp / "lr_delete", "split": tmp / "lr_split", "merge": tmp / "lr_merge"}
    jobs += [
        {"op": "delete", "root": str(collected), "episodes": [1], "out": str(tools["delete"])},
        {
            "op": "split",
            "root": str(collected),
            "splits": {"a": [0, 2], "b": [1]},
            "out": str(tools["split"]),
        },
        {  # LeRobot's split outputs drop the default features' "fps", so LeRobot merges them together only
            "op": "merge",
            "roots": [str(tools["split"] / "b"), str(tools["split"] / "a")],
            "out": str(tools["merge"]),
        },
    ]
    request = tmp / "request.json"
    request.write_text(json.dumps(jobs))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "HF_LEROBOT_HOME": str(tmp / "hf")}
    done = subprocess.run([str(python), str(PEER), str(request)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return {"tmp": tmp, "datasets": datasets, "deltas": deltas, "indices": indices, "tools": tools}


@pytest.mark.parametrize(
    "name", ["collect", "convert_v21", "convert_zarr", "convert_hdf5", "merge", "split", "filter"]
)
def test_lerobot_reads_what_we_write(world, name):
    root = world["datasets"][name]
    theirs = np.load(world["tmp"] / f"{name}.npz")
    meta = json.loads(str(theirs["meta"]))
    ours = LeRobotDataset(root, delta_timestamps=world["deltas"][name])
    try:
        assert (meta["num_frames"], meta["num_episodes"], meta["fps"]) == (
            ours.num_frames,
            ours.num_episodes,
            ours.fps,
        )
        # every non-video column of every row, exactly (LeRobot's rows in its file order, ours by index)
        columns = ours.load_tabular()
        order = np.argsort(theirs[f"col/{keys.INDEX}"], kind="stable")
        assert {k[4:] for k in theirs.files if k.startswith("col/")} == set(columns)
        for key, mine in columns.items():
            np.testing.assert_array_equal(theirs[f"col/{key}"][order].reshape(mine.shape), mine, err_msg=key)
        # whole items, delta_timestamps chunks and padding included
        for i, task in zip(world["indices"][name], meta["tasks"], strict=True):
            item = ours[i]
            assert item.pop(keys.TASK) == task
            assert {k.split("/", 2)[2] for k in theirs.files if k.startswith(f"item/{i}/")} == set(item), i
            for key, value in item.items():
                their = theirs[f"item/{i}/{key}"]
                mine = value.numpy()
                if mine.dtype == np.float64:  # LeRobot's items hold float64 columns as float32 (torch.tensor
                    mine = mine.astype(np.float32)  # of Python floats); its columns and ours keep float64
                assert their.shape == mine.shape and their.dtype == mine.dtype, (i, key)
                if key in ours.video_keys:
                    assert np.abs(their - mine).max() <= PIXEL_TOLERANCE, (i, key)
                else:
                    np.testing.assert_array_equal(their, mine, err_msg=f"{i} {key}")
    finally:
        ours.close()


def _episode_values(ds: LeRobotDataset, ep: int) -> dict[str, np.ndarray]:
    lo, hi = int(ds.episode_from[ep]), int(ds.episode_to[ep])
    skip = (keys.INDEX, keys.EPISODE_INDEX, keys.TASK_INDEX)
    values = {k: v[lo:hi] for k, v in ds.load_tabular().items() if k not in skip}
    for key in ds.video_keys:
        values[key] = ds.episode_video(ep, key).astype(np.int16)
    return values


def _same_episodes(new: LeRobotDataset, old: LeRobotDataset, pairs: list[tuple[int, int]]) -> None:
    assert new.num_episodes == len(pairs)
    np.testing.assert_array_equal(new.load_tabular()[keys.INDEX], np.arange(new.num_frames))
    for new_ep, old_ep in pairs:
        a, b = _episode_values(new, new_ep), _episode_values(old, old_ep)
        assert a.keys() == b.keys()
        for key in a:
            if key in new.video_keys:  # LeRobot re-encodes the episodes it cuts out of a file
                assert np.abs(a[key] - b[key]).mean() < 3, (new_ep, key)
            else:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{new_ep} {key}")


def test_we_read_what_lerobots_tools_write(world):
    """delete_episodes, split_dataset and merge_datasets on our packed collect dataset."""
    tools = world["tools"]
    src = LeRobotDataset(world["datasets"]["collect"])
    deleted = LeRobotDataset(tools["delete"])
    split_a, split_b = LeRobotDataset(tools["split"] / "a"), LeRobotDataset(tools["split"] / "b")
    merged = LeRobotDataset(tools["merge"])
    try:
        _same_episodes(deleted, src, [(0, 0), (1, 2)])
        _same_episodes(split_a, src, [(0, 0), (1, 2)])
        _same_episodes(split_b, src, [(0, 1)])
        _same_episodes(merged, src, [(0, 1), (1, 0), (2, 2)])
        for ds in (deleted, split_a, split_b, merged):
            ds.verify_videos()
            assert ds.tasks == src.tasks
    finally:
        for ds in (src, deleted, split_a, split_b, merged):
            ds.close()
