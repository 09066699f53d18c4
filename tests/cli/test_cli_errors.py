"""Each error a user can fix prints one line naming the file/key/value and the fix, exits non-zero, and shows
no traceback (unless --debug or ROBOT_RL_DEBUG=1): through the real `robot-rl` CLI in a subprocess.

Disk full is a real full file system (a small tmpfs, mounted when running as root) or, where mounting is not
possible, a file-size limit (RLIMIT_FSIZE: writes fail with EFBIG). A read-only run dir is a read-only bind
mount (root) or a folder without write permission (other users).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from online_setup import TINY, copy_run, free_address

CODE = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
ROOT = os.geteuid() == 0


def _cli(*args: str, env: dict | None = None, fsize: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-c", CODE, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(env or {})},
        preexec_fn=limit if fsize is not None else None,
    )


def _error_line(proc: subprocess.CompletedProcess, *needles: str, strict: bool = True) -> str:
    """The one error line: last on stderr, the only ``robot-rl:`` line, no traceback. ``strict``: nothing
    else on stderr either (the error came before any work and its progress bars)."""
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in re.split(r"[\r\n]+", proc.stderr) if line.strip()]
    assert [line for line in lines if line.startswith("robot-rl:")] == lines[-1:], proc.stderr[-2000:]
    if strict:
        assert len(lines) == 1, proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[-1], lines[-1]
    return lines[-1]


@pytest.fixture
def run(tiny_offline_run, tmp_path) -> Path:
    """A private copy of the tiny offline run (dataset, BC and QC checkpoints)."""
    return copy_run(tiny_offline_run, tmp_path / "run")


def _no_tmp_left(root: Path) -> None:
    left = [p for p in root.rglob("*") if ".tmp" in p.name or ".write_probe" in p.name]
    assert not left, left


# --- checkpoints --------------------------------------------------------------------------------------
CORRUPT = {
    "empty": lambda data: b"",
    "truncated": lambda data: data[: len(data) - 100],
    "random": lambda data: os.urandom(len(data)),
}


def test_corrupt_safetensors_names_the_file(run):
    """Each corruption is refused by the loader naming the file; one goes through the real CLI."""
    from robot_rl.checkpoint import CheckpointError, load_checkpoint

    model = run / "checkpoints" / "bc_seed0" / "model.safetensors"
    good = model.read_bytes()
    for kind in sorted(CORRUPT):
        model.write_bytes(CORRUPT[kind](good))
        with pytest.raises(CheckpointError, match="corrupt or truncated") as err:
            load_checkpoint(model.parent)
        assert str(model) in str(err.value), kind
    proc = _cli("eval", f"--run_dir={run}", *TINY)  # the random bytes left by the loop
    _error_line(proc, "checkpoint error", str(model), "corrupt or truncated")
    assert proc.returncode == 1


def test_truncated_config_json_names_the_file(run):
    """A half-written config.json: eval's check of the --policy.* flags (TINY gives policy.hidden_dims) read
    it before the loader and ended in a JSONDecodeError traceback (regressed in de1f335)."""
    config = run / "checkpoints" / "bc_seed0" / "config.json"
    text = config.read_text()
    config.write_text(text[: len(text) // 2])
    proc = _cli("eval", f"--run_dir={run}", *TINY)
    _error_line(proc, "checkpoint error", str(config), "not valid JSON")
    assert proc.returncode == 1


def test_debug_flag_and_env_show_the_traceback(run):
    (run / "checkpoints" / "bc_seed0" / "model.safetensors").write_bytes(b"")
    for proc in (
        _cli("eval", f"--run_dir={run}", *TINY, "--debug"),
        _cli("eval", f"--run_dir={run}", *TINY, env={"ROBOT_RL_DEBUG": "1"}),
    ):
        assert proc.returncode == 1
        assert "Traceback" in proc.stderr and "CheckpointError" in proc.stderr


def test_horizon_mismatch_names_both_values(tiny_offline_run, run):
    """Offline RL warm-starts from the finished BC checkpoint (horizon 5); a config asking for horizon 3 used
    to fail with a multi-frame size-mismatch traceback of load_state_dict."""
    shutil.copytree(tiny_offline_run / "stages", run / "stages")
    (run / "stages" / "train_offline_seed0.json").unlink()
    shutil.rmtree(run / "checkpoints" / "offline_seed0")
    proc = _cli("train", "--algo", "offline", f"--run_dir={run}", *TINY, "--policy.horizon=3")
    _error_line(proc, "checkpoint error", "bc_seed0", "policy.horizon is 5 in the checkpoint but 3")


REACHER = [
    "--env.id=Reacher-v5",
    "--env.kwargs={max_episode_steps: 5}",
]


def test_observation_missing_from_env_names_the_key(run):
    adapter = "--env.adapter={observation: {observation.state: ['']}, task: reach}"
    proc = _cli("eval", f"--run_dir={run}", *TINY, *REACHER, adapter)
    _error_line(proc, "checkpoint error", "bc_seed0", "'observation.environment_state'", "missing")


def test_observation_dim_mismatch_names_key_and_both_shapes(run):
    adapter = "--env.adapter={observation: {observation.state: [''], observation.environment_state: ['']}}"
    proc = _cli("eval", f"--run_dir={run}", *TINY, *REACHER, adapter)
    _error_line(proc, "'observation.environment_state' has shape (10,) in the data but (7,) in the")


def test_action_dim_mismatch_names_both_shapes(run):
    """A checkpoint whose config.json records another action dim than the env's (4)."""
    config = run / "checkpoints" / "bc_seed0" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "action_dim": 3}))
    proc = _cli("eval", f"--run_dir={run}", *TINY)
    _error_line(proc, "'action' has shape (4,) in the data but (3,) in the checkpoint")


