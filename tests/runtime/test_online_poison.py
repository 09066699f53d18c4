"""Poisoned pushed episodes never end a run (issue 39): a live learner (real LearnerServer on 127.0.0.1,
real ZmqLearnerLink, the tiny offline run's config) refuses episodes whose values are outside the run's
bounds with a one-line reason, stores none of them and keeps training; when training diverges anyway, it
rolls back to its last checkpoint, quarantines the episodes stored since and goes on, and the same
command resumes."""

from __future__ import annotations

import json
import logging
import threading
import time

import numpy as np
import pytest
from online_setup import copy_run, overrides, wait_for

from robot_rl import keys
from robot_rl.actor_build import build_actor_parts, describe_env
from robot_rl.config import load_config
from robot_rl.policies import factory as agents
from robot_rl.runtime.metrics import episode_meta
from robot_rl.runtime.weights import NonFiniteWeightsError, agent_weights

STEPS = 60  # the 60-step episodes


def _served(run, *extra: str):
    """An in-process learner on tcp://127.0.0.1:0, its server and a real ZeroMQ link to it."""
    from robot_rl.runtime.learner import Learner
    from robot_rl.runtime.link import LearnerServer, ZmqLearnerLink

    cfg = load_config(None, overrides(run, "--online.address=tcp://127.0.0.1:0", *extra))
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    server = LearnerServer(learner, cfg.online.address).start()
    return learner, server, ZmqLearnerLink(server.address, timeout_s=5.0)


def _episode(learner, **values) -> dict[str, np.ndarray]:
    """A truncated STEPS-step episode of zeros (inside every bound of the tiny run), with ``values``
    (key -> fill value) written into every frame of those keys."""
    frames = {k: np.zeros((STEPS, *shape), dtype) for k, (shape, dtype) in learner.episode_spec.items()}
    frames.update({k: np.zeros(shape, dtype) for k, (shape, dtype) in learner.final_spec.items()})
    for key, value in values.items():
        frames[key][:] = value
    return frames


def _push(link, learner, episode: int, frames: dict) -> dict:
    return link.push(0, episode, frames, episode_meta(frames, learner.cfg.env.control_hz, -1))


