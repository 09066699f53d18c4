"""ROS 2 messages <-> numpy for the rosbag2 converters: vectors from JointState / JointTrajectory /
Float64MultiArray / TwistStamped, RGB frames from Image / CompressedImage, and the reverse for export.

Messages are (de)serialised as CDR with ``rosbags``' ROS 2 Humble typestore (these standard types are the
same in every ROS 2 distribution since Humble). ``rosbags`` and OpenCV are imported lazily.
"""

from __future__ import annotations

import struct
from functools import cache

import numpy as np

from robot_rl.data.convert import rosbag_topics as rt
from robot_rl.data.errors import DatasetError
from robot_rl.extras import require

ROS_EXTRA = "pip install 'robot-rl[ros]'"
ENCODINGS = ("rgb8", "bgr8", "mono8")
HEADER_TYPES = (rt.JOINT_STATE, rt.TRAJECTORY, rt.TWIST, rt.IMAGE, rt.COMPRESSED)


@cache
def typestore():
    """``rosbags``' ROS 2 Humble typestore. Raises MissingExtraError naming ``robot-rl[ros]`` when absent."""
    require("rosbags", "rosbag2 conversion", ROS_EXTRA)
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_HUMBLE)


def header_stamp_ns(raw: bytes | memoryview) -> int:
    """``header.stamp`` in ns of a CDR message whose first field is a std_msgs/Header, read from the
    bytes (no deserialisation): 4 bytes encapsulation, then int32 sec and uint32 nanosec."""
    endian = "<" if raw[1] == 1 else ">"
    sec, nanosec = struct.unpack_from(endian + "iI", raw, 4)
    return sec * 1_000_000_000 + nanosec


def stamp_ns(sec: int, nanosec: int) -> int:
    """A builtin_interfaces/Time as integer nanoseconds."""
    return int(sec) * 1_000_000_000 + int(nanosec)


class VectorReader:
    """Turns the messages of one ``state``/``action`` topic into float64 vectors in a fixed column order.

    Args:
        spec: the topic's :class:`~robot_rl.data.convert.rosbag_topics.VectorTopic`.
        msgtype: the bag's full type name (one of ``STATE_TYPES``/``ACTION_TYPES``, checked by the caller).
        where: ``"<bag>: <topic>"`` for error messages.

    JointState: ``spec.fields`` concatenated, each in ``joints`` order (names ``<joint>`` for one field,
    ``<joint>.<field>`` for several). JointTrajectory: the first point's positions by ``joint_names``.
    Float64MultiArray: ``data``. TwistStamped: linear xyz then angular xyz.
    """

    def __init__(self, spec: rt.VectorTopic, msgtype: str, where: str) -> None:
        self.spec, self.msgtype, self.where = spec, msgtype, where
        self.joints: list[str] = list(spec.joints)
        self.width: int | None = None

    def names(self) -> list[str] | None:
        """Column names (None when the bag gives none, i.e. a Float64MultiArray with no ``joints``)."""
        if self.msgtype == rt.TWIST:
            return list(rt.TWIST_NAMES)
        if self.msgtype == rt.FLOAT_ARRAY:
            return self.joints if self.joints and len(self.joints) == self.width else None
        fields = self.spec.fields if self.msgtype == rt.JOINT_STATE else ["position"]
        if len(fields) == 1:
            return list(self.joints)
        return [f"{j}.{f}" for f in fields for j in self.joints]

    def _by_name(self, names: list[str], values: dict[str, np.ndarray], t_ns: int) -> np.ndarray:
        if not self.joints:
            self.joints = list(names)
        index = {n: i for i, n in enumerate(names)}
        missing = [j for j in self.joints if j not in index]
        if missing:
            raise DatasetError(
                f"{self.where}: message at t={t_ns * 1e-9:.6f} s lacks joints {missing} (it names {names})"
            )
        cols = []
        for field, arr in values.items():
            if len(arr) != len(names):
                raise DatasetError(
                    f"{self.where}: message at t={t_ns * 1e-9:.6f} s has {len(names)} joint names but "
                    f"{len(arr)} {field} values"
                )
            cols.append(np.asarray(arr, np.float64)[[index[j] for j in self.joints]])
        return np.concatenate(cols)

    def __call__(self, msg, t_ns: int) -> np.ndarray:
        """One message -> float64 (D,). Raises DatasetError naming the topic and time on missing joints,
        a field shorter than the names, a trajectory without points, or a length change."""
        if self.msgtype == rt.JOINT_STATE:
            vec = self._by_name(list(msg.name), {f: getattr(msg, f) for f in self.spec.fields}, t_ns)
        elif self.msgtype == rt.TRAJECTORY:
            if not msg.points:
                raise DatasetError(f"{self.where}: JointTrajectory at t={t_ns * 1e-9:.6f} s has no points")
            vec = self._by_name(list(msg.joint_names), {"positions": msg.points[0].positions}, t_ns)
        elif self.msgtype == rt.TWIST:
            lin, ang = msg.twist.linear, msg.twist.angular
            vec = np.array([lin.x, lin.y, lin.z, ang.x, ang.y, ang.z], np.float64)
        else:
            vec = np.asarray(msg.data, np.float64)
        if self.width is None:
            self.width = len(vec)
        elif len(vec) != self.width:
            raise DatasetError(
                f"{self.where}: message at t={t_ns * 1e-9:.6f} s has {len(vec)} values, earlier ones "
                f"{self.width}"
            )
        return vec


