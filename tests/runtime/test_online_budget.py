"""The run's env-step budget holds over every actor, with the learner up or down (issue 39): the learner
grants each actor a lease (robot_rl.runtime.leases) and an actor never logs a step past it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from online_setup import copy_run, free_address, overrides, wait_for

from robot_rl import keys
from robot_rl.actor_build import build_actor_parts, describe_env
from robot_rl.config import ConfigError, load_config
from robot_rl.policies import factory as agents
from robot_rl.runtime.leases import ActorLease, Leases


def test_leases_never_pass_the_budget_and_survive_a_restart(tmp_path):
    leases = Leases(tmp_path, budget=1000, num_actors=2, window=120)
    leases.renew([0, 1], {})
    assert leases.granted == {0: 250, 1: 250}  # ceil(1000 / (2 * 2)) each: half of the share
    leases.renew([0, 1], {0: 240, 1: 30})  # renewed as steps are stored
    assert leases.granted == {0: 240 + 183, 1: 250}  # ceil((1000 - 270) / 4); actor 1 still has room
    again = Leases(tmp_path, budget=1000, num_actors=2, window=120)  # a restarted learner
    assert again.granted == leases.granted
    for stored in ({0: 420, 1: 30}, {0: 550, 1: 250}, {0: 670, 1: 300}):
        again.renew([0, 1], stored)
        assert sum(again.held(stored).values()) <= 1000
    assert again.granted == {0: 670, 1: 330}  # the whole budget is granted: no lease grows
    again.release(1, 300)  # actor 1 said bye with 30 steps of its lease unspent: they return
    again.renew([0], {0: 670, 1: 300})
    assert again.granted == {0: 700, 1: 300}
    again.release(0, 670)
    again.renew([2], {0: 670, 1: 300})  # a third actor joins
    assert again.granted[2] == 30


def test_a_late_or_old_actor_counts_what_it_stored(tmp_path):
    """Steps stored beyond a lease (an old log, or sent after a bye) count against the budget too."""
    leases = Leases(tmp_path, budget=300, num_actors=1, window=60)
    leases.renew([0, 1], {1: 280})
    assert leases.granted == {0: 20, 1: 280}


def test_damaged_lease_files_are_named(tmp_path):
    (tmp_path / "leases.json").write_text("{")
    with pytest.raises(ConfigError, match="leases.json: unreadable lease file"):
        Leases(tmp_path, budget=10, num_actors=1, window=1)
    (tmp_path / "lease.json").write_text("[]")
    with pytest.raises(ConfigError, match="lease.json: not a lease file"):
        ActorLease(tmp_path)
    (tmp_path / "ok").mkdir()
    lease = ActorLease(tmp_path / "ok")
    lease.set(42)
    assert lease.steps == 42 and ActorLease(tmp_path / "ok").steps == 42


def _served(run, *extra: str, address: str | None = None):
    """An in-process learner served on ``address`` (a free one by default); returns (learner, server)."""
    from robot_rl.runtime.learner import Learner
    from robot_rl.runtime.link import LearnerServer

    address = address or free_address()
    cfg = load_config(
        None,
        overrides(run, f"--online.address={address}", "--online.max_env_steps_ahead=0", *extra),
    )
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    return learner, LearnerServer(learner, address).start()


def _episode_lengths(log) -> list[int]:
    return np.diff(log.episode_ends, prepend=0).tolist()


@pytest.mark.parametrize("envs", [1, 2])
def test_actors_stop_at_the_budget_with_the_learner_up(tiny_offline_run, tmp_path, envs):
    """100 steps with 60-step episodes: the actor used to log 120 (a single env finished its second
    episode; two envs both started, the budget seemed to have room). Its lease is the budget: the last
    episodes are cut where it ends, and exactly 100 steps are logged and stored."""
    from robot_rl.runtime.batched_actor import actor_class
    from robot_rl.runtime.link import ZmqLearnerLink

    batched = ["--env.backend=mujoco_cpu", "--intervention.device=none"] if envs > 1 else []
    learner, server = _served(
        copy_run(tiny_offline_run, tmp_path / "run"),
        "--online.env_steps=100",
        "--env.max_episode_steps=60",
        f"--online.envs_per_actor={envs}",
        *batched,
    )
    try:
        actor = actor_class(learner.cfg)(
            learner.cfg, 0, 0, ZmqLearnerLink(server.address), build_actor_parts(learner.cfg, 0)
        )
        actor.run()
    finally:
        server.close()
    lengths = _episode_lengths(actor.log)
    assert sum(lengths) == learner.replay.num_steps == 100, lengths
    assert max(lengths) <= 60


def test_with_the_learner_down_an_actor_spends_its_lease_then_waits_and_delivers(tiny_offline_run, tmp_path):
    """Issue 39: with the learner down each actor stopped once its own log held the whole budget (two
    actors logged 2x the budget), and gave up after online.max_weight_age_s / connect_timeout_s with
    episodes not sent. Now it acts until its lease is spent (the last episode cut there), then waits, however
    long, and delivers when the learner is back; the run then ends at the budget."""
    from robot_rl.runtime.actor import Actor
    from robot_rl.runtime.link import LearnerServer, ZmqLearnerLink

    run = copy_run(tiny_offline_run, tmp_path / "run")
    timeouts = ["--online.connect_timeout_s=1", "--online.max_weight_age_s=0"]  # 0: weights never stale
    learner, server = _served(
        run, "--online.env_steps=100", "--env.max_episode_steps=60", "--intervention.device=none", *timeouts
    )
    first = Actor(learner.cfg, 0, 0, ZmqLearnerLink(server.address), build_actor_parts(learner.cfg, 0))
    first.sender.start()
    first._wait_for_policy()  # the weights and the lease (the whole budget: one actor, window 120)
    first.sender.closed.set()
    first.sender.join(timeout=5)
    assert first.lease.steps == 100
    server.close()  # the learner is down
    actor = Actor(
        learner.cfg,
        0,
        0,
        ZmqLearnerLink(server.address, timeout_s=0.2, token=server.token),
        build_actor_parts(learner.cfg, 0),
    )
    done: dict = {}
    runner = threading.Thread(target=lambda: done.update(actor.run()), daemon=True)
    runner.start()  # on the cached weights and lease
    try:
        wait_for(lambda: len(actor.log) >= 100, timeout_s=120, what="the lease spent")
        time.sleep(3)  # past online.connect_timeout_s: it waits, it does not exit
        assert runner.is_alive() and len(actor.log) == 100
        assert max(_episode_lengths(actor.log)) <= 60  # the last episode was cut at the lease's end
        assert learner.replay.num_steps == 0
        server = LearnerServer(learner, server.address).start()  # the learner is back
        runner.join(timeout=60)
        assert not runner.is_alive(), "the actor did not deliver and stop once the learner was back"
    finally:
        actor.sender.closed.set()
        server.close()
    assert done["steps"] == 100 and learner.replay.num_steps == 100
    assert learner.replay.acked[0] == actor.log.num_episodes
    assert actor.lease.steps == 100 and learner.leases.granted == {0: 100}  # handed back at bye: none left


def test_stale_weights_pause_the_actor_until_the_learner_is_back(tiny_offline_run, tmp_path):
    """online.max_weight_age_s without contact used to end the actor with an error; now it stops acting
    (no episode starts) and acts again once the learner answers."""
    from robot_rl.runtime.actor import Actor
    from robot_rl.runtime.link import LearnerServer, ZmqLearnerLink

    run = copy_run(tiny_offline_run, tmp_path / "run")
    learner, server = _served(
        run, "--online.env_steps=2000", "--intervention.device=none", "--online.max_weight_age_s=1"
    )
    actor = Actor(
        learner.cfg, 0, 0, ZmqLearnerLink(server.address, timeout_s=0.2), build_actor_parts(learner.cfg, 0)
    )
    runner = threading.Thread(target=actor.run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: actor.log.num_episodes >= 1, timeout_s=120, what="a first episode")
        server.close()
        wait_for(lambda: actor._waiting == "stale", timeout_s=60, what="a pause on stale weights")
        paused = len(actor.log)
        time.sleep(2.0)
        assert runner.is_alive() and len(actor.log) == paused, "it acted on stale weights"
        server = LearnerServer(learner, server.address).start()
        wait_for(lambda: len(actor.log) > paused, timeout_s=60, what="acting again")
        assert keys.ACTION in actor.log.episode(0)
    finally:
        actor.parent_pid = -1  # as if its parent were gone: it stops
        runner.join(timeout=30)
        server.close()
    assert not runner.is_alive()


def test_rejected_episodes_use_up_no_lease_and_the_run_still_ends(tiny_offline_run, tmp_path):
    """An episode the learner rejects (robot_rl.runtime.episode_guard) is acknowledged, never stored: its
    steps must count for neither side, or the leases would hold budget that never gets stored and the
    learner would wait for it forever."""
    from robot_rl.runtime.actor import Actor
    from robot_rl.runtime.episode_guard import EpisodeRejected
    from robot_rl.runtime.link import ZmqLearnerLink

    learner, server = _served(
        copy_run(tiny_offline_run, tmp_path / "run"),
        "--online.env_steps=100",
        "--env.max_episode_steps=60",
        "--intervention.device=none",
    )
    check, seen = learner.guard.check, []

    def reject_the_first(frames, where: str) -> None:
        seen.append(where)
        if len(seen) == 1:
            raise EpisodeRejected(f"{where}: rejected by the test")
        check(frames, where)

    learner.guard.check = reject_the_first
    actor = Actor(learner.cfg, 0, 0, ZmqLearnerLink(server.address), build_actor_parts(learner.cfg, 0))
    runner = threading.Thread(target=actor.run, daemon=True)
    runner.start()
    runner.join(timeout=180)
    actor.sender.closed.set()
    server.close()
    assert not runner.is_alive(), "the run never ended: the rejected steps held budget that never came"
    rejected = _episode_lengths(actor.log)[0]
    assert actor.lease.rejected == rejected
    assert learner.replay.num_steps == 100 and len(actor.log) == 100 + rejected


def test_the_learner_names_a_silent_actor_that_holds_an_unspent_lease(tiny_offline_run, tmp_path, caplog):
    """A dead actor's lease holds budget until it is back: the learner names it (status and log) once it
    has been silent for its threshold, instead of waiting without a word."""
    from robot_rl.runtime.link import ZmqLearnerLink

    learner, server = _served(copy_run(tiny_offline_run, tmp_path / "run"), "--online.num_actors=2")
    try:
        ZmqLearnerLink(server.address).hello(1)  # leased, then silent, as if killed
        assert learner.leases.granted[1] > 0 and learner.status()["waiting_for"] == []
        learner._silent_s = 0.2
        time.sleep(0.3)
        assert learner.status()["waiting_for"] == [1]
        with caplog.at_level("WARNING", logger="robot_rl.runtime.learner"):
            learner._check_faults()  # what train() calls whenever it waits for data
        assert "waiting for actors [1]" in caplog.text
    finally:
        server.close()