def _training(learner) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["summary"] = learner.train(drain_s=0)
        except Exception as err:  # noqa: BLE001 - handed to the test
            out["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _finished(thread: threading.Thread, out: dict, timeout_s: float = 120) -> dict:
    thread.join(timeout_s)
    assert not thread.is_alive(), "the learner did not finish training"
    assert "error" not in out, f"the learner stopped: {out.get('error')}"
    return out["summary"]


def _finite(learner) -> bool:
    try:
        agent_weights(learner.agent)
    except NonFiniteWeightsError:
        return False
    return True


def test_poison_episodes_are_refused_with_their_reason_and_the_learner_trains_on(tiny_offline_run, tmp_path):
    """Issue 39: obs 1e30 and reward 3e38 made the learner diverge within 4 s (and the run could not be
    resumed: they stayed in the replay); action 1000 (box ±0.03 m) and reward 1e4 were stored silently."""
    run = copy_run(tiny_offline_run, tmp_path / "run")
    learner, server, link = _served(run, f"--online.env_steps={2 * STEPS}")
    thread, out = _training(learner)
    poisons = {  # episode -> (frames, what its one-line reason must say)
        1: (
            _episode(learner, **{keys.STATE: 1e30}),
            [f"'{keys.STATE}' at frame 0 entry 0 is 1e+30, allowed ["],
        ),
        2: (_episode(learner, **{keys.REWARD: 3e38}), [f"'{keys.REWARD}' at frame 0 is 3e+38", "[-1, 2]"]),
        3: (
            _episode(learner, **{keys.ACTION: 1000.0}),
            [f"'{keys.ACTION}' at frame 0 entry 0 (a policy step) is 1000, allowed [-0.03006, 0.03006]"],
        ),
        4: (
            _episode(learner, **{keys.REWARD: 1e4, keys.INTERVENTION: True}),
            [f"'{keys.REWARD}' at frame 0 is 10000, allowed [-1, 2] (the reward range)"],
        ),
        5: (
            _episode(learner, **{keys.ACTION: -1000.0, keys.INTERVENTION: True}),
            ["(an intervention step) is -1000, allowed [-0.03006, 0.03006] (the env's action box)"],
        ),
    }
    try:
        assert _push(link, learner, 0, _episode(learner))["acked"] == 1
        for episode, (frames, needles) in poisons.items():
            reply = _push(link, learner, episode, frames)
            reason = reply.get("rejected", "")
            assert reply["acked"] == episode + 1, reply  # handled: the actor moves on
            assert reason.startswith(f"actor 0 episode {episode}: ") and "\n" not in reason, reason
            for needle in needles:
                assert needle in reason, reason
            assert reply["status"]["rejected_episodes"] == episode
        first = poisons[1][1][0]
        assert first in _push(link, learner, 1, poisons[1][0]).get("rejected", "")  # a resend: the same
        assert learner.replay.num_episodes == 1 and learner.replay.num_steps == STEPS  # 0 poison stored
        assert _push(link, learner, 6, _episode(learner))["acked"] == 7
        summary = _finished(thread, out)
    finally:
        server.close()
        link.close()
    assert summary["updates"] == 2 * STEPS and _finite(learner)
    assert summary["env_steps"] == 2 * STEPS and summary["episodes"] == 2
    saved = json.loads((learner.dir / "summary.json").read_text())["rejected_episodes"]
    assert saved["0"]["count"] == len(poisons) and len(saved["0"]["reasons"]) == len(poisons)
    assert saved["0"]["reasons"][0].startswith("actor 0 episode 1: 'observation.state'")
    # the rejections are durable: a restarted learner acknowledges them and answers a resend the same
    learner, server, link = _served(run, f"--online.env_steps={2 * STEPS}")
    try:
        reply = _push(link, learner, 3, poisons[3][0])
        assert reply["acked"] == 7 and poisons[3][1][0] in reply["rejected"]
        assert reply["status"]["rejected_episodes"] == len(poisons)
    finally:
        server.close()
        link.close()


def _checkpoint_updates(learner) -> int:
    try:
        return json.loads((learner.dir / "learner_resume" / "learner_state.json").read_text())["updates"]
    except (FileNotFoundError, json.JSONDecodeError):
        return -1


def test_divergence_rolls_back_quarantines_and_the_same_command_resumes(tiny_offline_run, tmp_path, caplog):
    """Issue 39: training that diverged stopped the run for good, and the episode that drove it stayed in
    the replay. With the observation range check off (online.obs_range_factor=0: finite values only), an
    observation of 1e30 passes validation and drives the weights to NaN through the real update."""
    run = copy_run(tiny_offline_run, tmp_path / "run")
    args = ("--online.obs_range_factor=0", f"--online.env_steps={3 * STEPS}")
    learner, server, link = _served(run, *args)
    thread, out = _training(learner)
    try:
        assert _push(link, learner, 0, _episode(learner))["acked"] == 1
        wait_for(lambda: _checkpoint_updates(learner) == STEPS, 60, what="the checkpoint after episode 0")
        with caplog.at_level(logging.ERROR, logger="robot_rl.runtime.learner"):
            assert "rejected" not in _push(link, learner, 1, _episode(learner, **{keys.STATE: 1e30}))
            wait_for(lambda: learner.replay.quarantined.reasons, 60, what="the rollback")
            assert _push(link, learner, 2, _episode(learner))["acked"] == 3
            summary = _finished(thread, out)
    finally:
        server.close()
        link.close()
    quarantine = [json.loads(line) for line in (learner.dir / "quarantine.jsonl").read_text().splitlines()]
    assert [(q["actor"], q["episode"]) for q in quarantine] == [(0, 1)]
    assert "training diverged" in quarantine[0]["reason"]
    rollback = [r.getMessage() for r in caplog.records if "rolled back to" in r.getMessage()]
    assert len(rollback) == 1 and "actor 0 episode 1" in rollback[0], rollback
    assert f"{learner.dir / 'learner_resume'} ({STEPS} updates" in rollback[0]
    assert summary["quarantined_episodes"] == [[0, 1]] and summary["updates"] == 3 * STEPS
    assert learner.replay.num_episodes == 3 and _finite(learner)  # kept on disk, trained past
    # the same command resumes: the quarantine holds across the restart, no batch ever sees the 1e30
    learner, server, link = _served(run, *args)
    try:
        assert learner.replay.sampled_steps == 2 * STEPS and learner.replay.num_steps == 3 * STEPS
        with learner.lock:
            for batch in learner.draw_batches():
                assert np.abs(batch["observations"][keys.STATE]).max() < 1e3
        thread, out = _training(learner)
        assert _finished(thread, out)["quarantined_episodes"] == [[0, 1]] and _finite(learner)
    finally:
        server.close()
        link.close()


def test_training_that_diverges_again_and_again_stops_with_one_line(tiny_offline_run, tmp_path):
    """A genuinely unstable config (a learning rate of 1e20) diverges after every rollback: the learner
    gives up after online.max_rollbacks rollbacks in a row, naming the checkpoint, and never writes a NaN
    checkpoint."""
    run = copy_run(tiny_offline_run, tmp_path / "run")
    learner, server, link = _served(run, "--offline.lr=1e20", "--online.max_rollbacks=2")
    try:
        assert _push(link, learner, 0, _episode(learner))["acked"] == 1
        start = time.monotonic()
        with pytest.raises(NonFiniteWeightsError) as stopped:
            learner.train(drain_s=0)
    finally:
        server.close()
        link.close()
    line = str(stopped.value)
    assert "\n" not in line and "after 2 rollbacks in a row to" in line and "online.max_rollbacks=2" in line
    assert time.monotonic() - start < 60
    from robot_rl.training.resume import restore

    restore(learner.agent, learner.dir / "learner_resume")
    assert _finite(learner)  # the last checkpoint is still a good one
    assert not learner.replay.quarantined.reasons  # episode 0 came before it: nothing to blame


def test_ledger_cuts_a_torn_last_line_and_refuses_a_garbled_one(tmp_path):
    """A crash while a rejection was written (so never answered) leaves a torn last line: it is cut off and
    the records before it stay; a garbled line elsewhere is refused naming the file and line."""
    from robot_rl.data.errors import DatasetError
    from robot_rl.runtime.episode_ledger import EpisodeLedger

    path = tmp_path / "rejected.jsonl"
    EpisodeLedger(path).add(0, 0, "actor 0 episode 0: 'next.reward' at frame 0 is 10000")
    with open(path, "a") as f:
        f.write('{"actor": 0, "episode": 1, "rea')
    ledger = EpisodeLedger(path)
    assert list(ledger.reasons) == [(0, 0)] and path.read_text().endswith('10000"}\n')
    ledger.add(0, 1, "again")
    assert EpisodeLedger(path).per_actor() == {0: [ledger.reason(0, 0), "again"]}
    path.write_text('{"actor": 0}\n' + path.read_text())
    with pytest.raises(DatasetError, match=f"{path}: line 1 is not an episode record"):
        EpisodeLedger(path)


def test_guard_allows_ordinary_values_around_a_feature_constant_in_the_demos():
    """A span of 0 (a sensor that never moved in the demos) is floored at MIN_SPAN: ordinary readings
    pass, 1e30 does not."""
    from robot_rl.runtime.episode_guard import EpisodeGuard, EpisodeRejected, action_bounds

    zero = np.zeros(2, np.float32)
    guard = EpisodeGuard(action_bounds(zero - 1, zero + 1), (0.0, 1.0), {keys.STATE: (zero, zero)}, 10.0, 0)
    frames = {
        keys.TASK_INDEX: np.zeros(3, np.int64),
        keys.ACTION: np.zeros((3, 2), np.float32),
        keys.REWARD: np.zeros(3, np.float32),
        keys.INTERVENTION: np.zeros(3, bool),
        keys.STATE: np.full((3, 2), 9.5, np.float32),
        keys.final_key(keys.STATE): np.full(2, -9.5, np.float32),
    }
    guard.check(frames, "actor 0 episode 0")
    frames[keys.final_key(keys.STATE)][1] = 1e30
    final = r"'final.observation.state' at the final observation entry 1 is 1e\+30, allowed \[-10, 10\]"
    with pytest.raises(EpisodeRejected, match=final):
        guard.check(frames, "actor 0 episode 0")
    frames[keys.TASK_INDEX][2] = 1
    with pytest.raises(EpisodeRejected, match="'task_index' at frame 2 is 1, allowed \\[0, 0\\]"):
        guard.check(frames, "actor 0 episode 0")


def test_an_actor_whose_episodes_are_all_rejected_stops_and_the_run_ends(tiny_offline_run, tmp_path):
    """Rejected steps count for no lease, so an actor whose every episode is rejected (here its cube spawns
    outside the demos' range, and the guard allows none of it) would act forever and the run never end.
    After online.max_rejected_episodes in a row it says bye with the fault and stops with one line, and the
    learner, with every actor faulted, stops too."""
    from robot_rl.runtime.actor import Actor, RejectedEpisodesError
    from robot_rl.runtime.learner import ActorsFaultedError

    learner, server, link = _served(
        copy_run(tiny_offline_run, tmp_path / "run"),
        "--online.obs_range_factor=0.000001",
        "--env.spawn_region=[0.56, 0.62, 0.16, 0.22]",  # demos: x 0.38-0.55, y -0.15-0.15
        "--online.max_rejected_episodes=2",
        "--intervention.device=none",
        "--online.max_env_steps_ahead=0",
    )
    try:
        actor = Actor(learner.cfg, 0, 0, link, build_actor_parts(learner.cfg, 0))
        out: dict = {}

        def act() -> None:
            try:
                out["counters"] = actor.run()
            except Exception as err:  # noqa: BLE001 - handed to the test
                out["error"] = err

        runner = threading.Thread(target=act, daemon=True)
        runner.start()
        runner.join(120)
        actor.sender.closed.set()
        assert not runner.is_alive(), "the actor kept acting on episodes the learner rejects"
        assert isinstance(out.get("error"), RejectedEpisodesError), out
        assert "actor 0: the learner rejected 2 episodes in a row" in str(out["error"])
        assert learner.replay.num_steps == 0 and learner.status()["rejected_episodes"] >= 2
        assert "rejected 2 episodes in a row" in learner.faults[0]  # the bye said why
        with pytest.raises(ActorsFaultedError, match="actor 0: actor 0: the learner rejected"):
            learner.train(drain_s=0)
    finally:
        server.close()
        link.close()
