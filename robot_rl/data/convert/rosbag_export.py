"""Export episodes of a LeRobot dataset to a rosbag2 (sqlite3 or MCAP), the reverse of
:func:`robot_rl.data.convert.rosbag.bag_to_lerobot` under the same topics file."""

from __future__ import annotations

import os
import shutil
from functools import cache
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.convert import rosbag_align as align
from robot_rl.data.convert import rosbag_messages as rm
from robot_rl.data.convert import rosbag_topics as rt
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot.reader import LeRobotDataset

START_NS = 1_700_000_000 * align.NS  # the first episode's first frame (2023-11-14), never 0 (unset)
STORAGES = ("sqlite3", "mcap")
# rosbag2 metadata version 8 is the one form both Humble's and Jazzy's rosbag2 read. Humble (writes 5)
# decodes any version >= 5 and ignores keys it does not know, but reads ``offered_qos_profiles`` as a YAML
# string (a list there throws); Jazzy (writes 9) reads that string for versions 4-8 and a YAML list only
# from 9, and needs ``custom_data`` (6+), ``type_description_hash`` (7+) and ``ros_distro`` (8+), which
# ``rosbags`` writes. The same integer-policy QoS string goes into the sqlite3 ``topics`` table and the
# MCAP channel metadata, where both distros read it too.
METADATA_VERSION = 8
INFINITE_S, INFINITE_NS = 9223372036, 854775807  # RMW_DURATION_INFINITE, as ros2 bag record stores it


@cache
def offered_qos():
    """The QoS profile recorded for every exported topic (``ros2 bag play`` offers it again): a default
    rclcpp publisher's, reliable and volatile as the project's nodes publish: keep last 10, automatic
    liveliness, infinite deadline, lifespan and lease. Returns a ``rosbags.interfaces.Qos``."""
    from rosbags.interfaces import (
        Qos,
        QosDurability,
        QosHistory,
        QosLiveliness,
        QosReliability,
        QosTime,
    )

    infinite = QosTime(INFINITE_S, INFINITE_NS)
    return Qos(
        QosHistory.KEEP_LAST,
        10,
        QosReliability.RELIABLE,
        QosDurability.VOLATILE,
        infinite,
        infinite,
        QosLiveliness.AUTOMATIC,
        infinite,
        False,
    )


def _joints(spec: rt.VectorTopic, msgtype: str, names: list[str] | None, dim: int, where: str) -> list[str]:
    """Joint names for ``dim`` values: the topics file's ``joints``, else the feature's ``names`` (with a
    ``.<field>`` suffix dropped), else ``joint_<i>``. Raises DatasetError naming ``where`` on a mismatch."""
    fields = len(spec.fields) if msgtype == rt.JOINT_STATE else 1
    if dim % fields:
        raise DatasetError(f"{where}: {dim} values do not split into {spec.fields}")
    count = dim // fields
    if spec.joints:
        if len(spec.joints) != count:
            raise DatasetError(f"{where}: {len(spec.joints)} joints in the topics file for {count} values")
        return list(spec.joints)
    if names and len(names) == dim:
        suffix = f".{spec.fields[0]}" if fields > 1 else ""
        return [n.removesuffix(suffix) for n in names[:count]]
    return [f"joint_{i}" for i in range(count)]


def _vector_type(spec: rt.VectorTopic, default: str, dim: int, where: str) -> str:
    msgtype = rt.full_type(spec.type) if spec.type else default
    if msgtype == rt.TWIST and dim != 6:
        raise DatasetError(f"{where}: TwistStamped needs 6 values, the feature has {dim}")
    return msgtype


