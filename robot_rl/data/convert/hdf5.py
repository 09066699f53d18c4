"""Import robomimic and ALOHA/ACT HDF5 demonstrations into LeRobot v3.0 datasets (h5py).

Two layouts, detected by :func:`detect_layout`:

- **robomimic**: one file; ``data/demo_<i>`` groups (taken in numeric order, demo_10 after demo_2) each
  holding ``actions`` (T, d), ``obs/<key>`` (T, ...), optional ``rewards`` (T,), ``dones`` (T,) and
  ``states`` (T, S) (the simulator state); ``data`` attributes may hold ``env_args`` JSON (robosuite:
  ``env_name``, ``env_kwargs.control_freq``, ``env_kwargs.robots``) and LIBERO's ``problem_info`` JSON
  (``language_instruction``). Images are ``obs/<camera>_image`` uint8 (T, H, W, 3).
- **ALOHA/ACT**: a folder of ``episode_<i>.hdf5`` files (numeric order), or one such file, each with
  ``/action`` (T, d), ``/observations/qpos`` (T, d), optional ``/observations/qvel`` and
  ``/observations/effort``, ``/observations/images/<camera>`` uint8 (T, H, W, 3) and root attribute
  ``sim`` (not imported). JPEG-compressed episodes (root attribute ``compress``) are not supported.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

from robot_rl import keys
from robot_rl.data.convert.arrays import Plan, build_frames, is_rgb, state_names, write_lerobot
from robot_rl.data.errors import DatasetError

ROBOMIMIC_FPS = 20  # robosuite's default control_freq
ALOHA_FPS = 50  # ALOHA/ACT record at 50 Hz
ROBOMIMIC = "robomimic"
ALOHA = "aloha"
# LeRobot's motor names for the 14-dim ALOHA bimanual state and action.
ALOHA_NAMES = [
    f"{side}_{joint}"
    for side in ("left", "right")
    for joint in ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper")
]
_LAYOUTS = (
    "robomimic (one file with data/demo_<i>/actions and data/demo_<i>/obs/<key>) or ALOHA/ACT (a folder "
    "of episode_<i>.hdf5 files, or one, with /action and /observations/qpos)"
)
_ALOHA_FILE = re.compile(r"episode_(\d+)\.(hdf5|h5)$")
_DEMO = re.compile(r"demo_(\d+)$")


def _open(path: Path) -> h5py.File:
    try:
        return h5py.File(path, "r")
    except OSError as err:
        raise DatasetError(f"{path}: not a readable HDF5 file: {err}") from err


def _aloha_files(folder: Path) -> list[Path]:
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _ALOHA_FILE.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def detect_layout(src: str | Path) -> str:
    """'robomimic' or 'aloha' for an HDF5 file or folder. Raises DatasetError naming ``src`` and what
    it holds when it is neither."""
    src = Path(src)
    if src.is_dir():
        if _aloha_files(src):
            return ALOHA
        raise DatasetError(
            f"{src}: unknown HDF5 layout: a folder without episode_<i>.hdf5 files; expected {_LAYOUTS}"
        )
    if not src.is_file():
        raise DatasetError(f"{src}: no such file or folder")
    with _open(src) as f:
        if "data" in f and any(_DEMO.fullmatch(k) for k in f["data"]):
            return ROBOMIMIC
        if "action" in f and "observations" in f:
            return ALOHA
        raise DatasetError(f"{src}: unknown HDF5 layout (top-level keys {sorted(f)}); expected {_LAYOUTS}")


def _json_attr(group, name: str, where: str) -> dict:
    raw = group.attrs.get(name)
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, json.JSONDecodeError) as err:
        raise DatasetError(f"{where}: attribute {name!r} is not valid JSON: {err}") from err
    return value if isinstance(value, dict) else {}


def _reader(group, where: str):
    """``read(name)`` -> the whole dataset at ``group[name]``; DatasetError naming it when absent."""

    def read(name: str) -> np.ndarray:
        if name not in group or not hasattr(group[name], "shape"):
            raise DatasetError(f"{where}: missing dataset {name!r}")
        return group[name][()]

    return read


def _plan(group, prefix: str, rules: list[tuple[str, str, str]]) -> tuple[Plan, list[str]]:
    """Plan entries for the datasets under ``group[prefix]``. ``rules`` are (regex, LeRobot key template
    using the match's ``name`` group, kind); the first rule whose regex matches a dataset's name decides
    and the last must match any name. A dataset that does not fit its rule's kind (RGB (T, H, W, 3) for
    'image', numeric up to 3-D otherwise) is skipped, as are subgroups. Returns (plan, skipped paths)."""
    plan: Plan = {}
    skipped = []
    for name in sorted(group[prefix]) if prefix in group else []:
        node = group[prefix][name]
        path = f"{prefix}/{name}"
        if not hasattr(node, "shape"):
            skipped.append(path)
            continue
        m, template, kind = next((m, t, k) for p, t, k in rules if (m := re.fullmatch(p, name)))
        fits = node.ndim <= 3 and node.dtype.kind in "biuf"
        if is_rgb(node.shape, node.dtype) if kind == "image" else fits:
            key = template.format(name=m.groupdict().get("name", name))
            plan.setdefault(key, ([], kind))[0].append(path)
        else:
            skipped.append(f"{path} {node.shape} {node.dtype}")
    return plan, skipped


def _demo_plan(demo, where: str) -> tuple[Plan, dict[str, list[str]]]:
    for name in ("actions", "obs"):
        if name not in demo:
            raise DatasetError(f"{where}: missing {name!r}")
    plan: Plan = {keys.ACTION: (["actions"], "float32")}
    for name, key, kind in (
        ("rewards", keys.REWARD, "float32"),
        ("dones", keys.DONE, "bool"),
        ("states", "observation.sim_state", "tabular"),
    ):
        if name in demo:
            plan[key] = ([name], kind)
    obs_plan, skipped = _plan(
        demo,
        "obs",
        [
            (r"(?P<name>.+)_image", keys.IMAGE_PREFIX + "{name}", "image"),
            (r"object", keys.ENV_STATE, "float32"),
            (r".+", keys.STATE, "state"),
        ],
    )
    if skipped:
        warnings.warn(f"{where}: datasets not imported: {skipped}", stacklevel=2)
    plan |= obs_plan
    names: dict[str, list[str]] = {}
    if keys.STATE in plan:
        names[keys.STATE] = state_names({p.split("/", 1)[1]: demo[p].shape[1:] for p in plan[keys.STATE][0]})
    return plan, names


def _robomimic(src: Path, dst: Path, fps: int | None, task: str | None) -> Path:
    with _open(src) as f:
        data = f["data"]
        demos = sorted((int(m.group(1)), k) for k in data if (m := _DEMO.fullmatch(k)))
        env_args = _json_attr(data, "env_args", f"{src}: 'data'")
        problem = _json_attr(data, "problem_info", f"{src}: 'data'")
        env_kwargs = env_args.get("env_kwargs") or {}
        fps = fps or int(env_kwargs.get("control_freq") or ROBOMIMIC_FPS)
        task = task or problem.get("language_instruction") or env_args.get("env_name") or src.stem
        robots = env_kwargs.get("robots") or []
        robot_type = ",".join(robots) if isinstance(robots, list) else str(robots)
        where = {name: f"{src}: 'data/{name}' (robomimic layout)" for _, name in demos}
        plan, names = _demo_plan(data[demos[0][1]], where[demos[0][1]])

        def episodes() -> Iterator[tuple[dict[str, np.ndarray], str, str]]:
            for _, name in demos:
                yield build_frames(plan, _reader(data[name], where[name]), where[name]), task, "demo"

        return write_lerobot(dst, fps, episodes(), names, robot_type)


def _aloha_plan(f, where: str) -> tuple[Plan, dict[str, list[str]]]:
    if f.attrs.get("compress"):
        raise DatasetError(f"{where}: JPEG-compressed images (attribute compress=True) are not supported")
    for name in ("action", "observations/qpos"):
        if name not in f:
            raise DatasetError(f"{where}: missing dataset {name!r}")
    plan: Plan = {keys.ACTION: (["action"], "float32")}
    obs_plan, skipped = _plan(
        f,
        "observations",
        [
            (r"qpos", keys.STATE, "float32"),
            (r"qvel", "observation.velocity", "float32"),
            (r"effort", "observation.effort", "float32"),
            (r".+", "observation.{name}", "tabular"),
        ],
    )
    image_rule = (r"(?P<name>.+)", keys.IMAGE_PREFIX + "{name}", "image")
    img_plan, img_skipped = _plan(f, "observations/images", [image_rule])
    skipped = [s for s in skipped if s != "observations/images"] + img_skipped
    skipped += [name for name in f if name not in ("action", "observations")]
    if skipped:
        warnings.warn(f"{where}: datasets not imported: {skipped}", stacklevel=2)
    plan |= obs_plan | img_plan
    motors = (keys.ACTION, keys.STATE, "observation.velocity", "observation.effort")
    names = {
        k: ALOHA_NAMES for k in motors if k in plan and f[plan[k][0][0]].shape[1:] == (len(ALOHA_NAMES),)
    }
    return plan, names


def _aloha(src: Path, dst: Path, fps: int | None, task: str | None) -> Path:
    files = _aloha_files(src) if src.is_dir() else [src]
    where = {path: f"{path} (ALOHA layout)" for path in files}
    task = task or (src.name if src.is_dir() else src.stem)
    with _open(files[0]) as f:
        plan, names = _aloha_plan(f, where[files[0]])

    def episodes() -> Iterator[tuple[dict[str, np.ndarray], str, str]]:
        for path in files:
            with _open(path) as f:
                frames = build_frames(plan, _reader(f, where[path]), where[path])
            yield frames, task, "demo"

    return write_lerobot(dst, fps or ALOHA_FPS, episodes(), names, ALOHA)


def hdf5_to_lerobot(
    src: str | Path, dst: str | Path, fps: int | None = None, task: str | None = None
) -> Path:
    """Import robomimic or ALOHA/ACT HDF5 demonstrations (layout detected) into a LeRobot v3.0 dataset.

    robomimic mapping, per ``data/demo_<i>`` (numeric order): ``actions`` -> ``action`` (float32);
    ``obs/<camera>_image`` (T, H, W, 3) -> video ``observation.images.<camera>``; ``obs/object`` ->
    ``observation.environment_state`` (float32); every other numeric ``obs`` array up to 3-D ->
    concatenated, flattened, in sorted key order into ``observation.state`` float32, with ``names``
    ``<key>`` / ``<key>_<i>``; ``rewards`` -> ``next.reward``; ``dones`` -> ``next.done`` (bool);
    ``states`` -> ``observation.sim_state`` (dtype kept). ``next_obs`` is not imported (it repeats
    ``obs`` one step later); other obs (depth maps) are skipped with a warning.

    ALOHA mapping, per ``episode_<i>.hdf5`` (numeric order): ``/action`` -> ``action``,
    ``/observations/qpos`` -> ``observation.state``, ``qvel`` -> ``observation.velocity``, ``effort`` ->
    ``observation.effort`` (float32; 14-dim ones named with LeRobot's ALOHA motor names),
    ``/observations/images/<camera>`` -> video ``observation.images.<camera>``, other numeric
    ``/observations/<name>`` -> ``observation.<name>``; other root datasets are skipped with a warning.

    Args:
        src: robomimic ``.hdf5`` file, ALOHA folder of ``episode_<i>.hdf5``, or one ALOHA episode file.
        dst: the new dataset's folder; must not exist.
        fps: frames per second. Default: robomimic ``env_args.env_kwargs.control_freq``, else 20; ALOHA 50.
        task: task string for every episode. Default: robomimic ``problem_info.language_instruction``, else
            ``env_args.env_name``, else the file name; ALOHA the folder (or file) name.
    Returns: ``dst``; every episode has source 'demo'.
    Raises:
        DatasetError naming the file and key (and the layout): an unknown layout, a demo without
        ``actions`` or ``obs``, an ALOHA file without ``/action`` or ``/observations/qpos``, arrays of
        different lengths in one episode, a demo or file lacking a key the first one had, an existing
        ``dst``.
    """
    src, dst = Path(src), Path(dst)
    layout = detect_layout(src)
    if layout == ROBOMIMIC:
        return _robomimic(src, dst, fps, task)
    return _aloha(src, dst, fps, task)
