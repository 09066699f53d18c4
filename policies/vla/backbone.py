"""The VLA policy's backbone: a Hugging Face image-text-to-text VLM, loaded offline, with the freezing and
LoRA choices of :class:`robot_rl.config.VLAConfig`, the prompt it reads, and a fingerprint of its frozen
weights (so a checkpoint that stores only the trainable part can tell it is loaded on the same backbone).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from robot_rl.config import VLAConfig
from robot_rl.extras import MissingExtraError

# LoRA targets: attention projections of the language model only (not the vision tower), as the VLM critic.
LORA_TARGETS = r".*(?:text_model|language_model)\..*\.(?:q_proj|k_proj|v_proj|o_proj)"
# parameter names of the vision encoder (Idefics3/SmolVLM ``vision_model``, PaliGemma ``vision_tower``)
_VISION = re.compile(r"(?:^|\.)(?:vision_model|vision_tower|visual)\.")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class VLMLoadError(ValueError):
    """The VLM named by ``policy.vla.vlm`` cannot be loaded: not available offline, not a VLM, or its
    processor needs a library that is not installed. The message names it and how to fetch it."""


def require_transformers():
    """The ``transformers`` module, with ``peft`` checked too (the VLA path's two libraries).

    Raises:
        MissingExtraError: either is not installed (names ``pip install 'robot-rl[vla]'``).
    """
    try:
        import peft  # noqa: F401  (LoRA; checked here so the error names the extra before any work)
        import transformers
    except ImportError as err:
        raise MissingExtraError(
            f"policy.kind=vla needs transformers and peft ({err}): pip install 'robot-rl[vla]'"
        ) from err
    return transformers


def load_vlm(ref: str, dtype: str = "float32") -> tuple[nn.Module, Any]:
    """Load ``(model, processor)`` for the hub id or folder ``ref`` with ``AutoModelForImageTextToText``
    and ``AutoProcessor``, offline (``local_files_only``), in ``dtype`` (``float32``/``bfloat16``).

    Raises:
        MissingExtraError: transformers/peft are not installed (names ``robot-rl[vla]``).
        VLMLoadError: ``ref`` is empty, not available offline (says ``hf download <ref>``), not a
            vision-language model, or needs a library that is not installed.
    """
    transformers = require_transformers()
    if not ref:
        raise VLMLoadError("policy.vla.vlm is empty: set --policy.vla.vlm=<hub id or local folder>")
    if ref.startswith((".", "/", "~")) and not Path(ref).expanduser().is_dir():
        raise VLMLoadError(f"policy.vla.vlm={ref!r}: no such model folder")
    try:
        processor = transformers.AutoProcessor.from_pretrained(ref, local_files_only=True)
        model = transformers.AutoModelForImageTextToText.from_pretrained(
            ref, local_files_only=True, dtype=DTYPES[dtype]
        )
    except OSError as err:
        raise VLMLoadError(
            f"policy.vla.vlm={ref!r} is not available offline: it is neither a local model folder nor in the "
            "Hugging Face cache, and robot_rl never downloads weights at run time. On a machine with network "
            f"run `hf download {ref}`, copy the cache (~/.cache/huggingface/hub or $HF_HOME) here, or pass a "
            f"folder saved with save_pretrained ({err})"
        ) from err
    except ImportError as err:
        raise VLMLoadError(f"policy.vla.vlm={ref!r} needs a library that is not installed: {err}") from err
    except (ValueError, KeyError, TypeError) as err:
        raise VLMLoadError(
            f"policy.vla.vlm={ref!r} is not an image-text-to-text model AutoModelForImageTextToText can "
            f"load ({err}); fetch a VLM such as `hf download HuggingFaceTB/SmolVLM-256M-Instruct`"
        ) from err
    image_processor = getattr(processor, "image_processor", None)
    if getattr(image_processor, "do_image_splitting", False):
        image_processor.do_image_splitting = False  # one tile per camera image
    return model, processor


def backbone_ref(ref: str) -> str:
    """The reference stored in a checkpoint: an absolute path for a folder, else the hub id."""
    return str(Path(ref).resolve()) if Path(ref).is_dir() else ref


def configure_training(model: nn.Module, cfg: VLAConfig, ref: str) -> None:
    """Set which backbone parameters train (``requires_grad``) and add LoRA adapters.

    ``train_expert_only``: none. Else ``lora_rank > 0``: float32 LoRA adapters on the language model's
    attention projections only. Else the whole backbone except (``freeze_vision``) the vision encoder.
    The LM head (unused: the policy reads hidden states, never logits) never trains.

    Raises:
        VLMLoadError: LoRA is asked for and the model has no language-model attention projections.
    """
    if cfg.train_expert_only or cfg.lora_rank > 0:
        model.requires_grad_(False)
    elif cfg.freeze_vision:
        for name, p in model.named_parameters():
            p.requires_grad_(_VISION.search(name) is None)
    for name, p in model.named_parameters():
        if name.startswith("lm_head."):  # the policy never computes logits
            p.requires_grad_(False)
    if cfg.lora_rank > 0 and not cfg.train_expert_only:
        from peft import LoraConfig, inject_adapter_in_model

        lora = LoraConfig(r=cfg.lora_rank, lora_alpha=2 * cfg.lora_rank, target_modules=LORA_TARGETS)
        try:
            inject_adapter_in_model(lora, model)
        except ValueError as err:
            raise VLMLoadError(f"{ref}: no language-model attention layers for LoRA: {err}") from err
        for name, p in model.named_parameters():
            if "lora_" in name:  # float32 adapters on a bfloat16 base, as peft's autocast does
                p.data = p.data.float()
                p.requires_grad_(True)


def is_vision_param(name: str) -> bool:
    """True for a parameter of the vision encoder (by its dotted name)."""
    return _VISION.search(name) is not None


def fingerprint(params: list[tuple[str, torch.Tensor]]) -> torch.Tensor:
    """(4,) float64 summary of frozen weights: element count, sum, sum of squares, and a position-weighted
    sum (tensor i counts i+1 times), so another model, or the same one with other weights, differs."""
    total = torch.zeros(4, dtype=torch.float64)
    for i, (_, p) in enumerate(sorted(params, key=lambda kv: kv[0])):
        x = p.detach().to(torch.float64)
        s = x.sum()
        total += torch.stack(
            [torch.tensor(float(x.numel()), dtype=torch.float64), s, (x * x).sum(), (i + 1) * s]
        )
    return total


def prompt(processor: Any, task: str, num_images: int) -> str:
    """The prompt text: one image placeholder per camera then ``Task: <instruction>``, in the processor's
    chat template when it has one (SmolVLM), else image tokens + text (PaliGemma's convention)."""
    text = f"Task: {task.strip()}"
    if getattr(processor, "chat_template", None):
        content = [{"type": "image"}] * num_images + [{"type": "text", "text": text}]
        messages = [{"role": "user", "content": content}]
        return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return getattr(processor, "image_token", "<image>") * num_images + text


def processor_inputs(
    processor: Any, tasks: list[str], images: list[list[np.ndarray]], device: torch.device, dtype
) -> dict[str, torch.Tensor]:
    """Tokenised prompts and pixel values for B samples (``images``: B lists of (H, W, 3) uint8), on
    ``device``; floating tensors in ``dtype``."""
    text = [prompt(processor, t, len(imgs)) for t, imgs in zip(tasks, images, strict=True)]
    inputs = processor(text=text, images=images, return_tensors="pt", padding=True)
    return {
        k: v.to(device, dtype) if v.is_floating_point() else v.to(device)
        for k, v in inputs.items()
        if isinstance(v, torch.Tensor)
    }


def hidden_states(model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The multimodal backbone's last hidden states (B, L, width), without the LM head."""
    if hasattr(model, "model"):
        return model.model(**inputs).last_hidden_state
    return model(**inputs, output_hidden_states=True).hidden_states[-1]
