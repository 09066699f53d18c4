"""LeRobot 0.4.4's SAC learner update on state observations, for the peer row of ``bench_learner.py``.

Runs only in the LeRobot side venv (``../shared/peers/lerobot/setup.sh``), never in robot_rl's: it imports
LeRobot. One update is the body of ``lerobot/rl/learner.py``'s loop at ``utd_ratio`` 1 and
``policy_update_freq`` 1: critic loss, backward, grad-norm clip, Adam step; actor loss, backward, clip,
step; temperature loss, backward, clip, step; Polyak update of the target critics. The batch is random
(the update's cost does not depend on the values): ``observation.state`` (22,),
``observation.environment_state`` (7,), action (``--action-dim``,), reward, done. Network sizes come from
the command line (``--critic-hidden``, ``--actor-hidden``) so the row can match robot_rl's learner;
``--no-compile`` turns off SAC's default ``torch.compile`` of the critics. Prints one JSON line
``{"updates": ..., "seconds": ..., "updates_per_s": ..., "compile": ..., "critic_hidden": [...], ...}``;
the warm-up updates (and any compilation) are not timed.

    HF_HUB_OFFLINE=1 ~/.cache/robot_rl/lerobot044/bin/python benchmarks/lerobot_sac_peer.py --threads 1
"""

from __future__ import annotations

import argparse
import json
import time

import lerobot_tv_shim  # noqa: F401 - must precede torchvision (see ../shared/peers/lerobot/README.md)
import torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.sac.configuration_sac import SACConfig
from lerobot.policies.sac.modeling_sac import SACPolicy


def build(args: argparse.Namespace) -> SACPolicy:
    """A state-only SACPolicy with the requested widths."""
    cfg = SACConfig(
        input_features={
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(22,)),
            "observation.environment_state": PolicyFeature(type=FeatureType.ENV, shape=(7,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(args.action_dim,))},
        device="cpu",
        use_torch_compile=args.compile,
        dataset_stats=None,
    )
    cfg.critic_network_kwargs.hidden_dims = list(args.critic_hidden)
    cfg.actor_network_kwargs.hidden_dims = list(args.actor_hidden)
    return SACPolicy(cfg)


def update(policy: SACPolicy, optimizers: dict, batch: dict, clip: float) -> None:
    """One learner step as ``lerobot/rl/learner.py`` makes it (UTD 1, policy_update_freq 1)."""
    loss = policy.forward(batch, model="critic")["loss_critic"]
    optimizers["critic"].zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.critic_ensemble.parameters(), max_norm=clip).item()
    optimizers["critic"].step()
    loss = policy.forward(batch, model="actor")["loss_actor"]
    optimizers["actor"].zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.actor.parameters(), max_norm=clip).item()
    optimizers["actor"].step()
    loss = policy.forward(batch, model="temperature")["loss_temperature"]
    optimizers["temperature"].zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_([policy.log_alpha], max_norm=clip).item()
    optimizers["temperature"].step()
    policy.update_target_networks()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--action-dim", type=int, default=4)
    parser.add_argument("--critic-hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--actor-hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--time-per-case", type=float, default=6.0)
    parser.add_argument("--min-updates", type=int, default=1)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    policy = build(args)
    policy.train()
    # the learner's optimisers (lerobot/rl/learner.py make_optimizers_and_scheduler)
    params = policy.get_optim_params()
    optimizers = {
        "actor": torch.optim.Adam(params["actor"], lr=policy.config.actor_lr),
        "critic": torch.optim.Adam(params["critic"], lr=policy.config.critic_lr),
        "temperature": torch.optim.Adam([params["temperature"]], lr=policy.config.temperature_lr),
    }
    b = args.batch_size

    def obs() -> dict[str, torch.Tensor]:
        return {"observation.state": torch.randn(b, 22), "observation.environment_state": torch.randn(b, 7)}

    batch = {
        "action": torch.rand(b, args.action_dim) * 2 - 1,
        "reward": torch.rand(b),
        "state": obs(),
        "next_state": obs(),
        "done": torch.zeros(b),
    }
    clip = policy.config.grad_clip_norm
    for _ in range(2):  # warm-up (and compilation)
        update(policy, optimizers, batch, clip)
    n, start = 0, time.perf_counter()
    while n < args.min_updates or time.perf_counter() - start < args.time_per_case:
        update(policy, optimizers, batch, clip)
        n += 1
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "updates": n,
                "seconds": seconds,
                "updates_per_s": n / seconds,
                "compile": args.compile,
                "critic_hidden": args.critic_hidden,
                "actor_hidden": args.actor_hidden,
                "threads": torch.get_num_threads(),
            }
        )
    )


if __name__ == "__main__":
    main()
