"""Resumable training checkpoints: written atomically, so a run killed at any moment continues from the
last one (offline training and the online learner both use them; docs/design.md §4). Besides modules and
optimizers they carry the agent's own training state (QC's kept target picks) and the global random
streams, so a resumed offline run ends with the weights of one never killed (LeRobot's trainer keeps
its ``rng_state`` the same way)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from robot_rl.checkpoint import CONFIG_FILE, MODEL_FILE, load_checkpoint, read_header, save_checkpoint

AGENT_KEY, RNG_KEY = "agent", "rng"  # extra_state keys beside the optimizers' names


def resume_checkpoint(final_dir: Path) -> Path | None:
    """The resumable checkpoint a killed training run of ``final_dir`` continues from, or None.

    That is ``<final_dir>_resume`` when complete, else the previous one (``<final_dir>_resume.old``),
    which :func:`save_resume` keeps until its successor is in place: a kill at any moment leaves one.
    """
    current = resume_dir(final_dir)
    for path in (current, _previous(current)):
        if (path / "learner_state.json").is_file():
            return path
    return None


def resume_dir(final_dir: Path) -> Path:
    """Where the resumable checkpoint of ``final_dir`` lives: ``<final_dir>_resume``."""
    return final_dir.with_name(final_dir.name + "_resume")


def _previous(resume_dir: Path) -> Path:
    return resume_dir.with_name(resume_dir.name + ".old")


def save_resume(agent, path: Path, state: dict, config: dict, stats) -> None:
    """Write a resumable checkpoint (modules, optimizers, the agent's :meth:`resume_state` and the random
    streams (:func:`rng_state`) as ``extra_state``, and the counters ``state`` as
    ``learner_state.json``) to a temporary folder, then swap it in; the old one is removed only after.
    ``config``: the checkpoint's config dict (``method``, ``obs_shapes`` and ``action_dim`` included).

    Raises:
        OSError: naming ``path`` (the temporary folder removed) when writing fails.
        CheckpointError: ``config`` lacks the header's keys
            (:func:`robot_rl.checkpoint.save_checkpoint`).
    """
    tmp, old = path.with_name(path.name + ".tmp"), _previous(path)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        extra = {**agent.optimizer_state(), AGENT_KEY: agent.resume_state(), RNG_KEY: rng_state()}
        save_checkpoint(tmp, agent.modules(), config, stats, extra_state=extra)
        (tmp / "learner_state.json").write_text(json.dumps(state))
    except OSError as err:  # a full disk: leave no half-written folder behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(err.errno, err.strerror, str(path)) from err
    if (path / "learner_state.json").is_file():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    else:
        shutil.rmtree(path, ignore_errors=True)  # an incomplete folder from an earlier kill
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def restore(agent, path: Path) -> dict:
    """Load a :func:`save_resume` checkpoint into ``agent`` (modules, optimizers and its resume state);
    returns its counters, with the saved random streams under ``RNG_KEY`` (None for a checkpoint written
    before they were kept). The caller sets them (:func:`set_rng_state`) once it has done what a fresh run
    also does before its first step."""
    ckpt = load_checkpoint(path, extra_state=True)
    ckpt.load_modules(agent.modules(), path)
    agent.load_optimizer_state(ckpt.extra_state)
    agent.load_resume_state(ckpt.extra_state.get(AGENT_KEY, {}))
    counters = json.loads((path / "learner_state.json").read_text())
    return {**counters, RNG_KEY: ckpt.extra_state.get(RNG_KEY)}


def rng_state() -> dict:
    """The global random streams a training step draws from: torch's CPU generator (flow noise, best-of-N
    samples), every CUDA device's when there is one, NumPy's and Python's."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    numpy = (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss)  # no uint32 in safetensors
    state = {"torch": torch.get_rng_state(), "numpy": numpy, "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict | None) -> bool:
    """Set the global random streams to ``state`` (:func:`rng_state`'s dict, as :func:`restore` returns it);
    False (nothing set) for None, a checkpoint written before the streams were kept."""
    if state is None:
        return False
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    return True


def remove_resume(final_dir: Path) -> None:
    """Delete the resumable checkpoints of ``final_dir`` once its final checkpoint is written."""
    current = resume_dir(final_dir)
    for leftover in (current, _previous(current)):
        shutil.rmtree(leftover, ignore_errors=True)


def trained_steps(final_dir: Path, algo: str) -> int | None:
    """How many steps the final checkpoint ``final_dir`` of ``algo`` ('bc' or an offline method) was
    trained for (its config's ``bc.steps`` / ``offline.steps``); None without a complete checkpoint.

    Raises:
        CheckpointError: its config.json is corrupt or of a format this code does not read."""
    if not (final_dir / MODEL_FILE).is_file() or not (final_dir / CONFIG_FILE).is_file():
        return None
    return int(read_header(final_dir).config["bc" if algo == "bc" else "offline"]["steps"])


def restore_trained(agent, final_dir: Path) -> None:
    """Load the modules of the final checkpoint ``final_dir`` into ``agent`` to train it further; its
    optimizers start afresh (a final checkpoint keeps no optimizer state).

    Raises CheckpointError naming the file when a module's tensors do not fit the agent."""
    load_checkpoint(final_dir).load_modules(agent.modules(), final_dir)
