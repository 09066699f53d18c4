"""``write_episode_video`` / ``write_rerun`` and ``robot-rl dataset visualize`` on the G1 LeRobot fixture
and on small datasets written here: the MP4 decodes to the expected frames and size with a moving cursor,
the .rrd reads back with every frame and dimension, and bad requests are named."""

from __future__ import annotations

import sys
from pathlib import Path

import av
import numpy as np
import pytest
from repo_paths import LEROBOT_FIXTURES

from robot_rl import keys
from robot_rl.cli.main import main
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.visualize import CAMERA_HEIGHT, STRIP_HEIGHT, write_episode_video, write_rerun
from robot_rl.data.lerobot.writer import LeRobotWriter

G1 = LEROBOT_FIXTURES / "g1_pick_bottle_v30"
CAM = "observation.images.cam_high"
needs_g1 = pytest.mark.skipif(not G1.is_dir(), reason=f"fixture absent: {G1}")


def _decode(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def _red_columns(image: np.ndarray) -> np.ndarray:
    """Columns with a vertical run of red pixels (the cursor), red by a margin over green and blue."""
    rgb = image.astype(int)
    red = rgb[..., 0] - np.maximum(rgb[..., 1], rgb[..., 2]) > 60
    return np.flatnonzero(red.sum(axis=0) > 10)


@needs_g1
def test_g1_grid_video(tmp_path):
    out = write_episode_video(G1, tmp_path / "grid.mp4", [0, 3], max_frames=6)
    frames = _decode(out)
    tile_w = 640 * CAMERA_HEIGHT // 480  # 480x640 camera scaled to CAMERA_HEIGHT rows
    assert len(frames) == 6 and frames[0].shape == (CAMERA_HEIGHT + STRIP_HEIGHT, 2 * tile_w, 3)
    ds = LeRobotDataset(G1)
    for slot, ep in enumerate((0, 3)):
        row = int(ds.episode_from[ep]) + 5
        camera = ds.video_frames(CAM, np.array([row]), size=(CAMERA_HEIGHT, tile_w))[0]
        tile = frames[5][:CAMERA_HEIGHT, slot * tile_w : (slot + 1) * tile_w]
        assert np.abs(tile.astype(float) - camera).mean() < 8  # H.264 of the same scaled frame
    strip = [f[CAMERA_HEIGHT:, :tile_w] for f in frames]
    first, last = _red_columns(strip[0]), _red_columns(strip[-1])
    assert len(first) and len(last) and last.mean() > first.mean() + 150  # cursor: start to end


def test_grid_of_unequal_episodes_and_cameras(tmp_path):
    """Two cameras of different sizes side by side; the shorter episode holds its last frame."""
    features = {
        keys.STATE: {"dtype": "float32", "shape": [3]},
        keys.ACTION: {"dtype": "float32", "shape": [2]},
        "observation.images.wrist": {"dtype": "video", "shape": [16, 24, 3]},
        "observation.images.top": {"dtype": "video", "shape": [32, 32, 3]},
    }
    rng = np.random.default_rng(0)
    with LeRobotWriter(tmp_path / "ds", fps=10, features=features) as writer:
        for n in (5, 8, 3):
            frames = {
                key: rng.integers(0, 255, (n, *feat["shape"]), dtype=np.uint8)
                if feat["dtype"] == "video"
                else rng.normal(size=(n, *feat["shape"])).astype(np.float32)
                for key, feat in features.items()
            }
            writer.add_episode(frames, task="t")
    out = write_episode_video(tmp_path / "ds", tmp_path / "out" / "grid.mp4", [0, 1, 2])
    frames = _decode(out)
    assert len(frames) == 8 and frames[0].shape == (2 * (32 + STRIP_HEIGHT), 2 * (24 + 32), 3)


@needs_g1
def test_bad_requests_are_named(tmp_path):
    with pytest.raises(DatasetError, match=r"g1_pick_bottle_v30.*episode 7 out of range.*5 episodes"):
        write_episode_video(G1, tmp_path / "x.mp4", [0, 7])
    with pytest.raises(DatasetError, match=r"g1_pick_bottle_v30.*episode -1 out of range"):
        write_rerun(G1, tmp_path / "x.rrd", [-1])
    with pytest.raises(DatasetError, match=r"no episodes"):
        write_episode_video(G1, tmp_path / "x.mp4", [])
    with pytest.raises(ValueError, match=r"max_frames"):
        write_episode_video(G1, tmp_path / "x.mp4", [0], max_frames=0)
    assert not list(tmp_path.iterdir())


@needs_g1
def test_g1_rerun_recording(tmp_path):
    rerun_chunk = pytest.importorskip("rerun.chunk")
    out = write_rerun(G1, tmp_path / "g1.rrd", [1, 4], max_frames=4)
    assert out.stat().st_size > 0
    rows: dict[str, int] = {}
    for line in rerun_chunk.RrdReader(out).store().summary().splitlines():
        entity, count = line.split()[0], int(line.split("rows=")[1].split()[0])
        rows[entity] = rows.get(entity, 0) + count
    for ep in (1, 4):
        assert rows[f"/episode_{ep}/images/cam_high"] == 4
        state = [e for e in rows if e.startswith(f"/episode_{ep}/state/")]
        action = [e for e in rows if e.startswith(f"/episode_{ep}/action/")]
        assert len(state) == len(action) == 26 and f"/episode_{ep}/state/kLeftElbow" in state
        assert all(rows[e] == 4 for e in state + action)


def test_missing_rerun_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "rerun", None)  # as if rerun-sdk were not installed
    with pytest.raises(ImportError, match=r"pip install 'robot-rl\[viz\]'"):
        write_rerun(tmp_path, tmp_path / "x.rrd", [0])
    assert main(["dataset", "visualize", str(tmp_path), "--out", str(tmp_path / "x.rrd")]) == 1
    assert "pip install 'robot-rl[viz]'" in capsys.readouterr().err


@needs_g1
def test_visualize_cli(tmp_path, capsys):
    def visualize(out: Path, *args: str) -> int:
        return main(["dataset", "visualize", str(G1), "--out", str(out), *args])

    assert visualize(tmp_path / "v.mp4", "--episodes", "0-1", "--max-frames", "3") == 0
    assert len(_decode(tmp_path / "v.mp4")) == 3 and str(tmp_path / "v.mp4") in capsys.readouterr().out
    assert visualize(tmp_path / "v.rrd", "--episodes", "2", "--max-frames", "2") == 0
    assert (tmp_path / "v.rrd").stat().st_size > 0
    assert visualize(tmp_path / "v.gif") == 1
    err = capsys.readouterr().err
    assert "v.gif" in err and ".mp4" in err and ".rrd" in err
    assert visualize(tmp_path / "w.mp4", "--episodes", "9") == 1
    assert "episode 9 out of range" in capsys.readouterr().err
