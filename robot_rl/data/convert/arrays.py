"""Write converted arrays as a LeRobot v3.0 dataset: what the format importers
(:mod:`robot_rl.data.convert.zarr_buffers`, :mod:`robot_rl.data.convert.hdf5`) share.

An importer describes one episode as a :data:`Plan` (LeRobot key -> source array names and how to turn
them into a feature), :func:`build_frames` reads an episode's arrays through it, and
:func:`write_lerobot` writes the episodes, staged so a failure leaves nothing behind.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.writer import LeRobotWriter


def state_names(shapes: dict[str, tuple[int, ...]]) -> list[str]:
    """Per-dimension names of :func:`stack_state`'s output: ``key`` for a 1-dim array, ``key_<i>`` else."""
    names = []
    for key in sorted(shapes):
        dim = int(np.prod(shapes[key]))
        names += [key] if dim == 1 else [f"{key}_{i}" for i in range(dim)]
    return names


def stack_state(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """Concatenate low-dim arrays (T, ...) in sorted key order into float32 (T, S), each flattened."""
    return np.concatenate(
        [np.asarray(arrays[k]).reshape(len(arrays[k]), -1).astype(np.float32) for k in sorted(arrays)],
        axis=1,
    )


def tabular_array(arr: np.ndarray) -> np.ndarray:
    """A bool or numeric per-frame array in a dtype the LeRobot writer stores: float64 stays (wall-clock
    times need it), other floats become float32, integers int64, bool stays."""
    if arr.dtype.kind == "f" and arr.dtype != np.float64:
        return arr.astype(np.float32)
    return arr.astype(np.int64) if arr.dtype.kind in "iu" else arr


def is_rgb(shape: tuple[int, ...], dtype: np.dtype) -> bool:
    """True for a numeric (N, H, W, 3) array: an image stream."""
    return len(shape) == 4 and shape[-1] == 3 and np.dtype(dtype).kind in "fiu"


def rgb_uint8(arr: np.ndarray, where: str) -> np.ndarray:
    """(T, H, W, 3) image frames as uint8. Non-uint8 frames must hold values in [0, 255] (diffusion_policy's
    PushT stores float32 pixels) and are rounded. Raises DatasetError naming ``where`` otherwise."""
    if arr.dtype == np.uint8:
        return arr
    if arr.size and not (np.min(arr) >= 0 and np.max(arr) <= 255):  # NaN fails both comparisons
        raise DatasetError(f"{where}: {arr.dtype} image values must lie in [0, 255]")
    return np.round(arr).astype(np.uint8)


def write_lerobot(
    dst: Path,
    fps: int,
    episodes: Iterable[tuple[dict[str, np.ndarray], str, str]],
    names: dict[str, list[str]],
    robot_type: str = "",
) -> Path:
    """Write ``(frames, task, source)`` episodes, frames keyed by LeRobot key, as a LeRobot v3.0 dataset.

    Features (dtype, per-frame shape) come from the first episode: ``observation.images.*`` arrays
    (T, H, W, 3) uint8 become videos, (T,) arrays shape [1], others keep their trailing shape; ``names``
    gives a key's names. Written to a hidden sibling folder renamed onto ``dst`` at the end.
    Raises DatasetError if ``dst`` exists, there is no episode, or the writer's on bad frames.
    """
    with fmt.staged_destination(dst) as tmp:
        stream: Iterator = iter(episodes)
        first = next(stream, None)
        if first is None:
            raise DatasetError(f"{dst}: the source holds no episodes")
        features = {}
        for key, arr in first[0].items():
            dtype = "video" if keys.is_image_key(key) else str(arr.dtype)
            features[key] = {"dtype": dtype, "shape": list(arr.shape[1:]) or [1], "names": names.get(key)}
        with LeRobotWriter(tmp, fps=fps, features=features, robot_type=robot_type) as writer:
            for frames, task, source in itertools.chain([first], stream):
                writer.add_episode(frames, task=task, source=source)
    return Path(dst)


Plan = dict[str, tuple[list[str], str]]  # LeRobot key -> (source array names, kind); see build_frames


def build_frames(plan: Plan, read: Callable[[str], np.ndarray], where: str) -> dict[str, np.ndarray]:
    """One episode's frames by LeRobot key from a plan, reading each source array with ``read(name)``.

    Kinds: 'state' stacks its arrays with :func:`stack_state`; 'image' makes uint8 with :func:`rgb_uint8`;
    'tabular' applies :func:`tabular_array`; any other kind is a numpy dtype name to cast to.
    Raises DatasetError naming ``where`` and the arrays when their lengths differ.
    """
    frames: dict[str, np.ndarray] = {}
    first: tuple[str, int] | None = None
    for key, (names, kind) in plan.items():
        arrays = {name: np.asarray(read(name)) for name in names}
        for name, arr in arrays.items():
            if first is None:
                first = (name, len(arr))
            elif len(arr) != first[1]:
                raise DatasetError(f"{where}: {name!r} has {len(arr)} frames but {first[0]!r} has {first[1]}")
        if kind == "state":
            frames[key] = stack_state(arrays)
        elif kind == "image":
            frames[key] = rgb_uint8(arrays[names[0]], f"{where}: {names[0]!r}")
        elif kind == "tabular":
            frames[key] = tabular_array(arrays[names[0]])
        else:
            frames[key] = arrays[names[0]].astype(kind)
    return frames
