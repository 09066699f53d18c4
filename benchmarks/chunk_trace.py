"""What an offline agent's critic and one-step actor do at each decision state of a cube task (issue 38
item 2: why CO-RFT's actor fails place-in-bin, why VLA QC-FQL's BC-anchored picks fail pick-cube).

Along rollouts driven by ``--drive`` (``agent``: the checkpoint's own acting, i.e. its
``offline.extraction``; ``actor``: the one-step policy μ(s, z); ``bc``: one behaviour-flow sample), at every
decision state (one chunk per state), with N = ``--samples`` behaviour-flow samples A_i:

- the critic's aggregated Q of the samples (mean, max, spread) and of the actor's chunk, where the agent
  has a one-step actor (QC-FQL, CO-RFT);
- the sample the critic picks (argmax Q, the BC-anchored extraction), against the samples' mean: its
  gripper command (mean over the chunk; −1 open, +1 closed, normalised units) and its summed vertical
  command (normalised units);
- the actor's dependence on its noise z (std of its chunk over 4 draws of z, mean over steps and dims);
- the instruction's pull: mean |Δ| of the actor's chunk, and of a flow sample with the same noise, when
  the observation's instruction is replaced by ``--alt-task``.

States are split by the pinch site's height above the cube's centre (``approach``: > 3 cm; ``near``).
Normalised units throughout (the policy's action normalisation); episodes are ``robot-rl eval``'s env seeds.

    python benchmarks/chunk_trace.py runs/mt/vla/checkpoints/offline_seed0 \
        --env-id robot_rl/PandaPlaceInBin-v0 --drive actor --episodes 5 --cameras front --image-size 32 \
        --environment-state-size 10
"""

from __future__ import annotations

import numpy as np
import torch
from grasp_trace import PINCH, open_trace, trace_parser

from robot_rl import keys
from robot_rl.algos.one_step import OneStepAgent
from robot_rl.stages.envs import EVAL_SEED_OFFSET

GRIP, DZ = 3, 2  # action dims of the Panda tasks: (dx, dy, dz, gripper)
APPROACH_M = 0.03  # pinch site this far above the cube's centre: the approach


@torch.no_grad()
def state_row(agent, obs: dict, alt_task: str, n: int) -> tuple[dict, dict[str, np.ndarray]]:
    """The figures of one decision state (module docstring) and the normalised chunks (h, d) to drive by."""
    policy, critic = agent.policy, agent.critic
    h, d = policy.horizon, policy.action_dim
    feat = policy.encode(obs)
    noise = torch.randn(n, h * d)
    samples = policy.sample_from_features(feat.repeat_interleave(n, 0), noise, 0).reshape(n, h, d)
    cfeat = critic.features(obs)
    q = critic.q_agg(critic.q_from_features(cfeat.repeat_interleave(n, 0), samples)).numpy()
    pick = samples[int(q.argmax())]
    row = {
        "q_mean": float(q.mean()),
        "q_max": float(q.max()),
        "q_std": float(q.std()),
        "pick_grip": float(pick[:, GRIP].mean()),
        "samples_grip": float(samples[:, :, GRIP].mean()),
        "pick_dz": float(pick[:, DZ].sum()),
        "samples_dz": float(samples[:, :, DZ].sum(1).mean()),
    }
    alt = {**obs, keys.TASK: np.array([alt_task], dtype=object)}
    flow_alt = policy.sample_from_features(policy.encode(alt), noise[:1], 0).reshape(h, d)
    row["flow_instruction_pull"] = float((flow_alt - samples[0]).abs().mean())
    chunks = {"bc": samples[0].numpy(), "pick": pick.numpy()}
    if isinstance(agent, OneStepAgent):
        one_step = agent.one_step
        z = torch.randn(4, h, d)
        mus = torch.stack([policy.clip_normalized(one_step(obs, z[i : i + 1]))[0] for i in range(4)])
        actor = mus[0]
        row["q_actor"] = float(critic.q_agg(critic.q_from_features(cfeat, actor[None]))[0])
        row["actor_grip"] = float(actor[:, GRIP].mean())
        row["actor_dz"] = float(actor[:, DZ].sum())
        row["actor_z_std"] = float(mus.std(0).mean())
        actor_alt = policy.clip_normalized(one_step(alt, z[:1]))[0]
        row["actor_instruction_pull"] = float((actor_alt - actor).abs().mean())
        chunks["actor"] = actor.numpy()
    return row, chunks


def main() -> None:
    p = trace_parser(__doc__, episodes=5, max_episode_steps=100)
    p.add_argument("--drive", choices=("agent", "actor", "bc"), default="agent")
    p.add_argument("--samples", type=int, default=16, help="behaviour-flow samples per state (N)")
    p.add_argument("--alt-task", default="Pick up the cube and lift it.")
    args = p.parse_args()
    agent, obs_keys, env = open_trace(args)
    torch.manual_seed(0)
    if args.drive == "actor" and not isinstance(agent, OneStepAgent):
        raise SystemExit(f"{args.checkpoint}: --drive actor needs a one-step actor (qc_fql, corft)")
    low, high = env.action_space.low, env.action_space.high
    rows, successes = [], []
    for episode in range(args.episodes):
        obs, info = env.reset(seed=EVAL_SEED_OFFSET + episode)
        done, success = False, False
        while not done:
            batch = {k: torch.as_tensor(obs[k][None]) for k in obs_keys}
            batch[keys.TASK] = np.array([info.get("task", "")], dtype=object)
            row, chunks = state_row(agent, batch, args.alt_task, args.samples)
            row["approach"] = bool(obs[keys.STATE][PINCH][2] - obs[keys.ENV_STATE][2] > APPROACH_M)
            rows.append(row)
            if args.drive == "agent":
                chunk = agent.act(batch)[0].numpy()
            else:
                normalised = torch.as_tensor(chunks["actor" if args.drive == "actor" else "bc"])[None]
                chunk = agent.policy.unnormalize_actions(normalised, batch)[0].numpy()
            for action in chunk:
                obs, _, terminated, truncated, step_info = env.step(np.clip(action, low, high))
                success = success or bool(step_info.get("is_success", False))
                if terminated or truncated:
                    done = True
                    break
        successes.append(success)
    env.close()
    print(f"{args.env_id}, drive {args.drive}: success {np.mean(successes):.2f}, {len(rows)} decision states")
    for phase, keep in (("all", lambda r: True), ("approach", lambda r: r["approach"])):
        sel = [r for r in rows if keep(r)]
        if not sel:
            continue
        mean = {k: float(np.mean([r[k] for r in sel])) for k in sel[0] if k != "approach"}
        line = (
            f"{phase:>8} ({len(sel):3d}): Q samples mean {mean['q_mean']:+.3f} max {mean['q_max']:+.3f} "
            f"std {mean['q_std']:.3f} | picked grip {mean['pick_grip']:+.2f} "
            f"(samples {mean['samples_grip']:+.2f}) "
            f"dz {mean['pick_dz']:+.2f} (samples {mean['samples_dz']:+.2f}) | flow instruction pull "
            f"{mean['flow_instruction_pull']:.3f}"
        )
        if "q_actor" in mean:
            beats = np.mean([r["q_actor"] > r["q_max"] for r in sel])
            line += (
                f" | actor Q {mean['q_actor']:+.3f} (> every sample {beats:.2f}) "
                f"grip {mean['actor_grip']:+.2f} dz {mean['actor_dz']:+.2f} "
                f"z-std {mean['actor_z_std']:.3f} instruction pull "
                f"{mean['actor_instruction_pull']:.3f}"
            )
        print(line)


if __name__ == "__main__":
    main()
