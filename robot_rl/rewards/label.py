"""``robot-rl label``: write critic progress and rewards into a copy of a LeRobot dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.config import RewardConfig
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot.columns import with_columns
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.reward_labels import PROGRESS, write_labels_meta
from robot_rl.rewards.base import ProgressCritic
from robot_rl.rewards.episodes import critic_episodes
from robot_rl.rewards.metrics import voc
from robot_rl.rewards.shaping import episode_rewards


def label_dataset(
    critic: ProgressCritic,
    src: str | Path,
    dst: str | Path,
    cfg: RewardConfig,
    gamma: float,
    rule: str = "scale",
    overwrite: bool = False,
    progress=None,
    gamma_key: str = "offline.gamma",
    critic_source: str = "",
) -> dict:
    """Score every episode of ``src`` and write ``dst`` with ``progress`` (N,) float32 (the critic's
    per-frame progress) and ``next.reward`` (N,) float32 from ``episode_rewards`` with the learner's
    discount ``gamma`` (and ``next.done`` when ``cfg.critic_done``). Episodes are decoded one at a time, so
    memory stays at one episode. ``dst`` also gets ``meta/reward_labels.json``
    (:mod:`robot_rl.data.reward_labels`): ``gamma``, the config key ``gamma_key`` it came from, the mode,
    the scale, the progress column and ``critic_source`` (the critic checkpoint), so that a learner with
    another discount gets the shaping reshaped to its own.

    Returns:
        {"episodes", "frames", "voc": per-episode VOC list, "mean_reward", "done_frames"}.

    Raises:
        DatasetError: from reading ``src`` or writing ``dst`` (names the path), or 'shaped' on a dataset
            without ``next.reward``.
        ValueError: an unknown reward mode, or 'success' (nothing to label).
        CriticScoreError: the critic produced NaN/inf; nothing is written.
    """
    ds = LeRobotDataset(src)
    table = ds.load_tabular()
    n_eps, n = ds.num_episodes, ds.num_frames
    bounds = [(int(ds.episode_from[e]), int(ds.episode_to[e])) for e in range(n_eps)]
    ds.close()
    env_reward, env_done = table.get(keys.REWARD), table.get(keys.DONE)
    if cfg.mode == "shaped" and env_reward is None:
        raise DatasetError(f"{src}: reward.mode=shaped adds shaping to next.reward, which this dataset lacks")
    out_progress = np.zeros(n, dtype=np.float32)
    out_reward = np.zeros(n, dtype=np.float32)
    out_done = np.zeros(n, dtype=bool)
    vocs = []
    for (lo, hi), episode in zip(bounds, critic_episodes(critic, src, success="episode_end"), strict=True):
        phi = critic.episode_progress(episode.frames, episode.task, rule=rule)
        done_prob = critic.against_first(episode.frames, episode.task).done
        ep_reward = None if env_reward is None else np.asarray(env_reward[lo:hi]).reshape(-1)
        ep_done = None if env_done is None else np.asarray(env_done[lo:hi]).reshape(-1).astype(bool)
        reward, done = episode_rewards(cfg, gamma, phi, done_prob, ep_reward, ep_done)
        out_progress[lo:hi], out_reward[lo:hi] = phi, reward
        if done is not None:
            out_done[lo:hi] = done
        vocs.append(voc(phi))
        if progress is not None:
            progress(1)
    columns = {PROGRESS: out_progress, keys.REWARD: out_reward}
    if cfg.critic_done:
        columns[keys.DONE] = out_done
    with_columns(src, dst, columns, overwrite=overwrite)
    meta = {"gamma": float(gamma), "gamma_key": gamma_key, "mode": cfg.mode, "scale": float(cfg.scale)}
    write_labels_meta(dst, {**meta, "progress_key": PROGRESS, "critic": critic_source})
    return {
        "episodes": n_eps,
        "frames": n,
        "voc": [round(v, 4) for v in vocs],
        "mean_reward": float(out_reward.mean()),
        "done_frames": int(out_done.sum()),
    }
