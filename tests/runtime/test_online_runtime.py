"""Online RL runtime: real learner and actor processes on localhost (and Ray), the simulated human, RLPD
replay, and the bad inputs of issue 3 (unreachable learner, mismatched checkpoints, NaN policy, a device
that disconnects)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from online_setup import CODE, committed_episodes, copy_run, free_address, overrides, toy_episode, wait_for

from robot_rl import keys
from robot_rl.actor_build import build_actor_parts, describe_env
from robot_rl.config import ConfigError, load_config
from robot_rl.data.errors import DatasetError
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.policies import factory as agents
from robot_rl.runtime.intervention import DeviceError, HumanInput
from robot_rl.runtime.replay import ACTOR_EPISODE_KEY, ACTOR_KEY, OnlineReplay, rlpd_batch
from robot_rl.runtime.weights import NonFiniteWeightsError


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CODE, *args], capture_output=True, text=True, timeout=timeout
    )


def test_replay_stores_each_episode_once_and_resumes(tmp_path):
    replay = OnlineReplay(tmp_path / "r", {keys.STATE: (3,)}, 2, horizon=2, gamma=0.9)
    assert replay.add(0, 0, toy_episode(4))
    assert not replay.add(0, 0, toy_episode(4))  # a resend after a lost acknowledgement
    assert replay.add(1, 0, toy_episode(3, intervened=True, value=1.0))
    with pytest.raises(DatasetError, match="actor 0 sent episode 2 but episode 1"):
        replay.add(0, 2, toy_episode(2))
    assert (replay.num_episodes, replay.num_steps, replay.intervention_steps) == (2, 7, 3)
    again = OnlineReplay(tmp_path / "r", {keys.STATE: (3,)}, 2, horizon=2, gamma=0.9)
    assert again.acked == {0: 1, 1: 1} and again.num_steps == 7
    arrays = again.buffer.arrays()
    assert arrays[ACTOR_KEY].tolist() == [0] * 4 + [1] * 3 and arrays[ACTOR_EPISODE_KEY].max() == 0
    rng = np.random.default_rng(0)
    batch = rlpd_batch(again, None, 64, 0.5, rng)  # prior half: interventions only (no demos)
    assert batch["actions"].shape == (64, 2, 2)
    assert (batch["observations"][keys.STATE][:32] == 1.0).all()  # the intervened episode's states


def test_replay_bootstraps_truncated_chunks_from_the_stored_final_observation(tmp_path):
    """docs/algorithms.md §1: a chunk reaching a time-limit end bootstraps from s_{t+h}, the state after the
    last step, kept once per episode on disk, also after a learner restart; with h = 1 (SAC) the last
    step does not bootstrap from its own state."""
    replay = OnlineReplay(tmp_path / "r", {keys.STATE: (3,)}, 2, horizon=1, gamma=0.9)
    assert replay.add(0, 0, toy_episode(4, value=1.0, final=50.0))
    assert replay.add(0, 1, toy_episode(3, value=2.0, final=60.0))
    for _ in range(2):  # live, then reopened from disk
        batch = replay.sample_online(64, np.random.default_rng(0))
        last = batch["observations"][keys.STATE][:, 0] == 1.0
        nxt = batch["next_observations"][keys.STATE][:, 0]
        assert set(nxt[last]) == {1.0, 50.0} and set(nxt[~last]) == {2.0, 60.0}
        assert (batch["critic_valid"] == 1).all()
        replay = OnlineReplay(tmp_path / "r", {keys.STATE: (3,)}, 2, horizon=1, gamma=0.9)
    assert replay.buffer.episode(1)[keys.final_key(keys.STATE)].tolist() == [60.0] * 3
    frames = toy_episode(2)
    del frames[keys.final_key(keys.STATE)]
    with pytest.raises(DatasetError, match="final.observation.state"):
        replay.add(0, 2, frames)
    assert replay.num_episodes == 2 and replay.acked == {0: 2}


def _takeover_episode(shapes: dict, action_dim: int, length: int = 20, human=(3, 10), value: float = 0.0):
    """A toy episode whose takeover ends mid-episode: a human drives steps [human[0], human[1]) with
    action +0.5, the policy the rest with -0.5; every observation is ``value + step index``."""
    steps = np.arange(length, dtype=np.float32)
    interv = (steps >= human[0]) & (steps < human[1])
    frames = {
        k: np.broadcast_to(value + steps.reshape(-1, *[1] * len(s)), (length, *s)).copy()
        for k, s in shapes.items()
    }
    frames[keys.TASK_INDEX] = np.zeros(length, np.int64)
    frames[keys.ACTION] = np.where(interv, 0.5, -0.5)[:, None].repeat(action_dim, 1).astype(np.float32)
    frames[keys.REWARD] = np.zeros(length, np.float32)
    frames[keys.DONE] = frames[keys.SUCCESS] = np.zeros(length, bool)
    frames[keys.INTERVENTION] = interv
    frames.update({keys.final_key(k): frames[k][-1] + 1 for k in shapes})  # the state after the last step
    return frames


def test_hg_dagger_batches_imitate_only_human_steps(tmp_path):
    """Issue 14.6: a chunk drawn from a human-driven step runs past the hand-back; HG-DAgger's BC must not
    imitate the policy's actions there (valid * is_intervention), while RL batches keep every step."""
    h = 5
    replay = OnlineReplay(tmp_path / "r", {keys.STATE: (3,)}, 2, horizon=h, gamma=0.9)
    replay.add(0, 0, _takeover_episode({keys.STATE: (3,)}, 2))  # human steps 3..9, policy 10..19
    replay.add(0, 1, toy_episode(12, value=-1.0))  # autonomous
    rng = np.random.default_rng(0)
    bc = rlpd_batch(replay, None, 512, 0.5, rng, human_only=True)  # no demos: all from interventions
    start = bc["observations"][keys.STATE][:, 0].astype(int)
    assert bc["actions"].shape == (512, h, 2) and set(start) == set(range(3, 10))  # every human step
    expected_valid = (start[:, None] + np.arange(h)[None, :] < 10).astype(np.float32)  # until the hand-back
    np.testing.assert_array_equal(bc["valid"], expected_valid)
    assert (bc["actions"][bc["valid"] > 0] == 0.5).all()  # only human actions are imitated
    assert (bc["valid"].sum(1) < h).any()  # chunks that ran past the hand-back were cut
    # RL keeps the policy's steps after the hand-back (the episode goes on to step 19)
    rl = rlpd_batch(replay, None, 512, 1.0, rng)
    assert (rl["valid"] == 1).all() and (rl["actions"][rl["valid"] > 0] == -0.5).any()
    autonomous = OnlineReplay(tmp_path / "a", {keys.STATE: (3,)}, 2, horizon=h, gamma=0.9)
    autonomous.add(0, 0, toy_episode(12))
    with pytest.raises(DatasetError, match="no demonstrations or human-driven online steps to imitate"):
        rlpd_batch(autonomous, None, 8, 1.0, rng, human_only=True)
    assert rlpd_batch(autonomous, None, 8, 1.0, rng)["actions"].shape == (8, h, 2)  # RL: online steps


