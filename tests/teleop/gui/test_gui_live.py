"""The live web GUI (issue 18) in a real browser against a real ``robot-rl online --intervention.device=gui``
run: 2 actors, 2 simulated cameras each, a (untrained) progress critic as the reward."""

from __future__ import annotations

import csv
import json
import os
import re
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


@pytest.mark.e2e
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
            device.instruct("Pick up the red cube and lift it.")
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
    assert {m["task"] for m in statuses} == {"Pick up the red cube and lift it."}  # the panel shows it


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


PAD_JS = """() => {
  // A scripted gamepad (the Gamepad API's shape, standard mapping): Playwright cannot plug a real one.
  const pad = {id: "scripted test pad (STANDARD GAMEPAD)", index: 0, connected: true, mapping: "standard",
               timestamp: 0, axes: [0, 0, 0, 0],
               buttons: Array.from({length: 17}, () => ({pressed: false, touched: false, value: 0}))};
  let plugged = false;
  Object.defineProperty(navigator, "getGamepads",
                        {configurable: true, value: () => [plugged ? pad : null, null, null, null]});
  window.testPad = {
    plug() { plugged = true; window.dispatchEvent(new Event("gamepadconnected")); },
    unplug() { plugged = false; window.dispatchEvent(new Event("gamepaddisconnected")); },
    set({axes, buttons}) {
      for (const [i, v] of Object.entries(axes)) pad.axes[i] = v;
      for (const [i, v] of Object.entries(buttons)) {
        Object.assign(pad.buttons[i], {pressed: v, touched: v, value: +v});
      }
      pad.timestamp = performance.now();
    },
  };
}"""
"""Installs ``window.testPad`` in a loaded page (``plug()``, ``unplug()``,
``set({axes: {index: value}, buttons: {index: bool}})``): ``navigator.getGamepads`` returns the pad
while plugged, ``gamepadconnected`` / ``gamepaddisconnected`` are dispatched as a browser does."""
HIDE_JS = """hidden => {  // as when the operator switches to another tab (or back)
  Object.defineProperty(document, "hidden", {configurable: true, get: () => hidden});
  const state = hidden ? "hidden" : "visible";
  Object.defineProperty(document, "visibilityState", {configurable: true, get: () => state});
  document.dispatchEvent(new Event("visibilitychange"));
}"""
LEFT_X, LEFT_Y, RIGHT_Y = 0, 1, 3  # the Gamepad API's standard mapping: stick axes (down / right = +1)


def _pad(page, axes: dict[int, float] | None = None, **roles: bool) -> None:
    """Move the scripted pad's sticks (``axes``) and press / release buttons by role
    (``teleop.gamepad.XBOX_BUTTONS``: intervene, close, open, success, failure)."""
    from robot_rl.teleop.gamepad import XBOX_BUTTONS

    buttons = {str(XBOX_BUTTONS[role]): on for role, on in roles.items()}
    sticks = {str(axis): value for axis, value in (axes or {}).items()}
    page.evaluate("s => window.testPad.set(s)", {"axes": sticks, "buttons": buttons})