def decode_image(msg, msgtype: str, where: str) -> np.ndarray:
    """A sensor_msgs/Image (rgb8, bgr8 or mono8; rows may be padded to ``step``) or CompressedImage
    (JPEG/PNG, decoded with OpenCV) -> (H, W, 3) uint8 RGB.

    Raises DatasetError naming ``where`` for another encoding, a data size that does not match
    height x step, or compressed bytes OpenCV cannot decode; MissingExtraError when OpenCV is absent.
    """
    if msgtype == rt.COMPRESSED:
        require("cv2", f"{where}: decoding sensor_msgs/CompressedImage", "pip install 'robot-rl[cameras]'")
        import cv2

        bgr = cv2.imdecode(np.frombuffer(msg.data, np.uint8), cv2.IMREAD_COLOR)
        if bgr is None:
            raise DatasetError(f"{where}: CompressedImage (format {msg.format!r}) could not be decoded")
        return bgr[:, :, ::-1]
    if msg.encoding not in ENCODINGS:
        raise DatasetError(
            f"{where}: image encoding {msg.encoding!r} is not supported (supported: {list(ENCODINGS)})"
        )
    channels = 1 if msg.encoding == "mono8" else 3
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    data = np.asarray(msg.data, np.uint8)
    if step < w * channels or data.size != h * step:
        raise DatasetError(
            f"{where}: {msg.encoding} image {h}x{w} with step {step} has {data.size} bytes, not {h * step}"
        )
    img = data.reshape(h, step)[:, : w * channels].reshape(h, w, channels)
    if msg.encoding == "mono8":
        return np.repeat(img, 3, axis=2)
    return img[:, :, ::-1] if msg.encoding == "bgr8" else img


# -- export: numpy -> messages -------------------------------------------------------------------------
def header(t_ns: int, frame_id: str = ""):
    """A std_msgs/Header stamped ``t_ns`` (integer ns)."""
    types = typestore().types
    sec, nanosec = divmod(int(t_ns), 1_000_000_000)
    return types["std_msgs/msg/Header"](
        stamp=types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec), frame_id=frame_id
    )


def vector_message(msgtype: str, vec: np.ndarray, spec: rt.VectorTopic, joints: list[str], t_ns: int):
    """The inverse of :class:`VectorReader`: float (D,) -> a message of ``msgtype`` stamped ``t_ns``.

    JointState: ``vec`` is ``spec.fields`` blocks of len(joints) values each; other fields stay empty.
    """
    types = typestore().types
    vec = np.asarray(vec, np.float64)
    if msgtype == rt.JOINT_STATE:
        blocks = dict(zip(spec.fields, np.split(vec, len(spec.fields)), strict=True))
        empty = np.zeros(0, np.float64)
        return types[rt.JOINT_STATE](
            header=header(t_ns),
            name=list(joints),
            **{f: np.ascontiguousarray(blocks.get(f, empty)) for f in rt.JOINT_FIELDS},
        )
    if msgtype == rt.TRAJECTORY:
        point = types["trajectory_msgs/msg/JointTrajectoryPoint"](
            positions=vec,
            velocities=np.zeros(0),
            accelerations=np.zeros(0),
            effort=np.zeros(0),
            time_from_start=types["builtin_interfaces/msg/Duration"](sec=0, nanosec=0),
        )
        return types[rt.TRAJECTORY](header=header(t_ns), joint_names=list(joints), points=[point])
    if msgtype == rt.TWIST:
        v3 = types["geometry_msgs/msg/Vector3"]
        twist = types["geometry_msgs/msg/Twist"](linear=v3(*vec[:3]), angular=v3(*vec[3:6]))
        return types[rt.TWIST](header=header(t_ns), twist=twist)
    layout = types["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0)
    return types[rt.FLOAT_ARRAY](layout=layout, data=vec)


def image_message(msgtype: str, rgb: np.ndarray, t_ns: int, quality: int = 95):
    """(H, W, 3) uint8 RGB -> an rgb8 sensor_msgs/Image, or a JPEG CompressedImage (OpenCV, ``quality``)."""
    types = typestore().types
    if msgtype == rt.COMPRESSED:
        require("cv2", "exporting sensor_msgs/CompressedImage", "pip install 'robot-rl[cameras]'")
        import cv2

        ok, buf = cv2.imencode(
            ".jpg", np.ascontiguousarray(rgb[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, quality]
        )
        if not ok:
            raise DatasetError("OpenCV could not JPEG-encode a frame")
        return types[rt.COMPRESSED](header=header(t_ns), format="jpeg", data=buf.reshape(-1))
    h, w, _ = rgb.shape
    return types[rt.IMAGE](
        header=header(t_ns),
        height=h,
        width=w,
        encoding="rgb8",
        is_bigendian=0,
        step=w * 3,
        data=np.ascontiguousarray(rgb).reshape(-1),
    )


def marker_message(msgtype: str, value: bool | str):
    """A std_msgs/Bool or std_msgs/String episode marker."""
    return typestore().types[msgtype](data=value)
