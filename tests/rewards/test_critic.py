"""Progress critic: VLAC arithmetic, metrics, input checks, the compact critic trained on real sim demos,
critic eval, dataset labelling and online shaping (docs/algorithms.md §9)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.cli.main import main
from robot_rl.config import ConfigError, RewardConfig, load_config
from robot_rl.rewards.base import CriticInputError, CriticOutput, CriticScoreError, ProgressCritic
from robot_rl.rewards.metrics import done_auc, negative_delta_rate, voc
from robot_rl.rewards.progress import hop_labels, reconstruct_progress, time_progress
from robot_rl.rewards.shaping import episode_rewards, shaping_terms

FRONT = keys.image_key("front")


def test_hop_labels_and_vlac_reconstruction_are_inverses():
    rng = np.random.default_rng(0)
    for _ in range(20):
        curve = np.concatenate([[0.0], rng.uniform(0, 1, size=30)])  # goes up and down
        deltas = hop_labels(curve[:-1], curve[1:])
        assert np.all(np.abs(deltas) <= 1)
        np.testing.assert_allclose(reconstruct_progress(deltas), curve, atol=1e-5)
    demo = time_progress(11, 8)
    assert demo[0] == 0 and demo[8] == 1 and demo[-1] == 1 and np.all(np.diff(demo) >= 0)


def test_mix_rule_forgives_a_late_drop_and_bad_input_is_refused():
    deltas = np.array([0.5, 0.5, -0.4])  # V: 0.5, 0.75, then a drop
    assert reconstruct_progress(deltas, "scale")[-1] == pytest.approx(0.75 * 0.6)
    assert reconstruct_progress(deltas, "mix")[-1] == pytest.approx(0.75 - 0.2)
    with pytest.raises(ValueError, match="NaN"):
        reconstruct_progress(np.array([0.1, np.nan]))
    with pytest.raises(ValueError, match="rule"):
        reconstruct_progress(deltas, "average")


def test_voc_negative_rate_and_auc():
    assert voc(np.arange(10.0)) == pytest.approx(1.0)
    assert voc(np.arange(10.0)[::-1]) == pytest.approx(-1.0)
    assert voc(np.ones(5)) == 0.0
    assert negative_delta_rate(np.array([0.1, -0.2, 0.0, -0.5])) == 0.5
    assert done_auc(np.array([0.1, 0.2, 0.9]), np.array([0, 0, 1])) == 1.0
    assert done_auc(np.array([0.1, 0.2]), np.array([0, 0])) is None


def test_shaping_telescopes_so_it_is_policy_invariant():
    """Ng et al. 1999 with Phi(absorbing) = 0: on a terminated episode sum_t gamma^t F_t = -Phi_0, so the
    shaped return is G - Phi_0 (no terminal bonus gamma^(T-1) Phi_(T-1)); a truncated episode keeps
    bootstrapping, and its last row, whose successor is unrecorded, gets 0."""
    rng = np.random.default_rng(1)
    phi, gamma = rng.uniform(0, 1, 25), 0.97
    disc = gamma ** np.arange(25)
    ended = np.zeros(25, bool)
    ended[-1] = True
    terms = shaping_terms(phi, gamma, ended)
    assert terms[-1] == pytest.approx(-phi[-1], abs=1e-6)
    assert np.sum(disc * terms) == pytest.approx(-phi[0], abs=1e-5)
    truncated = shaping_terms(phi, gamma)  # no termination: bootstrapped, last row has no successor
    assert truncated[-1] == 0.0
    assert np.sum(disc * truncated) == pytest.approx(gamma**24 * phi[-1] - phi[0], abs=1e-5)
    np.testing.assert_allclose(terms[:-1], truncated[:-1])
    mid = np.zeros(25, bool)
    mid[10] = True  # a termination inside the recorded rows: F = -Phi there
    assert shaping_terms(phi, gamma, mid)[10] == pytest.approx(-phi[10], abs=1e-6)
    # a 30-step success with Phi rising to 1 returns about its unshaped return, not twice it
    rising = np.linspace(0, 1, 30)
    done30 = np.r_[np.zeros(29, bool), True]
    reward, _ = episode_rewards(RewardConfig(mode="shaped"), 0.99, rising, np.zeros(30), done30 * 1.0, done30)
    assert np.sum(0.99 ** np.arange(30) * reward) == pytest.approx(0.99**29 - rising[0], abs=1e-5)
    reward, done = episode_rewards(RewardConfig(mode="shaped"), gamma, phi, np.zeros(25), np.ones(25), ended)
    np.testing.assert_allclose(reward, 1 + terms, atol=1e-6)
    assert done is None
    fired = np.r_[np.zeros(20), np.ones(5)]
    reward, done = episode_rewards(RewardConfig(mode="critic", critic_done=True), gamma, phi, fired, None)
    assert done.sum() == 6 and not done[18] and done[19]  # row t reads the done head on frame t + 1
    np.testing.assert_allclose(reward[19], -phi[19] + 1, atol=1e-6)  # the done head's row is terminal
    with pytest.raises(ValueError, match="shaped"):
        episode_rewards(RewardConfig(mode="shaped"), gamma, phi, fired, None)


def test_shaping_gamma_is_the_learners():
    from robot_rl.config import PipelineConfig
    from robot_rl.rewards.shaping import shaping_gamma

    cfg = PipelineConfig()
    cfg.offline.gamma, cfg.sac.gamma = 0.95, 0.9
    assert shaping_gamma(cfg, "offline") == 0.95
    assert shaping_gamma(cfg, "online") == 0.95
    cfg.online.method = "sac"
    assert shaping_gamma(cfg, "online") == 0.9 and shaping_gamma(cfg, "offline") == 0.95
    with pytest.raises(ConfigError, match="`gamma` are not valid for RewardConfig"):
        load_config(overrides=["--reward.gamma=0.99"])


class _ConstantCritic(ProgressCritic):
    """A critic with a fixed answer, to test the interface's checks (not a model)."""

    image_keys, image_size = (FRONT,), (8, 8)

    def __init__(self, delta: float):
        self.delta = delta

    def _score(self, obs_i, obs_j, tasks):
        n = len(tasks)
        return CriticOutput(np.full(n, self.delta), np.zeros(n))


