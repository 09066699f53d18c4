"""Calibration on synthetic data with known answers: checkerboard views rendered through a known camera
(a board texture warped by the homography K [r1 r2 t]) give back fx, fy, cx, cy and each view's pose;
hand-eye calibration on poses generated from a known camera mount gives back the mount; calibration
files round-trip and a mismatched one is a CalibrationError naming the file."""

import json
import math

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from robot_rl.hardware import calibration as cal  # noqa: E402
from robot_rl.hardware.errors import CalibrationError  # noqa: E402

PATTERN, SQUARE, PX = (8, 6), 0.03, 24  # inner corners, square (m), texture px per square
W, H = 640, 480
K = np.array([[520.0, 0.0, 322.0], [0.0, 505.0, 236.0], [0.0, 0.0, 1.0]])
rng = np.random.default_rng(0)


def _rotation(rotvec):
    return cv2.Rodrigues(np.asarray(rotvec, dtype=np.float64))[0]


def _board_texture():
    cols, rows = PATTERN[0] + 1, PATTERN[1] + 1  # squares
    tex = np.full(((rows + 2) * PX, (cols + 2) * PX), 255, np.uint8)  # one white square of margin
    for r in range(rows):
        for c in range(cols):
            if (r + c) % 2 == 0:
                tex[(r + 1) * PX : (r + 2) * PX, (c + 1) * PX : (c + 2) * PX] = 0
    return tex


def _render(T_cam_board):
    """The board seen by camera K at pose T_camera_board (origin at the first inner corner)."""
    # texture pixel (u, v) -> board metres: the first inner corner is at texture (2 PX, 2 PX)
    to_board = np.array([[SQUARE / PX, 0, -2 * SQUARE], [0, SQUARE / PX, -2 * SQUARE], [0, 0, 1]])
    rt = np.column_stack([T_cam_board[:3, 0], T_cam_board[:3, 1], T_cam_board[:3, 3]])
    gray = cv2.warpPerspective(
        _board_texture(), K @ rt @ to_board, (W, H), flags=cv2.INTER_AREA, borderValue=200
    )
    return np.repeat(gray[..., None], 3, axis=2)


def _views(n):
    out = []
    center = np.array([(PATTERN[0] - 1) * SQUARE / 2, (PATTERN[1] - 1) * SQUARE / 2, 0.0])
    for _ in range(n):
        rot = _rotation(rng.uniform(-0.45, 0.45, 3))
        t = np.array([rng.uniform(-0.05, 0.05), rng.uniform(-0.04, 0.04), rng.uniform(0.45, 0.6)])
        out.append(cal.to_transform(rot, t - rot @ center))  # board centre at t
    return out


def test_intrinsics_and_board_pose_recovered_from_rendered_views(tmp_path):
    poses = _views(10)
    images = [_render(p) for p in poses]
    calib = cal.calibrate_intrinsics("wrist", images, PATTERN, SQUARE)
    fx, fy, cx, cy = (
        calib.camera_matrix[0, 0],
        calib.camera_matrix[1, 1],
        calib.camera_matrix[0, 2],
        calib.camera_matrix[1, 2],
    )
    assert fx == pytest.approx(K[0, 0], rel=0.01) and fy == pytest.approx(K[1, 1], rel=0.01)
    assert abs(cx - K[0, 2]) < 3.0 and abs(cy - K[1, 2]) < 3.0
    assert calib.rms_px < 0.5 and calib.image_size == (W, H)
    pose = cal.board_pose(images[0], calib, PATTERN, SQUARE)
    # the detector may number the corners from the other end (a 180 deg turn of the board): compare the
    # board centre and normal, which do not depend on that
    centre = np.array([(PATTERN[0] - 1) * SQUARE / 2, (PATTERN[1] - 1) * SQUARE / 2, 0.0, 1.0])
    np.testing.assert_allclose((pose @ centre)[:3], (poses[0] @ centre)[:3], atol=0.005)
    assert abs(float(pose[:3, 2] @ poses[0][:3, 2])) > 0.999
    # stored next to the robot config and loaded back
    path = cal.calibration_file(tmp_path / "ur5e.yaml", "wrist")
    assert path.name == "ur5e.wrist.calibration.json"
    cal.save_calibration(path, calib)
    back = cal.load_calibration(path, "wrist", (W, H))
    np.testing.assert_allclose(back.camera_matrix, calib.camera_matrix)


