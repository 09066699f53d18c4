"""Import a rosbag2 (sqlite3 ``.db3`` or MCAP) into a LeRobot v3.0 dataset, driven by a topics file
(:mod:`robot_rl.data.convert.rosbag_topics`). Read with ``rosbags`` (pure Python; ``robot-rl[ros]``).

Two passes over the bag: the first decodes the state/action/marker messages and only the header stamps
of the camera messages; the second decodes just the camera frames the aligned episodes use, so memory
holds one episode's frames, not the bag's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.convert import rosbag_align as align
from robot_rl.data.convert import rosbag_messages as rm
from robot_rl.data.convert import rosbag_topics as rt
from robot_rl.data.convert.arrays import write_lerobot
from robot_rl.data.errors import DatasetError

# storage files as ``ros2 bag record`` names them: ``<bag>_<i>.db3`` / ``.mcap``, with ``.zstd`` appended
# under ``--compression-mode file``
STORAGE_SUFFIXES = (".db3", ".mcap", ".db3.zstd", ".mcap.zstd")


def is_rosbag2(path: str | Path) -> bool:
    """True for a rosbag2 folder: ``metadata.yaml`` beside at least one storage file (``.db3`` or
    ``.mcap``, or either compressed as ``.zstd``)."""
    path = Path(path)
    return (
        path.is_dir()
        and (path / "metadata.yaml").is_file()
        and any(p.name.endswith(STORAGE_SUFFIXES) for p in path.iterdir())
    )


@contextmanager
def _bag_errors(bag: Path) -> Iterator[None]:
    """Re-raise whatever ``rosbags`` or the storage raises on a corrupt or truncated bag as DatasetError
    naming the bag's files."""
    try:
        yield
    except DatasetError:
        raise
    except Exception as err:  # noqa: BLE001 - rosbags, sqlite3, ruamel and struct raise many types
        files = sorted(p.name for p in bag.iterdir()) if bag.is_dir() else []
        raise DatasetError(
            f"{bag}: not a readable rosbag2 (files {files}): {type(err).__name__}: {err}"
        ) from err


@dataclass
class _Stream:
    """One mapped topic's messages, in bag order: alignment times, receive times and decoded values."""

    topic: str
    msgtype: str
    times: list[int] = field(default_factory=list)
    received: list[int] = field(default_factory=list)
    values: list = field(default_factory=list)

    def sorted(self) -> tuple[np.ndarray, np.ndarray]:
        """(times int64 (n,), bag-order index (n,)) sorted by time, stable."""
        times = np.asarray(self.times, np.int64)
        order = np.argsort(times, kind="stable")
        return times[order], order


@dataclass
class _Episode:
    """An aligned episode: numeric frames, per camera the bag-order indices of the frames it shows."""

    numeric: dict[str, np.ndarray]
    images: dict[str, np.ndarray]
    task: str


def _check_topics(bag: Path, cfg: rt.TopicsConfig, found: dict[str, str]) -> dict[str, tuple[str, str]]:
    """{topic: (role, full type)} of the mapped topics. Raises DatasetError naming a missing topic (with
    the bag's topics) or an unsupported or unexpected type."""
    wanted = [
        ("state", cfg.state.topic, cfg.state.type, rt.STATE_TYPES),
        ("action", cfg.action.topic, cfg.action.type, rt.ACTION_TYPES),
        *[(f"cameras.{n}", c.topic, c.type, rt.CAMERA_TYPES) for n, c in cfg.cameras.items()],
    ]
    if cfg.episodes.split == "topic":
        wanted.append(("episodes.topic", cfg.episodes.topic, cfg.episodes.type, rt.MARKER_TYPES))
    out: dict[str, tuple[str, str]] = {}
    listing = ", ".join(f"{t} ({m})" for t, m in sorted(found.items())) or "none"
    for role, topic, given, allowed in wanted:
        if topic not in found:
            raise DatasetError(f"{bag}: topic {topic!r} ({role}) is not in the bag; its topics: {listing}")
        msgtype = found[topic]
        if msgtype not in allowed:
            raise DatasetError(
                f"{bag}: topic {topic!r} ({role}) has message type {msgtype}, which is not supported "
                f"there; supported: {list(allowed)}"
            )
        if given and rt.full_type(given) != msgtype:
            raise DatasetError(
                f"{bag}: topic {topic!r} ({role}) is {msgtype}, but the topics file says {given}"
            )
        if topic in out:
            raise DatasetError(f"{bag}: topic {topic!r} is mapped twice ({out[topic][0]} and {role})")
        out[topic] = (role, msgtype)
    return out