def _obs(n: int, size: int = 8) -> dict:
    return {FRONT: np.zeros((n, size, size, 3), np.uint8)}


def test_bad_critic_inputs_are_named():
    critic = _ConstantCritic(0.1)
    assert critic.predict(_obs(2), _obs(2), "pick up the cube").delta.shape == (2,)
    with pytest.raises(CriticInputError, match="8x8"):
        critic.predict(_obs(2, 16), _obs(2, 16), "pick")
    with pytest.raises(CriticInputError, match="channel-first"):
        critic.predict({FRONT: np.zeros((2, 3, 8, 8), np.uint8)}, _obs(2), "pick")
    with pytest.raises(CriticInputError, match="uint8"):
        critic.predict({FRONT: np.zeros((2, 8, 8, 3), np.float32)}, _obs(2), "pick")
    with pytest.raises(CriticInputError, match="empty task"):
        critic.predict(_obs(2), _obs(2), "  ")
    with pytest.raises(CriticInputError, match="observation.images.front"):
        critic.predict({}, _obs(2), "pick")
    with pytest.raises(CriticScoreError, match="NaN"):
        _ConstantCritic(float("nan")).predict(_obs(2), _obs(2), "pick")


def test_text_model_not_available_offline_names_it():
    from robot_rl.rewards.text import TextEmbedder

    with pytest.raises(CriticInputError, match="no-such-org/no-such-model"):
        TextEmbedder("no-such-org/no-such-model")(["pick up the cube"])


# -- the compact critic on real simulated demos ----------------------------------------------------------


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    """24 noisy-expert demos with a 64 px front camera, and a compact critic trained on 20 of them for 200
    steps: at 200 the held-out figures that test_compact_critic_orders_held_out_demos checks were
    success voc_anchor_mean 0.81 and reversed -0.77 (400 steps: 0.56, -0.78), for half the training."""
    run = tmp_path_factory.mktemp("critic_run")
    common = [f"--run_dir={run}", "--env.cameras=[front]", "--collect.num_episodes=24", "--env.num_envs=2"]
    assert main(["collect", *common]) == 0
    critic_args = [*common, "--reward_model.steps=200", "--data.val_episodes=[20,21,22,23]"]
    assert main(["critic", "train", *critic_args]) == 0
    return run, critic_args


