"""Train LeRobot 0.4.4's ACT on exported G1 frames and write its chunk predictions (the peer of
``bench_g1_anchor.py``). Runs in the LeRobot side venv (``/work/shared/peers/lerobot``), never imports
robot_rl: the metric is computed by the caller, in robot_rl's venv, from the predictions written here.

Input ``--data`` (npz, written by ``bench_g1_anchor.py``): ``state``, ``prev_action``, ``action`` (N, 26)
float32 for every dataset row, ``episode`` (N,) int64, ``train_rows`` and ``score_rows`` int64.
Output ``--out`` (npz): ``predicted`` (len(score_rows), h, 26) float32 in action units, ``seconds``,
``final_loss``.

The model and loss are LeRobot's (``ACTPolicy.forward``: L1 over non-padded chunk steps plus
``kl_weight`` x KL of the CVAE latent; Zhao et al. 2023, "Learning Fine-Grained Bimanual Manipulation with
Low-Cost Hardware"), trained with AdamW as LeRobot's preset (weight decay 1e-4, no scheduler) at ``--lr``.
Inputs and targets are mean-std normalised with statistics of the training rows, LeRobot's default for
ACT (``NormalizationMode.MEAN_STD``, (x - mean) / (std + 1e-8)). No image: ACT's ResNet needs torchvision's
ImageNet weights, which cannot be downloaded here, so this is state-only ACT. ACT needs an
``observation.environment_state`` token when it has no image: ``--inputs state`` passes the joint state
there; ``--inputs state+prev`` passes the joint state as ``observation.state`` and the last command
(``observation.prev_action``, as robot_rl's policies see it) as the environment state. Chunks that run
past an episode's end are padded with its last action and masked (``action_is_pad``), as LeRobot does.
"""

from __future__ import annotations

import argparse
import time

import lerobot_tv_shim  # noqa: F401  (before torchvision: defines the operator schemas its import needs)
import numpy as np
import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.act.modeling_act import ACTPolicy


def chunk_targets(action: np.ndarray, episode: np.ndarray, rows: np.ndarray, h: int):
    """Chunks a[t..t+h-1] (len(rows), h, d) and their pad mask (len(rows), h) bool, cut at episode ends."""
    idx = rows[:, None] + np.arange(h)[None]
    last = np.searchsorted(episode, episode[rows], side="right") - 1  # last row of each row's episode
    pad = idx > last[:, None]
    idx = np.minimum(idx, last[:, None])
    return action[idx], pad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--inputs", choices=["state", "state+prev"], default="state+prev")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--horizon", type=int, default=15)
    parser.add_argument("--dim_model", type=int, default=512)
    parser.add_argument("--dim_feedforward", type=int, default=3200)
    parser.add_argument("--layers", type=int, default=4, help="encoder and CVAE-encoder layers (LeRobot: 4)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    npz = np.load(args.data)
    state, prev, action = npz["state"], npz["prev_action"], npz["action"]
    episode, train_rows, score_rows = npz["episode"], npz["train_rows"], npz["score_rows"]
    d = action.shape[1]
    if args.inputs == "state":
        inputs = {"observation.environment_state": state}
        features = {"observation.environment_state": PolicyFeature(FeatureType.ENV, (d,))}
    else:
        inputs = {"observation.state": state, "observation.environment_state": prev}
        features = {
            "observation.state": PolicyFeature(FeatureType.STATE, (state.shape[1],)),
            "observation.environment_state": PolicyFeature(FeatureType.ENV, (d,)),
        }
    config = ACTConfig(
        input_features=features,
        output_features={"action": PolicyFeature(FeatureType.ACTION, (d,))},
        chunk_size=args.horizon,
        n_action_steps=args.horizon,
        pretrained_backbone_weights=None,
        dim_model=args.dim_model,
        dim_feedforward=args.dim_feedforward,
        n_encoder_layers=args.layers,
        n_vae_encoder_layers=args.layers,
        optimizer_lr=args.lr,
        device="cpu",
    )
    policy = ACTPolicy(config)
    stats = {k: (v[train_rows].mean(0), v[train_rows].std(0) + 1e-8) for k, v in inputs.items()}
    a_mean, a_std = action[train_rows].mean(0), action[train_rows].std(0) + 1e-8
    norm = {k: torch.from_numpy((v - stats[k][0]) / stats[k][1]).float() for k, v in inputs.items()}
    target, pad = chunk_targets((action - a_mean) / a_std, episode, np.arange(len(action)), args.horizon)
    target, pad = torch.from_numpy(target).float(), torch.from_numpy(pad)
    optim = torch.optim.AdamW(
        policy.get_optim_params(), lr=args.lr, weight_decay=config.optimizer_weight_decay
    )

    start = time.time()
    policy.train()
    loss = torch.zeros(())
    for _ in range(args.steps):
        rows = torch.from_numpy(rng.choice(train_rows, args.batch_size))
        batch = {k: v[rows] for k, v in norm.items()}
        batch["action"], batch["action_is_pad"] = target[rows], pad[rows]
        loss, _ = policy.forward(batch)
        optim.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 10.0)  # lerobot-train's grad_clip_norm
        optim.step()
    seconds = time.time() - start

    policy.eval()
    rows = torch.from_numpy(score_rows)
    with torch.no_grad():
        pred = policy.predict_action_chunk({k: v[rows] for k, v in norm.items()}).numpy()
    np.savez(
        args.out,
        predicted=(pred * a_std + a_mean).astype(np.float32),
        seconds=seconds,
        final_loss=float(loss.detach()),
    )
    print(f"act {args.inputs}: {args.steps} steps in {seconds:.0f} s, final loss {float(loss.detach()):.4f}")


if __name__ == "__main__":
    main()