def test_intrinsics_need_the_board_in_enough_views():
    blank = np.full((H, W, 3), 200, np.uint8)
    with pytest.raises(
        CalibrationError, match=r"camera 'wrist': checkerboard \(8, 6\) found in 1 of 3 images"
    ):
        cal.calibrate_intrinsics("wrist", [blank, blank, _render(_views(1)[0])], PATTERN, SQUARE)


def _pose(rotvec, t):
    return cal.to_transform(_rotation(rotvec), t)


def test_hand_eye_recovers_the_camera_mount():
    T_gripper_camera = _pose([0.05, -0.1, math.pi / 2], [0.03, -0.05, 0.08])  # the known mount
    T_base_board = _pose([0.0, 0.0, 0.3], [0.6, 0.1, 0.0])
    grippers, boards = [], []
    for _ in range(12):
        T_base_gripper = _pose(
            [math.pi + rng.uniform(-0.4, 0.4), rng.uniform(-0.4, 0.4), rng.uniform(-1, 1)],
            [rng.uniform(0.4, 0.7), rng.uniform(-0.2, 0.3), rng.uniform(0.3, 0.5)],
        )
        grippers.append(T_base_gripper)
        boards.append(np.linalg.inv(T_base_gripper @ T_gripper_camera) @ T_base_board)
    found = cal.calibrate_hand_eye(grippers, boards)
    np.testing.assert_allclose(found, T_gripper_camera, atol=1e-6)
    # with 1 mm / ~0.3 deg of noise on the board poses the mount is still within a few mm
    noisy = [_pose(rng.normal(0, 0.005, 3), rng.normal(0, 0.001, 3)) @ T for T in boards]
    found = cal.calibrate_hand_eye(grippers, noisy)
    assert np.linalg.norm(found[:3, 3] - T_gripper_camera[:3, 3]) < 0.01
    with pytest.raises(CalibrationError, match=">= 3 paired poses"):
        cal.calibrate_hand_eye(grippers[:2], boards[:2])


def test_calibration_file_mismatch_names_the_file(tmp_path):
    calib = cal.CameraCalibration("wrist", (W, H), K.copy(), np.zeros(5), 0.2, np.eye(4))
    path = tmp_path / "so101.wrist.calibration.json"
    cal.save_calibration(path, calib)
    assert cal.load_calibration(path, "wrist").camera_to_gripper.shape == (4, 4)
    with pytest.raises(CalibrationError, match=rf"{path}: calibration of camera 'wrist', not 'front'"):
        cal.load_calibration(path, "front")
    with pytest.raises(
        CalibrationError, match=rf"{path}: calibrated at 640x480 px but the camera gives 1280x720"
    ):
        cal.load_calibration(path, "wrist", (1280, 720))
    data = json.loads(path.read_text())
    data["camera_matrix"] = [[0, 0, 1], [0, 0, 1]]
    path.write_text(json.dumps(data))
    with pytest.raises(CalibrationError, match=rf"{path}: camera_matrix must be a finite 3x3"):
        cal.load_calibration(path, "wrist")
    path.write_text("{not json")
    with pytest.raises(CalibrationError, match=rf"{path}: not a readable calibration file"):
        cal.load_calibration(path, "wrist")
    with pytest.raises(CalibrationError, match="calibration file not found"):
        cal.load_calibration(tmp_path / "missing.json", "wrist")
