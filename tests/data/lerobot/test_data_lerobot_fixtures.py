"""Acceptance: our reader against LeRobot-written fixtures (v3.0 and v2.1 of the same G1 episodes)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from repo_paths import LEROBOT_FIXTURES

from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.video import VideoDecoder

FIXTURES = LEROBOT_FIXTURES
V30 = FIXTURES / "g1_pick_bottle_v30"
V21 = FIXTURES / "g1_pick_bottle_v21"
CAM = "observation.images.cam_high"
TASK = "Pick up the yellow bottle on the table."
DELTAS = {"action": [i / 30 for i in range(10)]}

pytestmark = pytest.mark.skipif(
    not (V30.is_dir() and V21.is_dir()), reason=f"fixtures absent under {FIXTURES}"
)


@pytest.fixture(scope="module")
def datasets() -> dict[str, LeRobotDataset]:
    return {
        "v30": LeRobotDataset(V30, delta_timestamps=DELTAS),
        "v21": LeRobotDataset(V21, delta_timestamps=DELTAS),
    }


@pytest.mark.parametrize("version", ["v30", "v21"])
def test_frame_400_matches_lerobot(datasets: dict[str, LeRobotDataset], version: str) -> None:
    ds = datasets[version]
    assert (ds.fps, ds.num_episodes, ds.num_frames, len(ds)) == (30, 5, 1787, 1787)
    assert ds.tasks == [TASK]
    np.testing.assert_array_equal(ds.episode_from, [0, 290, 711, 1083, 1425])
    np.testing.assert_array_equal(ds.episode_to, [290, 711, 1083, 1425, 1787])
    item = ds[400]
    img = item[CAM]
    assert img.shape == (3, 480, 640) and img.dtype == torch.float32
    assert 0.0 <= float(img.min()) and float(img.max()) <= 1.0 and float(img.std()) > 0.01
    assert item["observation.state"].shape == (26,) and item["observation.state"].dtype == torch.float32
    assert item["action"].shape == (10, 26) and item["action"].dtype == torch.float32
    assert item["action_is_pad"].shape == (10,) and item["action_is_pad"].dtype == torch.bool
    assert not item["action_is_pad"].any()
    assert item["task"] == TASK
    assert int(item["index"]) == 400 and int(item["episode_index"]) == 1 and int(item["frame_index"]) == 110
    tab = ds.load_tabular()
    np.testing.assert_array_equal(item["action"].numpy(), tab["action"][400:410])
    np.testing.assert_array_equal(item["observation.state"].numpy(), tab["observation.state"][400])


def test_v21_and_v30_agree(datasets: dict[str, LeRobotDataset]) -> None:
    a, b = datasets["v30"], datasets["v21"]
    ta, tb = a.load_tabular(), b.load_tabular()
    assert set(ta) == set(tb)
    for key in ta:
        np.testing.assert_array_equal(ta[key], tb[key], err_msg=key)
    for idx in (0, 400, 1786):
        ia, ib = a[idx], b[idx]
        for key in ("observation.state", "action", "action_is_pad"):
            assert torch.equal(ia[key], ib[key]), key
        assert float((ia[CAM] - ib[CAM]).abs().mean()) < 2 / 255


def test_is_pad_at_episode_end(datasets: dict[str, LeRobotDataset]) -> None:
    ds = datasets["v30"]
    item = ds[289]  # last frame of episode 0
    assert item["action_is_pad"].tolist() == [False] + [True] * 9
    assert torch.equal(item["action"][5], item["action"][0])  # padded by repeating the edge frame
    assert ds[285]["action_is_pad"].tolist() == [False] * 5 + [True] * 5
    assert not ds[290]["action_is_pad"].any()  # first frame of episode 1


def test_video_decode_is_frame_exact(datasets: dict[str, LeRobotDataset]) -> None:
    """Random-access frames equal the frames of a sequential decode at the same index (no off-by-one)."""
    ds21, ds30 = datasets["v21"], datasets["v30"]
    sequential = VideoDecoder().decode_all(V21 / "videos/chunk-000" / CAM / "episode_000001.mp4")
    assert len(sequential) == 421
    detectable = 0
    for frame in (110, 3, 420, 0, 111, 250, 200):  # backwards and forwards seeks
        got = (ds21[290 + frame][CAM].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        np.testing.assert_array_equal(got, sequential[frame])
        # a one-frame shift is only visible where the neighbouring frame differs
        other = sequential[frame + 1] if frame < 420 else sequential[frame - 1]
        detectable += not np.array_equal(other, sequential[frame])
    assert detectable >= 4
    v30_frames = ds30.episode_video(1, CAM)
    assert v30_frames.shape == (421, 480, 640, 3) and v30_frames.dtype == np.uint8
    sub = slice(None, None, 20)
    assert np.abs(v30_frames[sub].astype(np.int16) - sequential[sub]).mean() < 2


def test_verify_videos(datasets: dict[str, LeRobotDataset]) -> None:
    datasets["v30"].verify_videos()
    datasets["v21"].verify_videos()


def test_stats_and_sources(datasets: dict[str, LeRobotDataset]) -> None:
    ds = datasets["v30"]
    ref = json.loads((V30 / "meta/stats.json").read_text())
    stats = ds.stats()
    np.testing.assert_allclose(stats["action"].mean, ref["action"]["mean"], rtol=1e-5, atol=1e-6)
    tab = ds.load_tabular()
    np.testing.assert_allclose(tab["action"].mean(0), ref["action"]["mean"], rtol=1e-4, atol=1e-5)
    assert stats[CAM].mean.shape == (3, 1, 1)
    assert ds.episode_sources is None  # LeRobot datasets carry no robot_rl source column
    assert datasets["v21"].stats()["action"].q99.shape == (26,)


def test_episode_metadata_columns_of_fixture() -> None:
    cols = set(pq.read_schema(V30 / "meta/episodes/chunk-000/file-000.parquet").names)
    assert {"dataset_from_index", "dataset_to_index", f"videos/{CAM}/from_timestamp"} <= cols
