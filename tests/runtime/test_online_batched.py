"""Batched online RL (issue 19 item 5): an actor stepping ``online.envs_per_actor`` simulated envs as one
batch on the ``mujoco_cpu`` backend, with a real learner and actor process on localhost."""

from __future__ import annotations

import json

import numpy as np
import pytest
from online_setup import copy_run, free_address, overrides, replay_on_single_env, run_online

from robot_rl import keys
from robot_rl.actor_build import build_actor_parts, describe_env
from robot_rl.config import ConfigError, load_config
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.policies import factory as agents
from robot_rl.runtime.actor import ACTOR_SEED_STRIDE, ONLINE_SEED_OFFSET, Actor
from robot_rl.runtime.batched_actor import ENV_INDEX_KEY, ENV_SEED_KEY, BatchedActor, actor_class

BATCHED = ["--online.envs_per_actor=2", "--env.backend=mujoco_cpu"]


@pytest.mark.e2e
def test_two_envs_per_actor_train_and_log_every_envs_episodes(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    # the actor's own step cap (25 < the env's 60) and a tight throttle (fewer steps ahead than two
    # episodes in flight hold) are both exercised
    args = overrides(
        run,
        f"--online.address={free_address()}",
        "--online.max_episode_steps=25",
        "--online.max_env_steps_ahead=10",
        *BATCHED,
    )
    folder = run_online(args)
    cfg = load_config(None, args)
    summary = json.loads((folder / "summary.json").read_text())
    log = ZarrReplayBuffer(folder / "actor0" / "episodes")
    replay = ZarrReplayBuffer(folder / "replay")
    # the learner holds every episode of both envs, once, and counts all their steps (UTD 1)
    assert replay.num_episodes == log.num_episodes and summary["env_steps"] == len(replay) == len(log)
    assert summary["env_steps"] >= summary["env_steps_trained"] >= 120
    assert summary["env_steps"] < 120 + 25  # less than one episode past the budget, as with one env
    assert summary["updates"] >= summary["env_steps_trained"]
    np.testing.assert_array_equal(replay.arrays()[keys.ACTION], log.arrays()[keys.ACTION])
    np.testing.assert_array_equal(
        replay.episode_arrays()[keys.final_key(keys.STATE)], log.episode_arrays()[keys.final_key(keys.STATE)]
    )
    per_episode = log.episode_arrays()
    envs, seeds = per_episode[ENV_INDEX_KEY], per_episode[ENV_SEED_KEY]
    assert set(envs.tolist()) == {0, 1}
    base = ONLINE_SEED_OFFSET  # training seed 0, actor 0
    for env in (0, 1):  # episode j of env i: seed base + 2 j + i, in order
        np.testing.assert_array_equal(seeds[envs == env], base + 2 * np.arange((envs == env).sum()) + env)
    assert seeds.max() < base + ACTOR_SEED_STRIDE
    interventions = 0
    for index in range(log.num_episodes):
        frames = log.episode(index)
        steps = len(frames[keys.ACTION])
        terminated, truncated = replay_on_single_env(cfg.env, int(seeds[index]), frames)
        # each episode ends where its own env ended it, at the actor's cap, or (the last ones) where the
        # actor's lease of the run's env steps ran out
        assert terminated or truncated or steps == 25 or index >= log.num_episodes - 2, (index, steps)
        assert steps <= 25
        intervened = int(frames[keys.INTERVENTION].sum())
        assert envs[index] == 0 or intervened == 0  # the simulated human drives env 0 only
        interventions += intervened
    assert interventions > 0  # the tiny policy stalls; the human takes over on env 0


def test_bad_envs_per_actor_fails_naming_the_keys(tmp_path):
    base = [f"--run_dir={tmp_path}"]
    with pytest.raises(ConfigError, match="online.envs_per_actor=0"):
        load_config(None, [*base, "--online.envs_per_actor=0"])
    with pytest.raises(ConfigError, match=r"online.envs_per_actor=2 needs env.backend=mujoco_cpu"):
        load_config(None, [*base, "--online.envs_per_actor=2"])  # the default backend is gym_vector
    with pytest.raises(ConfigError, match=r"online.envs_per_actor=2 with intervention.device=gui"):
        load_config(None, [*base, *BATCHED, "--intervention.device=gui"])
    with pytest.raises(ConfigError, match=r"online.envs_per_actor=2 with reward.mode='shaped'"):
        load_config(None, [*base, *BATCHED, "--reward.mode=shaped"])
    cfg = load_config(None, [*base, *BATCHED, "--intervention.device=sim_human"])
    assert actor_class(cfg) is BatchedActor
    assert actor_class(load_config(None, base)) is Actor  # N = 1: the single-env actor, unchanged


def _run_until_unplugged(run, device):
    """Run a 2-env batched actor with ``device`` against an in-process learner until the device raises
    DeviceError; returns (config, actor, the closed server)."""
    from robot_rl.runtime.intervention import DeviceError
    from robot_rl.runtime.learner import Learner
    from robot_rl.runtime.link import LearnerServer, ZmqLearnerLink

    cfg = load_config(None, overrides(run, "--online.address=tcp://127.0.0.1:0", *BATCHED))
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    server = LearnerServer(learner, cfg.online.address).start()
    actor = BatchedActor(cfg, 0, 0, ZmqLearnerLink(server.address), build_actor_parts(cfg, 0))
    actor.device = device
    try:
        with pytest.raises(DeviceError, match="disconnected"):
            actor.run()
    finally:
        server.close()
    return cfg, actor, server


class _Operator:
    """A scripted operator on env 0: drives polls 2-3 with ``ACTION``, presses success at poll 4, and the
    device is unplugged at poll 12. Counts polls over episodes and keeps the states it was shown."""

    ACTION = np.array([0.5, -0.5, 0.25, 1.0], np.float32)

    def __init__(self) -> None:
        self.polls, self.seen, self.resets = 0, [], []

    def reset(self, env_seed: int) -> None:
        self.resets.append(env_seed)

    def poll(self, obs):
        from robot_rl.runtime.intervention import DeviceError, HumanInput

        self.polls += 1
        if self.polls == 12:
            raise DeviceError("gamepad 0 was disconnected")
        self.seen.append(np.array(obs[keys.STATE]))
        if self.polls in (2, 3):
            return HumanInput(action=self.ACTION)
        return HumanInput(label="success" if self.polls == 4 else None)

    def close(self) -> None:
        pass


def test_the_human_drives_env_0_and_the_other_env_runs_the_policy(tiny_offline_run, tmp_path):
    """The arbiter on env 0 as in the single actor (its action wins and is recorded as an intervention, a
    label ends its episode, a device failure stops the actor with every episode in flight logged); env 1
    runs its policy chunk to its end while env 0 waits, then both start their next chunk in one forward."""
    from robot_rl.runtime.link import ZmqLearnerLink

    run = copy_run(tiny_offline_run, tmp_path / "run")
    operator = _Operator()
    cfg, actor, server = _run_until_unplugged(run, operator)
    h = cfg.policy.horizon
    log = actor.log
    envs, seeds = log.episode_arrays()[ENV_INDEX_KEY], log.episode_arrays()[ENV_SEED_KEY]
    # env 0's labelled episode, then the two episodes in flight when the device failed
    assert envs.tolist() == [0, 0, 1] and operator.resets == [seeds[0], seeds[1]]
    first, second, other = (log.episode(i) for i in range(3))
    assert len(first[keys.ACTION]) == 3  # the label at the 4th poll ends it before a 4th step
    assert first[keys.INTERVENTION].tolist() == [False, True, True]
    human = np.clip(_Operator.ACTION, actor.low, actor.high)  # clipped to the action box, as the policy's
    np.testing.assert_array_equal(first[keys.ACTION][1:], [human] * 2)
    assert first[keys.SUCCESS][-1] and first[keys.DONE][-1] and first[keys.REWARD][-1] == 1.0
    assert len(second[keys.ACTION]) == 7 and not second[keys.INTERVENTION].any()  # polls 5-11
    # env 1 finished its first chunk (h steps) while env 0 waited, then stepped with env 0 again
    assert len(other[keys.ACTION]) == h + 7 and not other[keys.INTERVENTION].any()
    # the device saw env 0's observations, one per step it polled
    seen = np.stack(operator.seen)
    np.testing.assert_array_equal(
        seen[:4], np.concatenate([first[keys.STATE], first[keys.final_key(keys.STATE)][None]])
    )
    np.testing.assert_array_equal(seen[4:], second[keys.STATE])
    assert actor.counters["interventions"] == 2
    for index, frames in enumerate((first, second, other)):
        replay_on_single_env(cfg.env, int(seeds[index]), frames, labelled=index == 0)
    # a restarted actor goes on with each env's seeds; one with another N is refused, naming the key
    link = ZmqLearnerLink(server.address)
    again = BatchedActor(cfg, 0, 0, link, build_actor_parts(cfg, 0))
    assert again._episodes_per_env() == [2, 1]
    again.env.close()
    three = overrides(run, "--online.address=tcp://127.0.0.1:0", *BATCHED, "--online.envs_per_actor=3")
    wider = BatchedActor(load_config(None, three), 0, 0, link, build_actor_parts(load_config(None, three), 0))
    with pytest.raises(ValueError, match="another online.envs_per_actor than 3"):
        wider._episodes_per_env()
    wider.env.close()
    link.close()


class _LabelFailure:
    """An operator who ends env 0's episode with a 'failure' label at poll 3 and otherwise watches."""

    def __init__(self) -> None:
        self.polls = 0

    def reset(self, env_seed: int) -> None:
        pass

    def poll(self, obs):
        from robot_rl.runtime.intervention import HumanInput

        self.polls += 1
        return HumanInput(label="failure" if self.polls == 3 else None)

    def close(self) -> None:
        pass


def _stop_at_the_second_check(run, device):
    """A batched actor (2 envs) with a real learner on localhost whose stop arrives at its second check
    (the first starts both envs); returns (config, the actor's log, episodes the learner holds)."""
    from robot_rl.runtime.learner import Learner
    from robot_rl.runtime.link import LearnerServer, ZmqLearnerLink

    cfg = load_config(None, overrides(run, "--online.address=tcp://127.0.0.1:0", *BATCHED))
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    server = LearnerServer(learner, cfg.online.address).start()
    actor = BatchedActor(cfg, 0, 0, ZmqLearnerLink(server.address), build_actor_parts(cfg, 0))
    if actor.device is not None:
        actor.device.close()  # the config's simulated human, replaced
    actor.device = device
    checks = []
    actor._should_stop = lambda: checks.append(1) or len(checks) > 1
    try:
        actor.run()
        return cfg, actor.log, learner.replay.num_episodes
    finally:
        server.close()


def test_a_stop_logs_the_episodes_still_in_flight(tiny_offline_run, tmp_path):
    """The stop arrives while env 1's episode is running (env 0's ended on a label): that episode is logged
    as truncated with its final observation and reaches the learner; it used to be dropped."""
    cfg, log, replayed = _stop_at_the_second_check(
        copy_run(tiny_offline_run, tmp_path / "run"), _LabelFailure()
    )
    per_episode = log.episode_arrays()
    assert per_episode[ENV_INDEX_KEY].tolist() == [0, 1] and replayed == 2
    labelled, in_flight = log.episode(0), log.episode(1)
    assert len(labelled[keys.ACTION]) == 2 and not labelled[keys.SUCCESS][-1]
    # env 1 ran its first chunk to its end (the stop is checked at a query moment), then was cut there
    assert len(in_flight[keys.ACTION]) == cfg.policy.horizon and not in_flight[keys.DONE].any()
    ended = replay_on_single_env(cfg.env, int(per_episode[ENV_SEED_KEY][1]), in_flight)
    assert ended == (False, False)  # neither terminated nor truncated by the env: cut by the stop


def test_a_stop_cuts_busy_envs_at_their_next_chunk(tiny_offline_run, tmp_path):
    """No env is idle when the stop arrives (both run the policy, nobody ends an episode): every episode is
    cut at the next query moment, after one chunk, and logged; the actor used to act on until an episode
    ended, up to ``max_steps`` past the budget and past the learner's wait for its bye."""
    cfg, log, replayed = _stop_at_the_second_check(copy_run(tiny_offline_run, tmp_path / "run"), None)
    per_episode = log.episode_arrays()
    assert sorted(per_episode[ENV_INDEX_KEY].tolist()) == [0, 1] and replayed == 2
    for index in range(2):
        frames = log.episode(index)
        assert len(frames[keys.ACTION]) == cfg.policy.horizon < cfg.env.max_episode_steps
        ended = replay_on_single_env(cfg.env, int(per_episode[ENV_SEED_KEY][index]), frames)
        assert ended == (False, False)  # cut by the stop, not ended by its env


class _EStop:
    """An operator who latches the e-stop at poll 3 and releases it at poll 7; unplugged at poll 10."""

    def __init__(self) -> None:
        self.polls, self.seen = 0, []

    def reset(self, env_seed: int) -> None:
        pass

    def poll(self, obs):
        from robot_rl.runtime.intervention import DeviceError, HumanInput

        self.polls += 1
        self.seen.append(sorted(obs))
        if self.polls == 10:
            raise DeviceError("gamepad 0 was disconnected")
        return HumanInput(stop=3 <= self.polls < 7)

    def close(self) -> None:
        pass


def test_an_e_stop_on_env_0_holds_every_env(tiny_offline_run, tmp_path):
    operator = _EStop()
    cfg, actor, _ = _run_until_unplugged(copy_run(tiny_offline_run, tmp_path / "run"), operator)
    log, h = actor.log, cfg.policy.horizon
    assert log.episode_arrays()[ENV_INDEX_KEY].tolist() == [0, 0, 1]
    first, second, other = (log.episode(i) for i in range(3))
    assert len(first[keys.ACTION]) == 2  # the e-stop at the 3rd poll ends env 0's episode, unexecuted
    assert not first[keys.DONE].any()  # ended by the operator, not the task
    assert operator.seen[3:6] == [[]] * 3  # the hold polls with no observation, as the single actor
    # env 1 executed nothing while held: 2 steps before, the rest of its chunk alone, then 2 with env 0
    assert len(second[keys.ACTION]) == 2 and len(other[keys.ACTION]) == h + 2
