"""Online RL with a VLA actor (issue 20): offline QC on a tiny random Idefics3 VLA (vision frozen, language
model fine-tuned), then ``robot-rl online`` with real learner and actor processes rendering the camera.
The learner publishes only what trains (the frozen vision tower never crosses the link: the VLA's
state dict leaves it out, as its checkpoints do), the actor swaps the published weights in, and the
online checkpoint evaluates."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from online_setup import CODE, free_address
from safetensors import safe_open
from tiny_vlm import IMAGE, build_tiny_vlm  # noqa: E402

ENV = ["--env.cameras=[front]", f"--env.image_size={IMAGE}", "--env.max_episode_steps=12", "--env.num_envs=1"]
TINY = [
    "--policy.kind=vla",
    "--policy.vla.expert_width=32",
    "--policy.vla.expert_layers=1",
    "--policy.flow_steps=2",
    "--seeds=[0]",
    "--bc.steps=4",
    "--bc.batch_size=4",
    "--offline.steps=4",
    "--offline.batch_size=4",
    "--offline.best_of_n=2",
    "--offline.critic_hidden_dims=[32,32]",
    "--data.num_workers=0",
    "--online.env_steps=40",
    "--online.batch_size=4",
    "--online.publish_every=2",
    "--online.checkpoint_every=10",
    "--online.max_env_steps_ahead=12",  # one episode: the actor cannot finish before any update is published
    "--online.connect_timeout_s=120",
    "--intervention.device=sim_human",
    "--eval.episodes_per_seed=2",
    "--eval.num_videos=0",
]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CODE, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.e2e
def test_online_qc_with_a_vla_actor_syncs_only_trained_weights(tmp_path):
    vlm = build_tiny_vlm(tmp_path / "vlm")
    args = [f"--run_dir={tmp_path / 'run'}", *ENV, *TINY, f"--policy.vla.vlm={vlm}"]
    for stage in (["collect", "--collect.num_episodes=4"], ["train", "--algo=offline"]):
        done = _cli(*stage, *args)
        assert done.returncode == 0, done.stderr[-3000:]
    done = _cli("online", *args, f"--online.address={free_address()}")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "run" / "online" / "online_qc_seed0"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["env_steps"] >= 40 and summary["updates"] >= 40 and not summary["actor_faults"]
    cached = folder / "actor0" / "policy"
    assert json.loads((cached / "version.json").read_text())["version"] > 0  # the actor took new weights
    with safe_open(cached / "model.safetensors", "pt") as published:
        names = list(published.keys())
    assert not [n for n in names if "vision" in n]  # the frozen tower stays on each side
    assert [n for n in names if n.startswith("policy.backbone.")]  # the fine-tuned language model syncs
    done = _cli("eval", "--algo=online", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "run" / "eval" / "online_qc_seed0.json").read_text())
    assert len(result["episodes"]) == 2
