"""The live web GUI (issue 18) in a real browser against a real ``robot-rl online --intervention.device=gui``
run: 2 actors, 2 simulated cameras each, a (untrained) progress critic as the reward."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch
from online_setup import committed_episodes, copy_run, free_address, overrides, start, wait_for

from robot_rl import keys
from robot_rl.data.replay import ZarrReplayBuffer

TOKEN = "s3cret-token"
CAMERAS = ("front", "wrist")


class _Server:
    """The GUI app served by uvicorn in a thread on a free localhost port (the device tests' server)."""

    def __init__(self, tmp_path, token=None):
        import threading

        import uvicorn

        from robot_rl.teleop.gui.app import create_app

        self.server = uvicorn.Server(
            uvicorn.Config(create_app(tmp_path, token), host="127.0.0.1", port=0, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, timeout_s=30, what="uvicorn")
        self.port = self.server.servers[0].sockets[0].getsockname()[1]

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _ui(port: int, token: str = TOKEN):
    from websockets.sync.client import connect

    return connect(f"ws://127.0.0.1:{port}/ws/ui?token={token}", open_timeout=5)  # use as a context


def _poll_until(device, check, what: str, timeout_s: float = 10.0):
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        out = device.poll({})
        if check(out):
            return out
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"


def test_gui_device_maps_browser_keys_like_the_keyboard_latches_estop_and_drops_control_on_disconnect(
    tmp_path,
):
    """The actor-side device against a real server and a real websocket 'browser': the arrow keys give the
    keyboard device's actions (teleop/command.py), the e-stop makes poll report stop until the reset, a
    closed tab hands back to the policy, and a vanished server leaves policy-only control."""
    from robot_rl.teleop.command import ActionMapper, DeviceCommand
    from robot_rl.teleop.gui.device import GuiDevice

    low, high = np.array([-0.03, -0.03, -0.03, 0.0]), np.array([0.03, 0.03, 0.03, 2.0])
    server = _Server(tmp_path, TOKEN)
    device = GuiDevice(f"ws://127.0.0.1:{server.port}", 3, low, high, 0.5, control_hz=200.0, token=TOKEN)
    try:
        wait_for(lambda: device.connected, timeout_s=10, what="the device connected")
        with _ui(server.port) as ui:
            assert device.poll({}).action is None  # the policy drives
            ui.send(json.dumps({"type": "takeover", "actor": 3, "on": True}))
            drive = {"type": "drive", "actor": 3, "held": ["up", "page_down"], "gripper": 1, "seq": 1}
            ui.send(json.dumps(drive))
            expected = ActionMapper(low, high, 0.5).action(DeviceCommand(np.array([1.0, 0, -1.0]), 1.0, True))
            out = _poll_until(device, lambda h: h.action is not None and h.action[0] > 0, "the drive command")
            np.testing.assert_allclose(out.action, expected)
            np.testing.assert_allclose(out.action, [0.015, 0.0, -0.015, 2.0])
            ui.send(json.dumps({"type": "label", "actor": 3, "label": "success"}))
            _poll_until(device, lambda h: h.label == "success", "the label")
            ui.send(json.dumps({"type": "estop"}))
            _poll_until(device, lambda h: h.stop and h.action is None, "the e-stop")
        # the tab went away: still latched (only a reset releases it)
        assert device.poll({}).stop
        with _ui(server.port) as ui:
            ui.send(json.dumps({"type": "reset"}))
            out = _poll_until(device, lambda h: not h.stop, "the reset")
            assert out.action is None  # the e-stop dropped the take-over
            ui.send(json.dumps({"type": "takeover", "actor": 3, "on": True}))
            _poll_until(device, lambda h: h.action is not None, "a second take-over")
        # the tab that took over is gone: the policy drives again
        _poll_until(device, lambda h: h.action is None, "hand-back on a closed tab")
        with _ui(server.port) as ui:
            ui.send(json.dumps({"type": "takeover", "actor": 3, "on": True}))
            _poll_until(device, lambda h: h.action is not None, "a third take-over")
            server.stop()  # the GUI goes away: policy-only control, no error
            wait_for(lambda: not device.connected, timeout_s=10, what="the device noticed")
            assert device.poll({}).action is None and not device.poll({}).stop
    finally:
        device.close()
        server.stop()


def test_a_reconnecting_latched_actor_relatches_a_fresh_server(tmp_path):
    """A GUI restarted while an actor is latched must not release the e-stop by itself."""
    from robot_rl.teleop.gui.device import GuiDevice

    low, high = np.array([-0.03, -0.03, -0.03, 0.0]), np.array([0.03, 0.03, 0.03, 2.0])
    server = _Server(tmp_path)
    device = GuiDevice(f"ws://127.0.0.1:{server.port}", 0, low, high, control_hz=200.0)
    try:
        wait_for(lambda: device.connected, timeout_s=10, what="the device connected")
        with _ui(server.port, "") as ui:
            ui.send(json.dumps({"type": "estop"}))
            _poll_until(device, lambda h: h.stop, "the e-stop")
        port = server.port
        server.stop()
        wait_for(lambda: not device.connected, timeout_s=10, what="the device noticed")
        assert device.poll({}).stop  # still latched without a server
        server = _Server(tmp_path)  # a fresh server on another port: point the device at it
        device.url = device.url.replace(f":{port}/", f":{server.port}/")
        wait_for(lambda: device.connected, timeout_s=10, what="the device reconnected")
        wait_for(lambda: server.server.config.app.state.hub.estop, timeout_s=10, what="the server latched")
        assert device.poll({}).stop
    finally:
        device.close()
        server.stop()


def test_gui_device_sends_camera_frames_at_camera_hz_with_every_step_between(tmp_path):
    """Frames are the browser's main cost: the device sends the numbers of every step but camera frames at
    most ``camera_hz`` times a second."""
    import threading
    import time

    from robot_rl.teleop.gui.device import GuiDevice

    low, high = np.array([-0.03, -0.03, -0.03, 0.0]), np.array([0.03, 0.03, 0.03, 2.0])
    server = _Server(tmp_path)
    device = GuiDevice(f"ws://127.0.0.1:{server.port}", 0, low, high, control_hz=100.0, camera_hz=4.0)
    got: list[dict] = []
    try:
        wait_for(lambda: device.connected, timeout_s=10, what="the device connected")
        with _ui(server.port, "") as ui:
            stop = threading.Event()

            def read():
                while not stop.is_set():
                    try:
                        got.append(json.loads(ui.recv(timeout=0.2)))
                    except TimeoutError:
                        pass

            reader = threading.Thread(target=read)
            reader.start()
            image = np.zeros((8, 8, 3), np.uint8)
            start, steps = time.monotonic(), 0
            while time.monotonic() - start < 2.0:
                device.poll({})
                steps += 1
                device.observe({"step": steps, "obs": {keys.image_key("front"): image}})
            elapsed = time.monotonic() - start
            wait_for(lambda: any(m.get("step") == steps for m in got), timeout_s=60, what="the last step")
            stop.set()
            reader.join()
    finally:
        device.close()
        server.stop()
    statuses = [m for m in got if m.get("type") == "status"]
    framed = [m for m in statuses if m["frames"]]
    times = [m["t_frame"] for m in framed]
    assert 1 <= len(times) <= 1 + elapsed * 4.0 and len(set(times)) == len(times)  # none sent twice
    assert set(framed[0]["frames"]) == {"front"}
    assert len(statuses) > len(framed)  # the steps between frames still reach the page (a loaded
    # machine coalesces steps: a tab gets the newest, carrying unsent frames along)


def test_a_slow_tab_keeps_the_unsent_camera_frames_when_a_newer_step_replaces_them():
    """A tab gets only the newest message per actor; a step without frames must not drop unsent ones."""
    from robot_rl.teleop.gui.hub import UiClient

    ui = UiClient(None)
    framed = {"type": "status", "actor": 0, "step": 1, "frames": {"front": "AAAA"}, "t_frame": 5.0}
    ui.offer("actor0", json.dumps(framed), framed)
    newer = {"type": "status", "actor": 0, "step": 2, "frames": {}}
    ui.offer("actor0", json.dumps(newer), newer)
    sent = json.loads(ui.pending["actor0"])
    assert sent["step"] == 2 and sent["frames"] == {"front": "AAAA"} and sent["t_frame"] == 5.0
    ui.pending, ui.pending_frames = {}, {}  # what the pump does when it sends the batch
    ui.offer("actor0", json.dumps(newer), newer)
    assert json.loads(ui.pending["actor0"])["frames"] == {}  # frames already sent are not sent again


@pytest.fixture(scope="module")
def live(tiny_offline_run, tmp_path_factory, browser):
    """A running ``robot-rl online`` with the GUI (2 actors, 2 cameras, critic reward); yields
    (url, run dir, online folder, process). Camera frames come at the default
    ``intervention.gui_camera_hz`` (the page's CPU budget: its cost on a 2-core CI machine once starved
    the tests on the other xdist worker).

    Runs only with ``ROBOT_RL_GUI_LIVE=1`` (``ROBOT_RL_GUI_LIVE=1 pytest -n 0 tests/test_gui_live.py``):
    in a clean-clone CI run under xdist, headless Chromium's threads (browser-process thread pool and one
    renderer at ~90 %) kept both cores busy for over 10 min while these tests waited, although the same
    file alone uses well under one core (benchmarks/bench_gui_page.py)."""
    if os.environ.get("ROBOT_RL_GUI_LIVE") != "1":
        pytest.skip("live-run browser tests: set ROBOT_RL_GUI_LIVE=1 (Chromium starved a 2-core CI run)")
    pytest.importorskip("sentence_transformers")
    from robot_rl.config import CriticConfig
    from robot_rl.rewards.compact import CompactProgressCritic

    tmp = tmp_path_factory.mktemp("gui_live")
    run = copy_run(tiny_offline_run, tmp / "run")
    torch.manual_seed(5)
    CompactProgressCritic(CriticConfig(cameras=["front"])).save(tmp / "critic")
    args = overrides(
        run,
        f"--online.address={free_address()}",
        "--online.num_actors=2",
        "--online.env_steps=100000",  # runs while the tests drive it; killed at the end
        "--env.cameras=[front,wrist]",
        "--env.control_hz=20",
        "--env.max_episode_steps=300",  # 15 s: a take-over below fits in one episode
        "--reward.mode=critic",
        f"--critic.checkpoint={tmp / 'critic'}",
        "--intervention.device=gui",
        "--intervention.gui_port=0",
        f"--intervention.gui_token={TOKEN}",
    )
    proc = start("online", *args, log=tmp / "online.log")
    info = run / "gui.json"
    folder = run / "online" / "online_qc_seed0"
    try:
        wait_for(info.is_file, timeout_s=120, procs=(proc,), what="the GUI server")
        port = json.loads(info.read_text())["port"]
        yield f"http://127.0.0.1:{port}", run, folder, proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture
def open_page(browser):
    """Opens pages of the live GUI (``open_page(url)``) and closes every one after the test, also a failed
    one's: a page left open keeps decoding live streams for the rest of the module (on a loaded CI machine
    that starved the next tests)."""
    pages = []

    def open_(url: str, token: str = TOKEN):
        page = browser.new_page()
        pages.append(page)
        page.set_default_timeout(120_000)  # a loaded 2-core CI machine
        page.goto(f"{url}/?token={token}")
        return page

    yield open_
    for page in pages:
        page.close()


def _live(url: str) -> dict:
    req = urllib.request.Request(f"{url}/api/live", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())


def _pct(values: list[float]) -> tuple[float, float]:
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


@pytest.mark.slow
def test_panels_show_both_cameras_of_both_actors_and_the_progress_curve(live, open_page):
    url, _, _, _ = live
    page = open_page(url)
    page.wait_for_function(
        """cams => [0, 1].every(a => window.gui.frames[a] && cams.every(c => window.gui.frames[a][c] >= 10)
            && window.gui.progressPoints[a] >= 10)""",
        arg=list(CAMERAS),
        timeout=420_000,  # the actors load torch, the critic and MiniLM: minutes on a busy 2-core machine
        polling=100,  # ms; the default polls every animation frame, which starves a 2-core machine
    )
    assert page.locator(".panel").count() == 2
    assert page.locator("#actor-0 .acting").inner_text() in ("policy", "human")
    latencies = page.evaluate("window.gui.frameLatency")
    p50, p99 = _pct(latencies)
    print(
        f"\ncamera frame -> browser display latency over {len(latencies)} frames: p50 {p50:.1f} ms, "
        f"p99 {p99:.1f} ms"
    )
    page.screenshot(path=str(live[1] / "gui_live.png"))


@pytest.mark.slow
def test_takeover_drives_the_arm_is_recorded_and_hands_back_then_success_label(live, open_page):
    url, _, folder, _ = live
    log_dir = folder / "actor0" / "episodes"
    page = open_page(url)
    page.wait_for_function("window.gui.panels[0] && window.gui.statuses > 0", timeout=60_000, polling=100)
    page.locator("#actor-0 .title").click()  # select actor 0
    page.wait_for_function(
        "Number(document.querySelector('#actor-0').dataset.step) < 100", timeout=120_000, polling=100
    )
    page.keyboard.press("Space")  # take over
    page.wait_for_function("document.querySelector('#actor-0').dataset.acting === 'human'", polling=100)
    for key in ("ArrowDown", "ArrowUp"):  # -x then +x while held: +x then has room below WORKSPACE_HIGH
        before = int(page.locator("#actor-0").get_attribute("data-steps"))
        page.keyboard.down(key)
        page.wait_for_function(
            f"Number(document.querySelector('#actor-0').dataset.steps) >= {before + 6}", polling=100
        )
        page.keyboard.up(key)
    for _ in range(15):  # key press -> actuator command latency samples (each key event is a command)
        n = page.evaluate("window.gui.keyLatency.length")
        page.keyboard.down("ArrowLeft")
        page.wait_for_function(f"window.gui.keyLatency.length > {n}", polling=100)
        n += 1
        page.keyboard.up("ArrowLeft")
        page.wait_for_function(f"window.gui.keyLatency.length > {n}", polling=100)
    latencies = page.evaluate("window.gui.keyLatency")
    p50, p99 = _pct(latencies)
    print(
        f"\nbrowser key press -> actuator command latency over {len(latencies)} key events (control "
        f"20 Hz): p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )
    page.keyboard.press("Space")  # hand back: the policy drives again from a new chunk
    page.wait_for_function(
        "document.querySelector('#actor-0').dataset.acting === 'policy'"
        " && document.querySelector('#actor-0 .chunk').textContent !== '-'",
        polling=100,
    )
    logged = committed_episodes(log_dir)
    page.locator("#actor-0 .success").click()
    wait_for(lambda: committed_episodes(log_dir) > logged, timeout_s=60, what="the labelled episode")
    episodes = ZarrReplayBuffer(log_dir)
    ep = episodes.episode(episodes.num_episodes - 1)
    assert bool(ep[keys.SUCCESS][-1]) and bool(ep[keys.DONE][-1])  # next.success = 1 from the button
    interv = ep[keys.INTERVENTION].astype(bool)
    assert interv.sum() >= 12 and not interv[-1]  # driven by the human, then by the policy again
    up = interv & (ep[keys.ACTION][:, 0] > 0) & (ep[keys.ACTION][:, 1] == 0)
    assert up.sum() >= 5
    high = 0.03  # the built-in task's largest xyz step (m): full deflection at intervention.scale = 1
    assert np.allclose(ep[keys.ACTION][up, 0], high)
    first, last = np.flatnonzero(up)[[0, -1]]
    pinch_x = ep[keys.STATE][:, 14]
    assert pinch_x[last] - pinch_x[first] > 0.01  # the end effector moved +x


@pytest.mark.slow
def test_estop_halts_every_actor_within_one_step_and_stays_latched_across_reload(live, open_page):
    url, _, _, _ = live
    page, other = open_page(url), open_page(url)
    for p in (page, other):
        p.wait_for_function(
            "[0, 1].every(a => window.gui.panels[a]) && window.gui.estop === false", polling=100
        )
    page.keyboard.press("Escape")
    for p in (page, other):  # both tabs show it
        p.wait_for_function("document.body.dataset.estop === 'latched'", polling=100)
    wait_for(
        lambda: all(_live(url)["status"][str(a)]["estop"] for a in (0, 1)), timeout_s=30, what="both latched"
    )
    halted = _live(url)["status"]
    beats = {a: halted[str(a)].get("beats", 0) for a in (0, 1)}
    wait_for(  # beats are sent only while no step runs
        lambda: all(_live(url)["status"][str(a)].get("beats", 0) >= beats[a] + 3 for a in (0, 1)),
        timeout_s=30,
        what="beats of both halted actors",
    )
    again = _live(url)["status"]
    for a in (0, 1):  # at most the step under way when the e-stop arrived, then nothing
        assert again[str(a)]["steps_after_latch"] <= 1
        assert (
            again[str(a)]["observed"] - halted[str(a)]["observed"] <= 1 - halted[str(a)]["steps_after_latch"]
        )
    page.reload()
    page.wait_for_function("document.body.dataset.estop === 'latched'", polling=100)
    assert page.locator("#banner").is_visible()
    page.wait_for_function("window.gui.panels[0] && window.gui.panels[1]", polling=100)
    assert page.locator("#actor-1 .banner").is_visible()
    page.screenshot(path=str(live[1] / "gui_estop.png"))
    other.locator("#reset").click()
    for p in (page, other):
        p.wait_for_function("document.body.dataset.estop === 'clear'", polling=100)
    steps = {a: again[str(a)]["observed"] for a in (0, 1)}
    wait_for(
        lambda: all(_live(url)["status"][str(a)].get("observed", 0) > steps[a] + 5 for a in (0, 1)),
        timeout_s=60,
        what="actors acting again after the reset",
    )


@pytest.mark.slow
def test_wrong_token_is_refused(live, browser):
    url, _, _, _ = live
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    for path in ("/", "/api/live"):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{url}{path}?token=wrong", timeout=5)
        assert err.value.code == 401
    for path in ("/ws/ui", "/ws/actor/0"):
        with pytest.raises(InvalidStatus) as err:
            connect(f"{url.replace('http', 'ws')}{path}?token=wrong", open_timeout=5)
        assert err.value.response.status_code == 403
    page = browser.new_page()
    try:
        assert page.goto(f"{url}/?token=wrong").status == 401
    finally:
        page.close()


@pytest.mark.slow
def test_actors_keep_acting_when_the_gui_goes_away(live):
    url, run, folder, proc = live
    pid = json.loads((run / "gui.json").read_text())["pid"]
    counts = [committed_episodes(folder / f"actor{a}" / "episodes") for a in (0, 1)]
    os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: all(committed_episodes(folder / f"actor{a}" / "episodes") > counts[a] for a in (0, 1)),
        timeout_s=300,  # an episode is up to 300 steps; a loaded 2-core machine slows the actors
        procs=(proc,),
        what="episodes logged with the GUI gone",
    )
    assert "lost the GUI" in (folder / "actor0.log").read_text()