def test_gamepad_in_the_page_drives_like_the_gamepad_device_and_never_keeps_driving(tmp_path, open_page):
    """The live page's Gamepad API code against a real server and two real actor devices: RB + sticks
    give the gamepad device's mapping (dead zone, full deflection = the largest step), A/B act at once,
    a key press keeps the pad's drive, Y/X label; releasing RB, selecting another actor, unplugging the
    pad and hiding the tab each stop the drive at once."""
    low, high = np.array([-0.03, -0.03, -0.03, 0.0]), np.array([0.03, 0.03, 0.03, 2.0])
    from robot_rl.teleop.gui.device import GuiDevice

    server = _Server(tmp_path, TOKEN)
    url = f"ws://127.0.0.1:{server.port}"
    devices = [GuiDevice(url, a, low, high, control_hz=200.0, token=TOKEN) for a in (0, 1)]
    try:
        page = open_page(f"http://127.0.0.1:{server.port}")
        page.wait_for_function("window.gui.panels[0] && window.gui.panels[1]", polling=100)
        page.evaluate(PAD_JS)
        page.locator("#actor-1 .title").click()
        page.evaluate("window.testPad.plug()")
        dev0, dev1 = devices
        assert dev1.poll({}).action is None
        _pad(page, {LEFT_X: -0.6}, intervene=True)  # RB + left stick 60 % left
        out = _poll_until(dev1, lambda h: h.action is not None, "RB + left stick")
        y = 0.03 * (0.6 - 0.1) / (1 - 0.1)  # GamepadDevice's 0.1 dead zone, full deflection 0.03 m
        np.testing.assert_allclose(out.action, [0.0, y, 0.0, 0.0], rtol=1e-5)
        _pad(page, close=True)  # A closes the gripper at once (the sticks did not move)
        _poll_until(dev1, lambda h: h.action is not None and h.action[3] == 2.0, "A: gripper closed")
        _pad(page, close=False)
        page.keyboard.press("o")  # a key while RB is held: the pad keeps driving
        out = _poll_until(dev1, lambda h: h.action is None or h.action[3] == 0.0, "o: gripper open")
        assert out.action is not None, "a key press while RB is held dropped the pad's drive"
        np.testing.assert_allclose(out.action, [0.0, y, 0.0, 0.0], rtol=1e-5)
        _pad(page, {LEFT_X: 0.0, LEFT_Y: -1.0, RIGHT_Y: -1.0})  # left stick up = +x, right stick up = +z
        out = _poll_until(dev1, lambda h: h.action is not None and h.action[0] > 0, "+x +z")
        np.testing.assert_allclose(out.action, [0.03, 0.0, 0.03, 0.0], rtol=1e-5)
        _pad(page, intervene=False)  # RB released: the policy drives (sticks still pushed)
        _poll_until(dev1, lambda h: h.action is None, "RB released")
        _pad(page, intervene=True)
        _poll_until(dev1, lambda h: h.action is not None, "RB again")
        page.locator("#actor-0 .title").click()  # selecting actor 0: the pad drives it, not actor 1
        _poll_until(dev1, lambda h: h.action is None, "actor 1 released on selecting actor 0")
        out = _poll_until(dev0, lambda h: h.action is not None, "actor 0 driven after its selection")
        np.testing.assert_allclose(out.action, [0.03, 0.0, 0.03, 0.0], rtol=1e-5)
        page.evaluate("window.testPad.unplug()")  # unplugged with RB held: the drive stops
        _poll_until(dev0, lambda h: h.action is None, "the unplugged pad released actor 0")
        page.evaluate("window.testPad.plug()")
        _poll_until(dev0, lambda h: h.action is not None, "the pad plugged in again")
        page.evaluate(HIDE_JS, True)  # the tab goes to the background with RB held: the drive stops
        _poll_until(dev0, lambda h: h.action is None, "a hidden tab released actor 0")
        page.evaluate(HIDE_JS, False)
        _poll_until(dev0, lambda h: h.action is not None, "the tab visible again")
        _pad(page, {LEFT_Y: 0.0, RIGHT_Y: 0.0}, intervene=False)
        _poll_until(dev0, lambda h: h.action is None, "RB released")
        for role in ("success", "failure"):  # Y, X
            _pad(page, **{role: True})
            _poll_until(dev0, lambda h, role=role: h.label == role, f"the {role} button")
            _pad(page, **{role: False})
        assert dev1.poll({}).label is None and dev0.poll({}).action is None
    finally:
        for device in devices:
            device.close()
        server.stop()


_LIVE_RUN: dict[str, int] = {}  # "failed": the worker's failed-test count when the live run started


@pytest.fixture(autouse=True)
def _no_test_on_a_live_run_that_failed_one(request):
    """The tests on the live run share it: once one fails (a starved or stuck run), the rest are skipped,
    naming it, instead of each waiting out its own timeouts (minutes each on a loaded CI machine)."""
    if "live" in request.fixturenames and request.session.testsfailed > _LIVE_RUN.get("failed", 1 << 30):
        pytest.skip("an earlier test on this live run failed (above): the run is not trusted")


