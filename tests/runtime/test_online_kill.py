"""Durability of online RL: SIGKILL real learner and actor processes mid-run, restart them, and count every
recorded transition (docs/design.md §4: after a crash both resume and no recorded transition is lost)."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest
from online_setup import committed_episodes, copy_run, free_address, overrides, start, wait_for

from robot_rl import keys
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.runtime.replay import ACTOR_EPISODE_KEY


def _kill(proc) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _assert_no_loss(folder, actors=(0,)) -> None:
    """The learner's replay holds exactly the episodes each actor logged: same count, same actions, in
    order, none twice."""
    replay = ZarrReplayBuffer(folder / "replay")
    arrays = replay.arrays()
    starts = np.concatenate([[0], replay.episode_ends[:-1]]).astype(int)
    for k in actors:
        log = ZarrReplayBuffer(folder / f"actor{k}" / "episodes")
        mine = [i for i, s in enumerate(starts) if arrays["runtime.actor"][s] == k]
        assert len(mine) == log.num_episodes > 0
        assert [int(arrays[ACTOR_EPISODE_KEY][starts[i]]) for i in mine] == list(range(log.num_episodes))
        for i, ep in enumerate(mine):
            a, b = starts[ep], replay.episode_ends[ep]
            np.testing.assert_array_equal(arrays[keys.ACTION][a:b], log.episode(i)[keys.ACTION])


@pytest.mark.e2e
def test_kill_actor_then_learner_then_resume(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    # the throttle keeps the actor near the learner while both run: a restarted actor acting on its cached
    # weights once spent the whole budget before the learner's first checkpoint, and then had no steps
    # left to show it acts without a learner (it never waits while the learner is unreachable)
    args = overrides(
        run,
        f"--online.address={free_address()}",
        "--online.env_steps=500",
        "--online.max_env_steps_ahead=40",
    )
    folder = run / "online" / "online_qc_seed0"
    actor_log, replay = folder / "actor0" / "episodes", folder / "replay"
    learner = start("online", "--role", "learner", *args, log=tmp_path / "learner.log")
    actor = start("online", "--role", "actor", *args, log=tmp_path / "actor.log")
    try:
        wait_for(lambda: committed_episodes(actor_log) >= 2, procs=(learner, actor), what="2 actor episodes")
        _kill(actor)  # mid-episode: only the unfinished episode is lost
        logged = committed_episodes(actor_log)
        actor = start("online", "--role", "actor", *args, log=tmp_path / "actor.log")
        wait_for(
            lambda: (
                (folder / "learner_resume" / "learner_state.json").is_file()
                and committed_episodes(replay) >= logged + 1
            ),
            procs=(learner, actor),
            what="a learner checkpoint and the restarted actor's first episode",
        )
        _kill(learner)
        stored = committed_episodes(replay)
        before = committed_episodes(actor_log)
        wait_for(
            lambda: committed_episodes(actor_log) >= before + 2, procs=(actor,), what="acting without learner"
        )
        assert committed_episodes(replay) == stored  # nobody is ingesting
        updates_at_kill = json.loads((folder / "learner_resume" / "learner_state.json").read_text())[
            "updates"
        ]
        learner = start("online", "--role", "learner", *args, log=tmp_path / "learner.log")
        assert learner.wait(timeout=600) == 0, (tmp_path / "learner.log").read_text()[-3000:]
        assert actor.wait(timeout=120) == 0, (tmp_path / "actor.log").read_text()[-3000:]
    finally:
        for p in (learner, actor):
            if p.poll() is None:
                _kill(p)
    assert "resumed from" in (tmp_path / "learner.log").read_text()
    summary = json.loads((folder / "summary.json").read_text())
    # counters survived the kill, and UTD 1 held over the steps in when training stopped
    assert summary["updates"] >= max(updates_at_kill, summary["env_steps_trained"])
    assert summary["env_steps_trained"] >= 500
    _assert_no_loss(folder)


@pytest.mark.e2e
def test_kill_whole_run_then_rerun(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    args = ["online", *overrides(run, f"--online.address={free_address()}", "--online.env_steps=300")]
    folder = run / "online" / "online_qc_seed0"
    proc = start(*args, log=tmp_path / "run.log")
    try:
        wait_for(lambda: committed_episodes(folder / "replay") >= 3, procs=(proc,), what="3 stored episodes")
        _kill(proc)  # the learner, and the actor through its process group
        time.sleep(0.5)
        proc = start(*args, log=tmp_path / "run.log")
        assert proc.wait(timeout=600) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            _kill(proc)
    assert (run / "stages" / "online_qc_seed0.json").is_file()
    _assert_no_loss(folder)


def _actor_pids(parent: int) -> list[int]:
    """PIDs of the ``--role actor`` processes started by ``parent`` (read from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            ppid = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and b"actor" in cmdline and b"--role" in cmdline:
            pids.append(int(entry))
    return pids


@pytest.mark.e2e
def test_role_all_restarts_a_killed_actor_and_loses_nothing(tiny_offline_run, tmp_path):
    """Issue 15: one actor dying used to end `--role all` with a traceback; it is restarted (back-off) and
    resumes from its log, and the run finishes with every logged episode stored once."""
    run = copy_run(tiny_offline_run, tmp_path / "run")
    args = overrides(run, f"--online.address={free_address()}", "--online.env_steps=300")
    folder = run / "online" / "online_qc_seed0"
    proc = start("online", *args, log=tmp_path / "online.log")
    try:
        wait_for(
            lambda: committed_episodes(folder / "actor0" / "episodes") >= 1, procs=(proc,), what="an episode"
        )
        (victim,) = _actor_pids(proc.pid)
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: _actor_pids(proc.pid) not in ([], [victim]), procs=(proc,), what="a restarted actor")
        assert proc.wait(timeout=600) == 0, (tmp_path / "online.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            _kill(proc)
    assert "restarting it" in (tmp_path / "online.log").read_text()
    _assert_no_loss(folder)


def test_role_all_stops_with_one_line_on_an_actor_fault(tiny_offline_run, tmp_path):
    """A fault a restart cannot fix (here: the progress critic the actors need is missing) stops the run
    with the actor's one-line error instead of restarting it or hanging."""
    run = copy_run(tiny_offline_run, tmp_path / "run")
    args = overrides(
        run,
        f"--online.address={free_address()}",
        "--reward.mode=critic",
        f"--reward_model.checkpoint={tmp_path / 'no_critic_here'}",
    )
    proc = start("online", *args, log=tmp_path / "online.log")
    try:
        assert proc.wait(timeout=300) == 1
    finally:
        if proc.poll() is None:
            _kill(proc)
    lines = [
        line for line in (tmp_path / "online.log").read_text().splitlines() if line.startswith("robot-rl:")
    ]
    assert lines and "actor 0 stopped: critic error" in lines[-1] and "no_critic_here" in lines[-1]
    assert "Traceback" not in (tmp_path / "online.log").read_text()