# --- disk full and read-only run dirs -------------------------------------------------------------------
def _mount(*args: str) -> bool:
    return ROOT and subprocess.run(["mount", *args], capture_output=True).returncode == 0


@contextlib.contextmanager
def small_disk(path: Path, contents: list[Path], free_kb: int):
    """``path`` on a tmpfs holding copies of ``contents`` and about ``free_kb`` KiB free; yields None. Without
    mount rights: ``path`` is a plain folder and the yielded file-size limit (bytes) stands in."""
    path.mkdir()
    mounted = _mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path))
    for src in contents:
        shutil.copytree(src, path / src.name)
    try:
        if mounted:
            free = shutil.disk_usage(path).free
            (path / "filler").write_bytes(b"\0" * (free - free_kb * 1024))
        yield None if mounted else free_kb * 1024
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], check=True)


@contextlib.contextmanager
def read_only(path: Path):
    """Make ``path`` read-only for the CLI: a read-only bind mount (root) or mode 0555 (other users)."""
    if ROOT:
        if not _mount("--bind", str(path), str(path)):
            pytest.skip("running as root without mount rights: cannot make a folder read-only")
        if not _mount("-o", "remount,bind,ro", str(path)):
            subprocess.run(["umount", str(path)], check=True)
            pytest.skip("cannot remount read-only")
    else:
        path.chmod(0o555)
    try:
        yield
    finally:
        if ROOT:
            subprocess.run(["umount", str(path)], check=True)
        else:
            path.chmod(0o755)


def test_disk_full_while_training_names_the_file(tiny_offline_run, tmp_path):
    root = tmp_path / "disk"
    with small_disk(root, [tiny_offline_run / "dataset"], free_kb=12) as fsize:
        proc = _cli("train", "--algo", "bc", f"--run_dir={root}", *TINY, "--bc.steps=20", fsize=fsize)
        line = _error_line(proc, "disk error", "model.safetensors", strict=False)
        assert ("No space left" if fsize is None else "File too large") in line
        _no_tmp_left(root)


def test_disk_full_while_collecting_names_the_file(tmp_path):
    root = tmp_path / "disk"
    with small_disk(root, [], free_kb=40) as fsize:
        proc = _cli("collect", f"--run_dir={root}", *TINY, fsize=fsize)
        _error_line(proc, "disk error", str(root / "dataset"), strict=False)
        _no_tmp_left(root)


