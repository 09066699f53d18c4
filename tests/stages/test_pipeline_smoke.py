"""The main job end to end on real MuJoCo physics with tiny budgets: report files, and a rerun that skips
every finished stage."""

import json
import subprocess
import sys

import pytest

TINY = [
    "--quick",
    "--collect.num_episodes=6",
    "--bc.steps=60",
    "--offline.steps=20",
    "--offline.best_of_n=4",
    "--eval.episodes_per_seed=4",
    "--eval.num_videos=1",
]


def _pipeline(run_dir):
    code = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    args = [sys.executable, "-c", code, "pipeline", f"--run_dir={run_dir}", *TINY]
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


@pytest.mark.e2e
def test_quick_pipeline_writes_report_and_resumes(tmp_path):
    run = tmp_path / "run"
    proc = _pipeline(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((run / "report.json").read_text())
    assert set(report["methods"]) == {"bc", "offline"}
    for summary in report["methods"].values():
        assert summary["num_episodes"] == 4
        assert 0.0 <= summary["success_ci95"][0] <= summary["success_rate"] <= summary["success_ci95"][1]
    assert report["dataset"]["num_episodes"] == 6
    assert (run / "dataset" / "meta" / "info.json").is_file()
    assert (run / "report.md").read_text().startswith("# robot_rl run report")
    assert (run / "curves.png").stat().st_size > 1000
    videos = sorted((run / "videos").glob("*.mp4"))
    assert len(videos) == 2 and all(v.stat().st_size > 0 for v in videos)
    for name in ("model.safetensors", "config.json", "normalization.json"):
        assert (run / "checkpoints" / "offline_seed0" / name).is_file()
    # Rerun: every stage is skipped, so no training progress bar appears and the report is identical.
    again = _pipeline(run)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "train bc seed 0" not in again.stderr
    assert json.loads((run / "report.json").read_text())["methods"] == report["methods"]
