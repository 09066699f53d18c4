"""A killed offline run that resumes ends with the same weights, to the bit, as one never killed: the
resumable checkpoint carries the random streams (flow noise, best-of-N samples) and QC's kept target picks
(``offline.target_reuse`` = k keeps a pick for k updates, so a checkpoint can fall inside a block).
LeRobot's trainer restores its random state the same way (its ``training_state/rng_state``)."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest
import torch
from online_setup import overrides

from robot_rl.checkpoint import load_checkpoint
from robot_rl.config import load_config
from robot_rl.run_dir import RunDir
from robot_rl.stages.train import train
from robot_rl.training import loop
from robot_rl.training.resume import resume_checkpoint


def _run_copy(src, dst):
    """The tiny run's dataset and finished BC stage, without its offline checkpoint."""
    shutil.copytree(src / "dataset", dst / "dataset")
    shutil.copytree(src / "checkpoints" / "bc_seed0", dst / "checkpoints" / "bc_seed0")
    (dst / "stages").mkdir()
    shutil.copy(src / "stages" / "train_bc_seed0.json", dst / "stages")
    return dst


def _weights(run_dir):
    """Module name + "." + key -> tensor of the final offline checkpoint."""
    saved = load_checkpoint(RunDir(run_dir).checkpoint("offline", 0)).weights
    return {f"{name}.{key}": value for name, state in saved.items() for key, value in state.items()}


def test_a_killed_offline_run_resumes_to_the_same_weights_as_an_unkilled_one(
    tiny_offline_run, tmp_path, monkeypatch
):
    # checkpoint_every 5 with k = 3: the run is killed after step 5, inside the block of steps 3..5. Without
    # the random streams 26 of 40 tensors differ (k = 1 too); with them but without the pick, the same 26.
    extra = ["--offline.steps=12", "--checkpoint_every=5", "--offline.target_reuse=3", "--threads=1"]
    whole = _run_copy(tiny_offline_run, tmp_path / "whole")
    train(load_config(None, overrides(whole, *extra)), "offline", 0)

    killed = _run_copy(tiny_offline_run, tmp_path / "killed")
    cfg = load_config(None, overrides(killed, *extra))
    save_resume = loop.save_resume

    def save_then_die(*args, **kwargs):
        save_resume(*args, **kwargs)
        # another process would start with other global random states: the resumed run must not use these
        torch.manual_seed(1234)
        np.random.seed(1234)
        random.seed(1234)
        raise KeyboardInterrupt("killed after the first resumable checkpoint")

    with monkeypatch.context() as patched:
        patched.setattr(loop, "save_resume", save_then_die)
        with pytest.raises(KeyboardInterrupt):
            train(cfg, "offline", 0)
    assert resume_checkpoint(RunDir(killed).checkpoint("offline", 0)) is not None
    train(cfg, "offline", 0)

    expected, got = _weights(whole), _weights(killed)
    assert expected.keys() == got.keys()
    differ = [k for k in expected if not torch.equal(expected[k], got[k])]
    assert not differ, f"{len(differ)} of {len(expected)} tensors differ after the resume, e.g. {differ[:3]}"
