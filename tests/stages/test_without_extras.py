"""README's first command runs on the base install (``./setup.sh``, no extras): the CLI's pipeline and
online commands import without the ``gui`` extra, and asking for the GUI without it fails before any work,
naming the ``pip install``. The extra's packages are made unimportable in a real subprocess (a ``None``
entry in ``sys.modules`` is what Python raises ImportError for), as on a machine without them."""

from __future__ import annotations

import subprocess
import sys

GUI_EXTRA = ("fastapi", "uvicorn", "starlette", "websockets")

CODE = f"""
import sys
for name in {GUI_EXTRA!r}:
    sys.modules[name] = None
from robot_rl.cli.commands import COMMANDS, load
for name in ("pipeline", "online"):
    load(next(c for c in COMMANDS if c.name == name).run)
from robot_rl.config import PipelineConfig
from robot_rl.extras import MissingExtraError
from robot_rl.stages.online import preflight
cfg = PipelineConfig(run_dir=sys.argv[1])
preflight(cfg)  # the default device needs no extra
cfg.intervention.device = "gui"
try:
    preflight(cfg)
except MissingExtraError as err:
    print("refused:", err)
"""


def test_the_pipeline_imports_without_the_gui_extra_and_the_gui_asks_for_it(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", CODE, str(tmp_path / "run")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused: intervention.device=gui needs fastapi: pip install 'robot-rl[gui]'" in proc.stdout
