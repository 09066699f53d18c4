"""rosbag2 -> LeRobot conversion speed (issue 17, item 4): frames/s of ``robot-rl dataset convert BAG
--topics ...`` on a generated bag with two 96x128 cameras and one 480x640 camera (raw rgb8
sensor_msgs/Image at 30 Hz), joint states at 100 Hz and commands at 50 Hz, resampled to 30 fps.

Same-run baselines on the same bag / the same frames:

- ``read``: iterate every message of the bag with rosbags (no deserialisation): the storage floor;
- ``read+decode``: deserialise every message and turn every image into an RGB array: the most the
  importer's reading side can cost (it decodes only the frames it keeps, in a second pass);
- ``zarr import``: the project's zarr importer (:func:`zarr_to_lerobot`) on a ReplayBuffer holding the
  same frames, state and actions: the cost of writing the LeRobot dataset (AV1 video encoding) alone.

    python benchmarks/bench_rosbag.py                      # 10 s of data, sqlite3
    python benchmarks/bench_rosbag.py --seconds 5 --storage mcap
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from robot_rl.data.convert import rosbag_messages as rm
from robot_rl.data.convert import rosbag_topics as rt
from robot_rl.data.convert.rosbag import bag_to_lerobot
from robot_rl.data.convert.zarr_buffers import zarr_to_lerobot

T0 = 1_700_000_000 * 10**9
FPS = 30
CAMERAS = {"left": (96, 128), "right": (96, 128), "top": (480, 640)}
JOINTS = [f"joint_{i}" for i in range(7)]
TOPICS = f"""
fps: {FPS}
task: bench
state: {{topic: /joint_states, fields: [position, velocity]}}
action: {{topic: /cmd}}
cameras:
""" + "".join(f"  {name}: {{topic: /{name}/image_raw}}\n" for name in CAMERAS)


def _image(h: int, w: int, k: int) -> np.ndarray:
    """A smooth moving colour gradient (what a camera and a video codec see), frame k."""
    y, x = np.ogrid[:h, :w]
    base = (x * 255 // w + y * 255 // h + 8 * k) % 256
    return np.stack([base, (base + 85) % 256, (base + 170) % 256], axis=-1).astype(np.uint8)


def _signals(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pos = np.sin(t[:, None] + np.arange(len(JOINTS)))
    return pos, np.cos(t[:, None] + np.arange(len(JOINTS)))


def write_bag(path: Path, seconds: float, storage: str) -> int:
    """The benchmark bag; returns its size in bytes."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    store = rm.typestore()
    spec = rt.VectorTopic(fields=["position", "velocity"])
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    events = []
    t_js = np.arange(0, seconds, 0.01)
    pos, vel = _signals(t_js)
    events += [(t, 0, i) for i, t in enumerate(t_js)]
    t_cmd = np.arange(0, seconds, 0.02)
    events += [(t, 1, i) for i, t in enumerate(t_cmd)]
    t_cam = np.arange(0, seconds, 1 / FPS)
    events += [(t, 2 + c, i) for c in range(len(CAMERAS)) for i, t in enumerate(t_cam)]
    events.sort()
    cams = list(CAMERAS.items())
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        conns = [
            writer.add_connection("/joint_states", rt.JOINT_STATE, typestore=store),
            writer.add_connection("/cmd", rt.FLOAT_ARRAY, typestore=store),
            *[writer.add_connection(f"/{n}/image_raw", rt.IMAGE, typestore=store) for n, _ in cams],
        ]
        for t, kind, i in events:
            ns = T0 + round(t * 1e9)
            if kind == 0:
                msg, msgtype = (
                    rm.vector_message(rt.JOINT_STATE, np.r_[pos[i], vel[i]], spec, JOINTS, ns),
                    rt.JOINT_STATE,
                )
            elif kind == 1:
                msg, msgtype = (
                    rm.vector_message(rt.FLOAT_ARRAY, np.sin(t + np.arange(7)), spec, [], ns),
                    rt.FLOAT_ARRAY,
                )
            else:
                msg, msgtype = rm.image_message(rt.IMAGE, _image(*cams[kind - 2][1], i), ns), rt.IMAGE
            writer.write(conns[kind], ns, store.serialize_cdr(msg, msgtype))
    return sum(p.stat().st_size for p in path.iterdir())


