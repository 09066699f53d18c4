"""Training loop shared by flow BC and chunked offline RL, with resumable periodic checkpoints."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from robot_rl import keys
from robot_rl.algos.batch import batch_to_torch
from robot_rl.config import PipelineConfig, config_to_dict
from robot_rl.data.normalize import compute_stats
from robot_rl.run_dir import RunDir

LOG_EVERY = 50


def load_training_arrays(root: Path) -> tuple[dict[str, np.ndarray], list[str], dict[str, tuple[int, ...]]]:
    """All frames of a LeRobot dataset as arrays (N, ...); camera keys are decoded to uint8 (N, H, W, 3).

    Returns (arrays, observation keys, observation shapes).
    """
    from robot_rl.data.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset(root)
    arrays = ds.load_tabular()
    obs_keys = sorted(k for k in ds.features if k.startswith("observation."))
    for key in obs_keys:
        if keys.is_image_key(key):
            arrays[key] = np.concatenate([ds.episode_video(ep, key) for ep in range(ds.num_episodes)])
    shapes = {k: tuple(arrays[k].shape[1:]) for k in obs_keys}
    return arrays, obs_keys, shapes


def _method(cfg: PipelineConfig, algo: str) -> str:
    return "bc" if algo == "bc" else cfg.offline.method


def train_agent(cfg: PipelineConfig, algo: str, seed: int, run: RunDir, init_from: Path | None) -> dict:
    """Train one agent on the run's dataset and save it to ``run.checkpoint(algo, seed)``.

    Every ``cfg.checkpoint_every`` steps the modules, optimizers, step and sampler RNG go to
    ``<ckpt>_resume``; a killed run continues from there, and log rows written after that checkpoint are
    dropped so the CSV log has each step once. Offline RL warm-starts its flow policy from ``init_from``.
    Returns the metrics of the last logged step.
    """
    from robot_rl.data.sampler import ChunkSampler
    from robot_rl.policies.checkpoint import save_checkpoint
    from robot_rl.policies.factory import build_agent, warm_start_from_bc

    budget = cfg.bc if algo == "bc" else cfg.offline
    arrays, obs_keys, shapes = load_training_arrays(run.dataset)
    stats = compute_stats({k: arrays[k] for k in [*obs_keys, keys.ACTION]})
    gamma = cfg.offline.gamma
    sampler = ChunkSampler(arrays, arrays[keys.EPISODE_INDEX], obs_keys, cfg.policy.horizon, gamma)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    action_dim = arrays[keys.ACTION].shape[1]
    agent = build_agent(_method(cfg, algo), cfg, shapes, action_dim, stats, device=cfg.device)
    final_dir = run.checkpoint(algo, seed)
    resume_dir = _resume_dir(final_dir)
    resume_from = resume_checkpoint(final_dir)
    start = 0
    log_path = run.train_log(algo, seed)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if resume_from is not None:
        start = _restore(agent, resume_from, rng)
        _truncate_log(log_path, start)
    elif init_from is not None:
        warm_start_from_bc(agent, init_from)
    metrics: dict[str, float] = {}
    config = {**config_to_dict(cfg), "method": _method(cfg, algo), "seed": seed, "obs_keys": obs_keys}
    agent.train()
    with open(log_path, "a" if start else "w", newline="") as log_file:
        writer = None
        for step in tqdm(
            range(start, budget.steps),
            desc=f"train {algo} seed {seed}",
            initial=start,
            total=budget.steps,
            unit="step",
        ):
            batch = batch_to_torch(sampler.sample(budget.batch_size, rng), cfg.device)
            metrics = agent.update(batch)
            if (step + 1) % LOG_EVERY == 0 or step + 1 == budget.steps:
                row = {"step": step + 1, **metrics}
                if writer is None:
                    writer = csv.DictWriter(log_file, fieldnames=list(row))
                    if not start:
                        writer.writeheader()
                writer.writerow(row)
                log_file.flush()
            if (step + 1) % cfg.checkpoint_every == 0 and step + 1 < budget.steps:
                _save_resume(agent, resume_dir, step + 1, rng, config, stats)
    agent.eval()
    save_checkpoint(final_dir, agent.modules(), config, stats, obs_shapes=shapes, action_dim=action_dim)
    for leftover in (resume_dir, _previous(resume_dir)):
        shutil.rmtree(leftover, ignore_errors=True)
    return metrics


def _truncate_log(path: Path, step: int) -> None:
    """Keep the header and the complete rows of steps <= ``step``: rows past the checkpoint are re-run, and
    a row torn by the kill (no newline, or too few fields) is dropped."""
    if not path.is_file():
        return
    header, *rows = path.read_text().splitlines(keepends=True) or [""]
    fields = header.count(",")
    kept = [
        r for r in rows if r.endswith("\n") and r.count(",") == fields and int(r.split(",", 1)[0]) <= step
    ]
    path.write_text(header + "".join(kept))


def resume_checkpoint(final_dir: Path) -> Path | None:
    """The resumable checkpoint a killed training run of ``final_dir`` continues from, or None.

    That is ``<final_dir>_resume`` when complete, else the previous one (``<final_dir>_resume.old``),
    which :func:`_save_resume` keeps until its successor is in place: a kill at any moment leaves one.
    """
    current = _resume_dir(final_dir)
    for path in (current, _previous(current)):
        if (path / "learner_state.json").is_file():
            return path
    return None


def _resume_dir(final_dir: Path) -> Path:
    return final_dir.with_name(final_dir.name + "_resume")


def _previous(resume_dir: Path) -> Path:
    return resume_dir.with_name(resume_dir.name + ".old")


def _save_resume(agent, path: Path, step: int, rng, config, stats) -> None:
    """Write the checkpoint to a temporary folder, then swap it in; the old one is removed only after."""
    from robot_rl.policies.checkpoint import save_checkpoint

    tmp, old = path.with_name(path.name + ".tmp"), _previous(path)
    shutil.rmtree(tmp, ignore_errors=True)
    save_checkpoint(tmp, agent.modules(), config, stats, extra_state=agent.optimizer_state())
    (tmp / "learner_state.json").write_text(json.dumps({"step": step, "rng": rng.bit_generator.state}))
    if (path / "learner_state.json").is_file():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    else:
        shutil.rmtree(path, ignore_errors=True)  # an incomplete folder from an earlier kill
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def _restore(agent, path: Path, rng) -> int:
    from robot_rl.policies.checkpoint import load_checkpoint, load_extra_state

    state, _, _ = load_checkpoint(path)
    for name, module in agent.modules().items():
        module.load_state_dict(state[name])
    agent.load_optimizer_state(load_extra_state(path))
    learner = json.loads((path / "learner_state.json").read_text())
    rng.bit_generator.state = learner["rng"]
    return int(learner["step"])


def load_agent(path: Path, device: str = "cpu", seed: int = 0):
    """Rebuild a trained agent from a checkpoint folder; returns (agent in eval mode, observation keys).

    Raises FileNotFoundError naming the missing checkpoint file.
    """
    from robot_rl.policies.factory import load_agent as _load

    torch.manual_seed(seed)
    agent, config, _ = _load(path, device=device)
    agent.eval()
    return agent, list(config["obs_keys"])
