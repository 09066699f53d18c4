"""Pack a LeRobot v3.0 dataset's episodes into few data and video files, as LeRobot does.

LeRobot v3.0 stores many episodes per file: ``data/chunk-CCC/file-FFF.parquet`` and
``videos/<key>/chunk-CCC/file-FFF.mp4`` grow until ``data_files_size_in_mb`` / ``video_files_size_in_mb``
(100 / 200 MB by default) and the episodes metadata addresses each episode by (chunk, file) plus its row
range (``dataset_from_index``/``dataset_to_index``) and, for videos, its span in the file
(``videos/<key>/from_timestamp``/``to_timestamp``). File number ``g`` (counted over chunks) lies in chunk
``g // chunks_size``, file ``g % chunks_size``.

Episodes are first written one per file ("pending"), then :func:`pack` merges the last packed file and the
pending files into full-size files: the parquet rows are concatenated and the mp4 packets copied with their
times shifted (nothing is decoded or re-encoded). An mp4 whose stream parameters differ from the file it
would join, or that starts with a decode delay (B-frames), starts a new file instead.

Crash safety: every step leaves each metadata row pointing at a complete file that holds its episode.
Merged files are written under fresh numbers, the metadata is committed, the merged-away files are deleted,
then the new files are renumbered down (hard link, commit, unlink) so numbers stay contiguous. A kill can
leave only unreferenced files, which :func:`remove_unreferenced` deletes (the writer does so on resume).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import pyarrow as pa
import pyarrow.compute as pc

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt

_FILE_RE = re.compile(r"chunk-(\d+)/file-(\d+)\.(parquet|mp4)$")
MB = 1024**2


@dataclass(frozen=True)
class FileSizes:
    """Target file sizes in MB (LeRobot's ``data_files_size_in_mb``, ``video_files_size_in_mb``): a file
    takes the next episode while its size plus the episode's stays below the target. 0 keeps one episode
    per file."""

    data_mb: float = fmt.DATA_FILES_SIZE_MB
    video_mb: float = fmt.VIDEO_FILES_SIZE_MB


@dataclass(frozen=True)
class Stream:
    """One family of files: the data parquet files (``video_key`` None) or one camera's mp4 files."""

    video_key: str | None = None

    @property
    def prefix(self) -> str:
        """Episodes-metadata column prefix: ``data/`` or ``videos/<key>/``."""
        return "data/" if self.video_key is None else f"videos/{self.video_key}/"

    def folder(self, root: Path) -> Path:
        """The folder holding the stream's ``chunk-CCC`` folders."""
        return root / ("data" if self.video_key is None else f"videos/{self.video_key}")

    def path(self, root: Path, number: int) -> Path:
        """Path of file number ``number`` (counted over chunks)."""
        chunk, file = divmod(number, fmt.CHUNKS_SIZE)
        if self.video_key is None:
            return root / fmt.DATA_PATH_V30.format(chunk_index=chunk, file_index=file)
        return root / fmt.VIDEO_PATH_V30.format(video_key=self.video_key, chunk_index=chunk, file_index=file)

    def number(self, row: dict[str, Any]) -> int:
        """File number holding the episode of episodes-metadata ``row``."""
        return int(row[self.prefix + "chunk_index"]) * fmt.CHUNKS_SIZE + int(row[self.prefix + "file_index"])

    def set_number(self, row: dict[str, Any], number: int) -> None:
        """Point episodes-metadata ``row`` at file number ``number``."""
        chunk, file = divmod(number, fmt.CHUNKS_SIZE)
        row[self.prefix + "chunk_index"], row[self.prefix + "file_index"] = chunk, file


def streams_of(video_keys: Sequence[str]) -> list[Stream]:
    """The data stream and one stream per video key."""
    return [Stream(), *(Stream(k) for k in video_keys)]


def next_number(stream: Stream, rows: Sequence[dict[str, Any]]) -> int:
    """The file number after the last episode's (0 when none): files hold runs of consecutive episodes,
    numbered in episode order, so the last episode's file has the highest number."""
    return stream.number(rows[-1]) + 1 if rows else 0


def pack(
    root: Path,
    rows: list[dict[str, Any]],
    video_keys: Sequence[str],
    sizes: FileSizes,
    commit: Callable[[int], None],
    final: bool = True,
    everything: bool = False,
) -> None:
    """Merge the files that hold the last episodes of ``rows`` into fewer, bigger ones, updating ``rows``
    (episodes-metadata dicts, in episode order, each file holding a run of consecutive episodes) in place.

    Which files: every file when ``everything``, else the last ones back to a file at least half the target
    size that cannot take the files after it (those before it are full). How: with ``final`` they
    are merged greedily in order, a file taking the next one while the sum stays below the target, as
    LeRobot fills its files; without, a file is merged with the next only when at most twice its size,
    so that repeated packing while episodes keep coming rewrites each byte O(log n) times, not O(n).
    An mp4 never joins a file whose stream parameters differ, nor one it would follow with a decode delay.

    Args:
        root: dataset folder.
        rows: every episode's metadata row; every file they reference must exist.
        video_keys: the video features.
        sizes: target file sizes; a stream whose target is 0 is left as it is.
        commit: ``commit(first_changed_episode)`` writes the episodes metadata from that episode on, and
            info.json; called whenever rows changed, before any file they no longer reference is deleted.
        final: merge greedily (at the end of a write) rather than by the doubling rule.
        everything: consider every file, not only the last ones (a freshly written copy).
    Raises DatasetError naming the file when a file cannot be read or written.
    """
    changed = len(rows)
    for stream in streams_of(video_keys):
        limit = (sizes.data_mb if stream.video_key is None else sizes.video_mb) * MB
        if limit <= 0 or not rows:
            continue
        units = _units(root, stream, rows, limit, everything)
        groups = _greedy(units, limit) if final else _doubling(units, limit)
        fresh = max(next_number(stream, rows), _highest_on_disk(stream.folder(root)) + 1)
        for group in groups:
            if len(group) < 2:
                continue  # already one file
            _merge(root, stream, rows, [ep for unit in group for ep in unit.episodes], fresh)
            changed = min(changed, group[0].episodes[0])
            fresh += 1
    if changed == len(rows):
        return
    commit(changed)
    remove_unreferenced(root, rows, video_keys)
    _renumber(root, rows, video_keys, commit)


@dataclass
class _Unit:
    """One existing file: its episodes, size in bytes and (videos) stream signature."""

    episodes: list[int]
    size: int
    signature: tuple | None


def _units(root: Path, stream: Stream, rows: list[dict], limit: float, everything: bool) -> list[_Unit]:
    """The files to pack, in episode order: all, or the last files back to one that is at least half full
    and cannot take the ones after it (sum reaching ``limit`` bytes)."""
    units: list[_Unit] = []
    total, end = 0, len(rows)
    while end > 0:  # runs of episodes sharing a file, from the last one back
        number = stream.number(rows[end - 1])
        path = stream.path(root, number)
        size = _size(path)
        if not everything and total + size >= limit and size >= limit / 2:
            break  # a file at least half full that cannot take the later ones: full
        start = end - 1
        while start > 0 and stream.number(rows[start - 1]) == number:
            start -= 1
        run, end = list(range(start, end)), start
        total += size
        units.append(_Unit(run, size, _video_signature(path) if stream.video_key is not None else None))
    return units[::-1]


def _joins(group: list[_Unit], unit: _Unit) -> bool:
    """Whether ``unit``'s file may be appended to the file ``group`` becomes (same video parameters, and
    its first packet a keyframe decoded at once)."""
    return unit.signature is None or (unit.signature == group[0].signature and bool(unit.signature[-1]))


def _greedy(units: list[_Unit], limit: float) -> list[list[_Unit]]:
    groups: list[list[_Unit]] = []
    for unit in units:
        if groups and sum(u.size for u in groups[-1]) + unit.size < limit and _joins(groups[-1], unit):
            groups[-1].append(unit)
        else:
            groups.append([unit])
    return groups


def _doubling(units: list[_Unit], limit: float) -> list[list[_Unit]]:
    groups: list[list[_Unit]] = []
    for unit in units:
        groups.append([unit])
        while len(groups) > 1:
            before, last = groups[-2], groups[-1]
            a, b = sum(u.size for u in before), sum(u.size for u in last)
            if a > 2 * b or a + b >= limit or not _joins(before, last[0]):
                break
            groups[-2:] = [before + last]
    return groups


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as err:
        raise DatasetError(f"{path}: cannot read the file's size: {err}") from err


def _video_signature(path: Path) -> tuple:
    """What must match for mp4 packets to be appended to another file's: codec, size, pixel format, time
    base and codec extradata; the last item says whether the first packet decodes at once (dts == pts, so
    appended after another file its decode times stay increasing) and is a keyframe."""
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            ctx = stream.codec_context
            first = next((p for p in container.demux(stream) if p.dts is not None), None)
            clean_start = first is not None and first.is_keyframe and first.dts == first.pts
            return (
                ctx.name,
                ctx.width,
                ctx.height,
                str(ctx.format.name if ctx.format else None),
                stream.time_base,
                bytes(ctx.extradata or b""),
                clean_start,
            )
    except (av.FFmpegError, IndexError, ValueError) as err:
        raise DatasetError(f"{path}: unreadable video: {err}") from err


def _merge(root: Path, stream: Stream, rows: list[dict], group: list[int], number: int) -> None:
    """Write the episodes ``group`` as file ``number`` of ``stream`` and point their rows at it."""
    dst = stream.path(root, number)
    sources: list[tuple[Path, list[int]]] = []
    for ep in group:
        path = stream.path(root, stream.number(rows[ep]))
        if sources and sources[-1][0] == path:
            sources[-1][1].append(ep)
        else:
            sources.append((path, [ep]))
    if stream.video_key is None:
        tables: list[pa.Table] = []
        for path, eps in sources:
            table = fmt.read_parquet(path)
            if tables and set(table.column_names) != set(tables[0].column_names):
                raise DatasetError(
                    f"{path}: columns {table.column_names} differ from {tables[0].column_names} in the "
                    "files it is packed with"
                )
            mask = pc.is_in(table.column(keys.EPISODE_INDEX), pa.array(eps, pa.int64()))
            table = table.filter(mask)
            tables.append(table.select(tables[0].column_names) if tables else table)
        try:
            merged = pa.concat_tables(tables)
        except pa.ArrowInvalid as err:
            raise DatasetError(f"{dst}: the packed files' column types differ: {err}") from err
        fmt.atomic_write_parquet(dst, merged)
    else:
        _concat_videos(stream, rows, sources, dst)
    for ep in group:
        stream.set_number(rows[ep], number)


def _concat_videos(
    stream: Stream, rows: list[dict], sources: list[tuple[Path, list[int]]], dst: Path
) -> None:
    """Copy the packets of each source file, shifted to follow the previous file's last episode, into
    ``dst`` (through a hidden temporary file), and shift the sources' episodes' from/to timestamps."""
    from_col, to_col = stream.prefix + "from_timestamp", stream.prefix + "to_timestamp"
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}.mp4")
    offset = 0.0
    shifted: list[tuple[int, float, float]] = []
    try:
        with av.open(str(tmp), "w", format="mp4") as out:
            out_stream = None
            for path, eps in sources:
                with av.open(str(path)) as inp:
                    in_stream = inp.streams.video[0]
                    if out_stream is None:
                        out_stream = out.add_stream_from_template(in_stream, opaque=True)
                        out_stream.time_base = in_stream.time_base
                    shift = round(offset / float(in_stream.time_base))
                    for packet in inp.demux(in_stream):
                        if packet.dts is None:
                            continue
                        packet.pts += shift
                        packet.dts += shift
                        packet.stream = out_stream
                        out.mux(packet)
                for ep in eps:
                    row = rows[ep]
                    shifted.append((ep, offset + float(row[from_col]), offset + float(row[to_col])))
                offset += float(rows[eps[-1]][to_col])
        os.replace(tmp, dst)
    except (av.FFmpegError, ValueError) as err:
        raise DatasetError(f"{dst}: cannot copy video packets from {sources[-1][0]}: {err}") from err
    finally:
        tmp.unlink(missing_ok=True)
    for ep, lo, hi in shifted:
        rows[ep][from_col], rows[ep][to_col] = lo, hi