def _first_pass(bag: Path, reader, cfg: rt.TopicsConfig, mapped: dict[str, tuple[str, str]]):
    """Read every mapped message once: vectors and markers decoded, cameras only stamped."""
    store = rm.typestore()
    streams = {topic: _Stream(topic, msgtype) for topic, (_, msgtype) in mapped.items()}
    vectors = {
        cfg.state.topic: rm.VectorReader(cfg.state, mapped[cfg.state.topic][1], f"{bag}: {cfg.state.topic}"),
        cfg.action.topic: rm.VectorReader(
            cfg.action, mapped[cfg.action.topic][1], f"{bag}: {cfg.action.topic}"
        ),
    }
    conns = [c for c in reader.connections if c.topic in mapped]
    with _bag_errors(bag):
        for conn, received, raw in reader.messages(connections=conns):
            stream = streams[conn.topic]
            has_header = stream.msgtype in rm.HEADER_TYPES
            t = rm.header_stamp_ns(raw) if has_header and cfg.time == "header" else received
            if t == 0 and has_header and cfg.time == "header":
                raise DatasetError(
                    f"{bag}: {conn.topic}: a message received at {received * 1e-9:.6f} s has header.stamp 0 "
                    "(unset); use 'time: receive' in the topics file"
                )
            if conn.topic in vectors:
                stream.values.append(vectors[conn.topic](store.deserialize_cdr(raw, conn.msgtype), t))
            elif stream.msgtype in rt.MARKER_TYPES:
                stream.values.append(store.deserialize_cdr(raw, conn.msgtype).data)
            stream.times.append(t)
            stream.received.append(received)
    return streams, vectors


def _windows(bag: Path, cfg: rt.TopicsConfig, streams: dict[str, _Stream]) -> list[tuple[int, int, str]]:
    data = [s for s in streams.values() if s.msgtype not in rt.MARKER_TYPES]
    all_times = np.sort(np.concatenate([np.asarray(s.times, np.int64) for s in data]))
    if not len(all_times):
        raise DatasetError(f"{bag}: the mapped topics hold no messages")
    if cfg.episodes.split == "none":
        return [(int(all_times[0]), int(all_times[-1]), "")]
    if cfg.episodes.split == "gap":
        return [(a, b, "") for a, b in align.gap_windows(all_times, cfg.episodes.gap_s)]
    marker = streams[cfg.episodes.topic]
    order = np.argsort(np.asarray(marker.times, np.int64), kind="stable")
    events = [(marker.times[i], marker.values[i]) for i in order]
    return align.marker_windows(events, int(all_times[-1]), f"{bag}: {cfg.episodes.topic}")


