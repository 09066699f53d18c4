"""Convert between diffusion-policy-style zarr ReplayBuffers and LeRobot datasets.

The zarr layout (diffusion_policy's and UMI's ``ReplayBuffer``): a group holding ``data/<key>`` arrays
(N, ...), all N frames long, and ``meta/episode_ends`` int (E,), the cumulative exclusive end frame of
each episode. Images are (N, H, W, 3) arrays such as ``data/img`` or ``data/camera0_rgb``. A ``.zip``
path (diffusion_policy's ``*.zarr.zip``) is read through zarr's ZipStore.

:func:`zarr_to_lerobot` maps the arrays to LeRobot keys; :func:`lerobot_to_zarr` writes the layout (zarr
format 2, which diffusion_policy's zarr 2 reader opens) with attributes that map it back exactly. The
import side writes through :mod:`robot_rl.data.convert.arrays`, as :mod:`robot_rl.data.convert.hdf5` does.
Both directions write to a hidden sibling folder renamed onto the destination at the end, so a failed
conversion leaves nothing behind.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.convert.arrays import Plan, build_frames, is_rgb, state_names, write_lerobot
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.reader import LeRobotDataset

# zarr array name -> (LeRobot key, dtype it is stored as)
EXACT_KEYS = {
    "action": (keys.ACTION, np.float32),
    "reward": (keys.REWARD, np.float32),
    "rewards": (keys.REWARD, np.float32),
    "done": (keys.DONE, np.bool_),
    "dones": (keys.DONE, np.bool_),
}
# A low-dim array joins observation.state when one of its '_'-separated name tokens is one of these.
STATE_TOKENS = frozenset({"state", "obs", "pos", "pose", "qpos", "qvel", "joint", "eef", "gripper"})
LEROBOT_KEY_ATTR = "lerobot_key"  # array attribute written on export: the LeRobot key it came from
_ZARR_PREFIXES = ("observation.images.", "observation.", "next.", "complementary_info.")
_VIDEO_BLOCK = 64  # frames decoded at a time on export
_CHUNK_BYTES = 1 << 20  # target size of one low-dim zarr chunk


# -- zarr -> LeRobot -----------------------------------------------------------------------------------
def _open(path: Path):
    import zarr
    from zarr.storage import ZipStore

    if not path.exists():
        raise DatasetError(f"{path}: no such zarr store")
    try:
        store = ZipStore(path, mode="r") if path.suffix == ".zip" else str(path)
        return zarr.open_group(store, mode="r")
    except Exception as err:  # noqa: BLE001 - zarr raises several types for a non-zarr path
        raise DatasetError(f"{path}: not a readable zarr group: {err}") from err


def _plan(src: Path, data) -> tuple[Plan, dict[str, list[str]]]:
    """{LeRobot key: (zarr array names, kind)} and {LeRobot key: names}; kinds as
    :func:`~robot_rl.data.convert.arrays.build_frames` reads them."""
    plan: Plan = {}
    names: dict[str, list[str]] = {}
    state: list[str] = []
    skipped = []

    def put(key: str, name: str, kind: str) -> None:
        if key in plan:
            raise DatasetError(f"{src}: 'data/{name}' and 'data/{plan[key][0][0]}' both map to {key!r}")
        plan[key] = ([name], kind)

    for name in sorted(data.array_keys()):
        arr = data[name]
        stored = arr.attrs.get(LEROBOT_KEY_ATTR)
        if stored:
            put(stored, name, "image" if keys.is_image_key(stored) else "tabular")
            if arr.attrs.get("names"):
                names[stored] = list(arr.attrs["names"])
        elif name in EXACT_KEYS:
            key, dtype = EXACT_KEYS[name]
            put(key, name, np.dtype(dtype).name)
        elif is_rgb(arr.shape, arr.dtype):
            put(keys.image_key(name), name, "image")
        elif arr.ndim > 3 or arr.dtype.kind not in "biuf":
            skipped.append(f"data/{name} {arr.shape} {arr.dtype}")
        elif STATE_TOKENS & set(name.split("_")):
            state.append(name)
        else:
            put(f"observation.{name}", name, "tabular")
    if state:
        if keys.STATE in plan:
            raise DatasetError(
                f"{src}: 'data/{plan[keys.STATE][0][0]}' and {state} both map to observation.state"
            )
        plan[keys.STATE] = (state, "state")
        names[keys.STATE] = state_names({n: data[n].shape[1:] for n in state})
    if skipped:
        warnings.warn(
            f"{src}: arrays not imported (not images, not numeric up to 3-D): {skipped}", stacklevel=3
        )
    if not plan:
        raise DatasetError(f"{src}: 'data' holds no array that maps to a LeRobot feature")
    return plan, names


def _episode_ends(src: Path, root, data) -> np.ndarray:
    if "meta" not in root or "episode_ends" not in root["meta"]:
        raise DatasetError(
            f"{src}: missing 'meta/episode_ends' (each episode's cumulative exclusive end frame)"
        )
    ends = np.asarray(root["meta"]["episode_ends"][:])
    if ends.ndim != 1 or ends.dtype.kind not in "iu" or not len(ends):
        raise DatasetError(f"{src}: 'meta/episode_ends' must be a non-empty 1-D integer array")
    if ends[0] <= 0 or np.any(np.diff(ends) <= 0):
        raise DatasetError(f"{src}: 'meta/episode_ends' must increase strictly from > 0 (no empty episodes)")
    for name in sorted(data.array_keys()):
        if data[name].shape[0] != ends[-1]:
            raise DatasetError(
                f"{src}: 'data/{name}' has {data[name].shape[0]} frames but 'meta/episode_ends' ends at "
                f"{ends[-1]}"
            )
    return ends.astype(np.int64)


def _episode_labels(src: Path, attrs: dict, n: int, task: str | None) -> tuple[list[str], list[str]]:
    """(task, source) per episode: ``task`` if given, else the ``meta`` attrs lerobot_to_zarr writes,
    else the store's name; sources from the attrs, else 'demo'."""
    sources = list(attrs.get("episode_sources") or ["demo"] * n)
    tasks = [task or src.name.split(".")[0]] * n
    if task is None and "tasks" in attrs and "episode_task_index" in attrs:
        try:
            tasks = [str(attrs["tasks"][i]) for i in attrs["episode_task_index"]]
        except (IndexError, TypeError) as err:
            raise DatasetError(f"{src}: 'meta' attribute episode_task_index does not index tasks") from err
    if len(tasks) != n or len(sources) != n or not set(sources) <= set(keys.SOURCES):
        raise DatasetError(
            f"{src}: 'meta' attributes give {len(tasks)} tasks and {len(sources)} sources (each one of "
            f"{keys.SOURCES}) for {n} episodes"
        )
    return tasks, sources