def _files_on_disk(folder: Path) -> dict[int, Path]:
    out = {}
    for path in folder.glob("chunk-*/file-*.*"):
        match = _FILE_RE.search(path.as_posix())
        if match:
            out[int(match[1]) * fmt.CHUNKS_SIZE + int(match[2])] = path
    return out


def _highest_on_disk(folder: Path) -> int:
    return max(_files_on_disk(folder), default=-1)


def remove_unreferenced(root: Path, rows: Sequence[dict[str, Any]], video_keys: Sequence[str]) -> None:
    """Delete the data and video files (and hidden temporary files) of ``root`` that no row of ``rows``
    references: leftovers of a pack or an episode that a kill interrupted."""
    for stream in streams_of(video_keys):
        folder = stream.folder(root)
        used = {stream.number(r) for r in rows}
        for number, path in _files_on_disk(folder).items():
            if number not in used:
                path.unlink()
        for tmp in folder.glob("chunk-*/.file-*.tmp*"):
            tmp.unlink()
        for chunk in folder.glob("chunk-*"):
            if chunk.is_dir() and not any(chunk.iterdir()):
                chunk.rmdir()


def _renumber(
    root: Path, rows: list[dict[str, Any]], video_keys: Sequence[str], commit: Callable[[int], None]
) -> None:
    """Give each stream's files the numbers 0, 1, ... in episode order where those numbers are free: hard
    link (or copy) each file to its new name, commit the rows, then remove the old names."""
    old_paths: list[Path] = []
    changed = len(rows)
    for stream in streams_of(video_keys):
        order: list[int] = []
        for row in rows:
            number = stream.number(row)
            if not order or order[-1] != number:
                order.append(number)
        if len(set(order)) != len(order):
            continue  # files interleave episodes (not written by us): leave them
        target = {old: new for new, old in enumerate(order) if old != new}
        on_disk = _files_on_disk(stream.folder(root))
        if not target or any(new in on_disk for new in target.values()):
            continue
        for old, new in target.items():
            src, dst = stream.path(root, old), stream.path(root, new)
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)
            old_paths.append(src)
        for ep, row in enumerate(rows):
            if stream.number(row) in target:
                stream.set_number(row, target[stream.number(row)])
                changed = min(changed, ep)
    if old_paths:
        commit(changed)
        for path in old_paths:
            path.unlink()