def test_disk_full_in_an_actor_names_its_episode_log(tmp_path):
    """Issue 39: an actor (`--role actor`, on its robot's machine) on a full disk said only "a file under
    run_dir": its episode log is zarr, whose store names no file. It fails creating the log, before it
    needs a learner."""
    root = tmp_path / "disk"
    with small_disk(root, [], free_kb=24) as fsize:
        if fsize is not None:
            pytest.skip("needs a real small file system (a tmpfs, mounted as root): zarr's files stay small")
        proc = _cli(
            "online", "--role", "actor", f"--run_dir={root}", *TINY, f"--online.address={free_address()}"
        )
        log = root / "online" / "online_qc_seed0" / "actor0" / "episodes"
        line = _error_line(proc, "disk error", f"{log}/", "No space left", strict=False)
        assert "run_dir" not in line.split(";")[0], line
        _no_tmp_left(root)


def test_disk_full_during_online_run(tiny_offline_run, tmp_path):
    root = tmp_path / "disk"
    contents = [tiny_offline_run / "dataset", tiny_offline_run / "checkpoints"]
    with small_disk(root, contents, free_kb=100) as fsize:
        proc = _cli("online", f"--run_dir={root}", *TINY, f"--online.address={free_address()}", fsize=fsize)
        _error_line(proc, "disk error", strict=False)
        _no_tmp_left(root)


@pytest.mark.parametrize(
    "command",
    [["eval"], ["train", "--algo", "offline"], ["collect"], ["online", f"--online.address={free_address()}"]],
    ids=["eval", "train", "collect", "online"],
)
def test_read_only_run_dir_fails_before_the_work(run, command):
    """`eval` used to run every episode and then fail to write its result."""
    if command[0] == "collect":
        shutil.rmtree(run / "dataset")
    if command[0] == "train":
        shutil.rmtree(run / "checkpoints" / "offline_seed0")
    with read_only(run):
        proc = _cli(*command, f"--run_dir={run}", *TINY)
    line = _error_line(proc, "disk error", str(run))
    assert "read-only" in line or "Permission denied" in line
    assert not (run / "stages").exists()


# --- environment, network address, extras and devices ----------------------------------------------------
def test_bogus_mujoco_gl_names_the_variable_and_valid_values(tmp_path):
    proc = _cli("collect", f"--run_dir={tmp_path}", *TINY, env={"MUJOCO_GL": "bogus"})
    _error_line(proc, "MUJOCO_GL='bogus'", "egl", "osmesa")


def test_invalid_online_address_names_the_key(tmp_path):
    from robot_rl.config import ConfigError, load_config

    for address in ["localhost:5560", "tcp://127.0.0.1", "tcp://127.0.0.1:70000"]:
        with pytest.raises(ConfigError, match=f"online.address='{address}'"):
            load_config(None, [f"--online.address={address}"])
    proc = _cli("online", f"--run_dir={tmp_path}", "--online.address=localhost:5560")
    assert proc.returncode == 2
    _error_line(proc, "config error", "online.address='localhost:5560'")
    assert not any(tmp_path.iterdir())


def test_the_old_critic_section_names_reward_model(tmp_path):
    proc = _cli("critic", "train", f"--run_dir={tmp_path}", "--critic.steps=5")
    assert proc.returncode == 2
    _error_line(proc, "config error", "critic.steps", "now reward_model", "reward_model.steps")
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_missing_wandb_names_the_pip_install(tmp_path):
    proc = _cli("online", f"--run_dir={tmp_path}", *TINY, "--online.wandb=true")
    _error_line(proc, "online.wandb=true", "pip install wandb")


def _gamepads() -> int:
    from robot_rl.runtime.intervention import DeviceError
    from robot_rl.teleop.gamepad import init_pygame_joystick

    try:
        return init_pygame_joystick().joystick.get_count()
    except DeviceError:  # no pygame or no SDL joystick support: no gamepad either
        return 0


def test_missing_gamepad_names_the_device_and_key(run):
    if _gamepads():
        pytest.skip("a gamepad is attached")
    # MUJOCO_GL set (as after an in-process render) once let PyOpenGL's INFO line onto stderr here
    proc = _cli(
        "online", f"--run_dir={run}", *TINY, "--intervention.device=gamepad", env={"MUJOCO_GL": "egl"}
    )
    _error_line(proc, "intervention device error", "intervention.device=gamepad", "gamepad:")
    assert not (run / "online").exists()
