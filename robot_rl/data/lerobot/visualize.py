"""Look at episodes of a LeRobot dataset (v3.0 or v2.1): an MP4 grid, or a rerun recording (.rrd).

:func:`write_episode_video`: one tile per episode, its cameras side by side (scaled to
``CAMERA_HEIGHT`` px high) over a plot strip of its state and action curves with a moving time cursor.
The strips are drawn once per episode with matplotlib; per frame only the cursor is painted, and frames
are decoded in blocks and encoded as they are made, so memory stays flat however long the episodes.

:func:`write_rerun`: every camera frame (JPEG-compressed) and every dimension of each low-dim feature
on a ``time`` timeline in seconds, under ``episode_<k>/``. Needs the ``viz`` extra (rerun-sdk).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.video import available_encoders, default_codec, encode_stream

CAMERA_HEIGHT = 192  # px: cameras are scaled down (never up) to this height in the grid
STRIP_HEIGHT = 160  # px: the state/action plot under each tile
NO_CAMERA_WIDTH = 384  # px: tile width of a dataset without cameras
JPEG_QUALITY = 85  # rerun images
_DPI = 100
_BLOCK = 32  # frames decoded per call, per episode and camera
_CURSOR = np.array([220, 30, 30], np.uint8)
_CURSOR_WIDTH = 2  # px


def _episodes_shown(
    ds: LeRobotDataset, episodes: list[int], max_frames: int | None
) -> tuple[list[int], list[int]]:
    """(episode indices, frames shown of each: its length capped at ``max_frames``). Raises DatasetError
    naming the dataset for no or out-of-range episodes, ValueError for ``max_frames`` below 1."""
    if not episodes:
        raise DatasetError(f"{ds.root}: no episodes requested")
    episodes = fmt.check_episode_ids(ds.root, episodes, ds.num_episodes)
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be at least 1, got {max_frames}")
    lengths = (ds.episode_to - ds.episode_from)[episodes]
    return episodes, [int(n) if max_frames is None else min(int(n), max_frames) for n in lengths]


def _camera_size(ds: LeRobotDataset, key: str) -> tuple[int, int]:
    """(H, W) of a camera in the grid: ``CAMERA_HEIGHT`` high (or native if smaller), even sides."""
    h, w = ds.features[key]["shape"][:2]
    height = min(h, CAMERA_HEIGHT) // 2 * 2
    return height, max(2, round(w * height / h / 2) * 2)


def _camera_frames(
    ds: LeRobotDataset, key: str, ep: int, n: int, size: tuple[int, int] | None
) -> Iterator[np.ndarray]:
    """The first ``n`` frames of episode ``ep``'s camera ``key`` at ``size`` (H, W; None: native),
    decoded ``_BLOCK`` at a time."""
    lo = int(ds.episode_from[ep])
    for start in range(0, n, _BLOCK):
        yield from ds.video_frames(key, np.arange(lo + start, lo + min(start + _BLOCK, n)), size=size)


def _strip(
    title: str, curves: dict[str, np.ndarray], fps: int, width: int
) -> tuple[np.ndarray, np.ndarray, slice]:
    """Draw the plot strip once: (image (STRIP_HEIGHT, width, 3) uint8, cursor column of each frame,
    rows the cursor spans)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width / _DPI, STRIP_HEIGHT / _DPI), dpi=_DPI)
    canvas = FigureCanvasAgg(fig)
    axes = fig.subplots(max(1, len(curves)), 1, sharex=True, squeeze=False)[:, 0]
    n = len(next(iter(curves.values()))) if curves else 1
    t = np.arange(n) / fps
    for ax, (label, values) in zip(axes, curves.items(), strict=False):
        ax.plot(t, values.reshape(n, -1), linewidth=0.6)
        ax.set_ylabel(label, fontsize=6, labelpad=1)
    for ax in axes:
        ax.tick_params(labelsize=5, length=2, pad=1)
        ax.set_xlim(0, max(t[-1], 1 / fps))
    axes[0].set_title(title, fontsize=7, pad=2)
    axes[-1].set_xlabel("time (s)", fontsize=6, labelpad=1)
    fig.subplots_adjust(left=0.12, right=0.98, top=0.87, bottom=0.2, hspace=0.12)
    canvas.draw()
    drawn = np.asarray(canvas.buffer_rgba())[..., :3]
    image = np.full((STRIP_HEIGHT, width, 3), 255, np.uint8)
    image[: drawn.shape[0], : drawn.shape[1]] = drawn[:STRIP_HEIGHT, :width]
    xs = axes[0].transData.transform(np.c_[t, np.zeros(n)])[:, 0]
    columns = np.clip(np.round(xs).astype(int), 0, width - _CURSOR_WIDTH)
    top, bottom = max(ax.bbox.y1 for ax in axes), min(ax.bbox.y0 for ax in axes)
    return image, columns, slice(int(STRIP_HEIGHT - top), int(STRIP_HEIGHT - bottom))


