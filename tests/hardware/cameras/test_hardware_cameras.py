"""Cameras on real files and device nodes: a recorded video played at its rate (PyAV), the OpenCV camera
on a video file and on device paths, and the RealSense camera with no device attached."""

import sys
import time

import numpy as np
import pytest

from robot_rl.config import CameraConfig, RobotConfig
from robot_rl.data.lerobot.video import encode_video
from robot_rl.hardware.cameras.opencv import OpenCVCamera
from robot_rl.hardware.cameras.realsense import RealSenseCamera
from robot_rl.hardware.cameras.video import VideoCamera
from robot_rl.hardware.errors import CameraError, MissingExtraError
from robot_rl.hardware.factory import make_cameras

FPS, FRAMES, H, W = 20, 12, 48, 64


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    """A real mp4: FRAMES solid frames, RGB (200, 10*i, 40), at FPS."""
    frames = np.zeros((FRAMES, H, W, 3), np.uint8)
    frames[..., 0] = 200
    frames[..., 1] = (10 * np.arange(FRAMES))[:, None, None]
    frames[..., 2] = 40
    path = tmp_path_factory.mktemp("video") / "wrist.mp4"
    encode_video(path, frames, FPS)
    return str(path)


def _check_rgb(image):
    assert image.shape == (H, W, 3) and image.dtype == np.uint8
    red, blue = image[..., 0].mean(), image[..., 2].mean()
    assert abs(red - 200) < 12 and abs(blue - 40) < 12  # BGR would swap these


def test_video_camera_plays_at_file_rate_then_names_itself_when_the_file_ends(video):
    cfg = RobotConfig(driver="sim", cameras={"wrist": CameraConfig(driver="video", source=video)})
    cam = make_cameras(cfg)["wrist"]
    assert isinstance(cam, VideoCamera)
    with cam:
        assert cam.fps == pytest.approx(FPS)
        stamps = []
        for _ in range(FRAMES):
            try:
                frame = cam.read(timeout_s=1.0)
            except CameraError:
                break
            _check_rgb(frame.image)
            stamps.append(frame.timestamp)
        assert len(stamps) >= FRAMES // 2 and np.all(np.diff(stamps) > 0)
        # paced at the file's rate: the frames span about (FRAMES - 1) / FPS s, not the ms decoding takes
        assert stamps[-1] - stamps[0] >= 0.6 * (FRAMES - 1) / FPS
        with pytest.raises(
            CameraError, match=rf"camera 'wrist' \(.*wrist.mp4\): stopped delivering frames after {FRAMES}"
        ):
            cam.read(timeout_s=2.0)


def test_video_camera_missing_file_names_camera_and_path(tmp_path):
    with pytest.raises(CameraError, match=r"camera 'front' \(.*nothing.mp4\): no such video file"):
        VideoCamera("front", str(tmp_path / "nothing.mp4")).connect()
    not_video = tmp_path / "notes.mp4"
    not_video.write_text("not a video")
    with pytest.raises(CameraError, match="not a readable video"):
        VideoCamera("front", str(not_video)).connect()


def test_opencv_camera_returns_latest_rgb_frame_then_times_out_naming_the_camera(video):
    pytest.importorskip("cv2")
    cam = OpenCVCamera("wrist", video)
    with pytest.raises(CameraError, match="not connected"):
        cam.read()
    with cam:
        _check_rgb(cam.read(timeout_s=2.0).image)
        # the file is read as fast as it decodes; once it ends no new frame comes: the first read after
        # that may still return the newest frame, the next one times out
        deadline = time.monotonic() + 5.0
        while cam.frames_grabbed < FRAMES and time.monotonic() < deadline:
            time.sleep(0.01)
        match = rf"camera 'wrist' \(.*\): no new frame within 0.3 s \({FRAMES} received since connect\)"
        with pytest.raises(CameraError, match=match):
            for _ in range(2):
                cam.read(timeout_s=0.3)


def test_opencv_camera_on_missing_or_non_camera_device_path():
    pytest.importorskip("cv2")
    with pytest.raises(CameraError, match=r"camera 'top' \(/dev/video_robot_rl_missing\): no such device"):
        OpenCVCamera("top", "/dev/video_robot_rl_missing").connect()
    with pytest.raises(CameraError, match=r"camera 'top' \(/dev/null\): OpenCV cannot open it"):
        OpenCVCamera("top", "/dev/null").connect()


def test_opencv_camera_without_opencv_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cv2", None)  # what an environment without the extra looks like
    with pytest.raises(
        MissingExtraError, match=r"camera 'top'.*needs cv2: pip install 'robot-rl\[cameras\]'"
    ):
        OpenCVCamera("top", "0").connect()


def test_realsense_camera_without_a_device_names_the_camera():
    pytest.importorskip("pyrealsense2")
    cfg = CameraConfig(driver="realsense", source="123456789", depth=True)
    cam = RealSenseCamera.from_config("wrist", cfg, RobotConfig(driver="sim"))
    with pytest.raises(CameraError, match=r"camera 'wrist' \(123456789\): no such RealSense connected"):
        cam.connect()
