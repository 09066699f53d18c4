"""The benchmark scripts still run end to end (a script that raised went unnoticed for a release: issue
38; two more had stopped running when issue 36 asked for this file to cover them all). Each script runs
once at a tiny size, in its own process as a user runs it, and its rows must be printed; the figures
themselves live in benchmarks/README.md and are never asserted here.

Not run here: ``bench_mjx.py`` (MJX needs JAX and an accelerator; ``gpu_offline.sh`` runs it there) and
``gpu_offline.sh`` itself (a packer and runner for a GPU machine). ``lerobot_loader_peer.py`` runs inside
``bench_loader.py`` when the LeRobot side venv exists (``ROBOT_RL_LEROBOT_VENV``, as for
tests/data/convert/test_lerobot_compat.py). A script whose optional dependency is absent (a browser, a Vulkan
driver) is skipped, naming it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from online_setup import copy_run
from repo_paths import ROOT


def run_bench(script: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python benchmarks/<script> args`` from the repository root, one thread per library, no stdin."""
    return subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    )


def bench_output(script: str, *args: str, timeout: float = 240) -> str:
    """The stdout of a benchmark that must exit 0 (its stderr's end in the failure message otherwise)."""
    out = run_bench(script, *args, timeout=timeout)
    assert out.returncode == 0, f"{script} exited {out.returncode}:\n{out.stderr[-3000:]}"
    return out.stdout


def assert_rows(stdout: str, patterns: list[str]) -> None:
    """Every regex in ``patterns`` matches some line of ``stdout`` (a row the script must print)."""
    lines = stdout.splitlines()
    missing = [p for p in patterns if not any(re.search(p, line) for line in lines)]
    assert not missing, f"rows missing: {missing}\n{stdout}"


NUM = r"[0-9]+(\.[0-9]+)?"

# script, tiny arguments, rows it must print (regexes)
SMALL = [
    (
        "bench_sim.py",
        ["--seconds", "0.2"],
        [rf"bare mj_step loop\s+:\s+{NUM}", rf"every 2 phys step.*overhead x{NUM}"],
    ),
    (
        "bench_batched.py",
        ["--sizes", "2", "--async-max", "1", "--seconds", "0.1"],
        [
            r"AsyncVectorEnv N=2 .*skipped",
            rf"mujoco_cpu batched N=2 .*x{NUM}",
            rf"actuator controller .*x{NUM}",
        ],
    ),
    (
        "bench_vector.py",
        ["--seconds", "0.2", "--workers", "2"],
        [rf"2 independent processes: .*x{NUM}", rf"vector env, 1 worker .*x{NUM}", rf"2 workers .*x{NUM}"],
    ),
    (
        "bench_control_loop.py",
        ["--seconds", "0.3"],
        [rf"10 Hz RobotEnv loop .*rate x{NUM}", rf"30 Hz RobotEnv loop .*rate x{NUM}"],
    ),
    (
        "bench_policy.py",
        ["--time-per-case", "0.05", "--threads", "1"],
        [r"QC best-of-8 \(default\).*QC best-of-32 \(paper\)", rf"^\s+1 \|.*{NUM}x", rf"^\s+64 \|.*{NUM}x"],
    ),
    (
        "bench_critic.py",
        ["--time-per-case", "0.05", "--threads", "1", "--actors", "2"],
        [r"in-process, 1 pair", r"server, 64 pair", r"server, 2 actors x 1 pair .*requests merged"],
    ),
    (
        "bench_writer.py",
        ["--episodes", "4", "--frames", "2", "--cameras", "1", "--size", "8"],
        [r"packed \(default.*episodes/s written", r"one file per episode .*episodes/s written"],
    ),
    (
        "bench_replay.py",
        ["--episodes", "6", "--at", "3", "6", "--old-episodes", "6", "--length", "5", "--image", "8"]
        + ["--capacity", "20"],
        [r"^old\s+\|\s+6 \|", rf"^new\s+\|\s+6 \|\s+20 \|.*\| {NUM}$"],
    ),
    (
        "bench_replay.py",
        ["--episodes", "4", "--at", "4", "--old-episodes", "4", "--length", "5", "--image", "8", "--disk"],
        [r"disk on", rf"^new\s+\|\s+4 \|.*\| {NUM}$"],
    ),
    (
        "bench_replay_chunks.py",
        ["--sizes", "8x8", "--length", "10", "--episodes", "2"],
        [r"8x8\s+\| old", r"8x8\s+\| new", rf"ratio old/new: append x{NUM}, read x{NUM}"],
    ),
    (
        "bench_randomize.py",
        ["--episodes", "1", "--noise", "0", "--presets", "none", "all"],
        [r"^\| none \| [01]\.00", r"^\| all \| [01]\.00"],
    ),
    (
        "bench_tasks.py",
        ["--episodes", "1", "--noise", "0"],
        [r"PandaPickCube-v0` \| 60 \|", r"PandaOpenDrawer-v0`"],
    ),
    (
        "bench_rosbag.py",
        ["--seconds", "0.2"],
        [r"read\+decode\s+: \d+ images", r"convert \(bag\)\s+: \d+ frames", rf"zarr import time: {NUM}x"],
    ),
    (
        "bench_sim_server.py",
        ["--steps", "5", "--hz", "20", "--cases", "drop 5%"],
        [r"^in-process\s+\| render", rf"^drop 5%\s+\| read\s+\|\s+{NUM} \|", r"^drop 5%\s+\| render"],
    ),
    (
        "bench_policy_server.py",
        ["--seconds", "0.3", "--calls", "5", "--delays", "0"],
        [r"in-process policy call : p50", r"round trip per chunk : p50", r"async: rate .*misses \d+/\d+"],
    ),
    (
        "bench_vla.py",
        [
            "--sizes",
            "tiny",
            "--batches",
            "1",
            "--train-batch",
            "2",
            "--time-per-case",
            "0.05",
            "--threads",
            "1",
        ],
        [
            r"^state flow \|.*\(baseline\)",
            r"^VLA tiny \|",
            r"^VLA tiny no KV cache \|",
            r"K/V cache speed-up",
        ],
    ),
    (
        "bench_ros2.py",
        ["--seconds", "0.3", "--rates", "10", "--cameras", "1", "--sizes", "8x8"],
        [rf"10\s+1\s+8x8 \|.*cyclonedds.*\| x\s*{NUM}"],
    ),
    (
        "bench_safety.py",
        ["--steps", "10", "--timing-commands", "100"],
        [r"^random\s+10 ", r"^out_of_box/joint\s+10 ", rf"joint_position \(with 10 Hz physics\).*x{NUM}"],
    ),
]