@dataclass
class _Tile:
    """One episode's place in the grid: top-left corner, frames shown, plot strip and camera streams."""

    y: int
    x: int
    length: int
    strip: np.ndarray  # (STRIP_HEIGHT, tile width, 3) uint8
    cursor: np.ndarray  # cursor column of each frame
    span: slice  # strip rows the cursor covers
    cameras: dict[str, Iterator[np.ndarray]]

    def paint(self, grid: np.ndarray, t: int, camera_height: int) -> None:
        """Draw frame ``t`` into ``grid``; past the episode's end the tile keeps its last frame."""
        if t >= self.length:
            return
        left = self.x
        for frames in self.cameras.values():
            frame = next(frames)
            grid[self.y : self.y + frame.shape[0], left : left + frame.shape[1]] = frame
            left += frame.shape[1]
        top = self.y + camera_height
        strip = grid[top : top + STRIP_HEIGHT, self.x : self.x + self.strip.shape[1]]
        strip[:] = self.strip
        strip[self.span, self.cursor[t] : self.cursor[t] + _CURSOR_WIDTH] = _CURSOR


def _write_mp4(out: Path, frames: Iterator[np.ndarray], fps: int, height: int, width: int) -> None:
    """Encode (height, width, 3) uint8 frames as they come, with H.264 when PyAV has it (plays everywhere),
    else the dataset default codec."""
    if "libx264" in available_encoders():
        codec, options = "libx264", {"crf": "23", "preset": "veryfast"}
    else:
        codec, options = default_codec(), {}
    encode_stream(out, frames, fps, height, width, codec, options)


