"""Recorded episode edits (relabel, note, exclude) reach the learner's replay: live, after a reopen, and a
damaged edit log is refused with the file and line named."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from online_setup import toy_episode

from robot_rl import keys
from robot_rl.actor_build import describe_env
from robot_rl.data.errors import DatasetError
from robot_rl.policies import factory as agents
from robot_rl.runtime.episode_edits import EditLogError, RunEdits, actor_log, label_values
from robot_rl.runtime.replay import OnlineReplay, rlpd_batch

SHAPES = {keys.STATE: (3,)}


def _episode(value: float, length: int = 4, intervened: bool = False) -> dict:
    """A toy episode whose state[0] is ``10 * value + step`` (so each sampled chunk names its step)."""
    frames = toy_episode(length, intervened=intervened, value=value)
    frames[keys.STATE][:, 0] = 10 * value + np.arange(length)
    return frames


def _replay(seed_dir, horizon: int = 1) -> OnlineReplay:
    return OnlineReplay(seed_dir / "replay", SHAPES, 2, horizon=horizon, gamma=0.9, edits_dir=seed_dir)


def _drawn(replay: OnlineReplay, n: int = 400) -> dict:
    return replay.sample_online(n, np.random.default_rng(0))


def _last_step_of(batch: dict, value: float, length: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """(rewards, masks) of the drawn chunks that start at the last step of episode ``value``."""
    at = batch["observations"][keys.STATE][:, 0] == 10 * value + length - 1
    assert at.any()
    return batch["rewards"][at], batch["masks"][at]


def test_relabel_changes_what_the_sampler_draws_live_and_after_a_reopen(tmp_path):
    replay = _replay(tmp_path)
    assert replay.add(0, 0, _episode(1.0)) and replay.add(0, 1, _episode(2.0))
    rewards, masks = _last_step_of(_drawn(replay), 1.0)
    assert (rewards == 0).all() and (masks == 1).all()  # recorded: a failure, truncated
    edits = actor_log(tmp_path, 0)
    edits.append(0, "label", "success")
    edits.append(0, "note", "the cube was in the bin; the detector missed it")
    assert replay.refresh_edits() and not replay.refresh_edits()  # picked up once, between updates
    for _ in range(2):  # live, then a new replay opened on the same folders
        rewards, masks = _last_step_of(_drawn(replay), 1.0)
        assert (rewards == 1).all() and (masks == 0).all()  # label_values: success = done, reward 1
        held = replay.memory.frames()
        assert held[keys.SUCCESS][:4].tolist() == [False, False, False, True]
        assert held[keys.SUCCESS][4:].tolist() == [False] * 4  # the other episode is untouched
        replay = _replay(tmp_path)
    assert not replay.buffer.episode(0)[keys.SUCCESS].any()  # the recorded frames are not rewritten
    edits.append(0, "label", None)  # back to what was recorded
    replay.refresh_edits()
    rewards, masks = _last_step_of(_drawn(replay), 1.0)
    assert (rewards == 0).all() and (masks == 1).all()
    assert [e["set"] for e in RunEdits(tmp_path).get(0, 0).history] == ["label", "note", "label"]


def test_excluded_episode_is_never_drawn_including_one_that_arrives_after_the_edit(tmp_path):
    replay = _replay(tmp_path, horizon=2)
    replay.add(0, 0, _episode(1.0))
    replay.add(0, 1, _episode(2.0, intervened=True))
    actor_log(tmp_path, 0).append(1, "exclude", True)
    actor_log(tmp_path, 1).append(0, "exclude", True)  # actor 1 has sent nothing yet
    replay.refresh_edits()
    replay.add(1, 0, _episode(3.0))
    for _ in range(2):
        drawn = _drawn(replay)["observations"][keys.STATE][:, 0] // 10
        assert set(drawn.tolist()) == {1.0}
        assert replay.sampled_steps == 4 and replay.intervention_steps == 0
        batch = rlpd_batch(replay, None, 64, 0.5, np.random.default_rng(1))  # no prior: all online
        assert set((batch["observations"][keys.STATE][:, 0] // 10).tolist()) == {1.0}
        replay = _replay(tmp_path, horizon=2)
    actor_log(tmp_path, 0).append(0, "exclude", True)
    replay.refresh_edits()
    assert replay.sampled_steps == 0 and _drawn(replay) == {}
    with pytest.raises(DatasetError, match="no demonstrations, interventions or online steps"):
        rlpd_batch(replay, None, 8, 0.5, np.random.default_rng(0))
    actor_log(tmp_path, 0).append(1, "exclude", False)
    replay.refresh_edits()
    assert set((_drawn(replay)["observations"][keys.STATE][:, 0] // 10).tolist()) == {2.0}


def test_a_garbled_edit_line_is_refused_naming_the_file_and_line(tmp_path, caplog):
    replay = _replay(tmp_path)
    replay.add(0, 0, _episode(1.0))
    log = actor_log(tmp_path, 0)
    log.append(0, "label", "success")
    replay.refresh_edits()
    with open(log.path, "a") as f:
        f.write('{"time": "t", "episode": 0, "set": "label", "value": "maybe"}\n')
    with pytest.raises(EditLogError, match=r"actor0/edits\.jsonl:2: a label must be one of"):
        _replay(tmp_path)  # a new learner refuses to start on it
    with caplog.at_level(logging.ERROR):
        assert not replay.refresh_edits()  # a running one logs it and keeps the edits it read
    assert "edits.jsonl:2" in caplog.text
    rewards, _ = _last_step_of(_drawn(replay), 1.0)
    assert (rewards == 1).all()
    log.path.write_text(log.path.read_text().splitlines()[0] + "\nnot json\n")
    with pytest.raises(EditLogError, match=r"edits\.jsonl:2: not a JSON edit"):
        log.read()
    log.path.write_text(log.path.read_text().splitlines()[0] + '\n{"time": "t", "epis')
    assert len(log.read()) == 1  # a line without its newline is not committed yet
    with pytest.raises(EditLogError, match="the last line has no newline"):
        log.append(0, "exclude", True)  # nothing is written behind a cut-short line
    assert log.path.read_text().endswith('"epis')
    with pytest.raises(EditLogError, match="exclude must be true or false"):
        actor_log(tmp_path, 1).append(0, "exclude", "yes")
    assert not actor_log(tmp_path, 1).path.exists()


def test_label_values_follow_the_live_label_rule():
    assert label_values("success") == {keys.SUCCESS: True, keys.DONE: True, keys.REWARD: 1.0}
    assert label_values("failure") == {keys.SUCCESS: False, keys.DONE: False, keys.REWARD: 0.0}
    with pytest.raises(ValueError, match="label must be one of"):
        label_values("great")


def _zeros_episode(learner, length: int, success: bool = False, intervened: int = 0) -> dict:
    """An all-zero episode that fits ``learner`` (per-frame keys and the final observation)."""
    frames = {k: np.zeros((length, *s), dt) for k, (s, dt) in learner.episode_spec.items()}
    frames.update({k: np.zeros(s, dt) for k, (s, dt) in learner.final_spec.items()})
    frames[keys.SUCCESS][-1] = frames[keys.DONE][-1] = success
    frames[keys.INTERVENTION][:intervened] = True
    return frames


def test_learner_rates_and_summary_count_episodes_as_edited(tiny_offline_run, tmp_path):
    """summary.json and the learner's metric rows follow relabels and exclusions (they had counted the
    recorded labels and every episode)."""
    from online_setup import copy_run, overrides

    from robot_rl.config import load_config
    from robot_rl.runtime.learner import Learner
    from robot_rl.runtime.metrics import episode_meta

    run = copy_run(tiny_offline_run, tmp_path / "run")
    cfg = load_config(None, overrides(run))
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    hz = learner.cfg.env.control_hz
    recorded = [
        _zeros_episode(learner, 4, success=True),
        _zeros_episode(learner, 4),
        _zeros_episode(learner, 6, intervened=6),
    ]
    for ep, frames in enumerate(recorded):
        learner.push(0, ep, frames, episode_meta(frames, hz, 0))
    with learner.lock:
        row = learner.window_snapshot()
    assert row["success_rate"] == pytest.approx(1 / 3) and row["intervention_rate"] == pytest.approx(6 / 14)
    edits = actor_log(learner.dir, 0)
    edits.append(1, "label", "success")  # the detector missed it
    edits.append(2, "exclude", True)  # a bad reset: not trained on, not counted
    with learner.lock:
        assert learner.refresh_edits()  # as the training loop does between updates
        row = learner.window_snapshot()
    assert row["success_rate"] == 1.0 and row["intervention_rate"] == 0.0
    late = _zeros_episode(learner, 5, success=True)  # relabelled before the learner got it
    edits.append(3, "label", "failure")
    with learner.lock:
        learner.refresh_edits()
    learner.push(0, 3, late, episode_meta(late, hz, 0))
    with learner.lock:
        assert learner.window_snapshot()["success_rate"] == pytest.approx(2 / 3)
    learner._finish()  # what train() does at the end: the final checkpoint and summary.json
    summary = json.loads((learner.dir / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["excluded_episodes"] == 1
    assert summary["success_rate"] == pytest.approx(2 / 3) and summary[
        "last20_success_rate"
    ] == pytest.approx(2 / 3)
    assert summary["intervention_rate"] == 0.0
    assert not learner.replay.buffer.episode(1)[keys.SUCCESS].any()  # the recorded frames stay


def test_live_rates_of_the_gui_panel_follow_the_actor_edits(tmp_path):
    """The actor's live success / intervention rates (the GUI panel) count relabels and exclusions."""
    import time

    from robot_rl.runtime.live import EDITS_POLL_S, LiveStats

    live = LiveStats(0, 10.0, edits_dir=tmp_path)
    for index, (success, intervened) in enumerate([(True, 0), (False, 0), (False, 4)]):
        frames = toy_episode(4, intervened=bool(intervened))
        frames[keys.SUCCESS][-1] = frames[keys.DONE][-1] = success
        live.episode_end(frames, index)

    def rates():
        info = live.step({}, 1, 0.0, {}, False, 0, 1, 0, 0)
        return info["success_rate"], info["intervention_rate"]

    assert rates() == (pytest.approx(1 / 3), pytest.approx(4 / 12))
    actor_log(tmp_path, 0).append(1, "label", "success")
    actor_log(tmp_path, 0).append(2, "exclude", True)
    actor_log(tmp_path, 1).append(0, "label", "failure")  # another actor's episode 0: not this one's
    deadline = time.monotonic() + 10 * EDITS_POLL_S
    while rates() != (1.0, 0.0):
        assert time.monotonic() < deadline, f"the edits never reached the live rates: {rates()}"
        time.sleep(0.05)
