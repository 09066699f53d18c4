"""``robot-rl serve`` as a real subprocess on a free localhost port, for the policy-server tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


class Server:
    """``robot-rl serve`` as a subprocess; ``address`` is the endpoint it printed."""

    def __init__(self, checkpoint: Path, *args: str, address: str = "tcp://127.0.0.1:0") -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "robot_rl.cli.main", "serve", "--checkpoint", str(checkpoint)]
        self.proc = subprocess.Popen(
            [*cmd, "--address", address, "--threads", "1", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        line = self.proc.stdout.readline()
        if not line.startswith("serving "):
            self.stop()
            raise RuntimeError(f"server did not start: {line}{self.proc.stderr.read()}")
        self.address = line.split()[1]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