@pytest.mark.e2e
def test_compact_critic_orders_held_out_demos(sim_run):
    run, _ = sim_run
    summary = json.loads((run / "critic" / "eval" / "summary.json").read_text())
    assert summary["episodes"] == [20, 21, 22, 23]
    assert (run / "critic" / "eval" / "progress.png").stat().st_size > 1000
    success, reversed_ = summary["success"], summary["reversed"]
    # Held-out successful demos rise against their first frame; the same demos played backwards fall.
    # (An untrained critic scores both near 0: the 200-step budget keeps this test short, the full
    # figures are in the README.)
    assert success["voc_anchor_mean"] > 0.2
    assert success["voc_anchor_mean"] > reversed_["voc_anchor_mean"] + 0.5
    assert reversed_["final_progress_mean"] < success["final_progress_mean"]


@pytest.mark.e2e
def test_critic_checkpoint_round_trip_and_eval_cli(sim_run, capsys):
    from robot_rl.rewards.registry import load_critic

    run, args = sim_run
    critic = load_critic(run / "critic")
    rng = np.random.default_rng(0)
    obs = {FRONT: rng.integers(0, 255, (3, 64, 64, 3), dtype=np.uint8)}
    a = critic.predict(obs, obs, "pick up the cube")
    b = load_critic(run / "critic").predict(obs, obs, "pick up the cube")
    np.testing.assert_array_equal(a.delta, b.delta)
    assert main(["critic", "eval", *args]) == 0
    printed = capsys.readouterr().out
    assert '"voc_mean"' in printed
    assert (run / "critic" / "eval_dataset" / "eval.json").is_file()


@pytest.fixture(scope="module")
def labelled(sim_run, tmp_path_factory):
    """The demo dataset labelled by the trained critic (shaped, offline.gamma = 0.9), once for the module's
    tests (they read it, or copy it before changing it)."""
    run, args = sim_run
    out = tmp_path_factory.mktemp("labelled") / "labelled"
    assert main(["label", *args, f"--output={out}", "--reward.mode=shaped", "--offline.gamma=0.9"]) == 0
    return out


@pytest.mark.e2e
def test_label_writes_progress_and_shaped_rewards(sim_run, labelled, tmp_path):
    from robot_rl.data.lerobot.reader import LeRobotDataset
    from robot_rl.data.lerobot.validate import validate_dataset

    run, args = sim_run
    out = labelled
    assert validate_dataset(out) == []
    src, dst = LeRobotDataset(run / "dataset").load_tabular(), LeRobotDataset(out).load_tabular()
    eps = dst[keys.EPISODE_INDEX]
    for ep in (0, 5):
        rows = eps == ep
        phi = dst["progress"][rows].reshape(-1)
        assert phi[0] == 0 and np.all((phi >= 0) & (phi <= 1))
        ended = src[keys.DONE][rows].reshape(-1).astype(bool)
        expect = src[keys.REWARD][rows].reshape(-1) + shaping_terms(phi, 0.9, ended)
        np.testing.assert_allclose(dst[keys.REWARD][rows].reshape(-1), expect, atol=1e-6)
    np.testing.assert_array_equal(dst[keys.ACTION], src[keys.ACTION])
    # refusing to overwrite (the labelled dataset is left as it was) and a mode with nothing to label
    before = sorted((p.relative_to(out), p.stat().st_mtime_ns) for p in out.rglob("*"))
    assert main(["label", *args, f"--output={out}", "--reward.mode=shaped"]) == 1
    assert sorted((p.relative_to(out), p.stat().st_mtime_ns) for p in out.rglob("*")) == before
    assert main(["label", *args, f"--output={tmp_path / 'x'}"]) == 2
    assert not (tmp_path / "x").exists()


def _expert_episode(
    env, critic, cfg: RewardConfig, task: str, gamma: float = 0.99, seed: int = 3
) -> tuple[list, list, list, dict]:
    from robot_rl.rewards.shaping import CriticRewardWrapper
    from robot_rl.sim.expert import PickCubeExpert

    wrapped = CriticRewardWrapper(env, critic, cfg, task=task, gamma=gamma)
    expert = PickCubeExpert(noise=0.0, seed=seed)
    expert.reset(seed=seed)
    obs, info = wrapped.reset(seed=seed)
    progress, rewards, fired = [info["progress"]], [], []
    for _ in range(60):
        obs, reward, terminated, truncated, info = wrapped.step(expert.act(obs))
        progress.append(info["progress"])
        rewards.append(reward)
        fired.append(info["critic_done"])
        if terminated or truncated:
            break
    end = {"terminated": terminated, "truncated": truncated, "success": info["is_success"]}
    return progress, rewards, fired, end