@pytest.mark.parametrize(
    ("script", "args", "rows"), SMALL, ids=[f"{s}:{' '.join(a)[:30]}" for s, a, _ in SMALL]
)
def test_benchmark_runs_at_a_tiny_size(script, args, rows):
    assert_rows(bench_output(script, *args), rows)


def test_bench_learner_runs_and_labels_the_default_best_of_n():
    from robot_rl.config import OfflineRLConfig

    out = bench_output(
        "bench_learner.py", "--time-per-case", "0", "--threads", "1", "--target-n", "2", "--target-reuse", "2"
    )
    rows = [line for line in out.splitlines() if "updates/s" in line]
    assert len(rows) == 7, out
    n = OfflineRLConfig().best_of_n
    assert f"QC best-of-{n} (default)" in out and f"QC best-of-{n}, target N=2" in out
    assert f"QC best-of-{n}, k=1 (QC's rule)" in out and f"QC best-of-{n}, reuse k=2" in out


def test_bench_gui_page_measures_chromium():
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("needs Debian's chromium (apt-get install chromium; setup.sh installs it as root)")
    pytest.importorskip("playwright.sync_api", reason="pip install playwright (test extra)")
    assert_rows(
        bench_output("bench_gui_page.py", "--seconds", "1"), [rf"tabs=1 .*Chromium {NUM} cores .*renderer="]
    )