def lerobot_to_bag(
    src: str | Path,
    dst: str | Path,
    topics: str | Path | rt.TopicsConfig | None = None,
    episodes: list[int] | None = None,
    storage: str = "sqlite3",
) -> Path:
    """Write episodes of a LeRobot dataset (v3.0 or v2.1) as a new rosbag2 folder ``dst``.

    Each frame k of an episode is stamped (header and bag time) ``t_e + (k * 1e9) // fps`` ns, the grid
    the importer resamples to, so re-importing with the same topics file and fps gives the same frames:
    ``observation.state`` on ``state.topic`` and ``action`` on ``action.topic`` (float32 -> float64, exact;
    types from the topics file, default JointState for state and Float64MultiArray for action; JointState
    joint names from the topics file, else the feature's names, else ``joint_<i>``), each video key
    ``observation.images.<camera>`` on ``cameras.<camera>.topic`` as an rgb8 Image (lossless against the
    decoded video) or a JPEG CompressedImage (``type: sensor_msgs/msg/CompressedImage``). Episode e starts
    ``2 * max(1, episodes.gap_s)`` s after episode e-1 ends. With ``episodes.split: topic`` each episode is
    framed by markers on ``episodes.topic``: Bool true half a frame before the first frame and false half a
    frame after the last, or a String holding the episode's task before the first frame.

    Without a topics file: ``/joint_states``, ``/action`` and ``/camera/<camera>/image_raw``.

    The bag is one ``<dst name>.db3`` or ``.mcap`` file beside a ``metadata.yaml`` of rosbag2 metadata
    version 8 (see ``METADATA_VERSION``), which Humble's and Jazzy's rosbag2 (``ros2 bag info/play``) both
    read; each topic records one offered QoS profile (:func:`offered_qos`).

    Args:
        src: dataset root. dst: the bag folder to create (must not exist).
        topics: a topics file or a loaded config. episodes: episode indices (default [0]).
        storage: ``sqlite3`` or ``mcap``.
    Returns: ``dst``.
    Raises: DatasetError naming the dataset/bag for an existing ``dst``, a bad episode index, a dataset
        without observation.state or action, or joint names that do not fit; ConfigError for a bad topics
        file; MissingExtraError when ``rosbags`` (or OpenCV, for CompressedImage) is missing.
    """
    src, dst = Path(src), Path(dst)
    if storage not in STORAGES:
        raise DatasetError(f"{dst}: storage must be one of {list(STORAGES)}, got {storage!r}")
    if dst.exists():
        raise DatasetError(f"{dst}: destination already exists")
    if topics is None:
        cfg = rt.TopicsConfig(
            state=rt.VectorTopic(topic="/joint_states"), action=rt.VectorTopic(topic="/action")
        )
    else:
        cfg = topics if isinstance(topics, rt.TopicsConfig) else rt.load_topics(topics)
    rm.typestore()
    from rosbags.rosbag2 import StoragePlugin, Writer

    ds = LeRobotDataset(src)
    stage = dst.with_name(f".{dst.name}.partial-{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    try:
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        with Writer(stage / dst.name, version=METADATA_VERSION, storage_plugin=plugin) as writer:
            _write(ds, cfg, writer, episodes if episodes is not None else [0])
        os.replace(stage / dst.name, dst)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        ds.close()
    return dst


def _connection(writer, topic: str, msgtype: str):
    return writer.add_connection(
        topic, msgtype, typestore=rm.typestore(), offered_qos_profiles=[offered_qos()]
    )


def _write(ds, cfg: rt.TopicsConfig, writer, episodes: list[int]) -> None:
    store = rm.typestore()
    for key in (keys.STATE, keys.ACTION):
        if key not in ds.features:
            raise DatasetError(f"{ds.root}: no {key!r} feature to export")
    cols = ds.load_tabular()
    vectors = []
    for key, spec, default in (
        (keys.STATE, cfg.state, rt.JOINT_STATE),
        (keys.ACTION, cfg.action, rt.FLOAT_ARRAY),
    ):
        dim = int(np.prod(ds.features[key]["shape"]))
        where = f"{ds.root}: {key} -> {spec.topic}"
        msgtype = _vector_type(spec, default, dim, where)
        joints = _joints(spec, msgtype, ds.features[key].get("names"), dim, where)
        vectors.append((key, spec, msgtype, joints, _connection(writer, spec.topic, msgtype)))
    cameras = []
    for key in ds.video_keys:
        name = key.removeprefix(keys.IMAGE_PREFIX)
        cam = cfg.cameras.get(name, rt.CameraTopic(topic=f"/camera/{name}/image_raw"))
        msgtype = rt.full_type(cam.type) if cam.type else rt.IMAGE
        cameras.append((key, msgtype, _connection(writer, cam.topic, msgtype)))
    marker = None
    if cfg.episodes.split == "topic":
        mtype = rt.full_type(cfg.episodes.type) if cfg.episodes.type else rt.BOOL
        marker = (mtype, _connection(writer, cfg.episodes.topic, mtype))
    half = align.NS // (2 * ds.fps)
    start = START_NS
    for ep in episodes:
        if not 0 <= ep < ds.num_episodes:
            raise DatasetError(f"{ds.root}: episode {ep} out of range ({ds.num_episodes} episodes)")
        lo, hi = int(ds.episode_from[ep]), int(ds.episode_to[ep])
        grid = start + (np.arange(hi - lo, dtype=np.int64) * align.NS) // ds.fps
        task = ds.tasks[int(cols[keys.TASK_INDEX][lo])]
        if marker is not None:
            value = task if marker[0] == rt.STRING else True
            writer.write(
                marker[1],
                int(grid[0]) - half,
                store.serialize_cdr(rm.marker_message(marker[0], value), marker[0]),
            )
        frames = {key: ds.episode_video(ep, key) for key, _, _ in cameras}
        for k, t in enumerate(grid.tolist()):
            for key, spec, msgtype, joints, conn in vectors:
                vec = np.asarray(cols[key][lo + k]).reshape(-1)
                msg = rm.vector_message(msgtype, vec, spec, joints, t)
                writer.write(conn, t, store.serialize_cdr(msg, msgtype))
            for key, msgtype, conn in cameras:
                writer.write(
                    conn, t, store.serialize_cdr(rm.image_message(msgtype, frames[key][k], t), msgtype)
                )
        if marker is not None and marker[0] == rt.BOOL:
            writer.write(
                marker[1],
                int(grid[-1]) + half,
                store.serialize_cdr(rm.marker_message(rt.BOOL, False), rt.BOOL),
            )
        start = int(grid[-1]) + int(2 * max(1.0, cfg.episodes.gap_s) * align.NS)
