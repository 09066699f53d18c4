"""The episode browser and learner view (robot_rl.teleop.gui.history) served by uvicorn on localhost and
driven by a real Chromium: the run's episodes and frames show, a relabel / exclusion made on the page
reaches a learner replay opened on the run dir, and a wrong token or bad input is refused."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from repo_paths import ROOT

from robot_rl import keys
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.runtime.metrics import MetricSinks
from robot_rl.runtime.replay import OnlineReplay, episode_spec, final_spec

TOKEN = "s3cret"
SHAPES = {keys.STATE: (3,), keys.image_key("front"): (16, 16, 3)}
# the README's screenshots are refreshed only when asked (ROBOT_RL_DOCS_SCREENSHOTS=1): a test run leaves the
# work tree as it was
DOCS = ROOT / "docs"
LENGTHS = (8, 6, 7)


def _screenshot(page, name: str, tmp: Path) -> None:
    folder = DOCS if os.environ.get("ROBOT_RL_DOCS_SCREENSHOTS") == "1" else tmp
    folder.mkdir(exist_ok=True)
    page.screenshot(path=str(folder / name))


def _episode(ep: int) -> dict:
    """Actor episode ``ep``: state[0] = 10 * ep + step; a failure except episode 1 (success); a human
    drives steps 2-4 of episode 0; the camera shows a colour ramp over the episode."""
    n = LENGTHS[ep]
    steps = np.arange(n)
    image = np.zeros((n, 16, 16, 3), np.uint8)
    image[..., 0] = (steps * 255 // n)[:, None, None]
    image[:, 4:12, 4:12, 1 + ep % 2] = 200
    state = np.zeros((n, 3), np.float32)
    state[:, 0] = 10 * ep + steps
    success = np.zeros(n, bool)
    success[-1] = ep == 1
    return {
        keys.STATE: state,
        keys.image_key("front"): image,
        keys.TASK_INDEX: np.zeros(n, np.int64),
        keys.ACTION: np.zeros((n, 2), np.float32),
        keys.REWARD: np.where(success, 1.0, 0.1 * steps / n).astype(np.float32),
        keys.DONE: success.copy(),
        keys.SUCCESS: success,
        keys.INTERVENTION: (steps >= 2) & (steps < 5) if ep == 0 else np.zeros(n, bool),
        keys.final_key(keys.STATE): state[-1],
        keys.final_key(keys.image_key("front")): image[-1],
    }


def _learner_replay(seed_dir: Path) -> OnlineReplay:
    return OnlineReplay(seed_dir / "replay", SHAPES, 2, horizon=2, gamma=0.9, edits_dir=seed_dir)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run dir as an online run leaves it, written with the runtime's own writers: actor 0's episode
    log, the learner's replay of the same episodes, the learner's metrics CSV and summary.json."""
    root = tmp_path_factory.mktemp("gui_history_run")
    seed_dir = root / "online" / "online_qc_seed0"
    log = ZarrReplayBuffer(seed_dir / "actor0" / "episodes", episode_spec(SHAPES, 2), final_spec(SHAPES))
    replay = _learner_replay(seed_dir)
    for ep in range(len(LENGTHS)):
        log.add_episode(_episode(ep))
        replay.add(0, ep, _episode(ep))
    sinks = MetricSinks(root / "logs" / "online_qc_seed0.csv")
    for i in range(1, 6):
        row = {"success_rate": i / 5, "intervention_rate": 1 / i, "updates_per_s": 20.0 + i}
        sinks.write(40 * i, {**row, "critic_loss": 2.0 / i, "actor_loss": -i, "q_mean": 0.1 * i})
    sinks.close()
    (seed_dir / "summary.json").write_text(json.dumps({"episodes": 3, "success_rate": 1 / 3}))
    return root


@pytest.fixture(scope="module")
def server(run_dir):
    """A FastAPI app with only the history router (token ``TOKEN``), served by uvicorn on a free port."""
    import uvicorn
    from fastapi import FastAPI

    from robot_rl.teleop.gui.history import history_router

    app = FastAPI()
    app.state.token = TOKEN
    app.include_router(history_router(run_dir))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2)
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def context(browser):
    """A fresh browser context (its own cookies), closed after the test."""
    ctx = browser.new_context(viewport={"width": 1120, "height": 760})
    yield ctx
    ctx.close()


def _page(context, url: str):
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    response = page.goto(url)
    return page, response, errors


