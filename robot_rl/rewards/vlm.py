"""VLAC-style progress critic on a Hugging Face vision-language model (docs/algorithms.md §9).

The VLM sees o_i's images, then o_j's (one image per camera per frame), and the question "how much closer
to completing the task is the second image?". A small head on the final hidden state of the last prompt
token gives the progress delta (tanh, [-1, 1]) and the done logit (sigmoid, [0, 1]). With
``RewardModelConfig.lora_rank > 0`` LoRA adapters on the language model's attention projections are trained
with the head; with 0 only the head is (the VLM stays frozen). A checkpoint holds the head and the LoRA
weights only; the base VLM is re-loaded from its id or folder, offline.

Use: ``hf download HuggingFaceTB/SmolVLM-256M-Instruct`` once on a machine with network (copy the HF cache
over if needed), then ``robot-rl critic train --reward_model.kind=vlm
--reward_model.model=HuggingFaceTB/SmolVLM-256M-Instruct --data.path=<dataset>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robot_rl.config import RewardModelConfig
from robot_rl.keys import image_key
from robot_rl.rewards.base import CriticInputError, CriticOutput
from robot_rl.rewards.pairs import PairBatch
from robot_rl.rewards.trainable import TrainableCritic

# LoRA targets: attention projections of the language model only (not the vision tower).
LORA_TARGETS = r".*(?:text_model|language_model)\..*\.(?:q_proj|k_proj|v_proj|o_proj)"


class ProgressHead(nn.Module):
    """(B, width) hidden state -> (delta (B,) in [-1, 1], done logit (B,)), float32."""

    def __init__(self, width: int, hidden: int = 256) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, hidden), nn.GELU())
        self.delta = nn.Linear(hidden, 1)
        self.done = nn.Linear(hidden, 1)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.trunk(h.float())
        return torch.tanh(self.delta(z)).squeeze(-1), self.done(z).squeeze(-1)


class VLMProgressCritic(TrainableCritic):
    """Pairwise progress critic: any transformers image-text-to-text model plus a delta/done head.

    Tested with a tiny SmolVLM (Idefics3); written for SmolVLM/Idefics3, Qwen2.5-VL and PaliGemma. Reads
    ``observation.images.<cam>`` for ``cfg.cameras`` as (B, S, S, 3) uint8 with S = ``cfg.image_size``;
    the processor resizes them to what the VLM expects (Idefics3 image splitting is switched off: one
    tile per frame). The state is not used.
    """

    kind = "vlm"

    def __init__(
        self, vlm: nn.Module, processor: Any, cfg: RewardModelConfig, model: str, device: str
    ) -> None:
        self.cfg, self.model_ref, self.device, self.processor = cfg, model, torch.device(device), processor
        self.image_keys = tuple(image_key(c) for c in cfg.cameras)
        self.image_size = (cfg.image_size, cfg.image_size)
        self.state_key = None
        self.dtype = vlm.dtype  # the base VLM's; the head and LoRA adapters are float32
        vlm.requires_grad_(False)
        if cfg.lora_rank > 0:
            from peft import LoraConfig, inject_adapter_in_model

            lora = LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank, target_modules=LORA_TARGETS)
            try:
                inject_adapter_in_model(lora, vlm)
            except ValueError as err:
                raise CriticInputError(
                    f"{model}: no language-model attention layers for LoRA: {err}"
                ) from err
            for name, p in vlm.named_parameters():
                if "lora_" in name:  # float32 adapters on a bfloat16 base, as peft's autocast does
                    p.data = p.data.float()
        width = vlm.config.get_text_config().hidden_size
        self.module = nn.ModuleDict({"vlm": vlm, "head": ProgressHead(width)}).to(self.device)
        self.module.eval()

    @classmethod
    def from_pretrained(
        cls, model: str, cfg: RewardModelConfig, device: str = "cpu", local_files_only: bool = True
    ) -> VLMProgressCritic:
        """Load the VLM ``model`` (hub id or local folder) and put a fresh head (and LoRA) on it.

        Float32 on CPU, bfloat16 on GPU. ``local_files_only`` keeps it offline (robot_rl never downloads).

        Raises:
            CriticInputError: ``model`` is empty, not available offline (the message says how to fetch
                it), not a vision-language model transformers can load, or needs a library that is not
                installed (Qwen2.5-VL's processor needs torchvision).
        """
        import transformers

        if not model:
            raise CriticInputError(
                "reward_model.model is empty: set --reward_model.model=<hub id or folder>, e.g. "
                "HuggingFaceTB/SmolVLM-256M-Instruct (download it first with `hf download <id>`)"
            )
        dtype = torch.float32 if str(device).startswith("cpu") else torch.bfloat16
        names = ("AutoModelForImageTextToText", "AutoModelForVision2Seq")
        auto_classes = [getattr(transformers, n) for n in names if hasattr(transformers, n)]
        try:
            processor = transformers.AutoProcessor.from_pretrained(model, local_files_only=local_files_only)
            for n, auto in enumerate(auto_classes):
                try:
                    vlm = auto.from_pretrained(model, local_files_only=local_files_only, dtype=dtype)
                    break
                except ValueError:  # not registered with this Auto class: try the next one
                    if n == len(auto_classes) - 1:
                        raise
        except OSError as err:
            raise CriticInputError(_unavailable(model, err)) from err
        except ImportError as err:  # e.g. Qwen2.5-VL's processor needs torchvision
            raise CriticInputError(f"{model!r} needs a library that is not installed: {err}") from err
        except ValueError as err:
            raise CriticInputError(
                f"{model!r} is not a vision-language model transformers can load: {err}"
            ) from err
        if getattr(getattr(processor, "image_processor", None), "do_image_splitting", False):
            processor.image_processor.do_image_splitting = False
        ref = str(Path(model).resolve()) if Path(model).is_dir() else model
        return cls(vlm, processor, cfg, ref, device)

    @classmethod
    def from_checkpoint(
        cls,
        meta: dict[str, Any],
        cfg: RewardModelConfig,
        weights: dict[str, torch.Tensor],
        device: str = "cpu",
    ) -> VLMProgressCritic:
        """Re-load the base VLM named in ``meta["model"]`` (offline), then the saved head and LoRA weights.

        Raises:
            CriticInputError: the base VLM is unavailable, or the weights do not fit it (another model or
                LoRA rank).
        """
        critic = cls.from_pretrained(meta.get("model") or cfg.model, cfg, device)
        head = {k[5:]: v for k, v in weights.items() if k.startswith("head.")}
        lora = {k[5:]: v for k, v in weights.items() if k.startswith("lora.")}
        expected = set(critic._lora_params())
        if set(lora) != expected or len(head) + len(lora) != len(weights):
            raise CriticInputError(
                f"checkpoint weights do not fit {critic.model_ref!r} with lora_rank={cfg.lora_rank}: "
                f"{len(lora)} LoRA tensors saved, {len(expected)} expected"
            )
        try:
            critic.module["head"].load_state_dict(head)
        except RuntimeError as err:
            raise CriticInputError(f"checkpoint head does not fit {critic.model_ref!r}: {err}") from err
        critic.module["vlm"].load_state_dict(lora, strict=False)
        return critic

    def extra_meta(self) -> dict[str, Any]:
        return {"model": self.model_ref}

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Head weights (``head.*``) and LoRA adapters (``lora.*``); never the base VLM."""
        head = {f"head.{k}": v for k, v in self.module["head"].state_dict().items()}
        return head | {f"lora.{k}": v for k, v in self._lora_params().items()}

    def _lora_params(self) -> dict[str, torch.Tensor]:
        return {k: p for k, p in self.module["vlm"].named_parameters() if "lora_" in k}

    def prompt(self, task: str) -> str:
        """The pairwise prompt text with its image placeholders (chat template when the processor has one)."""
        n = len(self.image_keys)
        if n == 1:
            order = "The first image is earlier, the second later"
            question = "How much closer to completing the task is the second image?"
        else:
            cams = ", ".join(self.cfg.cameras)
            order = f"The first {n} images (cameras {cams}) are earlier, the next {n} later"
            question = "How much closer to completing the task are the later images?"
        text = f"Task: {task.strip()}. {order}. {question}"
        if getattr(self.processor, "chat_template", None):
            content = [{"type": "image"}] * (2 * n) + [{"type": "text", "text": text}]
            messages = [{"role": "user", "content": content}]
            return self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return getattr(self.processor, "image_token", "<image>") * (2 * n) + text

    def forward(
        self, obs_i: dict[str, np.ndarray], obs_j: dict[str, np.ndarray], tasks: list[str]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(delta (B,) in [-1, 1], done logit (B,)), float32 tensors, on checked inputs."""
        images = [
            [np.asarray(o[k][b]) for o in (obs_i, obs_j) for k in self.image_keys] for b in range(len(tasks))
        ]
        inputs = self.processor(
            text=[self.prompt(t) for t in tasks], images=images, return_tensors="pt", padding=True
        )
        inputs = {
            k: v.to(self.device, self.dtype) if v.is_floating_point() else v.to(self.device)
            for k, v in inputs.items()
            if isinstance(v, torch.Tensor)
        }
        vlm = self.module["vlm"]
        tuned = self.cfg.lora_rank > 0
        with torch.set_grad_enabled(torch.is_grad_enabled() and tuned):
            if hasattr(vlm, "model"):  # the multimodal backbone without the LM head
                hidden = vlm.model(**inputs).last_hidden_state
            else:
                hidden = vlm(**inputs, output_hidden_states=True).hidden_states[-1]
        mask = inputs["attention_mask"]
        last = mask.shape[1] - 1 - mask.flip(1).argmax(1)  # last real token, left or right padding
        return self.module["head"](hidden[torch.arange(len(tasks), device=hidden.device), last])

    def loss(self, batch: PairBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """MSE on the delta plus BCE on the done logit, over one batch of pairs."""
        delta, done_logit = self.forward(batch.obs_i, batch.obs_j, batch.tasks)
        delta_loss = F.mse_loss(delta, torch.as_tensor(batch.delta, device=delta.device))
        done_target = torch.as_tensor(batch.done, device=delta.device)
        done_loss = F.binary_cross_entropy_with_logits(done_logit, done_target)
        return delta_loss + done_loss, {"delta_loss": delta_loss.item(), "done_loss": done_loss.item()}

    def _score(
        self, obs_i: dict[str, np.ndarray], obs_j: dict[str, np.ndarray], tasks: list[str]
    ) -> CriticOutput:
        with torch.no_grad():
            delta, done_logit = self.forward(obs_i, obs_j, tasks)
        return CriticOutput(
            delta.cpu().numpy().astype(np.float32), torch.sigmoid(done_logit).cpu().numpy().astype(np.float32)
        )


def _unavailable(model: str, err: Exception) -> str:
    return (
        f"vision-language model {model!r} is not available offline: it is neither a local model folder nor "
        "in the Hugging Face cache, and robot_rl never downloads weights at run time. On a machine with "
        f"network run `hf download {model}` (or `huggingface-cli download {model}`), copy the cache "
        "(~/.cache/huggingface/hub, or $HF_HOME) to this machine, or pass a local folder saved with "
        f"save_pretrained as --reward_model.model=/path/to/model ({err})"
    )
