"""Camera calibration with OpenCV (extra ``cameras``): intrinsics from checkerboard views
(``cv2.findChessboardCorners`` + ``cv2.calibrateCamera``, Zhang 2000), the board's pose in a view
(``cv2.solvePnP``), and hand-eye calibration (``cv2.calibrateHandEye``, Tsai-Lenz by default), stored as
one JSON file per camera next to the robot config (:func:`calibration_file`) and loaded back with
validation.

Conventions: images are RGB uint8 (H, W, 3) as cameras deliver them; poses are 4x4 float64 homogeneous
transforms ``T_a_b`` mapping points in frame b to frame a; lengths in m; pixel quantities in px.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robot_rl.hardware.errors import CalibrationError
from robot_rl.hardware.sdk import import_sdk

FORMAT = "robot_rl.camera_calibration/1"
"""The ``format`` field of a calibration file."""
MIN_VIEWS = 3
"""Fewest checkerboard views :func:`calibrate_intrinsics` accepts."""


def _cv2():
    return import_sdk("cv2", "cameras", "camera calibration")


@dataclass
class CameraCalibration:
    """One camera's calibration.

    Attributes:
        camera: the camera's name in ``env.robot.cameras``.
        image_size: (width, height) of the calibrated frames (px).
        camera_matrix: float64 (3, 3) ``[[fx, 0, cx], [0, fy, cy], [0, 0, 1]]`` (px).
        dist_coeffs: float64 (5,) OpenCV distortion ``k1, k2, p1, p2, k3``.
        rms_px: reprojection error of the calibration (px).
        camera_to_gripper: float64 (4, 4) ``T_gripper_camera`` from hand-eye calibration of a wrist
            camera, or ``None``.
    """

    camera: str
    image_size: tuple[int, int]
    camera_matrix: np.ndarray
    dist_coeffs: np.ndarray
    rms_px: float
    camera_to_gripper: np.ndarray | None = None


def calibration_file(robot_config: str | Path, camera: str) -> Path:
    """Where ``camera``'s calibration lives: next to the robot config, as
    ``<config stem>.<camera>.calibration.json``."""
    path = Path(robot_config)
    return path.with_name(f"{path.stem}.{camera}.calibration.json")


def board_points(pattern: tuple[int, int], square_m: float) -> np.ndarray:
    """The checkerboard's inner corners in its own frame: float32 (cols*rows, 3), z = 0, row-major, the
    order ``cv2.findChessboardCorners`` reports them in. ``pattern`` = (cols, rows) of inner corners."""
    cols, rows = pattern
    grid = np.zeros((rows * cols, 3), np.float32)
    grid[:, :2] = np.mgrid[0:cols, 0:rows].T.reshape(-1, 2) * square_m
    return grid


def find_board(image: np.ndarray, pattern: tuple[int, int]) -> np.ndarray | None:
    """The inner corners of a checkerboard in an RGB image, refined to sub-pixel: float32 (N, 1, 2) px, or
    ``None`` when the board is not found."""
    cv2 = _cv2()
    gray = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY)
    found, corners = cv2.findChessboardCorners(gray, pattern, flags=cv2.CALIB_CB_ADAPTIVE_THRESH)
    if not found:
        return None
    criteria = (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_MAX_ITER, 50, 1e-4)
    return cv2.cornerSubPix(gray, corners, (5, 5), (-1, -1), criteria)


def calibrate_intrinsics(
    camera: str, images: list[np.ndarray], pattern: tuple[int, int], square_m: float
) -> CameraCalibration:
    """Intrinsics from views of a checkerboard with ``pattern`` inner corners and ``square_m`` squares.

    Raises:
        CalibrationError: images of different sizes, or the board found in fewer than :data:`MIN_VIEWS`.
    """
    cv2 = _cv2()
    sizes = {(img.shape[1], img.shape[0]) for img in images}
    if len(sizes) != 1:
        raise CalibrationError(f"camera {camera!r}: calibration images differ in size: {sorted(sizes)}")
    found = [c for c in (find_board(img, pattern) for img in images) if c is not None]
    if len(found) < MIN_VIEWS:
        raise CalibrationError(
            f"camera {camera!r}: checkerboard {pattern} found in {len(found)} of {len(images)} images; "
            f"need at least {MIN_VIEWS}"
        )
    (size,) = sizes
    obj = [board_points(pattern, square_m)] * len(found)
    rms, matrix, dist, _, _ = cv2.calibrateCamera(obj, found, size, None, None)
    return CameraCalibration(camera, size, matrix, dist.reshape(-1)[:5].astype(np.float64), float(rms))


def board_pose(
    image: np.ndarray, calib: CameraCalibration, pattern: tuple[int, int], square_m: float
) -> np.ndarray | None:
    """``T_camera_board`` (4, 4) of the checkerboard in ``image`` (``cv2.solvePnP``), or ``None`` when the
    board is not found."""
    cv2 = _cv2()
    corners = find_board(image, pattern)
    if corners is None:
        return None
    ok, rvec, tvec = cv2.solvePnP(
        board_points(pattern, square_m), corners, calib.camera_matrix, calib.dist_coeffs
    )
    if not ok:
        return None
    return to_transform(cv2.Rodrigues(rvec)[0], tvec)


def to_transform(rotation: np.ndarray, translation: np.ndarray) -> np.ndarray:
    """A 4x4 transform from a (3, 3) rotation and a (3,) translation (m)."""
    out = np.eye(4)
    out[:3, :3] = rotation
    out[:3, 3] = np.asarray(translation, dtype=np.float64).reshape(3)
    return out


def calibrate_hand_eye(gripper_to_base: list[np.ndarray], board_to_camera: list[np.ndarray]) -> np.ndarray:
    """``T_gripper_camera`` (4, 4) of a camera on the gripper (eye in hand), from paired poses: the
    gripper in the base frame (``T_base_gripper``, from the robot's state) and the fixed board in the
    camera frame (``T_camera_board``, from :func:`board_pose`). For a camera fixed in the world (eye to
    hand) pass ``T_gripper_base`` (the inverses) with a board held by the gripper: the result is then
    ``T_base_camera``. Method: Tsai-Lenz (``cv2.CALIB_HAND_EYE_TSAI``).

    Raises:
        CalibrationError: fewer than 3 pairs or unequal lists (rotations about 2 non-parallel axes are
            needed for a unique answer).
    """
    cv2 = _cv2()
    if len(gripper_to_base) != len(board_to_camera) or len(gripper_to_base) < 3:
        raise CalibrationError(
            f"hand-eye calibration needs >= 3 paired poses, got {len(gripper_to_base)} gripper and "
            f"{len(board_to_camera)} board poses"
        )
    rotation, translation = cv2.calibrateHandEye(
        [t[:3, :3] for t in gripper_to_base],
        [t[:3, 3] for t in gripper_to_base],
        [t[:3, :3] for t in board_to_camera],
        [t[:3, 3] for t in board_to_camera],
        method=cv2.CALIB_HAND_EYE_TSAI,
    )
    return to_transform(rotation, translation)


def save_calibration(path: str | Path, calib: CameraCalibration) -> None:
    """Write ``calib`` as JSON to ``path`` (written to a temporary name, then renamed into place)."""
    path = Path(path)
    data = {
        "format": FORMAT,
        "camera": calib.camera,
        "image_size": list(calib.image_size),
        "camera_matrix": np.asarray(calib.camera_matrix).tolist(),
        "dist_coeffs": np.asarray(calib.dist_coeffs).tolist(),
        "rms_px": calib.rms_px,
        "camera_to_gripper": None if calib.camera_to_gripper is None else calib.camera_to_gripper.tolist(),
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def load_calibration(
    path: str | Path, camera: str, image_size: tuple[int, int] | None = None
) -> CameraCalibration:
    """Read and validate a calibration file for ``camera``.

    Args:
        path: the JSON file.
        camera: the camera it must belong to.
        image_size: (width, height) the camera delivers now; checked against the calibrated size.

    Raises:
        CalibrationError: missing or malformed file, another camera's or format's file, a different image
            size, or matrices of the wrong shape, non-finite or with non-positive focal lengths; the message
            names the file.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise CalibrationError(
            f"{path}: calibration file not found (calibrate camera {camera!r} first)"
        ) from err
    except (OSError, json.JSONDecodeError) as err:
        raise CalibrationError(f"{path}: not a readable calibration file: {err}") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise CalibrationError(f"{path}: format {found!r}, expected {FORMAT!r}")
    if data.get("camera") != camera:
        raise CalibrationError(f"{path}: calibration of camera {data.get('camera')!r}, not {camera!r}")
    try:
        size = tuple(int(v) for v in data["image_size"])
        matrix = np.asarray(data["camera_matrix"], dtype=np.float64)
        dist = np.asarray(data["dist_coeffs"], dtype=np.float64)
        rms = float(data["rms_px"])
        hand_eye = data.get("camera_to_gripper")
        hand_eye = None if hand_eye is None else np.asarray(hand_eye, dtype=np.float64)
    except (KeyError, TypeError, ValueError) as err:
        raise CalibrationError(f"{path}: missing or malformed field: {err!r}") from err
    problems = []
    if len(size) != 2 or min(size) <= 0:
        problems.append(f"image_size {list(size)} is not [width, height] > 0")
    elif image_size is not None and size != tuple(image_size):
        problems.append(
            f"calibrated at {size[0]}x{size[1]} px but the camera gives {image_size[0]}x{image_size[1]}"
        )
    if matrix.shape != (3, 3) or not np.all(np.isfinite(matrix)) or min(matrix[0, 0], matrix[1, 1]) <= 0:
        problems.append(f"camera_matrix must be a finite 3x3 with fx, fy > 0, got {matrix.tolist()}")
    if dist.shape != (5,) or not np.all(np.isfinite(dist)):
        problems.append(f"dist_coeffs must be 5 finite numbers, got {dist.tolist()}")
    if hand_eye is not None and (hand_eye.shape != (4, 4) or not _is_rigid(hand_eye)):
        problems.append("camera_to_gripper must be a 4x4 rigid transform")
    if problems:
        raise CalibrationError(f"{path}: " + "; ".join(problems))
    return CameraCalibration(camera, size, matrix, dist, rms, hand_eye)


def _is_rigid(transform: np.ndarray) -> bool:
    rot = transform[:3, :3]
    return (
        bool(np.all(np.isfinite(transform)))
        and np.allclose(rot @ rot.T, np.eye(3), atol=1e-6)
        and math.isclose(float(np.linalg.det(rot)), 1.0, abs_tol=1e-6)
        and np.allclose(transform[3], [0, 0, 0, 1])
    )
