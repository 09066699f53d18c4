"""``robot-rl critic train|eval`` and ``robot-rl label``: train a progress critic on a LeRobot dataset,
evaluate it (VOC, AUC, curves), and write critic rewards into a dataset."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.config import ConfigError, PipelineConfig
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.progress import progress
from robot_rl.rewards.episodes import critic_episodes, iter_episodes
from robot_rl.rewards.evaluate import plot_progress, score_episodes
from robot_rl.rewards.label import label_dataset
from robot_rl.rewards.pairs import PairSampler
from robot_rl.rewards.registry import build_critic, load_critic
from robot_rl.rewards.server import serve_checkpoint
from robot_rl.rewards.shaping import shaping_gamma, shaping_gamma_key
from robot_rl.rewards.trainable import train_critic
from robot_rl.run_dir import RunDir, write_json_atomic
from robot_rl.threads import set_threads


def critic_arguments(p: argparse.ArgumentParser) -> None:
    """``robot-rl critic``'s action and the flags of ``serve``."""
    p.add_argument("action", choices=["train", "eval", "serve"])
    p.add_argument(
        "--address",
        default="tcp://127.0.0.1:5555",
        help="serve: ZeroMQ bind address (off loopback it needs --security.keys)",
    )
    p.add_argument("--max-batch", type=int, default=64, help="serve: most pairs per forward pass")
    p.add_argument("--max-wait-ms", type=float, default=0.0, help="serve: wait this long to fill a batch")


def label_arguments(p: argparse.ArgumentParser) -> None:
    """``robot-rl label``'s output folder."""
    p.add_argument("--output", required=True, help="folder of the labelled copy of the dataset")
    p.add_argument("--overwrite", action="store_true", help="replace --output if it exists")


def run(args: argparse.Namespace, cfg: PipelineConfig, overrides: list[str]) -> None:
    """Dispatch ``robot-rl critic <action>`` and ``robot-rl label``."""
    set_threads(cfg.threads)
    if args.command == "label":
        label(cfg, args.output, args.overwrite)
    elif args.action == "train":
        train(cfg)
    elif args.action == "eval":
        evaluate(cfg)
    else:
        serve(cfg, args.address, args.max_batch, args.max_wait_ms)


def dataset_root(cfg: PipelineConfig) -> Path:
    """``data.path``, or the run's own dataset."""
    return Path(cfg.data.path) if cfg.data.path else RunDir(cfg.run_dir).dataset


def checkpoint_dir(cfg: PipelineConfig) -> Path:
    """``reward_model.checkpoint``, or ``<run_dir>/critic``."""
    return (
        Path(cfg.reward_model.checkpoint)
        if cfg.reward_model.checkpoint
        else RunDir(cfg.run_dir).root / "critic"
    )


def _success_mode(cfg: PipelineConfig) -> str:
    return "episode_end" if cfg.data.reward == "episode_end" else "dataset"