def _drawn_last_step(seed_dir: Path, ep: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """A learner replay opened on the run dir: (rewards, masks) of drawn chunks that start at episode
    ``ep``'s last step, and whether its held last step has next.success."""
    replay = _learner_replay(seed_dir)
    batch = replay.sample_online(2000, np.random.default_rng(0))
    at = batch["observations"][keys.STATE][:, 0] == 10 * ep + LENGTHS[ep] - 1
    end = sum(LENGTHS[: ep + 1]) - 1
    return batch["rewards"][at], batch["masks"][at], bool(replay.memory.frames()[keys.SUCCESS][end])


def test_episode_page_shows_frames_and_curve_and_its_relabel_and_exclusion_reach_the_replay(
    context, server, run_dir
):
    from playwright.sync_api import expect

    seed_dir = run_dir / "online" / "online_qc_seed0"
    rewards, masks, success = _drawn_last_step(seed_dir, 0)
    assert len(rewards) and (masks == 1).all() and not success  # recorded: a failure
    page, response, errors = _page(context, f"{server}/episodes?token={TOKEN}")
    assert response.status == 200
    rows = page.locator("#episode-list tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(1).locator("td").nth(2)).to_have_text("success")
    requested: list[int] = []  # the steps of the frame requests the page makes
    frame = re.compile(r"/frames/front/(\d+)\.jpg")
    page.on("request", lambda r: (m := frame.search(r.url)) and requested.append(int(m.group(1))))
    rows.nth(0).click()
    expect(page.locator("#detail")).to_have_attribute("data-episode", "0")
    frames, camera = page.locator("#frames"), page.locator("#cam-front")
    page.wait_for_function("document.getElementById('cam-front').naturalWidth === 16", polling=100)
    assert requested == [0]  # the shown step's frame, not every frame of the episode up front (that
    # starved the live GUI server, which also relays the e-stop)
    expect(page.locator("#curve polyline")).to_have_count(1)
    expect(page.locator("#curve")).to_have_attribute("data-points", str(LENGTHS[0]))
    expect(page.locator("#curve rect.span")).to_have_count(1)  # the human's steps 2-4
    last = LENGTHS[0] - 1
    page.evaluate(  # scrubbing from the last step back to step 1 within one task: no pile of requests,
        # the frame in flight and then the newest step asked for
        """n => { const s = document.getElementById("step");
                  for (let i = n; i >= 1; i--) { s.value = i; s.dispatchEvent(new Event("input")); } }""",
        last,
    )
    expect(camera).to_have_attribute("src", re.compile(r"/1\.jpg"))
    expect(camera).to_have_attribute("data-loaded", "3")
    assert requested == [0, last, 1]
    page.locator("#play").click()
    expect(frames).to_have_attribute("data-step", str(last))  # played through
    expect(camera).to_have_attribute("src", re.compile(rf"/{last}\.jpg"))
    assert len(requested) <= 3 + last - 1  # steps 2 .. last, each at most once (a frame loaded before may
    # come from the page's image cache)

    page.locator("#label-success").click()
    expect(page.locator("#outcome")).to_contain_text("success (recorded failure)")
    expect(rows.nth(0).locator("td").nth(2)).to_have_text("success")
    page.locator("#note").fill("cube in the bin, detector missed it")
    page.locator("#save-note").click()
    expect(page.locator("#history li")).to_have_count(2)
    _screenshot(page, "gui_episodes.png", run_dir)
    rewards, masks, success = _drawn_last_step(seed_dir, 0)
    assert len(rewards) and (masks == 0).all() and (rewards == 1).all() and success

    page.locator("#exclude").check()
    expect(rows.nth(0)).to_have_class(re.compile("excluded"))
    replay = _learner_replay(seed_dir)
    drawn = replay.sample_online(2000, np.random.default_rng(1))["observations"][keys.STATE][:, 0] // 10
    assert set(drawn.tolist()) == {1.0, 2.0}  # episode 0 is never drawn
    assert not ZarrReplayBuffer(seed_dir / "actor0" / "episodes").episode(0)[keys.SUCCESS].any()
    page.locator("#exclude").uncheck()
    expect(rows.nth(0)).not_to_have_class(re.compile("excluded"))
    assert errors == []


def test_learner_page_plots_the_metrics_the_learner_writes(context, server, run_dir):
    from playwright.sync_api import expect

    page, response, errors = _page(context, f"{server}/learner?token={TOKEN}")
    assert response.status == 200
    expect(page.locator("#plot-rates")).to_have_attribute("data-series", "success_rate,intervention_rate")
    expect(page.locator("#plot-rates")).to_have_attribute("data-points", "5")
    expect(page.locator("#plot-losses")).to_have_attribute("data-series", "critic_loss,actor_loss")
    expect(page.locator("#plot-q")).to_have_attribute("data-series", "q_mean")
    expect(page.locator("#plot-speed polyline")).to_have_count(1)
    expect(page.locator("#summary tr")).to_have_count(2)
    _screenshot(page, "gui_learner.png", run_dir)
    assert errors == []


def _request(url: str, body: dict | None = None, token: str | None = TOKEN) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers)) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_wrong_token_and_bad_input_are_refused(context, server):
    page, response, _ = _page(context, f"{server}/episodes?token=wrong")
    assert response.status == 401
    api = f"{server}/api/history/actors"
    assert _request(api, token="wrong")[0] == 401 and _request(api, token=None)[0] == 401
    status, actors = _request(api)
    assert status == 200 and actors == [
        {"run": "online_qc_seed0", "actor": "actor0", "episodes": 3, "steps": 21, "cameras": ["front"]}
    ]
    episodes = f"{api}/online_qc_seed0/actor0/episodes"
    status, reply = _request(f"{api}/online_qc_seed0/actor7/episodes")
    assert status == 404 and "actor7" in reply["detail"]
    status, reply = _request(f"{episodes}/9")
    assert status == 404 and "no episode 9" in reply["detail"]
    assert _request(f"{episodes}/0/frames/wrist/0.jpg")[0] == 404
    assert _request(f"{episodes}/0/frames/front/99.jpg")[0] == 404
    assert _request(f"{episodes}/2/label", {"label": "great"})[0] == 422
    assert _request(f"{episodes}/2/exclude", {"exclude": "yes"})[0] == 422
    assert _request(f"{episodes}/9/label", {"label": "success"})[0] == 404
    status, reply = _request(f"{episodes}/2/label", {"label": "success"})
    assert status == 200 and reply["success"] and not reply["recorded_success"]
    status, reply = _request(f"{episodes}/2/label", {"label": None})
    assert status == 200 and not reply["success"] and reply["label"] is None
    assert [e["value"] for e in reply["history"]] == ["success", None]