def write_episode_video(
    src: str | Path, out_mp4: str | Path, episodes: list[int], max_frames: int | None = None
) -> Path:
    """Write an MP4 grid of ``episodes`` of the dataset at ``src``, at the dataset's fps.

    Each tile shows one episode: its cameras side by side, scaled to ``CAMERA_HEIGHT`` px high, over a
    ``STRIP_HEIGHT`` px strip plotting every dimension of ``observation.state`` and ``action`` against
    time (s) with a red cursor at the current frame. Tiles fill a near-square grid in the order given.
    The video has as many frames as the longest shown episode; a shorter one holds its last frame.

    Args:
        src: dataset root.
        out_mp4: output file, written through a temporary sibling and renamed into place.
        episodes: episode indices (repeats allowed).
        max_frames: show at most this many frames of each episode (default: all).
    Returns: ``out_mp4``, H.264 (or the dataset's default codec) yuv420p.
    Raises:
        DatasetError naming the dataset: no episodes, an episode out of range, or unreadable data/video.
        ValueError: ``max_frames`` below 1.
    """
    ds = LeRobotDataset(src)
    try:
        episodes, lengths = _episodes_shown(ds, episodes, max_frames)
        sizes = {key: _camera_size(ds, key) for key in ds.video_keys}
        camera_height = max((h for h, _ in sizes.values()), default=0)
        tile_w = sum(w for _, w in sizes.values()) or NO_CAMERA_WIDTH
        tile_h = camera_height + STRIP_HEIGHT
        cols = math.ceil(math.sqrt(len(episodes)))
        rows = math.ceil(len(episodes) / cols)
        data = ds.load_tabular()
        tiles = []
        for slot, (ep, n) in enumerate(zip(episodes, lengths, strict=True)):
            lo = int(ds.episode_from[ep])
            curves = {
                label: data[key][lo : lo + n]
                for label, key in (("state", keys.STATE), ("action", keys.ACTION))
                if key in data
            }
            cameras = {key: _camera_frames(ds, key, ep, n, size) for key, size in sizes.items()}
            r, c = divmod(slot, cols)
            tiles.append(
                _Tile(r * tile_h, c * tile_w, n, *_strip(f"episode {ep}", curves, ds.fps, tile_w), cameras)
            )
        grid = np.full(((rows * tile_h + 1) // 2 * 2, (cols * tile_w + 1) // 2 * 2, 3), 255, np.uint8)

        def frames() -> Iterator[np.ndarray]:
            for t in range(max(lengths)):
                for tile in tiles:
                    tile.paint(grid, t, camera_height)
                yield grid

        out = Path(out_mp4)
        _write_mp4(out, frames(), ds.fps, *grid.shape[:2])
        return out
    finally:
        ds.close()


def _rerun():
    try:
        import rerun
    except ImportError as err:
        raise ImportError("writing a rerun recording needs rerun-sdk: pip install 'robot-rl[viz]'") from err
    return rerun


def _dim_names(feature: dict, dim: int) -> list[str]:
    """One label per dimension from a feature's ``names`` (a list, a nested list or a dict of lists, as
    LeRobot versions write them) when it has ``dim`` of them, else '0', '1', ..."""
    names = feature.get("names")
    if isinstance(names, dict):
        names = next(iter(names.values()), None)

    def flatten(x: object) -> list:
        return [y for item in x for y in flatten(item)] if isinstance(x, list | tuple) else [x]

    flat = flatten(names) if names else []
    return [str(x) for x in flat] if len(flat) == dim else [str(i) for i in range(dim)]


def _log_episode(rr, rec, ds: LeRobotDataset, data: dict[str, np.ndarray], ep: int, n: int) -> None:
    """Log the first ``n`` frames of episode ``ep`` to ``rec``: each dimension of each ``data`` column
    (dataset-wide arrays) as a scalar series, each camera frame as a JPEG, on the timeline ``time``."""
    lo = int(ds.episode_from[ep])
    seconds = np.arange(n) / ds.fps
    for key, values in data.items():
        values = values[lo : lo + n].reshape(n, -1).astype(np.float64)
        group = f"episode_{ep}/{rr.escape_entity_path_part(key.removeprefix('observation.'))}"
        for i, name in enumerate(_dim_names(ds.features[key], values.shape[1])):
            rec.send_columns(
                f"{group}/{rr.escape_entity_path_part(name)}",
                indexes=[rr.TimeColumn("time", duration=seconds)],
                columns=rr.Scalars.columns(scalars=values[:, i]),
            )
    for key in ds.video_keys:
        camera = rr.escape_entity_path_part(key.removeprefix(keys.IMAGE_PREFIX))
        for t, frame in zip(seconds, _camera_frames(ds, key, ep, n, None), strict=True):
            rec.set_time("time", duration=float(t))
            rec.log(f"episode_{ep}/images/{camera}", rr.Image(frame).compress(jpeg_quality=JPEG_QUALITY))


def write_rerun(
    src: str | Path, out_rrd: str | Path, episodes: list[int], max_frames: int | None = None
) -> Path:
    """Write ``episodes`` of the dataset at ``src`` to a rerun recording file (open with ``rerun FILE``).

    Under ``episode_<k>/``: each camera as JPEG images (``images/<camera>``), and each dimension of every
    other per-frame feature as a scalar series (``state/<name>``, ``action/<name>``, ``next.reward/0``,
    ...), all on the timeline ``time`` in seconds from the episode's start.

    Args:
        src: dataset root.
        out_rrd: output ``.rrd`` file.
        episodes: episode indices.
        max_frames: log at most this many frames of each episode (default: all).
    Returns: ``out_rrd``.
    Raises:
        ImportError telling to ``pip install 'robot-rl[viz]'`` when rerun-sdk is missing.
        DatasetError naming the dataset: no episodes, an episode out of range, unreadable data/video.
        ValueError: ``max_frames`` below 1.
    """
    rr = _rerun()
    ds = LeRobotDataset(src)
    try:
        episodes, lengths = _episodes_shown(ds, episodes, max_frames)
        data = {k: v for k, v in ds.load_tabular().items() if k not in fmt.DEFAULT_FEATURES}
        out = Path(out_rrd)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp{os.getpid()}{out.suffix}")
        rec = rr.RecordingStream("robot_rl")
        rec.save(tmp)
        try:
            for ep, n in zip(episodes, lengths, strict=True):
                _log_episode(rr, rec, ds, data, ep, n)
            rec.flush()
            rec.disconnect()
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
        return out
    finally:
        ds.close()
