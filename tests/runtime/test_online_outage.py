"""Recovery after a learner outage (issue 39): two real actor processes ride out a learner that stays down
longer than their timeouts, act on within their budget leases, deliver every episode once it is back, and
the run ends at its budget with nothing lost; the restarted learner names the actor it still waits for.

Before, with two actors and the learner down, each actor logged the whole budget (6,033 env steps for
3,000), and each gave up after ``online.max_weight_age_s`` / ``connect_timeout_s`` with episodes not sent,
so the restarted learner waited forever without a word. Here the timeouts are scaled down (3 s and 6 s
against a 15-s outage); ``ROBOT_RL_OUTAGE_S=180`` runs the issue's case (3 minutes, the default 120-s and
600-s timeouts) and ``ROBOT_RL_OUTAGE_BUDGET`` sets the budget (600 here)."""

from __future__ import annotations

import os
import re
import signal
import time

import numpy as np
import pytest
import zarr
from online_setup import committed_episodes, copy_run, free_address, learner_token, overrides, start, wait_for

from robot_rl import keys
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.runtime.replay import ACTOR_EPISODE_KEY, ACTOR_KEY
from robot_rl.transport import PeerUnavailableError

OUTAGE_S = float(os.environ.get("ROBOT_RL_OUTAGE_S", "15"))
BUDGET = int(os.environ.get("ROBOT_RL_OUTAGE_BUDGET", "600"))
pytestmark = [pytest.mark.timeout(int(600 + 2 * OUTAGE_S))]


def _signal(proc, sig: int) -> None:
    os.killpg(proc.pid, sig)


def _committed_frames(buffer) -> int:
    """Env steps committed in a zarr episode buffer another process may be writing (read-only)."""
    try:
        return int(zarr.open_group(str(buffer), mode="r").attrs["committed"]["frames"])
    except (FileNotFoundError, KeyError, zarr.errors.GroupNotFoundError):
        return 0


def _status(run, address: str) -> dict | None:
    """The learner's status through a real link, or None while it does not answer."""
    from robot_rl.runtime.link import ZmqLearnerLink

    try:
        link = ZmqLearnerLink(address, timeout_s=2.0, token=learner_token(run))
    except AssertionError:  # no token file yet: the learner has not started
        return None
    try:
        return link.weights(2**60)[0]["status"]
    except PeerUnavailableError:
        return None
    finally:
        link.close()


def _alive_for(seconds: float, procs: list, logs: list) -> None:
    """Wait ``seconds``; every process in ``procs`` must stay alive meanwhile."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for proc, log in zip(procs, logs, strict=True):
            assert proc.poll() is None, f"{log.name} exited ({proc.returncode}):\n{log.read_text()[-2000:]}"
        time.sleep(0.5)


def _assert_every_episode_stored_once(folder, actors) -> int:
    """The learner's replay holds exactly each actor's logged episodes, in order, once. Returns the env
    steps the actors logged in all."""
    replay = ZarrReplayBuffer(folder / "replay")
    arrays = replay.arrays()
    starts = np.concatenate([[0], replay.episode_ends[:-1]]).astype(int)
    total = 0
    for k in actors:
        log = ZarrReplayBuffer(folder / f"actor{k}" / "episodes")
        mine = [i for i, s in enumerate(starts) if arrays[ACTOR_KEY][s] == k]
        assert len(mine) == log.num_episodes > 0, f"actor {k}: {log.num_episodes} logged, {len(mine)} stored"
        assert [int(arrays[ACTOR_EPISODE_KEY][starts[i]]) for i in mine] == list(range(log.num_episodes))
        for i, ep in enumerate(mine):
            a, b = starts[ep], replay.episode_ends[ep]
            np.testing.assert_array_equal(arrays[keys.ACTION][a:b], log.episode(i)[keys.ACTION])
        total += len(log)
    assert len(replay) == total
    return total


@pytest.mark.e2e
def test_two_actors_ride_out_a_learner_outage_and_the_run_ends_at_its_budget(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    address = free_address()
    timeouts = (
        ["--online.connect_timeout_s=120", "--online.max_weight_age_s=600"]  # the defaults
        if OUTAGE_S >= 180
        else ["--online.connect_timeout_s=3", "--online.max_weight_age_s=6"]
    )
    args = overrides(
        run,
        f"--online.address={address}",
        f"--online.env_steps={BUDGET}",
        "--online.num_actors=2",
        "--online.max_env_steps_ahead=40",  # the actors keep pace with the learner while it is up
        *timeouts,
    )
    folder = run / "online" / "online_qc_seed0"
    logs = [tmp_path / "actor0.log", tmp_path / "actor1.log"]
    learner_log = tmp_path / "learner.log"
    learner = start("online", "--role", "learner", *args, log=learner_log)
    actors: list = []
    try:
        wait_for(lambda: _status(run, address) is not None, procs=(learner,), what="the learner serving")
        actors = [start("online", "--role", "actor", f"--actor-id={k}", *args, log=logs[k]) for k in (0, 1)]
        wait_for(
            lambda: (
                all(committed_episodes(folder / f"actor{k}" / "episodes") for k in (0, 1))
                and (status := _status(run, address)) is not None
                and status["env_steps"] >= BUDGET // 6
            ),
            procs=(learner, *actors),
            what="an episode of each actor and a sixth of the budget stored",
        )
        _signal(learner, signal.SIGKILL)
        learner.wait(timeout=30)
        stored_at_kill = _committed_frames(folder / "replay")
        _alive_for(OUTAGE_S, actors, logs)  # longer than both timeouts: nobody gives up
        logged = sum(_committed_frames(folder / f"actor{k}" / "episodes") for k in (0, 1))
        assert stored_at_kill < logged <= BUDGET, "the actors acted on within their leases, no further"

        _signal(actors[1], signal.SIGSTOP)  # actor 1 cannot say hello to the restarted learner
        learner = start("online", "--role", "learner", *args, log=learner_log)
        wait_for(
            lambda: (status := _status(run, address)) is not None and status["waiting_for"] == [1],
            procs=(learner, actors[0]),
            what="the restarted learner reporting that it waits for actor 1",
        )
        wait_for(
            lambda: re.search(r"learner: waiting for actors \[(0, )?1\]", learner_log.read_text()),
            procs=(learner, actors[0]),
            what="the learner's log line naming actor 1",
        )
        _signal(actors[1], signal.SIGCONT)
        assert learner.wait(timeout=600) == 0, learner_log.read_text()[-3000:]
        for proc, log in zip(actors, logs, strict=True):
            assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        for proc in (learner, *actors):
            if proc.poll() is None:
                _signal(proc, signal.SIGCONT)
                _signal(proc, signal.SIGKILL)
                proc.wait(timeout=30)
    total = _assert_every_episode_stored_once(folder, (0, 1))  # 0 episodes lost
    print(f"outage {OUTAGE_S:g} s: {total} env steps logged and stored for a budget of {BUDGET}")
    assert BUDGET <= total <= BUDGET * 1.01
    assert "resumed from" in learner_log.read_text()