@pytest.fixture(scope="module")
def live(alone, tiny_offline_run, tmp_path_factory, browser, request):
    """A running ``robot-rl online`` with the GUI (2 actors, 2 cameras, critic reward); yields
    (url, run dir, online folder, process). Camera frames come at the default
    ``intervention.gui_camera_hz`` (the page's CPU budget: its cost on a 2-core CI machine once starved
    the tests on the other xdist worker). The module's live tests run ``alone`` (conftest.py): no test of
    the other xdist worker runs beside them.

    Episodes are 400 steps (20 s at 20 Hz): a take-over must fit in one, because an episode's start hands
    control back to the policy (the device's ``reset``). With 200 steps a clean-clone CI run once timed out
    in the take-over test's key-latency loop: the time limit ended the episode mid-loop and no later key
    was applied."""
    pytest.importorskip("sentence_transformers")
    from robot_rl.config import RewardModelConfig
    from robot_rl.rewards.compact import CompactProgressCritic

    _LIVE_RUN["failed"] = request.session.testsfailed
    tmp = tmp_path_factory.mktemp("gui_live")
    run = copy_run(tiny_offline_run, tmp / "run")
    torch.manual_seed(5)
    CompactProgressCritic(RewardModelConfig(cameras=["front"])).save(tmp / "critic")
    args = overrides(
        run,
        f"--online.address={free_address()}",
        "--online.num_actors=2",
        "--online.env_steps=100000",  # runs while the tests drive it; killed at the end
        # the learner only has to write metrics here: at the default UTD it took a whole core (90 updates/s),
        # starving the timing tests of the other xdist worker (a CI run lost the sim-server file to it)
        "--online.utd_ratio=0.1",
        "--env.cameras=[front,wrist]",
        "--env.control_hz=20",
        "--env.max_episode_steps=400",  # 20 s; a take-over below (~40-150 steps under load) fits in one
        "--reward.mode=critic",
        f"--reward_model.checkpoint={tmp / 'critic'}",
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


@pytest.mark.e2e
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
    assert page.locator("#actor-1 .task").inner_text() == "Pick up the cube and lift it."  # the instruction
    latencies = page.evaluate("window.gui.frameLatency")
    p50, p99 = _pct(latencies)
    print(
        f"\ncamera frame -> browser display latency over {len(latencies)} frames: p50 {p50:.1f} ms, "
        f"p99 {p99:.1f} ms"
    )
    page.screenshot(path=str(live[1] / "gui_live.png"))


@pytest.mark.e2e
def test_takeover_drives_the_arm_is_recorded_and_hands_back_then_success_label(live, open_page):
    url, _, folder, _ = live
    log_dir = folder / "actor0" / "episodes"
    page = open_page(url)
    page.wait_for_function("window.gui.panels[0] && window.gui.statuses > 0", timeout=60_000, polling=100)
    page.locator("#actor-0 .title").click()  # select actor 0
    panel = "document.querySelector('#actor-0').dataset"
    page.wait_for_function(f"{panel}.episode !== undefined", polling=100)
    episode = page.locator("#actor-0").get_attribute("data-episode")
    page.keyboard.press("f")  # failure: the take-over below gets a whole fresh episode (a label that comes
    # with the time limit is dropped at the reset: a fresh episode too); the episode browser a 2nd episode
    page.wait_for_function(f"{panel}.episode !== '{episode}' && Number({panel}.step) < 50", polling=100)
    page.keyboard.press("Space")  # take over
    page.wait_for_function("document.querySelector('#actor-0').dataset.acting === 'human'", polling=100)
    for key in ("ArrowDown", "ArrowUp"):  # -x then +x while held: +x then has room below WORKSPACE_HIGH
        n = page.evaluate("window.gui.keyLatency.length")
        page.keyboard.down(key)
        page.wait_for_function(f"window.gui.keyLatency.length > {n}", polling=100)  # the actor applied it
        before = _live(url)["status"]["0"]["total_steps"]  # the server's newest step: the page's panel
        # is redrawn at most every 200 ms, so its count may be older than the key
        page.wait_for_function(
            f"Number(document.querySelector('#actor-0').dataset.steps) >= {before + 6}", polling=100
        )
        page.keyboard.up(key)
    for _ in range(10):  # key press -> actuator command latency samples (each key event is a command)
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
    hand_back = page.locator("#actor-0 .takeover")  # the panel's button, the Space key's twin
    assert hand_back.inner_text() == "Hand back"
    hand_back.click()  # the policy drives again from a new chunk
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


@pytest.mark.e2e
def test_gamepad_takeover_drives_the_arm_is_recorded_and_hands_back_then_success_button(live, open_page):
    """A scripted Gamepad API pad on the live page drives actor 1 of the live run: X ends an episode as a
    failure, RB + left stick moves the simulated end effector in the stick's direction with every such
    step recorded as an intervention, releasing RB hands back to the policy, Y ends the episode with
    next.success = 1."""
    url, _, folder, _ = live
    log_dir = folder / "actor1" / "episodes"
    page = open_page(url)
    page.wait_for_function("window.gui.panels[1] && window.gui.statuses > 0", timeout=60_000, polling=100)
    page.evaluate(PAD_JS)
    page.locator("#actor-1 .title").click()
    page.evaluate("window.testPad.plug()")
    panel = "document.querySelector('#actor-1').dataset"
    page.wait_for_function(f"Number({panel}.step) < 150", timeout=120_000, polling=100)
    logged = committed_episodes(log_dir)
    _pad(page, failure=True)  # X: a fresh episode for the take-over below
    wait_for(lambda: committed_episodes(log_dir) > logged, timeout_s=60, what="the X-labelled episode")
    _pad(page, failure=False)
    episodes = ZarrReplayBuffer(log_dir)
    failed = episodes.episode(episodes.num_episodes - 1)
    assert len(failed[keys.ACTION]) < 400 and not failed[keys.SUCCESS][-1]  # ended by the label

    _pad(page, {LEFT_X: -0.6}, intervene=True)  # RB + left stick 60 % left: +y
    page.wait_for_function(f"{panel}.acting === 'human'", polling=100)
    before = int(page.locator("#actor-1").get_attribute("data-steps"))  # drawn with 'human': every step
    # after it is driven (read before the take-over, the panel's count could be 200 ms old: 7 driven once)
    page.wait_for_function(f"Number({panel}.steps) >= {before + 8}", polling=100)
    _pad(page, {LEFT_X: 0.0}, intervene=False)  # hand back: the policy drives again from a new chunk
    page.wait_for_function(
        f"{panel}.acting === 'policy' && document.querySelector('#actor-1 .chunk').textContent !== '-'",
        polling=100,
    )
    logged = committed_episodes(log_dir)
    _pad(page, success=True)  # Y
    wait_for(lambda: committed_episodes(log_dir) > logged, timeout_s=60, what="the Y-labelled episode")
    _pad(page, success=False)
    page.evaluate("window.testPad.unplug()")
    episodes = ZarrReplayBuffer(log_dir)
    ep = episodes.episode(episodes.num_episodes - 1)
    assert bool(ep[keys.SUCCESS][-1]) and bool(ep[keys.DONE][-1])  # next.success = 1 from Y
    interv = ep[keys.INTERVENTION].astype(bool)
    driven = np.flatnonzero(interv)
    assert len(driven) >= 8 and interv[driven[0] : driven[-1] + 1].all() and not interv[-1]
    y = 0.03 * (0.6 - 0.1) / (1 - 0.1)  # dead zone 0.1, full deflection 0.03 m (intervention.scale 1)
    np.testing.assert_allclose(ep[keys.ACTION][interv, :3], [[0.0, y, 0.0]] * len(driven), rtol=1e-5)
    pinch_y = ep[keys.STATE][:, 15]
    assert pinch_y[driven[-1]] - pinch_y[driven[0]] > 0.01  # the end effector moved +y


def _spans(flags: np.ndarray) -> int:
    return int(np.sum(np.diff(np.concatenate([[0], flags.astype(np.int8)])) == 1))


@pytest.mark.e2e
def test_episode_browser_and_learner_view_on_the_live_run(live, open_page):
    """From the live page's links: the episode browser lists the live run's recorded episodes (their
    lengths and human steps as in the actor's log), shows an episode's frames, reward curve and
    intervention spans; a relabel, a note and an exclusion made there are appended to the actor's edit
    log (the recorded episode untouched); the learner view plots the metrics the learner writes."""
    from playwright.sync_api import expect

    from robot_rl.runtime.episode_edits import actor_log

    url, run, folder, proc = live
    log_dir = folder / "actor0" / "episodes"
    wait_for(lambda: committed_episodes(log_dir) >= 2, timeout_s=300, procs=(proc,), what="2 episodes")
    recorded = ZarrReplayBuffer(log_dir)
    lengths = np.diff(recorded.episode_ends, prepend=0)
    eps = [recorded.episode(e) for e in range(recorded.num_episodes)]
    human = [int(e[keys.INTERVENTION].sum()) for e in eps]
    chosen = int(np.argmax(human))  # the take-over episode when the tests above ran
    excluded = min((e for e in range(len(eps)) if e != chosen), key=lambda e: lengths[e])  # fewest frames
    was_success = bool(eps[chosen][keys.SUCCESS].any())
    page = open_page(url)
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.locator("header a[href='/episodes']").click()  # the token travels in the cookie
    page.wait_for_url("**/episodes")
    rows = page.locator("#episode-list tbody tr")
    page.wait_for_function(
        f"Number(document.querySelector('#episode-list tbody').dataset.count) >= {len(eps)}", polling=200
    )
    expect(page.locator("#actor-select option").first).to_contain_text(f"{folder.name} / actor0")
    for e in (chosen, excluded):
        cells = rows.nth(e).locator("td")
        expect(cells.nth(1)).to_have_text(str(lengths[e]))
        expect(cells.nth(3)).to_have_text(str(human[e]))
    rows.nth(chosen).click()
    expect(page.locator("#detail")).to_have_attribute("data-episode", str(chosen))
    page.wait_for_function(
        "['front', 'wrist'].every(c => { const i = document.getElementById('cam-' + c);"
        " return i && i.complete && i.naturalWidth > 0; })",
        polling=200,
    )
    expect(page.locator("#curve")).to_have_attribute("data-points", str(lengths[chosen]))
    expect(page.locator("#curve rect.span")).to_have_count(_spans(eps[chosen][keys.INTERVENTION]))
    relabel, note = ("failure" if was_success else "success"), "gamepad test: relabelled on the live run"
    page.locator(f"#label-{relabel}").click()
    expect(page.locator("#outcome")).to_contain_text(
        f"{relabel} (recorded {'success' if was_success else 'failure'})"
    )
    expect(rows.nth(chosen).locator("td").nth(2)).to_have_text(relabel)
    page.locator("#note").fill(note)
    page.locator("#save-note").click()
    expect(page.locator("#history li")).to_have_count(2)
    rows.nth(excluded).click()
    expect(page.locator("#detail")).to_have_attribute("data-episode", str(excluded))
    page.locator("#exclude").check()
    expect(rows.nth(excluded)).to_have_class(re.compile("excluded"))
    edits = [(e["episode"], e["set"], e["value"]) for e in actor_log(folder, 0).read()]
    assert edits == [(chosen, "label", relabel), (chosen, "note", note), (excluded, "exclude", True)]
    state = actor_log(folder, 0).state()
    assert state[chosen].label == relabel and state[chosen].note == note and state[excluded].exclude
    again = ZarrReplayBuffer(log_dir).episode(chosen)  # nothing recorded is rewritten
    assert bool(again[keys.SUCCESS].any()) == was_success

    def header() -> list[str]:
        path = run / "logs" / f"{folder.name}.csv"
        with open(path, newline="") if path.is_file() else open(os.devnull) as f:
            return next(csv.reader(f), [])

    wait_for(lambda: any(c.endswith("loss") for c in header()), timeout_s=120, what="the learner's losses")
    page.locator("#nav-learner").click()
    page.wait_for_url("**/learner*")
    rates = [c for c in header() if c in ("success_rate", "autonomous_success_rate", "intervention_rate")]
    losses = [c for c in header() if c.endswith("loss")]
    assert rates
    page.wait_for_function("Number(document.querySelector('#plot-rates').dataset.points) >= 2", polling=200)
    expect(page.locator("#plot-rates")).to_have_attribute("data-series", ",".join(rates))
    expect(page.locator("#plot-losses")).to_have_attribute("data-series", ",".join(losses))
    expect(page.locator("#plot-rates polyline")).to_have_count(len(rates))
    expect(page.locator("#plot-losses polyline")).to_have_count(len(losses))
    expect(page.locator("#plot-speed polyline[data-name='updates_per_s']")).to_have_count(1)
    assert errors == []


@pytest.mark.e2e
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
    other.locator("#estop").click()  # the button, the Escape key's twin, latches every actor too
    wait_for(
        lambda: all(_live(url)["status"][str(a)]["estop"] for a in (0, 1)), timeout_s=30, what="latched again"
    )
    page.locator("#reset").click()
    page.wait_for_function("document.body.dataset.estop === 'clear'", polling=100)


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_actors_keep_acting_when_the_gui_goes_away(live):
    url, run, folder, proc = live
    pid = json.loads((run / "gui.json").read_text())["pid"]
    counts = [committed_episodes(folder / f"actor{a}" / "episodes") for a in (0, 1)]
    os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: all(committed_episodes(folder / f"actor{a}" / "episodes") > counts[a] for a in (0, 1)),
        timeout_s=300,  # an episode is up to 400 steps; a loaded 2-core machine slows the actors
        procs=(proc,),
        what="episodes logged with the GUI gone",
    )
    assert "lost the GUI" in (folder / "actor0.log").read_text()
