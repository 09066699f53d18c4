"""A user's script that starts DataLoader workers from its top level, without
``if __name__ == "__main__":``, gets a clear error naming the script and line (spawned workers re-run the
script; before, the parent hung or died with "DataLoader worker exited unexpectedly"); the same script with
the guard trains. Real scripts, real subprocesses."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.data.training.main_guard import MainGuardError, check_main_guard

BODY = """\
from robot_rl.config import DataConfig
from robot_rl.data.training.loader import batches
from robot_rl.data.training.training_set import TrainingSet

def first_batch():
    cfg = DataConfig(path={root!r}, frame_cache="none", image_size=[16, 16])
    data = TrainingSet({root!r}, cfg, horizon=2, gamma=0.99, cache_dir={cache!r})
    stream = batches(data, 4, seed=0, start=0, stop=2, num_workers=1)
    print("batch", tuple(next(stream)["observations"]["observation.images.top"].shape), flush=True)
"""


@pytest.fixture(scope="module")
def video_dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("guard") / "ds"
    feats = {
        keys.STATE: {"dtype": "float32", "shape": [2]},
        keys.ACTION: {"dtype": "float32", "shape": [2]},
        "observation.images.top": {"dtype": "video", "shape": [16, 16, 3]},
    }
    rng = np.random.default_rng(0)
    with LeRobotWriter(root, fps=10, features=feats) as writer:
        for _ in range(2):
            writer.add_episode(
                {
                    keys.STATE: rng.normal(size=(8, 2)).astype(np.float32),
                    keys.ACTION: rng.normal(size=(8, 2)).astype(np.float32),
                    "observation.images.top": rng.integers(0, 255, (8, 16, 16, 3), dtype=np.uint8),
                },
                task="t",
            )
    return root


def _run(script: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=script.parent
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{script.name} hung: spawned DataLoader workers of an unguarded script")


def test_unguarded_script_gets_a_clear_error_and_the_guarded_one_runs(video_dataset, tmp_path) -> None:
    body = BODY.format(root=str(video_dataset), cache=str(tmp_path / "cache"))
    bare = tmp_path / "train_no_guard.py"
    bare.write_text(body + "\nfirst_batch()\n")
    done = _run(bare)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "MainGuardError" in last and f"{bare}:11" in last and 'if __name__ == "__main__":' in last, last

    guarded = tmp_path / "train_guarded.py"
    guarded.write_text(body + '\nif __name__ == "__main__":\n    first_batch()\n')
    done = _run(guarded)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "batch (4, 16, 16, 3)" in done.stdout


def test_check_passes_outside_scripts_and_reads_the_guard_in_either_order(tmp_path) -> None:
    check_main_guard("workers")  # under pytest __main__'s call is guarded: no error
    script = tmp_path / "s.py"
    script.write_text(
        textwrap.dedent(
            """\
            from robot_rl.data.training.main_guard import MainGuardError, check_main_guard
            if "__main__" == __name__:
                check_main_guard("w")
            try:
                check_main_guard("w")
            except MainGuardError as err:
                print("refused", err)
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and f"refused {script}:5 starts w" in done.stdout, done.stderr
    assert issubclass(MainGuardError, RuntimeError)
