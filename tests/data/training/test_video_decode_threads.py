"""The video loader's fast path (runs of a request decoded by several threads, one container each, one
swscale context per container) returns exactly the frames of a plain sequential PyAV decode converted
frame by frame with ``VideoFrame.to_ndarray`` (what the loader returned before), on the real G1 fixture
(480×640 AV1, five episodes packed in one mp4) at native resolution and scaled."""

from __future__ import annotations

import av
import numpy as np
import pytest
from repo_paths import LEROBOT_FIXTURES

from robot_rl.config import DataConfig
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.training.training_set import TrainingSet

G1 = LEROBOT_FIXTURES / "g1_pick_bottle_v30"
CAM = "observation.images.cam_high"
pytestmark = pytest.mark.skipif(not G1.is_dir(), reason="G1 fixture not present")


def _reference(ds: LeRobotDataset, rows: np.ndarray, size: tuple[int, int] | None) -> np.ndarray:
    """Decode the whole file in order and convert the wanted frames one by one, each with a fresh
    ``to_ndarray`` (its own swscale context)."""
    timestamp, times, paths = ds.load_tabular()["timestamp"], {}, set()
    for row in np.unique(rows).tolist():
        path, start = ds.video_path(int(ds.episode_of(np.array([row]))[0]), CAM)
        times[row], paths = round((start + float(timestamp[row])) * ds.fps), paths | {path}
    assert len(paths) == 1  # the v3.0 fixture packs every episode into one file
    wanted, got = set(times.values()), {}
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i in wanted:
                opts = {} if size is None else dict(height=size[0], width=size[1], interpolation="AREA")
                got[i] = frame.to_ndarray(format="rgb24", **opts)
            if i >= max(wanted):
                break
    return np.stack([got[times[r]] for r in rows.tolist()])


@pytest.mark.parametrize("size", [None, (90, 100)])
def test_threaded_decode_matches_a_plain_sequential_decode(size) -> None:
    rng = np.random.default_rng(1)
    rows = rng.integers(0, 760, 40)  # episodes 0-2 (a reference decode of the whole file is slow)
    rows[5], rows[17] = rows[3], rows[3] + 1  # a repeated row and a neighbour
    want = _reference(LeRobotDataset(G1), rows, size)
    for threads in (1, 3):
        ds = LeRobotDataset(G1, decode_threads=threads)
        np.testing.assert_array_equal(ds.video_frames(CAM, rows, size), want)
        np.testing.assert_array_equal(ds.video_frames(CAM, rows[::-1], size), want[::-1])  # warm decoders
        ds.close()


def test_training_batches_decode_now_and_next_frames_exactly(tmp_path) -> None:
    cfg = DataConfig(
        path=str(G1), image_size=[48, 64], frame_cache="none", reward="episode_end", val_episodes=[3, 4]
    )
    data = TrainingSet(G1, cfg, horizon=10, gamma=0.99, cache_dir=tmp_path, for_rl=True)
    rng = np.random.default_rng([0, 3])  # TrainingSet.sample's draw for (seed 0, step 3)
    idx = rng.integers(0, len(data.train.rows), size=16)
    batch = data.sample(16, 0, 3)
    now = data.train.rows[idx]
    nxt = data.train.rows[data.train.sampler.next_indices(idx)]
    want = _reference(data.dataset, np.concatenate([now, nxt]), (48, 64))
    np.testing.assert_array_equal(batch["observations"][CAM], want[:16])
    np.testing.assert_array_equal(batch["next_observations"][CAM], want[16:])
