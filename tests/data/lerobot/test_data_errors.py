"""Bad datasets fail with a DatasetError that names the file (and key)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import video
from robot_rl.data.lerobot.packing import FileSizes
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.video import VideoDecoder, encode_video
from robot_rl.data.lerobot.writer import LeRobotWriter

CAM = "observation.images.front"
DATA = "data/chunk-000/file-000.parquet"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def write(root: Path, video: bool = False) -> Path:
    feats = {
        keys.STATE: {"dtype": "float32", "shape": [3], "names": None},
        keys.ACTION: {"dtype": "float32", "shape": [2], "names": None},
    }
    if video:
        feats[CAM] = {"dtype": "video", "shape": [16, 16, 3], "names": None}
    # one file per episode, so that one episode's files can be broken alone
    with LeRobotWriter(root, fps=10, features=feats, file_sizes=FileSizes(0, 0)) as writer:
        for ep in range(2):
            frames = {keys.STATE: np.zeros((5, 3), np.float32) + ep, keys.ACTION: np.ones((5, 2), np.float32)}
            if video:
                frames[CAM] = np.full((5, 16, 16, 3), 100, np.uint8)
            writer.add_episode(frames, task="t")
    return root


def test_dataset_error_is_value_error() -> None:
    assert issubclass(DatasetError, ValueError)


def test_missing_info_json(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"meta/info\.json.*not found"):
        LeRobotDataset(tmp_path / "nothing")


def test_corrupt_parquet(tmp_path: Path) -> None:
    root = write(tmp_path / "ds")
    path = root / DATA
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DatasetError, match=r"file-000\.parquet.*unreadable parquet"):
        LeRobotDataset(root)


def test_corrupt_episodes_metadata(tmp_path: Path) -> None:
    root = write(tmp_path / "ds")
    (root / EPISODES).write_bytes(b"PAR1 garbage")
    with pytest.raises(DatasetError, match="meta/episodes/chunk-000/file-000.parquet"):
        LeRobotDataset(root)


def test_missing_column(tmp_path: Path) -> None:
    root = write(tmp_path / "ds")
    table = pq.read_table(root / DATA)
    pq.write_table(table.drop_columns([keys.ACTION]), root / DATA)
    with pytest.raises(DatasetError, match=r"file-000\.parquet: missing column 'action'"):
        LeRobotDataset(root)


def test_feature_shape_mismatch(tmp_path: Path) -> None:
    root = write(tmp_path / "ds")
    info = json.loads((root / "meta/info.json").read_text())
    info["features"][keys.STATE]["shape"] = [4]
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match=r"file-000\.parquet: column 'observation\.state'.*shape \[4\]"):
        LeRobotDataset(root)


@pytest.mark.parametrize("field", ["total_frames", "total_episodes", "total_tasks"])
def test_totals_mismatch(tmp_path: Path, field: str) -> None:
    root = write(tmp_path / "ds")
    info = json.loads((root / "meta/info.json").read_text())
    info[field] += 1
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match=rf"info\.json: {field} is"):
        LeRobotDataset(root)


def test_data_file_missing(tmp_path: Path) -> None:
    root = write(tmp_path / "ds")
    (root / "data/chunk-000/file-001.parquet").unlink()
    with pytest.raises(DatasetError, match=r"file-001\.parquet: file not found"):
        LeRobotDataset(root)


def test_truncated_mp4(tmp_path: Path) -> None:
    root = write(tmp_path / "ds", video=True)
    path = root / f"videos/{CAM}/chunk-000/file-001.mp4"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    ds = LeRobotDataset(root)
    assert ds[0][CAM].shape == (3, 16, 16)  # episode 0's video is intact
    with pytest.raises(DatasetError, match=r"file-001\.mp4"):
        ds.verify_videos()
    with pytest.raises(DatasetError, match=r"file-001\.mp4"):
        ds[7]
    (root / f"videos/{CAM}/chunk-000/file-000.mp4").unlink()
    with pytest.raises(DatasetError, match=r"file-000\.mp4: video file not found"):
        LeRobotDataset(root)[0]


def test_verify_videos_passes_and_catches_short_file(tmp_path: Path) -> None:
    root = write(tmp_path / "ds", video=True)
    LeRobotDataset(root).verify_videos()
    encode_video(root / f"videos/{CAM}/chunk-000/file-000.mp4", np.zeros((2, 16, 16, 3), np.uint8), fps=10)
    with pytest.raises(
        DatasetError, match=r"file-000\.mp4: video 'observation.images.front' ends at 0\.200s"
    ):
        LeRobotDataset(root).verify_videos()


def test_garbage_mp4(tmp_path: Path) -> None:
    path = tmp_path / "x.mp4"
    path.write_bytes(b"\x00" * 1000)
    with pytest.raises(DatasetError, match=r"x\.mp4: unreadable video"):
        VideoDecoder().decode(path, [0.0])
    with pytest.raises(DatasetError, match=r"x\.mp4: unreadable video"):
        VideoDecoder().decode_all(path)


def test_video_time_outside_file(tmp_path: Path) -> None:
    path = tmp_path / "v.mp4"
    encode_video(path, np.zeros((3, 16, 16, 3), np.uint8), fps=10)
    with pytest.raises(DatasetError, match=r"v\.mp4: no video frame at 5\.0000s"):
        VideoDecoder().decode(path, [5.0])
    with pytest.raises(DatasetError, match="even height"):
        encode_video(path, np.zeros((3, 15, 16, 3), np.uint8), fps=10)


def test_bad_delta_timestamps(tmp_path: Path) -> None:
    root = write(tmp_path / "ds")
    with pytest.raises(DatasetError, match="not multiples"):
        LeRobotDataset(root, delta_timestamps={keys.ACTION: [0.0, 0.05]})
    with pytest.raises(DatasetError, match="'nope'"):
        LeRobotDataset(root, delta_timestamps={"nope": [0.0]})


def test_a_transient_encoder_error_is_retried_and_a_lasting_one_names_the_file(tmp_path, monkeypatch, caplog):
    # libsvtav1 once returned EINVAL for one episode under heavy load (not reproducible on demand), so the
    # library error is injected here; the encode itself is real.
    real, calls = video.encode_stream, []

    def flaky(path, *args, fail_times):
        calls.append(path)
        if len(calls) <= fail_times:
            try:
                av.error.err_check(-22)  # what libsvtav1 returned: EINVAL
            except av.FFmpegError as err:
                raise DatasetError(f"{path}: video encoding failed: {err}") from err
        real(path, *args)

    frames = np.full((4, 16, 16, 3), 90, np.uint8)
    monkeypatch.setattr(video, "encode_stream", lambda path, *a: flaky(path, *a, fail_times=1))
    encode_video(tmp_path / "ok.mp4", frames, fps=10)
    assert len(calls) == 2 and "encoding it again (attempt 2 of 3)" in caplog.text
    assert len(VideoDecoder().decode_all(tmp_path / "ok.mp4")) == 4

    calls.clear()
    monkeypatch.setattr(video, "encode_stream", lambda path, *a: flaky(path, *a, fail_times=99))
    with pytest.raises(DatasetError, match=r"bad\.mp4: video encoding failed: .*Invalid argument"):
        encode_video(tmp_path / "bad.mp4", frames, fps=10)
    assert len(calls) == video.ENCODE_ATTEMPTS and not (tmp_path / "bad.mp4").exists()


def test_a_stalled_encode_is_abandoned_and_retried_and_never_replaces_the_file(tmp_path, monkeypatch, caplog):
    # libsvtav1's flush once blocked forever under CPU load (a CI test's collect hung in C, out of reach of
    # signals): a stall is injected as a frame source that stops giving frames; the encodes are real.
    real, calls, release, finished = video.encode_stream, [], threading.Event(), threading.Event()

    def stalling(path, frames, *args):
        calls.append(path)
        if len(calls) > 1:
            return real(path, frames, *args)

        def stuck():
            yield next(frames)
            release.wait(30)  # the stall: no frame, no packet
            yield np.full((16, 16, 3), 250, np.uint8)

        try:
            real(path, stuck(), *args)
        finally:
            finished.set()

    monkeypatch.setattr(video, "ENCODE_STALL_S", 0.5)
    monkeypatch.setattr(video, "encode_stream", stalling)
    frames = np.full((4, 16, 16, 3), 90, np.uint8)
    encode_video(tmp_path / "ok.mp4", frames, fps=10)
    assert len(calls) == 2 and "stalled (no progress for 0.5 s); encoding it again (attempt 2" in caplog.text
    release.set()  # the abandoned encode ends now, after the retry's file is in place
    assert finished.wait(30)
    decoded = VideoDecoder().decode_all(tmp_path / "ok.mp4")
    assert len(decoded) == 4 and all(abs(int(f.mean()) - 90) <= 3 for f in decoded)
    assert [p.name for p in tmp_path.iterdir()] == ["ok.mp4"]  # no temporary file left behind