def _align(bag: Path, cfg: rt.TopicsConfig, streams: dict[str, _Stream], fps: int) -> list[_Episode]:
    """Cut the streams into episodes and resample each onto its frame grid (rules in rosbag_align)."""
    roles = {
        keys.STATE: cfg.state.topic,
        keys.ACTION: cfg.action.topic,
        **{keys.image_key(n): c.topic for n, c in cfg.cameras.items()},
    }
    ordered = {topic: streams[topic].sorted() for topic in roles.values()}
    bag_start = min(int(t[0]) for t, _ in ordered.values() if len(t))
    episodes = []
    for i, (w0, w1, marker_task) in enumerate(_windows(bag, cfg, streams)):
        span = f"episode {i} ({(w0 - bag_start) * 1e-9:.3f}-{(w1 - bag_start) * 1e-9:.3f} s into the bag)"
        inside = {}
        for key, topic in roles.items():
            times, _ = ordered[topic]
            lo, hi = np.searchsorted(times, w0, "left"), np.searchsorted(times, w1, "right")
            if hi <= lo:
                raise DatasetError(f"{bag}: {span} has no message on {topic} ({key}): an empty episode")
            inside[key] = (lo, hi)
        t0 = max(int(ordered[roles[k]][0][lo]) for k, (lo, _) in inside.items())
        t1 = min(int(ordered[roles[k]][0][hi - 1]) for k, (_, hi) in inside.items())
        grid = align.frame_times(t0, t1, fps)
        if not len(grid):
            raise DatasetError(
                f"{bag}: {span} is empty: its topics have no common time span (the last message of one "
                "comes before the first of another)"
            )
        numeric, images = {}, {}
        for key, topic in roles.items():
            times, order = ordered[topic]
            lo, hi = inside[key]
            t, idx = times[lo:hi], order[lo:hi]
            if keys.is_image_key(key):
                images[key] = idx[align.nearest(t, grid)]
                continue
            values = np.stack([streams[topic].values[j] for j in idx])
            out = (
                values[align.nearest(t, grid)]
                if cfg.interpolation == "nearest"
                else align.linear(t, values, grid)
            )
            numeric[key] = out.astype(np.float32)
        episodes.append(_Episode(numeric, images, marker_task or cfg.task or bag.name))
    return episodes


def _frames(bag: Path, reader, cfg: rt.TopicsConfig, streams, episodes: list[_Episode]) -> Iterator:
    """Second pass: decode the camera frames the episodes use and yield ``(frames, task, 'demo')`` per
    episode, in order, as soon as its frames are complete."""
    store = rm.typestore()
    cam_of = {c.topic: keys.image_key(n) for n, c in cfg.cameras.items()}
    wanted: dict[str, dict[int, list[tuple[int, np.ndarray]]]] = {k: {} for k in cam_of.values()}
    remaining = [0] * len(episodes)
    for e, ep in enumerate(episodes):
        for key, idx in ep.images.items():
            unique, inverse = np.unique(idx, return_inverse=True)
            for u, j in enumerate(unique):
                wanted[key].setdefault(int(j), []).append((e, np.flatnonzero(inverse == u)))
            remaining[e] += len(unique)
    buffers: list[dict[str, np.ndarray]] = [{} for _ in episodes]
    counters = dict.fromkeys(cam_of, 0)
    done = 0

    def finished() -> Iterator:
        nonlocal done
        while done < len(episodes) and remaining[done] == 0:
            ep = episodes[done]
            yield {**ep.numeric, **buffers[done]}, ep.task, "demo"
            buffers[done] = {}
            done += 1

    yield from finished()
    conns = [c for c in reader.connections if c.topic in cam_of]
    with _bag_errors(bag):
        messages = reader.messages(connections=conns) if done < len(episodes) else iter(())
        for conn, received, raw in messages:
            key, j = cam_of[conn.topic], counters[conn.topic]
            counters[conn.topic] += 1
            if j not in wanted[key]:
                continue
            if received != streams[conn.topic].received[j]:
                raise DatasetError(f"{bag}: {conn.topic}: messages came back in a different order on re-read")
            where = f"{bag}: {conn.topic}"
            img = rm.decode_image(store.deserialize_cdr(raw, conn.msgtype), conn.msgtype, where)
            if img.shape[0] % 2 or img.shape[1] % 2:
                raise DatasetError(
                    f"{where}: frames are {img.shape[0]}x{img.shape[1]}; LeRobot videos (yuv420p) need "
                    "even sizes"
                )
            for e, rows in wanted[key].pop(j):
                buf = buffers[e].get(key)
                if buf is None:
                    buf = buffers[e][key] = np.empty((len(episodes[e].images[key]), *img.shape), np.uint8)
                if buf.shape[1:] != img.shape:
                    raise DatasetError(
                        f"{where}: frame size changes from {buf.shape[1:3]} to {img.shape[:2]}"
                    )
                buf[rows] = img
                remaining[e] -= 1
            yield from finished()
    if done < len(episodes):
        raise DatasetError(f"{bag}: camera messages ran out on re-read (episode {done} incomplete)")


