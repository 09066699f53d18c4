"""CPU cost of the live GUI page in headless Chromium.

A real GUI server (uvicorn in a thread), two real :class:`~robot_rl.teleop.gui.device.GuiDevice` actors
stepping at ``--hz`` with two 64x64 cameras each (a moving random image, status numbers as
:class:`~robot_rl.runtime.live.LiveStats` sends them) and ``--tabs`` headless Chromium tabs (Debian's
``chromium`` through Playwright) showing the live page. After the tabs show frames, CPU seconds of every
Chromium process (by ``--type``: renderer, gpu-process, utility, browser) and of this process (server and
device threads) are read over ``--seconds`` and printed as cores (CPU s / wall s), with the frames each
tab decoded. ``--camera_hz``: the devices' frame rate (``intervention.gui_camera_hz``); ``--static``:
serve another copy of the page (e.g. an older ``index.html``) for a before/after comparison.

Run: ``python benchmarks/bench_gui_page.py [--tabs 1] [--seconds 20] [--camera_hz 5]`` (needs the ``gui``
extra, Playwright and Debian's chromium).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil


def _cpu(me: psutil.Process) -> dict[str, float]:
    """CPU seconds (user + system) per Chromium process type among ``me``'s descendants, plus ``me``."""
    out: dict[str, float] = {}
    for child in me.children(recursive=True):
        try:
            cmd, t = " ".join(child.cmdline()), child.cpu_times()
        except psutil.Error:
            continue
        kind = next((k for k in ("renderer", "gpu-process", "utility", "zygote") if f"--type={k}" in cmd), "")
        kind = kind or ("browser" if "chrom" in cmd else "driver")
        out[kind] = out.get(kind, 0.0) + t.user + t.system
    t = me.cpu_times()
    out["server+devices"] = t.user + t.system
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tabs", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--hz", type=float, default=20.0, help="actor control rate (Hz)")
    ap.add_argument("--camera_hz", type=float, default=5.0)
    ap.add_argument("--static", default="", help="folder with the index.html to serve")
    ap.add_argument("--args", default="--no-sandbox --disable-gpu", help="Chromium flags")
    a = ap.parse_args()

    import uvicorn
    from playwright.sync_api import sync_playwright

    import robot_rl.teleop.gui.app as app_module
    from robot_rl.teleop.gui.device import GuiDevice

    if a.static:
        app_module.STATIC = Path(a.static)
    app = app_module.create_app(tempfile.mkdtemp(prefix="bench_gui_"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    low, high = np.array([-0.03] * 3 + [0.0]), np.array([0.03] * 3 + [1.0])
    url = f"ws://127.0.0.1:{port}"
    devices = [GuiDevice(url, k, low, high, control_hz=a.hz, camera_hz=a.camera_hz) for k in (0, 1)]
    stop = threading.Event()

    def actor(k: int) -> None:
        base = np.random.default_rng(k).integers(0, 255, (64, 64, 3), dtype=np.uint8)
        step = 0
        while not stop.is_set():
            devices[k].poll({})
            step += 1
            image = np.roll(base, step, axis=1)
            devices[k].observe(
                {
                    "actor": k,
                    "episode": step // 100,
                    "step": step % 100,
                    "total_steps": step,
                    "acting": "policy",
                    "chunk_index": step % 5,
                    "chunk_len": 5,
                    "reward": 0.1,
                    "progress": (step % 100) / 100,
                    "done_prob": 0.2,
                    "success_rate": 0.5,
                    "intervention_rate": 0.1,
                    "steps_per_s": a.hz,
                    "version": 3,
                    "lag": 0,
                    "obs": {"observation.images.front": image, "observation.images.wrist": image[::-1]},
                }
            )

    for k in (0, 1):
        threading.Thread(target=actor, args=(k,), daemon=True).start()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=a.args.split())
        pages = [browser.new_page() for _ in range(a.tabs)]
        for page in pages:
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_function("window.gui.frames[1] && window.gui.frames[1].wrist >= 3", polling=100)
        time.sleep(2.0)
        me = psutil.Process()
        frames0 = pages[0].evaluate("window.gui.frames[0].front")
        cpu0, t0 = _cpu(me), time.monotonic()
        time.sleep(a.seconds)
        cpu1, wall = _cpu(me), time.monotonic() - t0
        frames = pages[0].evaluate("window.gui.frames[0].front") - frames0
        stop.set()
        browser.close()
    for device in devices:
        device.close()
    server.should_exit = True
    cores = {k: (cpu1[k] - cpu0.get(k, 0.0)) / wall for k in cpu1}
    chromium = sum(v for k, v in cores.items() if k not in ("driver", "server+devices"))
    detail = " ".join(f"{k}={v:.3f}" for k, v in sorted(cores.items()))
    print(
        f"tabs={a.tabs} hz={a.hz:g} camera_hz={a.camera_hz:g} load={psutil.getloadavg()[0]:.1f}: Chromium "
        f"{chromium:.3f} cores ({detail}); tab 1 decoded {frames / wall:.1f} frames/s per camera"
    )


if __name__ == "__main__":
    main()