@pytest.mark.e2e
def test_online_critic_reward_in_the_sim(sim_run):
    from robot_rl.config import EnvConfig
    from robot_rl.rewards.registry import load_critic
    from robot_rl.rewards.shaping import CriticRewardWrapper
    from robot_rl.sim import make_env

    run, _ = sim_run
    critic = load_critic(run / "critic")
    env = make_env(EnvConfig(cameras=["front"], max_episode_steps=60))
    cfg = RewardConfig(mode="critic", critic_done=True, done_threshold=0.5, scale=2.0)
    progress, rewards, fired, end = _expert_episode(env, critic, cfg, env.unwrapped.task, gamma=0.95)
    assert all(0 <= p <= 1 for p in progress) and np.ptp(progress) > 0
    phi = np.array(progress)
    # critic-only reward = scale * (gamma * Phi' - Phi) + 1 when the done head fires; it ends the episode,
    # and the terminal step's successor is absorbing (Phi' = 0)
    successor = np.where(fired, 0.0, phi[1:])
    np.testing.assert_allclose(rewards, 2.0 * (0.95 * successor - phi[:-1]) + np.array(fired), atol=1e-5)
    assert not any(fired[:-1])
    # only the done head terminates: the simulator's success ends the episode as a truncation
    assert end["success"], "the clean expert should lift the cube"
    assert end["terminated"] == fired[-1]
    assert end["truncated"] != fired[-1]
    # a critic that returns NaN is rejected: no critic reward, progress held, never NaN
    bad = CriticRewardWrapper(
        env, _NanCritic(critic), RewardConfig(mode="shaped"), task="pick up the cube", gamma=0.99
    )
    bad.reset(seed=4)
    with pytest.warns(UserWarning, match="rejected"):
        _, reward, *_, info = bad.step(np.zeros(env.action_space.shape, np.float32))
    assert info["critic_rejected"] and np.isfinite(reward) and info["progress"] == 0.0
    env.close()


class _NanCritic(ProgressCritic):
    """Wraps a real critic and corrupts its scores, as a broken model would."""

    def __init__(self, inner):
        self.image_keys, self.image_size, self.state_key = inner.image_keys, inner.image_size, inner.state_key

    def _score(self, obs_i, obs_j, tasks):
        return CriticOutput(np.full(len(tasks), np.nan), np.zeros(len(tasks)))


def test_critic_cli_errors(tmp_path, capsys):
    assert (
        main(["critic", "eval", f"--reward_model.checkpoint={tmp_path / 'none'}", f"--run_dir={tmp_path}"])
        == 1
    )
    assert "not a critic checkpoint" in capsys.readouterr().err
    assert main(["critic", "train", "--reward_model.kind=gpt", f"--run_dir={tmp_path}"]) in (1, 2)
    assert main(["critic", "train", "--reward_model.colour=red"]) == 2


def test_episode_progress_batches_line_up():
    """Consecutive-pair scoring in batches gives T values for any T and batch size (incl. T = 1)."""
    critic = _ConstantCritic(0.5)
    for length, batch in [(1, 4), (5, 4), (9, 4), (4, 64)]:
        curve = critic.episode_progress(_obs(length), "pick", batch_size=batch)
        np.testing.assert_allclose(curve, 1 - 0.5 ** np.arange(length))


@pytest.mark.e2e
def test_dataset_filter_by_voc(sim_run, tmp_path, capsys):
    from robot_rl.data.lerobot.reader import LeRobotDataset
    from robot_rl.rewards.evaluate import episode_vocs
    from robot_rl.rewards.registry import load_critic

    run, _ = sim_run
    src, out, critic = run / "dataset", tmp_path / "kept", run / "critic"
    vocs = episode_vocs(load_critic(critic), src)
    threshold = float(np.median(vocs))
    args = ["dataset", "filter", str(src), "--out", str(out), "--critic", str(critic)]
    assert main([*args, "--min-voc", str(threshold)]) == 0
    assert LeRobotDataset(out).num_episodes == sum(v >= threshold for v in vocs) < len(vocs)
    assert main([*args, "--min-voc", "1.5", "--overwrite"]) == 1  # nothing passes: nothing written
    assert "no episode has VOC" in capsys.readouterr().err
    assert main(["dataset", "filter", str(src), "--out", str(tmp_path / "y"), "--min-voc", "0"]) == 1
    assert not (tmp_path / "y").exists()