@pytest.mark.parametrize("method", ["sac", "hg_dagger"])
def test_learner_draws_the_batches_each_method_needs(tiny_offline_run, tmp_path, method):
    """Issue 14: SAC's update gets critic_only_updates + 1 independently drawn full RLPD batches (each mixes
    demos and online steps); HG-DAgger's batch holds demos and human steps only."""
    from robot_rl.algos.batch import batch_to_torch
    from robot_rl.runtime.learner import Learner

    run = copy_run(tiny_offline_run, tmp_path / "run")
    cfg = load_config(None, overrides(run, f"--online.method={method}"))
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    value = 1000.0  # online observations are value + step: far from any demo observation
    learner.replay.add(0, 0, _takeover_episode(learner.obs_shapes, learner.action_dim, value=value))
    batches = learner.draw_batches()
    b = cfg.online.batch_size
    assert (
        len(batches)
        == learner.agent.batches_per_update
        == (cfg.sac.critic_only_updates + 1 if method == "sac" else 1)
    )
    for batch in batches:
        online = batch["observations"][keys.STATE][:, 0] >= value
        assert batch["actions"].shape[0] == b and 0 < online.sum() < b  # demos and online steps
        if method == "hg_dagger":
            assert (batch["actions"][online][batch["valid"][online] > 0] == 0.5).all()
            assert (batch["observations"][keys.STATE][online, 0] - value < 10).all()  # human starts
        else:
            assert online.sum() >= b // 2  # the online half plus the interventions of the prior half
    if method == "sac":
        assert cfg.sac.critic_only_updates == 1 and cfg.sac.backup_entropy is False
        assert not np.array_equal(batches[0]["actions"], batches[1]["actions"])
    metrics = learner.agent.update(*(batch_to_torch(x, cfg.device) for x in batches))
    assert all(np.isfinite(v) for v in metrics.values())
    if method == "sac":
        assert "critic_only_loss" in metrics


