"""Video encode/decode with PyAV for LeRobot-format datasets.

Encoding: frames (T, H, W, 3) uint8 RGB -> one mp4 (yuv420p). The default codec is the best encoder this
PyAV build ships, in LeRobot's order of preference: AV1 via ``libsvtav1`` (LeRobot's default), then H.264
(``libx264``/``h264``), then ``mpeg4``. See :func:`default_codec`.

Decoding: :class:`VideoDecoder` keeps containers open (one cache per process, safe under DataLoader
workers because the cache is keyed by pid), seeks to the keyframe before the requested time and decodes
forward, and continues decoding without a seek when the next request is a little later in the same file
(sequential reads cost one decode per frame). A request for many frames of one file is cut into runs of
consecutive times, decoded in parallel by threads, each on its own open container of the file (PyAV
releases the GIL while libdav1d/libavcodec decode and swscale converts). Each container decodes with one
codec thread, so the thread count is the decoder's own; every frame is decoded exactly as before.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from robot_rl.data.errors import DatasetError

# SVT-AV1 prints a banner and warnings to stderr for every encoder; keep only its errors unless asked.
os.environ.setdefault("SVT_LOG", "1")

ENCODE_ATTEMPTS = 3  # encoder-library errors and stalls are retried: see encode_video
ENCODE_STALL_S = float(os.environ.get("ROBOT_RL_ENCODE_STALL_S", "60"))
"""An encode that makes no progress (no frame taken, no packet out) for this long is abandoned and retried
(``ROBOT_RL_ENCODE_STALL_S``): libsvtav1 once blocked forever in its flush under CPU load."""
log = logging.getLogger(__name__)

# Ordered by preference: (encoder name, name written to info.json's video.codec).
_CODEC_PREFERENCE = (("libsvtav1", "av1"), ("libx264", "h264"), ("h264", "h264"), ("mpeg4", "mpeg4"))
_DEFAULT_CODEC: str | None = None
# Continue decoding instead of seeking when the target is at most this far after the last decoded frame,
# or at most one keyframe interval when that is shorter (then a seek lands at least as close).
_FORWARD_DECODE_S = 1.0
_FORKED_AWAY: list[dict] = []  # containers inherited from a parent process, never touched
# Below this many frames per thread a request is decoded in the calling thread (handing over costs more).
_MIN_FRAMES_PER_THREAD = 4


def available_encoders() -> list[str]:
    """Encoder names from the preference list that this PyAV build can open for writing."""
    out = []
    for name, _ in _CODEC_PREFERENCE:
        try:
            av.codec.Codec(name, "w")
        except Exception:  # noqa: BLE001 - PyAV raises UnknownCodecError or ValueError by version
            continue
        out.append(name)
    return out


def default_codec() -> str:
    """The best available encoder: ``libsvtav1`` (AV1, LeRobot's default) when present, else ``libx264``,
    ``h264`` or ``mpeg4``. Raises RuntimeError if PyAV has none of them."""
    global _DEFAULT_CODEC
    if _DEFAULT_CODEC is None:
        found = available_encoders()
        if not found:
            raise RuntimeError("PyAV has none of the video encoders libsvtav1, libx264, h264, mpeg4")
        _DEFAULT_CODEC = found[0]
    return _DEFAULT_CODEC


def codec_info_name(encoder: str) -> str:
    """The codec name info.json records for an encoder (``libsvtav1`` -> ``av1``)."""
    return dict(_CODEC_PREFERENCE).get(encoder, encoder)


def encode_video(path: str | Path, frames: np.ndarray, fps: int, codec: str | None = None) -> None:
    """Write ``frames`` (T, H, W, 3) uint8 RGB as an mp4 at ``fps`` frames/s, frame i at time i/fps, with a
    keyframe every 2 frames (as LeRobot) for cheap random access.

    Written to a temporary name and renamed into place, so ``path`` is either absent or complete.
    H and W must be even (yuv420p). An error returned by the encoder library itself is retried
    ``ENCODE_ATTEMPTS`` times in all (libsvtav1 once returned EINVAL for one episode of a dataset under heavy
    load and not on the rerun), so a transient failure does not end a recording. So is an encode that
    stalls: the encoder runs in a daemon thread (PyAV releases the GIL inside libavcodec) and one that takes
    no frame and gives no packet for :data:`ENCODE_STALL_S` is abandoned (it can never rename its file into
    place) and started afresh; libsvtav1's flush blocked forever once under CPU load, which hung a test
    run's collect stage where no signal could reach it. Raises DatasetError naming ``path`` on bad input or
    when every attempt failed.
    """
    path = Path(path)
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or len(frames) == 0:
        raise DatasetError(
            f"{path}: video frames must be non-empty (T, H, W, 3) uint8, got {frames.shape} {frames.dtype}"
        )
    codec = codec or default_codec()
    options = {"g": "2"}
    if codec == "libsvtav1":
        options.update(crf="30", preset="12")
    elif codec in ("libx264", "h264"):
        options.update(crf="23", preset="veryfast")
    for attempt in range(1, ENCODE_ATTEMPTS + 1):
        try:
            _encode_watched(path, frames, fps, codec, options)
            return
        except DatasetError as err:
            if attempt == ENCODE_ATTEMPTS or not isinstance(err.__cause__, av.FFmpegError | _Stalled):
                raise
            log.warning("%s; encoding it again (attempt %d of %d)", err, attempt + 1, ENCODE_ATTEMPTS)


class _Stalled(Exception):
    """An encode made no progress for :data:`ENCODE_STALL_S`."""


def _encode_watched(path: Path, frames: np.ndarray, fps: int, codec: str, options: dict[str, str]) -> None:
    """:func:`encode_stream` of ``frames`` in a daemon thread, watched for stalls (see :func:`encode_video`).

    Raises DatasetError (from :class:`_Stalled`) when it stalls, else what ``encode_stream`` raised.
    """
    last = [time.monotonic()]
    abandoned, done, failed = threading.Event(), threading.Event(), []

    def beat() -> None:
        last[0] = time.monotonic()

    def run() -> None:
        try:
            encode_stream(
                path, iter(frames), fps, frames.shape[1], frames.shape[2], codec, options, beat, abandoned
            )
        except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
            failed.append(err)
        finally:
            done.set()

    threading.Thread(target=run, name=f"encode {path.name}", daemon=True).start()
    try:
        while not done.wait(min(1.0, ENCODE_STALL_S)):
            if time.monotonic() - last[0] > ENCODE_STALL_S:
                stalled = _Stalled(f"no progress for {ENCODE_STALL_S:g} s")
                raise DatasetError(f"{path}: video encoding with {codec} stalled ({stalled})") from stalled
    finally:
        if not done.is_set():  # a stall, or an exception (Ctrl-C) while waiting: the encode must not land
            abandoned.set()
    if failed:
        raise failed[0]


def encode_stream(
    path: str | Path,
    frames: Iterator[np.ndarray],
    fps: int,
    height: int,
    width: int,
    codec: str,
    options: dict[str, str],
    progress: Callable[[], None] | None = None,
    abandoned: threading.Event | None = None,
) -> None:
    """Encode (height, width, 3) uint8 RGB frames as they come (memory stays flat) into an mp4 at ``fps``,
    with encoder ``codec`` and its ``options``, through a hidden temporary sibling renamed onto ``path``.
    ``progress`` is called after each frame and each packet; once ``abandoned`` is set the file is never
    renamed into place (a watcher gave up on this encode and started another).

    Raises DatasetError naming ``path`` for odd H or W (yuv420p), any encoder failure, or abandonment.
    """
    path = Path(path)
    if height % 2 or width % 2:
        raise DatasetError(f"{path}: yuv420p video needs even height and width, got {height}x{width}")
    beat = progress or (lambda: None)
    path.parent.mkdir(parents=True, exist_ok=True)
    # hidden (never matches file-*.mp4), and unique per encode: an abandoned one may still hold its file
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}-{uuid.uuid4().hex[:8]}.mp4")
    try:
        with av.open(str(tmp), "w", format="mp4") as container:
            stream = container.add_stream(codec, rate=Fraction(fps))
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            stream.options = options
            for frame in frames:
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    container.mux(packet)
                    beat()
                beat()
            for packet in stream.encode():
                container.mux(packet)
                beat()
        if abandoned is not None and abandoned.is_set():
            raise DatasetError(f"{path}: this encode was abandoned as stalled; another one replaced it")
        os.replace(tmp, path)
    except Exception as err:  # noqa: BLE001 - any encoder failure is reported against the file
        raise DatasetError(f"{path}: video encoding with {codec} failed: {err}") from err
    finally:
        tmp.unlink(missing_ok=True)


class _OpenVideo:
    """One open container plus the decoder position."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.container = av.open(str(path))
            self.stream = self.container.streams.video[0]
        except Exception as err:  # noqa: BLE001
            raise DatasetError(f"{path}: unreadable video: {err}") from err
        # Slice threads: frame threading delays every frame after a seek, which random access pays per sample.
        # One codec thread: parallelism comes from decoding runs of a request on several containers.
        self.stream.thread_type = "SLICE"
        self.stream.codec_context.thread_count = 1
        self.frames = None  # decode iterator
        self.last: tuple[float, av.VideoFrame] | None = None
        self._key_gap = 0.0  # widest interval between consecutive keyframes decoded so far (s)
        self._last_key: float | None = None
        self._converted: tuple = (None, None, None)  # (frame, size, rgb) of the last conversion
        # One reformatter for every frame of the file keeps swscale's context (and its scaling filter)
        # between frames; ``frame.to_ndarray(format=...)`` builds a new one per frame, which cost more than
        # decoding the frame. One swscale thread: its helper threads waited for a core on a busy machine
        # (25x the conversion time under load). Same swscale call, same pixels.
        self._reformatter = VideoReformatter()

    def _restart(self, t: float) -> None:
        offset = int(max(t, 0.0) / float(self.stream.time_base))
        self.container.seek(offset, stream=self.stream, backward=True, any_frame=False)
        self.frames = self.container.decode(self.stream)
        self.last = None
        self._last_key = None

    def frame_at(self, t: float, tolerance_s: float, size: tuple[int, int] | None = None) -> np.ndarray:
        """The frame whose presentation time is nearest ``t`` (seconds), within tolerance, as RGB uint8,
        scaled to ``size`` (H, W) by swscale's area filter when given."""
        if self.last is not None and abs(self.last[0] - t) <= tolerance_s:
            return self._rgb(self.last[1], size)
        if self.frames is None or self.last is None or not (0 < t - self.last[0] <= self.forward_s):
            self._restart(t)
        best = self.last
        try:
            while True:
                frame = next(self.frames, None)
                if frame is None:
                    break
                ft = float(frame.time)
                self.last = (ft, frame)
                if frame.key_frame:
                    self._note_keyframe(ft)
                if best is None or abs(ft - t) < abs(best[0] - t):
                    best = self.last
                if ft >= t - tolerance_s:
                    break
        except Exception as err:  # noqa: BLE001 - corrupt packets surface here
            self.frames = None
            raise DatasetError(f"{self.path}: cannot decode frame at {t:.4f}s: {err}") from err
        if best is None or abs(best[0] - t) > tolerance_s:
            got = "no frame" if best is None else f"nearest frame at {best[0]:.4f}s"
            raise DatasetError(f"{self.path}: no video frame at {t:.4f}s within {tolerance_s}s ({got})")
        return self._rgb(best[1], size)

    @property
    def forward_s(self) -> float:
        """How far ahead (s) decoding on beats seeking: one keyframe interval once seen, capped."""
        return min(_FORWARD_DECODE_S, self._key_gap) if self._key_gap else _FORWARD_DECODE_S

    def _note_keyframe(self, t: float) -> None:
        if self._last_key is not None and t > self._last_key:
            self._key_gap = max(self._key_gap, t - self._last_key)
        self._last_key = t

    def _rgb(self, frame: av.VideoFrame, size: tuple[int, int] | None) -> np.ndarray:
        if self._converted[0] is not frame or self._converted[1] != size:
            if size is None:
                rgb = self._reformatter.reformat(frame, format="rgb24", threads=1).to_ndarray()
            else:
                rgb = self._reformatter.reformat(
                    frame, format="rgb24", height=size[0], width=size[1], interpolation="AREA", threads=1
                ).to_ndarray()
            self._converted = (frame, size, rgb)
        return self._converted[2]

    def close(self) -> None:
        self.container.close()


def default_decode_threads() -> int:
    """Decoding threads per process: the CPUs this process may run on, shared among the DataLoader's
    workers when called in one, at most 4."""
    import torch.utils.data

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    worker = torch.utils.data.get_worker_info()
    return max(1, min(4, cores // (worker.num_workers if worker is not None else 1)))


class VideoDecoder:
    """Decodes frames by timestamp from mp4 files, keeping up to ``max_open`` containers open per process.

    ``decode(path, timestamps)`` -> (N, H, W, 3) uint8 RGB. Raises DatasetError naming the file if it is
    missing, unreadable, or has no frame within ``tolerance_s`` of a requested time.

    ``threads`` (default :func:`default_decode_threads`) decode the runs of one request in parallel, each on
    its own container of the file; 1 decodes in the calling thread only.
    """

    def __init__(self, tolerance_s: float = 1e-4, max_open: int = 16, threads: int = 0) -> None:
        self.tolerance_s = tolerance_s
        self.max_open = max_open
        self.threads = threads  # 0: default_decode_threads(), resolved in each process on first use
        self._pid = os.getpid()
        self._open: dict[Path, list[_OpenVideo]] = {}
        self._pool: ThreadPoolExecutor | None = None

    def _get(self, path: Path, count: int = 1) -> list[_OpenVideo]:
        """``count`` open containers of ``path`` (opened on first use, kept for later requests)."""
        if self._pid != os.getpid():  # forked into a DataLoader worker: never share containers
            # Closing (or garbage-collecting) a container inherited through fork would join decoder
            # threads that do not exist in this process and hang: keep them referenced, unused.
            _FORKED_AWAY.append(self._open)
            self._open, self._pid, self._pool = {}, os.getpid(), None
        videos = self._open.get(path)
        if videos is None:
            if not path.is_file():
                raise DatasetError(f"{path}: video file not found")
            if len(self._open) >= self.max_open:
                for video in self._open.pop(next(iter(self._open))):
                    video.close()
            videos = self._open[path] = []
        while len(videos) < count:
            videos.append(_OpenVideo(path))
        return videos[:count]

    def decode(
        self, path: str | Path, timestamps: list[float] | np.ndarray, size: tuple[int, int] | None = None
    ) -> np.ndarray:
        """Frames at ``timestamps`` (s) -> (N, H, W, 3) uint8 RGB, native or scaled to ``size`` (H, W).

        The times are sorted and cut into up to ``threads`` runs of consecutive times, one per thread and
        container; each run seeks and decodes forward exactly as a single container would."""
        order = np.argsort(np.asarray(timestamps, dtype=np.float64), kind="stable")
        threads = self.threads or default_decode_threads()
        runs = max(1, min(threads, len(order) // _MIN_FRAMES_PER_THREAD))
        videos = self._get(Path(path), runs)
        ctx = videos[0].stream.codec_context
        out = np.empty((len(order), *(size or (ctx.height, ctx.width)), 3), dtype=np.uint8)

        def run(video: _OpenVideo, part: np.ndarray) -> None:
            for i in part:
                out[i] = video.frame_at(float(timestamps[i]), self.tolerance_s, size)

        parts = np.array_split(order, runs)
        if runs == 1:
            run(videos[0], order)
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(threads, thread_name_prefix="video-decode")
            for future in [self._pool.submit(run, v, part) for v, part in zip(videos, parts, strict=True)]:
                future.result()
        return out

    def duration(self, path: str | Path) -> tuple[float, int, int]:
        """(time in seconds just past the last frame, height, width) of a video, reading packet headers
        only. Raises DatasetError naming the file if it is missing, unreadable or has no video packets."""
        video = self._get(Path(path))[0]
        try:
            video.container.seek(0, stream=video.stream)
            last, step = None, 0.0
            for packet in video.container.demux(video.stream):
                if packet.pts is not None:
                    t = float(packet.pts * video.stream.time_base)
                    last = t if last is None else max(last, t)
                    if packet.duration:
                        step = float(packet.duration * video.stream.time_base)
        except Exception as err:  # noqa: BLE001
            raise DatasetError(f"{video.path}: unreadable video: {err}") from err
        finally:
            video.frames, video.last = None, None
        if last is None:
            raise DatasetError(f"{video.path}: video has no frames")
        return last + step, video.stream.codec_context.height, video.stream.codec_context.width

    def decode_all(self, path: str | Path) -> np.ndarray:
        """Every frame of the file in order, (T, H, W, 3) uint8. Raises DatasetError naming the file."""
        path = Path(path)
        if not path.is_file():
            raise DatasetError(f"{path}: video file not found")
        try:
            with av.open(str(path)) as container:
                return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
        except Exception as err:  # noqa: BLE001
            raise DatasetError(f"{path}: unreadable video: {err}") from err

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        for videos in self._open.values():
            for video in videos:
                video.close()
        self._open.clear()

    def __getstate__(self) -> dict:  # containers cannot be pickled: workers reopen their own
        return {"tolerance_s": self.tolerance_s, "max_open": self.max_open, "threads": self.threads}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)