def test_bench_maniskill_runs_every_row():
    out = run_bench("bench_maniskill.py", "--seconds", "0.1")
    if out.returncode != 0 and "Vulkan" in out.stderr:
        pytest.skip(f"ManiSkill has no Vulkan driver here: {out.stderr.strip().splitlines()[-1]}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert_rows(out.stdout, [r"plain ManiSkill env.*1\.00$", rf"maniskill backend, N = 8\s+\d+\s+{NUM}$"])


def _tiny_video_dataset(root: Path) -> Path:
    """Three 20-frame episodes with a 32 px AV1 camera, written by robot_rl's LeRobot writer."""
    from robot_rl import keys
    from robot_rl.data.lerobot.writer import LeRobotWriter

    vec = {"dtype": "float32", "shape": [4], "names": None}
    camera = "observation.images.front"
    features = {
        keys.STATE: vec,
        keys.ACTION: vec,
        camera: {"dtype": "video", "shape": [32, 32, 3], "names": None},
    }
    rng = np.random.default_rng(0)
    with LeRobotWriter(root, fps=10, features=features) as writer:
        for _ in range(3):
            writer.add_episode(
                {
                    keys.STATE: rng.normal(size=(20, 4)).astype(np.float32),
                    keys.ACTION: rng.normal(size=(20, 4)).astype(np.float32),
                    camera: rng.integers(0, 255, (20, 32, 32, 3), dtype=np.uint8),
                },
                task="tiny",
            )
    return root


def test_bench_loader_runs_with_and_without_the_lerobot_peer(tmp_path):
    """Against LeRobot 0.4.4's loader (``lerobot_loader_peer.py`` in the side venv) when that venv exists,
    else with the LeRobot row skipped, as the script does."""
    dataset = _tiny_video_dataset(tmp_path / "dataset")
    venv = os.environ.get("ROBOT_RL_LEROBOT_VENV", "")
    peer = Path(venv) / "bin" / "python" if venv else tmp_path / "no_venv" / "python"
    out = bench_output(
        "bench_loader.py",
        *("--dataset", str(dataset), "--batches", "2", "--batch-size", "4", "--repeats", "1"),
        *("--workers", "0", "--size", "16", "16", "--lerobot-python", str(peer)),
    )
    rows = [
        r"^\s+0\s+0\s+",
        r"robot_rl zarr 16x16, 0 workers: .*frames/s",
        r"robot_rl memory 16x16, 0 workers",
    ]
    if peer.is_file():
        rows.append(rf"median ratio robot_rl/LeRobot, 0 workers, 1 thread: x{NUM}")
    else:
        rows.append(r"LeRobot row skipped: no LeRobot side venv")
    assert_rows(out, rows)


@pytest.fixture
def run(tiny_offline_run, tmp_path) -> Path:
    """A private copy of the session's tiny offline run (6 demos, BC and QC checkpoints)."""
    return copy_run(tiny_offline_run, tmp_path / "run")


def test_bench_online_then_compare_evals_on_its_evaluations(run, tmp_path):
    """bench_online's online QC run and held-out evaluation, then compare_evals on the evaluation files it
    wrote (the way docs/results.md's online table was pooled)."""
    out_dir = tmp_path / "online"
    tiny = ["--env.num_envs=1", "--data.num_workers=0", "--online.batch_size=32", "--online.publish_every=5"]
    tiny += ["--online.checkpoint_every=20", "--online.log_every_s=0.5", "--online.max_env_steps_ahead=0"]
    out = bench_output(
        "bench_online.py",
        *("--from-run", str(run), "--out", str(out_dir), "--seeds", "0", "--env-steps", "30"),
        *("--episodes", "1", "--methods", "qc", *tiny),
        timeout=400,
    )
    assert_rows(out, [rf"^qc\s+{NUM}\s+\[{NUM}, {NUM}\]"])
    evals = sorted(p.name for p in (out_dir / "eval").glob("*.json"))
    assert evals == ["online_qc_seed0.json"], evals
    table = bench_output(
        "compare_evals.py", f"a={out_dir}:online_qc", f"b={out_dir}:online_qc", "--seeds", "0"
    )
    assert_rows(
        table, [r"^test split", r"^\| a \| [01]\.000 \|", r"^\| b \| [01]\.000 \| .*\| 0 / 0 \| 1 \|$"]
    )


def test_grasp_trace_reads_a_checkpoint_on_its_task(run):
    out = bench_output(
        "grasp_trace.py",
        *(str(run / "checkpoints" / "offline_seed0"), "--env-id", "robot_rl/PandaPickCube-v0"),
        *("--episodes", "1", "--max-episode-steps", "5"),
    )
    assert_rows(
        out, [r"^0 \{'success': (True|False), 'steps': 5, 'min_pinch_z_m'", r"^success [01]\.00, min pinch z"]
    )


def test_chunk_trace_reads_the_critic_along_a_rollout(run):
    """QC's checkpoint (no one-step actor): the critic's view of the flow samples at every decision state."""
    out = bench_output(
        "chunk_trace.py",
        *(str(run / "checkpoints" / "offline_seed0"), "--env-id", "robot_rl/PandaPickCube-v0"),
        *("--episodes", "1", "--max-episode-steps", "10", "--samples", "4"),
    )
    assert_rows(
        out,
        [
            r"^robot_rl/PandaPickCube-v0, drive agent: success [01]\.00, 2 decision states",
            rf"^\s+all \(  2\): Q samples mean [+-]{NUM} max [+-]{NUM} std {NUM} \| picked grip [+-]{NUM}",
        ],
    )


def test_bench_ros2_success_pairs_dds_and_in_process_episodes(run, tmp_path):
    """One 10-step episode of the BC checkpoint in process and through sim_robot_node + policy_node over
    cyclonedds on loopback."""
    config = tmp_path / "short.yaml"
    config.write_text("env:\n  max_episode_steps: 10\n  num_envs: 1\n")
    result = tmp_path / "ros2_success.json"
    out = bench_output(
        "bench_ros2_success.py",
        *("--config", str(config), "--checkpoint", str(run / "checkpoints" / "bc_seed0")),
        *("--episodes", "1", "--control-hz", "20", "--out", str(result)),
    )
    assert_rows(
        out,
        [r"^\| in process \| [01]\.00 \|.*\| 10\.0 \| 1 \|", r"^\| DDS \(cyclonedds, 20 Hz\)", r"McNemar p"],
    )
    assert result.is_file()