def zarr_to_lerobot(
    src: str | Path, dst: str | Path, fps: int | None = None, task: str | None = None
) -> Path:
    """Import a diffusion-policy-style zarr ReplayBuffer into a new LeRobot v3.0 dataset at ``dst``.

    Mapping of each ``data/<name>`` array (N, ...), first rule that applies:

    1. an array with attribute ``lerobot_key`` (written by :func:`lerobot_to_zarr`) -> that key, with its
       ``names`` attribute and dtype (exact round trip);
    2. ``action`` -> ``action`` (float32); ``reward``/``rewards`` -> ``next.reward`` (float32);
       ``done``/``dones`` -> ``next.done`` (bool);
    3. numeric (N, H, W, 3) -> video ``observation.images.<name>`` (uint8; float pixels must lie in
       [0, 255] and are rounded, as diffusion_policy's PushT ``img``);
    4. numeric arrays up to 3-D whose name has a token (split on '_') in :data:`STATE_TOKENS`, such as
       ``state``, ``agent_pos``, ``robot_eef_pose``, ``robot0_gripper_width`` -> concatenated, flattened, in
       sorted name order into ``observation.state`` float32, with ``names`` ``<name>`` or ``<name>_<i>``;
    5. other numeric arrays up to 3-D (``keypoint``, ``timestamp``, ``stage``) -> ``observation.<name>``
       with their shape (float64 stays float64, other floats float32, integers int64, bool);
    6. anything else (strings, objects, non-RGB arrays beyond 3-D) is skipped with a warning naming it.

    Args:
        src: the zarr folder, or a ``.zip`` of one.
        dst: the new dataset's folder; must not exist.
        fps: frames per second. ``meta`` attribute ``fps`` wins when present; a different ``fps`` then is
            an error. Required when the store has none.
        task: task string for every episode. Default: the ``meta`` attributes ``tasks`` and
            ``episode_task_index`` when present, else the store's name without suffixes.
    Returns: ``dst``. LeRobot timestamps are frame_index / fps; the episodes' source comes from ``meta``
        attribute ``episode_sources``, else 'demo'.
    Raises:
        DatasetError naming the store and key: missing or non-increasing ``meta/episode_ends``, an array
        whose length differs from ``episode_ends[-1]``, no fps, two arrays mapping to one key, image
        values outside [0, 255], an existing ``dst``.
    """
    src = Path(src)
    root = _open(src)
    if "data" not in root:
        raise DatasetError(f"{src}: missing group 'data' (a ReplayBuffer keeps its arrays under data/)")
    data = root["data"]
    ends = _episode_ends(src, root, data)
    attrs = dict(root["meta"].attrs)
    stored_fps = attrs.get("fps")
    if stored_fps is not None and fps is not None and int(fps) != int(stored_fps):
        raise DatasetError(f"{src}: 'meta' attribute fps is {stored_fps} but fps {fps} was given; drop --fps")
    if stored_fps is None and fps is None:
        raise DatasetError(f"{src}: no 'fps' attribute in 'meta'; pass the recording rate with --fps")
    plan, names = _plan(src, data)
    tasks, sources = _episode_labels(src, attrs, len(ends), task)

    def episodes() -> Iterator[tuple[dict[str, np.ndarray], str, str]]:
        for ep, (start, end) in enumerate(zip(np.r_[0, ends[:-1]], ends, strict=True)):
            frames = build_frames(plan, lambda name, lo=start, hi=end: data[name][lo:hi], f"{src}/data")
            yield frames, tasks[ep], sources[ep]

    return write_lerobot(
        Path(dst), int(stored_fps or fps), episodes(), names, str(attrs.get("robot_type", ""))
    )