def bag_to_lerobot(
    bag: str | Path, dst: str | Path, topics: str | Path | rt.TopicsConfig, fps: int | None = None
) -> Path:
    """Convert a rosbag2 folder (sqlite3 or MCAP storage) into a new LeRobot v3.0 dataset at ``dst``.

    Features: ``observation.state`` and ``action`` float32 (T, D) from the topics file's ``state`` and
    ``action`` topics (column ``names`` from the joint names), ``observation.images.<camera>`` videos
    (T, H, W, 3) uint8 RGB from each ``cameras`` entry. Episodes' source is 'demo'; their task is the
    String marker's text, else the file's ``task``, else the bag folder's name.

    Time: each message's time is its ``header.stamp`` (``time: header``; Float64MultiArray, Bool and
    String have no header and always use the bag's receive time) or the bag's receive time
    (``time: receive``). Episodes are cut by ``episodes.split`` (none / gap / topic; see
    :class:`~robot_rl.data.convert.rosbag_topics.EpisodesConfig`). Inside an episode, frames lie on a
    ``fps`` grid from the latest first message of the mapped topics to the earliest last one (so the
    edges are trimmed to where every topic has data, never extrapolated, and a frame never takes a
    sample from outside its episode); numeric topics are sampled ``nearest`` (ties: the earlier
    message) or ``linear`` between the two messages around the frame time, cameras always ``nearest``
    (a slower camera repeats frames). The first frame's time becomes timestamp 0.

    Args:
        bag: the rosbag2 folder (``metadata.yaml`` and ``.db3``/``.mcap`` files), as ``ros2 bag record``
            of Humble or Jazzy writes it (split files, ``--compression-mode file`` or ``message`` with
            zstd) or as :func:`~robot_rl.data.convert.rosbag_export.lerobot_to_bag` does.
        dst: the new dataset's folder; must not exist.
        topics: a topics YAML file or a loaded :class:`~robot_rl.data.convert.rosbag_topics.TopicsConfig`.
        fps: overrides the topics file's ``fps``.
    Returns: ``dst``.
    Raises:
        DatasetError naming the bag and topic: not a rosbag2 folder, a corrupt or truncated bag, a mapped
            topic missing (the message lists the bag's topics), an unsupported message type or image
            encoding, a JointState lacking a configured joint, a header stamp of 0, an episode with no
            message on a topic or no common time span (empty episode), odd or changing frame sizes, an
            existing ``dst``.
        ConfigError: a bad topics file (naming the file and key).
        MissingExtraError: ``rosbags`` is not installed (``pip install 'robot-rl[ros]'``).
    """
    bag, dst = Path(bag), Path(dst)
    cfg = topics if isinstance(topics, rt.TopicsConfig) else rt.load_topics(topics)
    fps = int(fps or cfg.fps)
    if not is_rosbag2(bag):
        raise DatasetError(
            f"{bag}: not a rosbag2 folder (metadata.yaml and a .db3 or .mcap file, or either as .zstd)"
        )
    rm.typestore()  # MissingExtraError before anything else when rosbags is absent
    from rosbags.rosbag2 import Reader

    with _bag_errors(bag):
        reader = Reader(bag)
        reader.open()
    try:
        found = {c.topic: c.msgtype for c in reader.connections}
        mapped = _check_topics(bag, cfg, found)
        streams, vectors = _first_pass(bag, reader, cfg, mapped)
        episodes = _align(bag, cfg, streams, fps)
        names = {keys.STATE: vectors[cfg.state.topic].names(), keys.ACTION: vectors[cfg.action.topic].names()}
        return write_lerobot(dst, fps, _frames(bag, reader, cfg, streams, episodes), names, cfg.robot_type)
    finally:
        reader.close()