def test_a_qc_learner_with_target_reuse_feeds_each_draw_k_times(tiny_offline_run, tmp_path):
    """offline.target_reuse = 2 online: the learner hands QC each RLPD draw for 2 updates in a row, then
    draws anew; QC keeps its target pick over those 2 updates (tests/algos/test_algos_qc.py)."""
    from robot_rl.runtime.learner import Learner

    run = copy_run(tiny_offline_run, tmp_path / "run")
    cfg = load_config(None, overrides(run, "--online.method=qc", "--offline.target_reuse=2"))
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    learner.replay.add(0, 0, _takeover_episode(learner.obs_shapes, learner.action_dim, value=1000.0))
    assert learner.agent.batch_reuse == 2
    draws = [learner.draw_batches() for _ in range(5)]
    assert draws[0] is draws[1] and draws[2] is draws[3] and draws[4] is not draws[3]
    assert not np.array_equal(draws[1][0]["actions"], draws[2][0]["actions"])


def _online_csv(run: Path, name: str) -> list[dict]:
    with open(run / "logs" / f"{name}_seed0.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.e2e
def test_online_local_trains_with_simulated_human_and_evaluates(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    args = overrides(run, f"--online.address={free_address()}")
    done = _cli("online", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = run / "online" / "online_qc_seed0"
    summary = json.loads((folder / "summary.json").read_text())
    # UTD 1 over the steps in when training stopped; an episode in flight then is stored, not trained on
    assert summary["env_steps"] >= summary["env_steps_trained"] >= 120
    assert summary["updates"] >= summary["env_steps_trained"]
    assert summary["intervention_rate"] > 0  # the tiny policy stalls; the simulated human takes over
    # with the env's success as reward, an episode is terminal exactly when it succeeded
    assert summary["last20_terminal_rate"] == summary["last20_success_rate"]
    assert (run / "stages" / "online_qc_seed0.json").is_file()
    # every episode the actor recorded reached the learner, once
    log = ZarrReplayBuffer(folder / "actor0" / "episodes")
    replay = ZarrReplayBuffer(folder / "replay")
    assert replay.num_episodes == log.num_episodes > 0
    np.testing.assert_array_equal(replay.arrays()[keys.ACTION], log.arrays()[keys.ACTION])
    assert replay.arrays()[keys.INTERVENTION].any()
    rows = _online_csv(run, "online_qc")
    for column in (
        "success_rate",
        "terminal_rate",
        "intervention_rate",
        "env_steps_per_s",
        "updates_per_s",
        "weight_lag",
    ):
        assert column in rows[-1], column
    assert list((folder / "tensorboard").glob("events.out.tfevents.*"))
    # the final policy is a regular checkpoint: evaluate it like any other
    evaluated = _cli("eval", "--algo", "online", *args)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert (run / "eval" / "online_qc_seed0.json").is_file()
    # a rerun skips the finished stage
    assert _cli("online", *args).returncode == 0
    assert ZarrReplayBuffer(folder / "replay").num_episodes == replay.num_episodes


@pytest.mark.e2e
@pytest.mark.parametrize("method", ["sac", "hg_dagger", "qc_fql"])
def test_baselines_run_on_the_same_runtime(tiny_offline_run, tmp_path, method):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    args = overrides(
        run, f"--online.method={method}", "--online.env_steps=60", f"--online.address={free_address()}"
    )
    done = _cli("online", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    config = json.loads((run / "checkpoints" / f"online_{method}_seed0" / "config.json").read_text())
    assert config["online_method"] == method
    assert config["policy"]["horizon"] == (1 if method == "sac" else 5)
    evaluated = _cli("eval", "--algo", "online", *args)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]


@pytest.mark.e2e
def test_critic_only_reward_with_a_camera_the_policy_does_not_read(tiny_offline_run, tmp_path):
    """Issue 4 through issue 3's reward hook: the env renders a camera for the progress critic only; the
    state policy's replay never holds it, and the learner's rewards come from the critic alone."""
    pytest.importorskip("sentence_transformers")
    from robot_rl.config import RewardModelConfig
    from robot_rl.rewards.compact import CompactProgressCritic

    run = copy_run(tiny_offline_run, tmp_path / "run")
    critic_dir = tmp_path / "critic"
    # an untrained critic whose deltas are positive: an unseeded one may score every step as no progress
    # (VLAC keeps progress at 0 under negative deltas, so every reward would be 0)
    torch.manual_seed(5)
    CompactProgressCritic(RewardModelConfig(cameras=["front"])).save(critic_dir)  # untrained: rewards ~ noise
    args = overrides(
        run,
        "--online.env_steps=60",
        "--env.cameras=[front]",
        "--reward.mode=critic",
        "--reward.critic_done=true",
        f"--reward_model.checkpoint={critic_dir}",
        f"--online.address={free_address()}",
    )
    done = _cli("online", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = run / "online" / "online_qc_seed0"
    replay = ZarrReplayBuffer(folder / "replay").arrays()
    log = ZarrReplayBuffer(folder / "actor0" / "episodes").arrays()
    assert keys.image_key("front") in log  # the actor keeps everything it saw
    assert keys.image_key("front") not in replay and keys.STATE in replay
    rewards = replay[keys.REWARD]
    assert np.isfinite(rewards).all() and not np.isin(rewards, [0.0, 1.0]).all()  # critic terms, not 0/1
    # no success signal reaches the learner: the untrained done head (p ~ 0.5) stays below the 0.9
    # threshold, so no frame is terminal, not even one where the simulator reported success
    assert not replay[keys.DONE].any()
    assert json.loads((folder / "summary.json").read_text())["last20_terminal_rate"] == 0.0


@pytest.mark.e2e
def test_ray_runtime_with_two_actors(tiny_offline_run, tmp_path):
    pytest.importorskip("ray")
    run = copy_run(tiny_offline_run, tmp_path / "run")
    # 600 steps, not the usual 120: under CI load one Ray actor once spent all 120 before the other had
    # started (Ray starts its workers one after the other)
    done = _cli(
        "online", *overrides(run, "--online.num_actors=2", "--online.env_steps=600"), "--runtime", "ray"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    replay = ZarrReplayBuffer(run / "online" / "online_qc_seed0" / "replay")
    actors = set(replay.arrays()[ACTOR_KEY].tolist())
    assert actors == {0, 1}
    for k in (0, 1):
        log = run / "online" / "online_qc_seed0" / f"actor{k}" / "episodes"
        assert committed_episodes(log) == int(
            (replay.arrays()[ACTOR_KEY][replay.episode_ends - 1] == k).sum()
        )


def test_unreachable_learner_fails_clearly(tmp_path):
    address = free_address()
    done = _cli(
        "online",
        "--role",
        "actor",
        *overrides(tmp_path, f"--online.address={address}", "--online.connect_timeout_s=1"),
    )
    assert done.returncode == 1
    assert address in done.stderr and "no cached weights" in done.stderr


def test_mismatched_checkpoints_are_refused(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    config_path = run / "checkpoints" / "offline_seed0" / "config.json"
    config = json.loads(config_path.read_text())
    config["obs_shapes"]["observation.state"] = [99]
    config_path.write_text(json.dumps(config))
    done = _cli("online", *overrides(run, f"--online.address={free_address()}"))
    assert done.returncode == 2
    assert str(run / "checkpoints" / "offline_seed0") in done.stderr and "observation.state" in done.stderr

    from robot_rl.runtime.learner import Learner

    run = copy_run(tiny_offline_run, tmp_path / "run2")
    cfg = load_config(None, overrides(run))
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    learner._save_resume()
    state = learner.dir / "learner_resume" / "learner_state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "format": 99}))
    with pytest.raises(ConfigError, match="learner_state.json: learner checkpoint format 99"):
        Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)


def _learner_and_actor(run: Path, *extra: str, connect: bool = True):
    """An in-process learner served on localhost and an actor connected to it over the real socket."""
    from robot_rl.runtime.actor import Actor
    from robot_rl.runtime.learner import Learner
    from robot_rl.runtime.link import LearnerServer, ZmqLearnerLink

    cfg = load_config(None, overrides(run, "--online.address=tcp://127.0.0.1:0", *extra))
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    server = LearnerServer(learner, cfg.online.address).start()
    link = ZmqLearnerLink(server.address)
    actor = Actor(cfg, 0, 0, link, build_actor_parts(cfg, 0))
    if connect:  # else Actor.run connects
        actor.sender.start()
        actor._wait_for_policy()
    return learner, server, actor


def test_nan_policy_output_is_never_sent(tiny_offline_run, tmp_path):
    learner, server, actor = _learner_and_actor(
        copy_run(tiny_offline_run, tmp_path / "run"), "--intervention.device=none"
    )
    try:
        version = learner.version
        with torch.no_grad():
            for p in learner.agent.policy.parameters():
                p.fill_(float("nan"))
        with pytest.raises(NonFiniteWeightsError, match="policy.*NaN or inf"):
            learner._publish()  # a diverged learner never publishes
        assert learner.version == version
        assert actor._load_policy()
        agent, act = actor.source.agent, actor.source.agent.act

        def bad_observation(*_):
            raise ValueError("observation key 'x' missing")

        agent.act = bad_observation
        with pytest.raises(ValueError, match="key 'x' missing"):  # any other policy error is not a NaN stop
            actor._episode(env_seed=5)
        assert actor.counters["policy_nan_stops"] == 0
        agent.act = act
        with torch.no_grad():  # a policy that turns NaN on the actor's side is still caught there
            for p in actor.source.agent.policy.parameters():
                p.fill_(float("nan"))
        frames, error = actor._episode(env_seed=5)  # the env itself raises on a NaN action
        assert error is None and frames is None  # stopped before the first step: nothing was executed
        assert actor.counters["policy_nan_stops"] == 1
        actor.sender.closed.set()
        # an actor whose (cached) policy is NaN stops after online.max_nan_stops episodes in a row instead
        # of spinning through resets (460 resets in 20 s before), logging nothing, and tells the learner,
        # which stops waiting for data once no actor is left
        from safetensors.torch import load_file, save_file

        from robot_rl.runtime.actor import Actor, PolicyFaultError
        from robot_rl.runtime.learner import ActorsFaultedError
        from robot_rl.runtime.link import ZmqLearnerLink

        model = actor.dir / "policy" / "model.safetensors"
        save_file({k: torch.full_like(v, float("nan")) for k, v in load_file(model).items()}, model)
        broken = Actor(
            actor.cfg, 0, 0, ZmqLearnerLink(server.address, timeout_s=2.0), build_actor_parts(actor.cfg, 0)
        )
        broken.sender.have = learner.version  # its cache is current: the NaN policy is the one it runs
        with pytest.raises(PolicyFaultError, match="3 episodes in a row"):
            broken.run()
        assert broken.counters["policy_nan_stops"] == 3 and broken.num_logged() == 0
        assert "NaN/inf" in learner.faults[0]
        with pytest.raises(ActorsFaultedError, match="actor 0: .*NaN/inf"):
            learner.train(drain_s=0)
        assert (learner.dir / "learner_resume").exists()  # the learner saved before stopping
    finally:
        actor.sender.closed.set()
        server.close()


class _UnpluggedAfter:
    """Stands in for a teleop device whose USB cable is pulled after ``steps`` polls."""

    def __init__(self, steps: int) -> None:
        self.steps, self.polls = steps, 0

    def reset(self, env_seed: int) -> None:
        self.polls = 0

    def poll(self, obs) -> HumanInput:
        self.polls += 1
        if self.polls > self.steps:
            raise DeviceError("gamepad 0 was disconnected")
        return HumanInput()

    def close(self) -> None:
        pass


def test_device_disconnect_stops_safely_and_keeps_the_episode(tiny_offline_run, tmp_path):
    learner, server, actor = _learner_and_actor(copy_run(tiny_offline_run, tmp_path / "run"), connect=False)
    actor.device = _UnpluggedAfter(steps=7)
    try:
        with pytest.raises(DeviceError, match="disconnected"):
            actor.run()
        assert actor.log.num_episodes == 1 and len(actor.log) == 7  # the steps before the unplug
    finally:
        server.close()


class _LabelsAfter:
    """A device whose operator presses the success (or failure) key at poll ``steps``."""

    def __init__(self, steps: int, label: str) -> None:
        self.steps, self.label, self.polls = steps, label, 0

    def reset(self, env_seed: int) -> None:
        self.polls = 0

    def poll(self, obs) -> HumanInput:
        self.polls += 1
        return HumanInput(label=self.label if self.polls == self.steps else None)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("label", ["success", "failure"])
def test_human_label_ends_the_episode(tiny_offline_run, tmp_path, label):
    learner, server, actor = _learner_and_actor(copy_run(tiny_offline_run, tmp_path / "run"))
    actor.device = _LabelsAfter(steps=4, label=label)
    try:
        frames, error = actor._episode(env_seed=3)
    finally:
        actor.sender.closed.set()
        server.close()
    assert error is None and len(frames[keys.ACTION]) == 3  # the label at the 4th poll ends it
    assert frames[keys.SUCCESS][-1] == frames[keys.DONE][-1] == (label == "success")
    assert frames[keys.REWARD][-1] == (1.0 if label == "success" else 0.0)


def test_actor_whose_log_was_lost_stops_with_a_clear_error(tiny_offline_run, tmp_path):
    import shutil
    import time

    from robot_rl.runtime.actor import Actor

    learner, server, actor = _learner_and_actor(copy_run(tiny_offline_run, tmp_path / "run"))
    try:
        frames, _ = actor._episode(env_seed=1)
        actor.log.add_episode(frames, source="online")
        actor.sender.wake.set()
        deadline = time.monotonic() + 180  # a loaded 2-core CI machine (30 s once was not enough)
        while learner.replay.num_episodes < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert learner.replay.num_episodes == 1, "the learner never ingested the actor's episode"
        actor.sender.closed.set()
        actor.sender.join(5)
        shutil.rmtree(actor.dir / "episodes")  # the actor's log is gone, the learner holds its episode
        again = Actor(actor.cfg, 0, 0, actor.link, build_actor_parts(actor.cfg, 0))
        # The link's handshake, run in this thread until the learner answers (a slow answer on a loaded
        # machine is retried; `again.run()` could finish its tiny budget acting on before the answer came).
        give_up = threading.Timer(120, again.sender.closed.set)  # without the check it would loop on
        give_up.start()
        again.sender.run()
        give_up.cancel()
        assert isinstance(again.sender.error, RuntimeError)
        assert re.search(r"holds 1 episodes of actor 0 but its log .* has 0", str(again.sender.error))
    finally:
        server.close()


def _log_zero_episode(actor, length: int) -> None:
    """Append an all-zero episode of ``length`` steps to ``actor``'s own log (not sent)."""
    frames = {k: np.zeros((length, *shape), dtype) for k, (shape, dtype) in actor.log.spec.items()}
    frames.update({k: np.zeros(shape, dtype) for k, (shape, dtype) in actor.log.episode_spec.items()})
    actor.log.add_episode(frames)


def test_unsent_steps_count_episodes_left_from_an_earlier_run(tiny_offline_run, tmp_path):
    learner, server, actor = _learner_and_actor(copy_run(tiny_offline_run, tmp_path / "run"), connect=False)
    try:
        for length in (5, 7, 3):  # as if logged by this actor before a restart
            _log_zero_episode(actor, length)
        actor.sender.acked = -1  # not connected yet: nothing acknowledged
        assert actor._unsent_steps() == 15
        actor.sender.acked = 1
        assert actor._unsent_steps() == 10
    finally:
        server.close()


def test_throttle_never_waits_for_updates_that_cannot_come(tiny_offline_run, tmp_path):
    """An episode longer than ``online.max_env_steps_ahead`` used to hang a single-env actor: it waited for
    updates, and the learner, holding no unsent data of it, could make none. It waits only while an update
    can still come (here: while it has steps the learner has not acknowledged)."""
    learner, server, actor = _learner_and_actor(
        copy_run(tiny_offline_run, tmp_path / "run"), "--online.max_env_steps_ahead=10"
    )

    def throttled(episode_steps: int) -> threading.Thread:
        thread = threading.Thread(target=actor._throttle, args=(episode_steps,), daemon=True)
        thread.start()
        thread.join(timeout=5)
        return thread

    try:
        wait_for(lambda: actor.sender.status.get("allowed_env_steps") == 10, timeout_s=30, what="a status")
        assert not throttled(9).is_alive()  # within the allowance
        assert not throttled(30).is_alive()  # past it, but the learner has caught up with all it holds
        _log_zero_episode(actor, 15)  # not acknowledged by the learner: its updates can still come
        actor.sender.acked = 0
        waiting = throttled(0)
        assert waiting.is_alive()
        actor.sender.closed.set()  # a closing actor never waits
        waiting.join(timeout=5)
        assert not waiting.is_alive()
    finally:
        server.close()