def read_only(bag: Path) -> tuple[int, int]:
    """Iterate every message without deserialising: (message count, payload bytes)."""
    from rosbags.rosbag2 import Reader

    count = size = 0
    with Reader(bag) as reader:
        for _, _, raw in reader.messages():
            count += 1
            size += len(raw)
    return count, size


def read_decode(bag: Path) -> int:
    """Deserialise every message and decode every image to RGB: the number of images."""
    from rosbags.rosbag2 import Reader

    store = rm.typestore()
    frames = 0
    with Reader(bag) as reader:
        for conn, _, raw in reader.messages():
            msg = store.deserialize_cdr(raw, conn.msgtype)
            if conn.msgtype == rt.IMAGE:
                rm.decode_image(msg, conn.msgtype, conn.topic)
                frames += 1
    return frames


def write_zarr(path: Path, n: int) -> None:
    """A ReplayBuffer with the same n frames per camera, state and action (one episode)."""
    import zarr

    t = np.arange(n) / FPS
    pos, vel = _signals(t)
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    data = root.require_group("data")
    data.create_array("state", data=np.concatenate([pos, vel], 1).astype(np.float32))
    data.create_array("action", data=np.sin(t[:, None] + np.arange(7)).astype(np.float32))
    for name, (h, w) in CAMERAS.items():
        arr = data.create_array(name, shape=(n, h, w, 3), chunks=(1, h, w, 3), dtype=np.uint8)
        for k in range(n):
            arr[k] = _image(h, w, k)
    meta = root.require_group("meta")
    meta.create_array("episode_ends", data=np.array([n], np.int64))
    meta.attrs["fps"] = FPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the generated bag")
    parser.add_argument("--storage", choices=["sqlite3", "mcap"], default="sqlite3")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_rosbag_"))
    try:
        bag = work / "bag"
        t = time.perf_counter()
        size = write_bag(bag, args.seconds, args.storage)
        dt = time.perf_counter() - t
        print(f"bag: {args.storage}, {args.seconds:g} s of data, {size / 1e6:.0f} MB, written in {dt:.1f} s")
        (work / "topics.yaml").write_text(TOPICS)
        t = time.perf_counter()
        count, raw = read_only(bag)
        dt = time.perf_counter() - t
        mb = raw / 1e6
        print(f"read              : {count} messages, {mb:.0f} MB in {dt:.2f} s ({mb / dt:.0f} MB/s)")
        t = time.perf_counter()
        images = read_decode(bag)
        dt = time.perf_counter() - t
        print(f"read+decode       : {images} images in {dt:.2f} s ({images / dt:.0f} images/s)")
        t = time.perf_counter()
        ds = bag_to_lerobot(bag, work / "ds", work / "topics.yaml")
        dt = time.perf_counter() - t
        from robot_rl.data.lerobot.reader import LeRobotDataset

        n = LeRobotDataset(ds).num_frames
        print(
            f"convert (bag)     : {n} frames x {len(CAMERAS)} cameras in {dt:.2f} s ({n / dt:.1f} frames/s)"
        )
        write_zarr(work / "same.zarr", n)
        t = time.perf_counter()
        zarr_to_lerobot(work / "same.zarr", work / "ds_zarr")
        dz = time.perf_counter() - t
        print(
            f"zarr import (same): {n} frames x {len(CAMERAS)} cameras in {dz:.2f} s ({n / dz:.1f} frames/s)"
        )
        print(f"bag conversion / zarr import time: {dt / dz:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
