"""Serving the GUI with uvicorn: standalone (``robot-rl gui``) or as a child process of ``robot-rl online``.

``robot-rl online --intervention.device=gui`` runs the server in its own process (:func:`start_process`),
not in a thread of the learner: the learner's training loop holds the GIL most of the time, which would
delay frames and, worse, the e-stop; a separate process also keeps a GUI crash from touching the learner,
and it is exactly the standalone ``robot-rl gui`` that actors of a ``--role actor`` run connect to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from robot_rl.extras import MissingExtraError
from robot_rl.teleop.gui.bind import check_bind
from robot_rl.teleop.gui.device import TOKEN_ENV

INFO_FILE = "gui.json"


def serve(run_dir: str | Path, host: str = "127.0.0.1", port: int = 8765, token: str = "") -> None:
    """Serve the GUI of ``run_dir`` on ``host:port`` (0 = a free port) until SIGINT/SIGTERM. Once it
    accepts connections it prints its URL and writes ``<run_dir>/gui.json`` (``url``, ``port``, ``pid``).

    Raises:
        ValueError: ``host`` is not loopback and ``token`` is empty.
        MissingExtraError: uvicorn/fastapi are missing (names ``pip install 'robot-rl[gui]'``).
    """
    try:
        import uvicorn

        from robot_rl.teleop.gui.app import create_app
    except ModuleNotFoundError as err:
        raise MissingExtraError(f"the GUI needs {err.name}: pip install 'robot-rl[gui]'") from err

    check_bind(host, token)
    run_dir = Path(run_dir)
    app = create_app(run_dir, token or None)
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, log_level="warning", ws="websockets-sansio")
    )

    def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            time.sleep(0.02)
        bound = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://{host}:{bound}/"
        run_dir.mkdir(parents=True, exist_ok=True)
        tmp = run_dir / (INFO_FILE + ".tmp")
        tmp.write_text(json.dumps({"url": url, "port": bound, "pid": os.getpid()}))
        os.replace(tmp, run_dir / INFO_FILE)
        print(f"gui: serving {url}{'?token=...' if token else ''} for {run_dir}; Ctrl-C stops it", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    server.run()


def start_process(
    run_dir: str | Path, host: str, port: int, token: str, log_path: Path, timeout_s: float = 60.0
) -> tuple[subprocess.Popen, int]:
    """Start ``robot-rl gui`` for ``run_dir`` as a child process (output to ``log_path``; the token goes
    through $ROBOT_RL_GUI_TOKEN, not the command line) and wait until it serves. Returns the process and
    its port.

    Raises:
        RuntimeError: it exited or did not serve within ``timeout_s`` (names its log).
    """
    run_dir = Path(run_dir)
    info = run_dir / INFO_FILE
    info.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "robot_rl.cli.main", "gui", "--run_dir", str(run_dir)]
    cmd += ["--host", host, "--port", str(port)]
    env = {**os.environ, TOKEN_ENV: token}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if info.is_file():
            data = json.loads(info.read_text())
            if data.get("pid") == proc.pid:
                return proc, int(data["port"])
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    if proc.poll() is None:
        proc.terminate()
    raise RuntimeError(f"the GUI server did not start on {host}:{port}; see {log_path}")
