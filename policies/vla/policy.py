"""VLA policy: a Hugging Face image-text-to-text VLM with a flow-matching action expert (``policy.kind=vla``).

Architecture (SmolVLA-style, Shukor et al. 2025, "SmolVLA: A Vision-Language-Action Model for Affordable and
Efficient Robotics"): the VLM reads every camera image and the instruction; its last-layer hidden states,
projected to the expert's width, plus one token of the normalised proprio state form the prefix, and a
small transformer action expert cross-attends to that prefix (:class:`~.expert.FlowExpert`). We chose this
over π0's (Black et al. 2024, "π0: A Vision-Language-Action Flow Model for General Robot Control") expert
that attends to the VLM's per-layer KV cache: it is simpler, works with any ``AutoModelForImageTextToText``
without reaching into its attention layers, and keeps the one-VLM-pass-per-chunk property — the prefix is
computed once (:meth:`VLAPolicy.encode`) and reused by all K Euler steps.

Flow matching as :class:`~robot_rl.policies.flow.FlowChunkPolicy` (docs/algorithms.md §2), whose loss and
sampler
this class inherits unchanged: t = 0 noise, t = 1 data, loss ``E ||v(s, x_t, t) - (A - x_0)||^2`` masked by
``valid``, K Euler steps ``x <- x + v(s, x, k/K) / K``, clipped to the normalised action box, with the same
:class:`~robot_rl.policies.action_norm.ActionNormalization`. Only the features differ: (B, L, W + 1)
prefix tokens instead of a flat (B, F) vector.

With ``policy.vla.backbone=small`` the VLM is replaced by :class:`~.small.SmallVisionLanguage` (frozen
MiniLM instruction embedding + a CNN per camera, trained from scratch), feeding the same expert.

Checkpoints hold the expert, the state normalisation, the action normalisation and every trainable backbone
parameter (LoRA adapters; the language model when it is fine-tuned) but not the frozen backbone weights:
those are re-loaded from ``policy.vla.vlm`` (offline) and checked against the saved
``backbone_fingerprint`` (:func:`~.backbone.fingerprint`), so a checkpoint cannot silently run on another
backbone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from robot_rl.checkpoint import CheckpointError
from robot_rl.config import PolicyConfig
from robot_rl.data.normalize import FeatureStats
from robot_rl.keys import TASK, is_image_key

from ..encoders import ObservationEncoder
from ..flow import NORMALIZATIONS, FlowChunkPolicy
from . import backbone as bb
from .expert import FlowExpert
from .small import SmallVisionLanguage

FINGERPRINT = "backbone_fingerprint"


class InstructionError(ValueError):
    """The VLA policy has no instruction to read (none in ``obs["task"]`` nor ``policy.vla.instruction``) or
    one longer than ``policy.vla.max_text_tokens`` tokens (names it, its length and the key); the CLI
    prints it as one line."""


class VLAPolicy(FlowChunkPolicy):
    """A VLM-backbone flow chunk policy; a drop-in :class:`FlowChunkPolicy` for the agents, executor and eval.

    Args:
        cfg: PolicyConfig with ``kind='vla'``; ``cfg.vla`` (:class:`~robot_rl.config.VLAConfig`) picks the
            backbone and what trains; ``horizon``, ``flow_steps``, ``normalization``, ``action_*`` as the flow
            policy.
        obs_shapes: key -> per-sample shape; image keys ``observation.images.<cam>`` (H, W, 3) uint8 go to
            the VLM (all of them, in sorted order), vector keys are normalised (mean/std) into the state
            token.
        action_dim: d.
        stats: FeatureStats per vector key and ``action``.
        model, processor: an already loaded backbone (default: :func:`~.backbone.load_vlm` of
            ``cfg.vla.vlm``); it is cast to ``cfg.vla.dtype`` as a loaded one is.

    Observations: the camera images (B, H, W, 3) uint8, the vector keys (B, S) float, and ``obs["task"]``
    (B strings) or, when absent, ``cfg.vla.instruction``.

    Raises:
        MissingExtraError: transformers/peft are missing (``robot-rl[vla]``).
        VLMLoadError: the backbone cannot be loaded (names it and ``hf download``).
        ValueError: no camera image in ``obs_shapes``; in :meth:`encode`: a bad observation (names the key).
        InstructionError: in :meth:`encode`: no instruction, or one longer than ``cfg.vla.max_text_tokens``.
    """

    def __init__(
        self,
        cfg: PolicyConfig,
        obs_shapes: dict[str, tuple[int, ...]],
        action_dim: int,
        stats: dict[str, FeatureStats],
        model: nn.Module | None = None,
        processor=None,
    ):
        nn.Module.__init__(self)  # FlowChunkPolicy's loss and sampler, not its MLP encoder/velocity
        if cfg.normalization not in NORMALIZATIONS:
            raise ValueError(f"unknown normalization {cfg.normalization!r}; expected one of {NORMALIZATIONS}")
        vcfg = cfg.vla
        self.cfg, self.vla_cfg = cfg, vcfg
        self.horizon, self.action_dim, self.flow_steps = (
            int(cfg.horizon),
            int(action_dim),
            int(cfg.flow_steps),
        )
        self.register_policy_action_stats(cfg, stats, action_dim)
        self.obs_shapes = {k: tuple(int(s) for s in v) for k, v in sorted(obs_shapes.items())}
        self.image_keys = sorted(k for k in obs_shapes if is_image_key(k))
        if not self.image_keys:
            raise ValueError(
                "policy.kind=vla needs at least one camera image observation.images.<cam>; the data has "
                f"{sorted(obs_shapes)} (set data.images=true and record a camera)"
            )
        vector = {k: v for k, v in obs_shapes.items() if not is_image_key(k)}
        self.state = ObservationEncoder(vector, stats) if vector else None
        if vcfg.backbone == "small":
            model, processor = SmallVisionLanguage(self.image_keys), None
            self.backbone_ref, width = "small", model.hidden_size
        else:
            if model is None:
                model, processor = bb.load_vlm(vcfg.vlm, vcfg.dtype)
            elif vcfg.dtype not in bb.DTYPES:
                raise ValueError(f"policy.vla.dtype={vcfg.dtype!r}: one of {', '.join(bb.DTYPES)}")
            else:
                model = model.to(bb.DTYPES[vcfg.dtype])
            self.backbone_ref = bb.backbone_ref(vcfg.vlm) if vcfg.vlm else type(model).__name__
            bb.configure_training(model, vcfg, self.backbone_ref)
            width = model.config.get_text_config().hidden_size
        self.processor, self.backbone = processor, model
        self._tokenizer = model.tokenizer if processor is None else processor.tokenizer
        self._trained = {n for n, p in model.named_parameters() if p.requires_grad}
        frozen = [(n, p) for n, p in model.named_parameters() if not p.requires_grad]
        self.register_buffer(FINGERPRINT, bb.fingerprint(frozen))
        self.expert = FlowExpert(
            vcfg.expert_width,
            vcfg.expert_layers,
            self.horizon,
            self.action_dim,
            self.state.out_dim if self.state is not None else 0,
            width,
        )
        self.expert.compile_sampling = bool(vcfg.compile)
        self._token_counts: dict[str, int] = {}
        self.register_state_dict_post_hook(_drop_frozen_backbone)
        self.register_load_state_dict_pre_hook(_check_fingerprint)
        self.register_load_state_dict_post_hook(_allow_missing_frozen)

    # --- network -------------------------------------------------------------------------------------
    def _tasks(self, obs: dict, batch: int) -> list[str]:
        tasks = list(obs[TASK]) if TASK in obs else [self.vla_cfg.instruction] * batch
        if not tasks or not all(isinstance(t, str) and t.strip() for t in tasks):
            raise InstructionError(
                f"the VLA policy needs an instruction: obs[{TASK!r}] (B strings) or policy.vla.instruction"
            )
        limit = self.vla_cfg.max_text_tokens
        for task in tasks:
            n = self._token_counts.get(task)
            if n is None:
                ids = self._tokenizer(task, add_special_tokens=False).input_ids
                n = self._token_counts[task] = len(ids)
            if n > limit:
                raise InstructionError(
                    f"instruction {task[:60]!r}... has {n} tokens, more than "
                    f"policy.vla.max_text_tokens={limit}; shorten it or raise the limit"
                )
        return tasks

    def _images(self, obs: dict) -> list[torch.Tensor]:
        """Per camera key (B, H', W', 3) uint8 on the CPU, resized to ``image_size`` when set."""
        out = []
        for key in self.image_keys:
            if key not in obs:
                raise ValueError(f"observation key {key!r} missing; got keys {sorted(obs)}")
            x = torch.as_tensor(obs[key])
            if x.dtype != torch.uint8 or x.dim() != 4 or x.shape[-1] != 3:
                raise ValueError(
                    f"image observation {key!r} must be uint8 (B, H, W, 3), got {x.dtype} {tuple(x.shape)}"
                )
            size = self.vla_cfg.image_size
            if size and tuple(x.shape[1:3]) != (size, size):
                img = x.permute(0, 3, 1, 2).float()
                img = F.interpolate(img, (size, size), mode="bilinear", antialias=True)
                x = img.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
            out.append(x.cpu())
        return out

    def encode(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """One backbone pass: observation dict -> prefix features (B, L, W + 1) float32 (see
        :meth:`~.expert.FlowExpert.prefix`). Gradients reach the backbone only where it trains."""
        images = self._images(obs)
        tasks = self._tasks(obs, len(images[0]))
        state = self.state(obs) if self.state is not None else None
        if self.processor is None:  # the small from-scratch backbone
            hidden, mask = self.backbone(images, tasks)
            return self.expert.prefix(hidden, mask, state)
        device = self.expert.action_out.weight.device
        per_sample = [[x[b].numpy() for x in images] for b in range(len(tasks))]
        inputs = bb.processor_inputs(self.processor, tasks, per_sample, device, self.backbone.dtype)
        with torch.set_grad_enabled(torch.is_grad_enabled() and bool(self._trained)):
            hidden = bb.hidden_states(self.backbone, inputs)
        return self.expert.prefix(hidden, inputs["attention_mask"], state)

    @property
    def feature_dim(self) -> int:
        """The size of :meth:`pool_features`: 2 W with a state token, else W (W = the expert's width)."""
        return int(self.vla_cfg.expert_width) * (2 if self.state is not None else 1)

    def pool_features(self, feat: torch.Tensor) -> torch.Tensor:
        """Prefix (B, L, W + 1) from :meth:`encode` -> (B, feature_dim) float32, the one vector per
        observation that heads on the trunk read (CO-RFT's critic and one-step policy, π_RL's noise and
        value heads): the state token (the prefix's first, when the policy reads a state) next to the mean of
        the other valid tokens (camera and instruction). Averaging the state token in with the ~20 others
        left CO-RFT's one-step head unable to fit the demos (benchmarks/README.md, the VLA table)."""
        tokens, valid = feat[..., :-1], feat[..., -1:]
        first = 0 if self.state is None else 1  # the prefix's first token is the state's, when it has one
        rest, rest_valid = tokens[:, first:], valid[:, first:]
        mean = (rest * rest_valid).sum(1) / rest_valid.sum(1).clamp_min(1.0)
        return mean if self.state is None else torch.cat([tokens[:, 0], mean], dim=-1)

    def velocity_from_features(self, feat: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """feat (B, L, W + 1) from :meth:`encode`, x (B, h*d), t (B, 1) -> velocity (B, h*d) float32."""
        return self.expert(feat, x, t)

    def velocity_field(self, feat: torch.Tensor):
        """The expert's velocity with ``feat``'s cross-attention K/V computed once for all K flow steps
        (:meth:`~.expert.FlowExpert.velocity_field`)."""
        return self.expert.velocity_field(feat)

    def apply_inference(self, given: dict[str, object]) -> dict[str, object]:
        """Inference-time knobs (:mod:`robot_rl.eval.inference`): sets ``policy.vla.compile`` when ``given``
        has it; returns ``{"policy.vla.compile": value in effect}``."""
        if "policy.vla.compile" in given:
            self.expert.compile_sampling = bool(given["policy.vla.compile"])
        return {"policy.vla.compile": self.expert.compile_sampling}

    def frozen_backbone_keys(self) -> set[str]:
        """State-dict keys of the backbone that checkpoints leave out (frozen parameters and buffers)."""
        return {f"backbone.{k}" for k in self.backbone.state_dict() if k not in self._trained}


# State-dict hooks; the key names assume the policy is the top module saved/loaded (as checkpoints do).
def _drop_frozen_backbone(module: VLAPolicy, state: dict, prefix: str, local_metadata) -> None:
    for key in module.frozen_backbone_keys():
        state.pop(prefix + key, None)


def _check_fingerprint(module: VLAPolicy, state: dict, prefix: str, *args) -> None:
    saved = state.get(prefix + FINGERPRINT)
    if saved is None:
        return
    here = getattr(module, FINGERPRINT)
    if saved.shape != here.shape or not torch.allclose(saved.to(here), here, rtol=1e-6, atol=1e-6):
        raise CheckpointError(
            f"the checkpoint's frozen backbone weights do not match the VLM loaded from "
            f"policy.vla.vlm={module.backbone_ref!r} (fingerprint {saved.tolist()} saved, {here.tolist()} "
            "here): load it with the VLM (and the policy.vla freezing/LoRA options) it was trained with"
        )


def _allow_missing_frozen(module: VLAPolicy, incompatible) -> None:
    frozen = module.frozen_backbone_keys()
    missing = [k for k in incompatible.missing_keys if k in frozen]
    for key in missing:
        incompatible.missing_keys.remove(key)
