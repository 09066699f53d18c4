"""The console script: bad configs fail before any work, with the key named and exit code 2."""

import subprocess
import sys


def _cli(*args):
    code = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_unknown_override_exits_2_naming_key(tmp_path):
    proc = _cli("collect", f"--run_dir={tmp_path}", "--collect.num_episodez=3")
    assert proc.returncode == 2
    assert "num_episodez" in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing was started


def test_help_lists_subcommands():
    proc = _cli("--help")
    assert proc.returncode == 0
    for name in ("collect", "train", "eval", "pipeline"):
        assert name in proc.stdout


def test_collect_for_a_foreign_env_fails_clearly(tmp_path):
    proc = _cli("collect", f"--run_dir={tmp_path}", "--env.id=Reacher-v5")
    assert proc.returncode == 2
    assert "env.id='Reacher-v5'" in proc.stderr and "scripted expert" in proc.stderr
    assert not any(tmp_path.iterdir())