def test_pair_sampler_failed_pairs_and_slow_demos():
    """Failed-episode pairs target (delta 0, done 0) from frames at or after failed_from x length, with short
    gaps among them (episode scoring chains neighbouring frames); a failed_from outside [0, 1) is refused;
    success_max_steps drops slow successful demos from the time-progress labels."""
    from robot_rl.config import RewardModelConfig
    from robot_rl.rewards.episodes import CriticEpisode
    from robot_rl.rewards.pairs import PairSampler

    def episode(index: int, length: int, success_step: int | None) -> CriticEpisode:
        frames = np.repeat(np.arange(length, dtype=np.float32)[:, None], 2, axis=1)  # frame t holds t
        return CriticEpisode(index, {keys.STATE: frames}, "pick up the cube", success_step)

    episodes = [episode(0, 20, 19), episode(1, 60, None)]
    cfg = RewardModelConfig(mismatch_frac=0.0, stagnation_frac=0.0, failed_frac=0.99, failed_from=0.25)
    batch = PairSampler(episodes, cfg).sample(2000, np.random.default_rng(0))
    failed = batch.delta == 0.0  # ordered pairs of the success have nonzero hops
    t_i, t_j = batch.obs_i[keys.STATE][failed, 0], batch.obs_j[keys.STATE][failed, 0]
    assert failed.mean() > 0.9 and (batch.done[failed] == 0).all()
    assert t_i.min() >= 15 and t_j.min() >= 15 and max(t_i.max(), t_j.max()) <= 59
    assert (np.abs(t_j - t_i) <= 3).mean() > 0.4 and (t_j < t_i).mean() > 0.3
    with pytest.raises(ValueError, match="reward_model.failed_from"):
        PairSampler(episodes, RewardModelConfig(failed_from=1.0))
    # success_max_steps keeps slow demos out of the time labels; with none left the error names the key
    slow = [*episodes, episode(2, 45, 44)]
    assert len(PairSampler(slow, RewardModelConfig(success_max_steps=30)).success) == 1
    with pytest.raises(ValueError, match="reward_model.success_max_steps=15"):
        PairSampler(slow, RewardModelConfig(success_max_steps=15))


@pytest.mark.e2e
def test_labelled_rewards_follow_the_learners_gamma(sim_run, labelled, tmp_path):
    """A dataset labelled with offline.gamma = 0.9 records it; a learner with sac.gamma = 0.97 reads the
    shaping reshaped with 0.97 (exact: Ng's condition), one with 0.9 reads it as written, and a labelled
    dataset without the record is read as it is, with a warning."""
    from robot_rl.config import DataConfig
    from robot_rl.data.lerobot.reader import LeRobotDataset
    from robot_rl.data.reward_labels import LABELS_FILE
    from robot_rl.data.training.training_set import TrainingSet

    run, _ = sim_run
    out = shutil.copytree(labelled, tmp_path / "labelled")  # a copy: its labels record is removed below
    meta = json.loads((out / LABELS_FILE).read_text())
    assert meta["gamma"] == 0.9 and meta["gamma_key"] == "offline.gamma" and meta["mode"] == "shaped"
    assert meta["critic"] == str((run / "critic").resolve()) and meta["progress_key"] == "progress"
    src, dst = LeRobotDataset(run / "dataset").load_tabular(), LeRobotDataset(out).load_tabular()
    eps = dst[keys.EPISODE_INDEX].reshape(-1)

    def expected(gamma: float) -> np.ndarray:
        parts = []
        for ep in np.unique(eps):
            rows = eps == ep
            ended = src[keys.DONE][rows].reshape(-1).astype(bool)
            phi = dst["progress"][rows].reshape(-1)
            parts.append(src[keys.REWARD][rows].reshape(-1) + shaping_terms(phi, gamma, ended))
        return np.concatenate(parts)

    cfg = DataConfig(images=False)

    def learner_rewards(gamma: float, key: str) -> np.ndarray:
        data = TrainingSet(out, cfg, 1, gamma, tmp_path / "cache", for_rl=True, gamma_key=key)
        return data.train.sampler.rewards.reshape(-1)

    assert not np.allclose(expected(0.97), expected(0.9), atol=1e-3)
    np.testing.assert_allclose(learner_rewards(0.97, "sac.gamma"), expected(0.97), atol=1e-5)
    np.testing.assert_allclose(learner_rewards(0.9, "offline.gamma"), expected(0.9), atol=1e-6)
    (out / LABELS_FILE).unlink()  # labelled before the record existed
    with pytest.warns(UserWarning, match="sac.gamma=0.97"):
        np.testing.assert_allclose(learner_rewards(0.97, "sac.gamma"), expected(0.9), atol=1e-6)
