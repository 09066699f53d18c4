"""VLMProgressCritic on a tiny random SmolVLM (Idefics3) built offline: scoring, LoRA training, checkpoints,
unavailable models and input checks. No download."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_vlm import build_tiny_vlm

from robot_rl.config import RewardModelConfig
from robot_rl.rewards.base import CriticInputError
from robot_rl.rewards.pairs import PairBatch
from robot_rl.rewards.registry import load_critic
from robot_rl.rewards.trainable import WEIGHTS_FILE, train_critic
from robot_rl.rewards.vlm import VLMProgressCritic

FRONT = "observation.images.front"
TASK = "pick up the cube"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm"))


def make_cfg(**kw) -> RewardModelConfig:
    return RewardModelConfig(
        **{"kind": "vlm", "image_size": 64, "lora_rank": 4, "batch_size": 8, "lr": 3e-3, **kw}
    )


def frames(rng: np.random.Generator, bright: np.ndarray) -> np.ndarray:
    """(B, 64, 64, 3) uint8 noise around a dark (~60) or bright (~190) level per bright[b]."""
    level = np.where(bright, 190, 60)[:, None, None, None]
    return np.clip(level + rng.normal(0, 25, (len(bright), 64, 64, 3)), 0, 255).astype(np.uint8)


class BrightnessPairs:
    """Dark -> bright is progress (+0.5, done); bright -> dark is regress (-0.5, not done)."""

    def sample(self, batch_size: int, rng: np.random.Generator) -> PairBatch:
        forward = rng.random(batch_size) < 0.5
        return PairBatch(
            obs_i={FRONT: frames(rng, ~forward)},
            obs_j={FRONT: frames(rng, forward)},
            tasks=[TASK] * batch_size,
            delta=np.where(forward, 0.5, -0.5).astype(np.float32),
            done=forward.astype(np.float32),
        )


def random_obs(rng: np.random.Generator, n: int, keys=(FRONT,)) -> dict[str, np.ndarray]:
    return {k: rng.integers(0, 256, (n, 64, 64, 3), dtype=np.uint8) for k in keys}


def test_predict_ranges_and_cameras(tiny: Path) -> None:
    rng = np.random.default_rng(0)
    critic = VLMProgressCritic.from_pretrained(str(tiny), make_cfg())
    out = critic.predict(random_obs(rng, 3), random_obs(rng, 3), [TASK, "open the drawer", "fold the towel"])
    for x in (out.delta, out.done):
        assert x.shape == (3,) and x.dtype == np.float32 and np.isfinite(x).all()
    assert (np.abs(out.delta) <= 1).all() and ((out.done >= 0) & (out.done <= 1)).all()
    # Two cameras, head only: four images per prompt, the VLM frozen.
    keys = ("observation.images.front", "observation.images.wrist")
    two = VLMProgressCritic.from_pretrained(str(tiny), make_cfg(cameras=["front", "wrist"], lora_rank=0))
    assert two.image_keys == keys and two.state_key is None and two.image_size == (64, 64)
    assert two.prompt(TASK).count("<image>") == 4
    assert not any(p.requires_grad for p in two.module["vlm"].parameters())
    assert two.predict(random_obs(rng, 2, keys), random_obs(rng, 2, keys), TASK).delta.shape == (2,)


def test_lora_training_learns_and_checkpoint_round_trips(tiny: Path, tmp_path: Path) -> None:
    critic = VLMProgressCritic.from_pretrained(str(tiny), make_cfg())
    trainable = {n for n, p in critic.module.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("head.") or ".lora_" in n for n in trainable)
    assert any(".lora_" in n for n in trainable)
    base = {k: v.clone() for k, v in critic.module["vlm"].state_dict().items() if "lora_" not in k}
    lora = {k: v.clone() for k, v in critic.trainable_state().items() if k.startswith("lora.")}
    held_out = BrightnessPairs().sample(32, np.random.default_rng(123))
    with torch.no_grad():
        before = critic.loss(held_out)[0].item()
    log = train_critic(critic, BrightnessPairs(), steps=200, log_every=50)
    with torch.no_grad():
        after, parts = critic.loss(held_out)
    assert after.item() < 0.2 * before, (before, after.item(), log)
    assert set(parts) == {"delta_loss", "done_loss"}
    out = critic.predict(held_out.obs_i, held_out.obs_j, held_out.tasks)
    assert (np.sign(out.delta) == np.sign(held_out.delta)).mean() > 0.9
    # The base VLM is untouched, the LoRA adapters moved.
    for k, v in critic.module["vlm"].state_dict().items():
        if "lora_" not in k:
            assert torch.equal(v, base[k]), k
    assert any(not torch.equal(v, critic.trainable_state()[k]) for k, v in lora.items())

    path = critic.save(tmp_path / "critic")
    loaded = load_critic(path)
    assert isinstance(loaded, VLMProgressCritic) and loaded.model_ref == str(tiny.resolve())
    again = loaded.predict(held_out.obs_i, held_out.obs_j, held_out.tasks)
    np.testing.assert_allclose(again.delta, out.delta, atol=1e-6)
    np.testing.assert_allclose(again.done, out.done, atol=1e-6)
    from safetensors.torch import load_file

    saved = load_file(str(path / WEIGHTS_FILE))
    assert all(k.startswith(("head.", "lora.")) for k in saved)
    assert (path / WEIGHTS_FILE).stat().st_size < 0.3 * (tiny / "model.safetensors").stat().st_size


def test_checkpoint_with_other_lora_rank_is_refused(tiny: Path, tmp_path: Path) -> None:
    from robot_rl.rewards.trainable import read_checkpoint

    path = VLMProgressCritic.from_pretrained(str(tiny), make_cfg()).save(tmp_path / "c")
    meta, cfg, weights = read_checkpoint(path)
    cfg.lora_rank = 0
    with pytest.raises(CriticInputError, match="lora_rank=0"):
        VLMProgressCritic.from_checkpoint(meta, cfg, weights)


@pytest.mark.parametrize("model", ["nonexistent-org/nonexistent-vlm", "/nonexistent/dir/vlm"])
def test_unavailable_model_names_the_id_and_the_fix(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CriticInputError) as err:
        VLMProgressCritic.from_pretrained(model, make_cfg())
    assert model in str(err.value) and f"hf download {model}" in str(err.value)
    assert "never downloads" in str(err.value)
    with pytest.raises(CriticInputError, match="reward_model.model is empty"):
        VLMProgressCritic.from_pretrained("", make_cfg())


def test_bad_inputs_are_refused_before_the_model(tiny: Path) -> None:
    rng = np.random.default_rng(1)
    critic = VLMProgressCritic.from_pretrained(str(tiny), make_cfg())
    good = random_obs(rng, 2)
    small = {FRONT: rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)}
    with pytest.raises(CriticInputError, match="32x32"):
        critic.predict(good, small, TASK)
    with pytest.raises(CriticInputError, match="channel-first"):
        critic.predict(good, {FRONT: good[FRONT].transpose(0, 3, 1, 2)}, TASK)
    with pytest.raises(CriticInputError, match="empty task"):
        critic.predict(good, good, ["", TASK])
    with pytest.raises(CriticInputError, match="wrist"):
        VLMProgressCritic.from_pretrained(str(tiny), make_cfg(cameras=["wrist"])).predict(good, good, TASK)