# -- LeRobot -> zarr -----------------------------------------------------------------------------------
def _zarr_name(key: str) -> str:
    """``observation.images.front`` -> ``front``, ``observation.state`` -> ``state``, ``next.reward`` ->
    ``reward``, ``complementary_info.is_intervention`` -> ``is_intervention``; other dots become '_'."""
    for prefix in _ZARR_PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    return key.replace(".", "_")


def lerobot_to_zarr(src: str | Path, dst: str | Path) -> Path:
    """Export a LeRobot dataset (v3.0 or v2.1) to a diffusion-policy-style zarr ReplayBuffer at ``dst``.

    Writes zarr format 2 (Blosc-zstd compressed, lossless): ``data/<name>`` for every feature except the
    LeRobot bookkeeping columns (timestamp, frame_index, episode_index, index, task_index), named by
    dropping the ``observation.images.``/``observation.``/``next.``/``complementary_info.`` prefix
    (``observation.state`` -> ``data/state``, ``observation.images.top`` -> ``data/top``, ``action`` ->
    ``data/action``), each with attributes ``lerobot_key`` and ``names``. Videos are decoded to uint8
    (N, H, W, 3) arrays chunked one frame per chunk; low-dim arrays keep their dtype and shape (shape-[1]
    features as (N,)). ``meta/episode_ends`` int64 (E,), and ``meta`` attributes ``fps``, ``robot_type``,
    ``tasks``, ``episode_task_index`` (each episode's first frame's task) and ``episode_sources``.

    Returns ``dst``. Raises DatasetError naming the file for an unreadable source, an existing ``dst``,
    or two features that would share a zarr name.
    """
    ds = LeRobotDataset(src)
    try:
        with fmt.staged_destination(dst) as tmp:
            _export(ds, tmp)
    finally:
        ds.close()
    return Path(dst)


def _export_names(ds) -> dict[str, str]:
    """{zarr array name: LeRobot key} of every feature but the bookkeeping columns. Raises DatasetError
    naming the dataset and both keys when two features would share a name."""
    by_name: dict[str, str] = {}
    for key in ds.features:
        if key in fmt.DEFAULT_FEATURES:
            continue
        name = _zarr_name(key)
        if name in by_name:
            raise DatasetError(
                f"{ds.root}: features {by_name[name]!r} and {key!r} both export as data/{name}"
            )
        by_name[name] = key
    return by_name


def _export(ds, folder: Path) -> None:
    import numcodecs
    import zarr

    by_name = _export_names(ds)
    # Byte shuffling helps multi-byte numbers and only costs time on uint8 pixels.
    pixels = numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.NOSHUFFLE)
    numbers = numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.SHUFFLE)
    root = zarr.open_group(str(folder), mode="w", zarr_format=2)
    data, meta = root.require_group("data"), root.require_group("meta")
    tabular = ds.load_tabular()
    n = ds.num_frames
    for name, key in by_name.items():
        feat = ds.features[key]
        if key in ds.video_keys:
            shape = (n, *feat["shape"])
            arr = data.create_array(
                name, shape=shape, chunks=(1, *shape[1:]), dtype=np.uint8, compressors=pixels
            )
            # Decoded a block at a time, each block within one episode (as video_frames requires).
            for lo, hi in zip(ds.episode_from, ds.episode_to, strict=True):
                for start in range(int(lo), int(hi), _VIDEO_BLOCK):
                    rows = np.arange(start, min(start + _VIDEO_BLOCK, int(hi)))
                    arr[start : rows[-1] + 1] = ds.video_frames(key, rows)
        else:
            values = tabular[key]
            chunks = (max(1, min(n, _CHUNK_BYTES // max(1, values[:1].nbytes))), *values.shape[1:])
            arr = data.create_array(
                name, shape=values.shape, chunks=chunks, dtype=values.dtype, compressors=numbers
            )
            arr[:] = values
        arr.attrs.update({LEROBOT_KEY_ATTR: key, "names": feat.get("names")})
    meta.create_array("episode_ends", data=ds.episode_to.astype(np.int64))
    meta.attrs.update(
        {
            "fps": ds.fps,
            "robot_type": ds.info.get("robot_type") or "",
            "tasks": list(ds.tasks),
            "episode_task_index": tabular[keys.TASK_INDEX][ds.episode_from].astype(int).tolist(),
            "episode_sources": ds.episode_sources or ["demo"] * ds.num_episodes,
        }
    )