def split_episodes(cfg: PipelineConfig, num_episodes: int) -> tuple[list[int], list[int]]:
    """(train, held-out) episode ids: ``data.val_episodes``, else the last 10% (at least one).

    Raises:
        ConfigError: a held-out id out of range, or nothing left to train on.
    """
    val = list(cfg.data.val_episodes) or list(range(num_episodes - max(1, num_episodes // 10), num_episodes))
    bad = [e for e in val if not 0 <= e < num_episodes]
    if bad:
        raise ConfigError(f"data.val_episodes: {bad} out of range for {num_episodes} episodes")
    train = [e for e in range(num_episodes) if e not in set(val)]
    if not train:
        raise ConfigError(f"data.val_episodes holds out all {num_episodes} episodes; nothing to train on")
    return train, val


def train(cfg: PipelineConfig) -> dict:
    """Train a critic on the dataset's training episodes, save it, and evaluate it on the held-out ones."""
    root = dataset_root(cfg)
    train_eps, val_eps = split_episodes(cfg, LeRobotDataset(root).num_episodes)
    state_key = keys.STATE if cfg.reward_model.use_state else None
    image_keys = [keys.image_key(c) for c in cfg.reward_model.cameras]
    start = time.time()
    episodes = list(
        iter_episodes(root, image_keys, cfg.reward_model.image_size, state_key, train_eps, _success_mode(cfg))
    )
    state_dim = episodes[0].frames[state_key].shape[1] if state_key else 0
    critic = build_critic(cfg.reward_model, state_dim, cfg.device)
    if state_key and hasattr(critic, "fit_state_stats"):
        critic.fit_state_stats(np.concatenate([e.frames[state_key] for e in episodes]))
    try:
        sampler = PairSampler(episodes, cfg.reward_model)
    except ValueError as err:
        raise ConfigError(f"{root}: {err}") from err
    with progress(total=cfg.reward_model.steps, desc="train critic", unit="step") as bar:
        log = train_critic(critic, sampler, cfg.reward_model.steps, progress=bar.update)
    out = checkpoint_dir(cfg)
    critic.save(out)
    write_json_atomic(out / "train_log.json", log)
    train_s = time.time() - start
    result = evaluate(cfg, critic=critic, episodes=val_eps, out_dir=out / "eval")
    result.update(train_episodes=len(train_eps), train_wall_time_s=train_s, final=log[-1] if log else {})
    write_json_atomic(out / "eval" / "summary.json", result)
    return result


def evaluate(
    cfg: PipelineConfig, critic=None, episodes: list[int] | None = None, out_dir: Path | None = None
) -> dict:
    """Score held-out episodes (``data.val_episodes``, default all) and write eval.json and progress.png."""
    critic = critic or load_critic(checkpoint_dir(cfg), cfg.device)
    root = dataset_root(cfg)
    if episodes is None:
        episodes = list(cfg.data.val_episodes) or None
    eps = list(critic_episodes(critic, root, episodes, _success_mode(cfg)))
    start = time.time()
    result = score_episodes(critic, eps, cfg.reward_model.rule)
    out_dir = out_dir or checkpoint_dir(cfg) / f"eval_{root.name}"
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "eval.json", result)
    plot_progress(result, out_dir / "progress.png")
    summary = {"dataset": str(root), "episodes": [e.index for e in eps], **result["summary"]}
    summary["eval_wall_time_s"] = time.time() - start
    print(json.dumps(summary, indent=2))
    return summary


def label(cfg: PipelineConfig, output: str, overwrite: bool) -> dict:
    """Label the dataset with the trained critic's progress and ``reward.mode`` rewards into ``output``.

    Raises:
        ConfigError: ``reward.mode`` is not shaped or critic.
    """
    if cfg.reward.mode not in ("shaped", "critic"):
        raise ConfigError(f"reward.mode={cfg.reward.mode!r}: label writes 'shaped' or 'critic' rewards")
    critic = load_critic(checkpoint_dir(cfg), cfg.device)
    root = dataset_root(cfg)
    with progress(total=LeRobotDataset(root).num_episodes, desc="label", unit="ep") as bar:
        summary = label_dataset(
            critic,
            root,
            output,
            cfg.reward,
            shaping_gamma(cfg, "offline"),
            cfg.reward_model.rule,
            overwrite,
            bar.update,
            shaping_gamma_key(cfg, "offline"),
            str(checkpoint_dir(cfg).resolve()),
        )
    print(json.dumps({k: v for k, v in summary.items() if k != "voc"}, indent=2))
    return summary


def serve(cfg: PipelineConfig, address: str, max_batch: int, max_wait_ms: float) -> None:
    """Serve the trained critic on ``address`` until interrupted (robot_rl.rewards.server), with the keys
    of ``security.keys`` and the limits ``reward_model.serve_max_pairs`` and
    ``reward_model.serve_max_message_mb``."""
    serve_checkpoint(
        checkpoint_dir(cfg),
        address,
        cfg.device,
        max_batch,
        max_wait_ms,
        cfg.security.keys,
        cfg.reward_model.serve_max_pairs,
        cfg.reward_model.serve_max_message_mb,
    )
