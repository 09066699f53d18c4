"""The flow-matching action expert of the VLA policy (SmolVLA-style: Shukor et al. 2025, "SmolVLA: A
Vision-Language-Action Model for Affordable and Efficient Robotics").

A small pre-norm transformer decoder over the h action tokens: self-attention among them and cross-attention
to the prefix, i.e. the VLM's last-layer hidden states projected to the expert's width plus, as in SmolVLA,
one token of the normalised proprio state. Each action token is ``Linear(x_t[k]) + time embedding(t) +
learned position k``; the output head maps each action token to its velocity (d,). The prefix is computed
once per chunk and reused by every flow step.

The prefix travels as one tensor (so flow samplers can ``repeat_interleave`` it like any feature):
(B, L, W + 1) float32, the last channel 1 for a real token and 0 for padding.

Sampling caches the cross-attention keys and values of the prefix (:meth:`FlowExpert.velocity_field`): they
depend on the prefix only, so each of the K flow steps projects only the h action tokens, as openpi's π0
reuses the prefix KV cache across its denoising steps (Black et al. 2024, "π0"). Training and the
log-probability paths keep the plain decoder (:meth:`FlowExpert.forward`); both give the same velocity
(tested to float32 rounding). With ``compile_sampling`` (``policy.vla.compile``) the cached flow step runs
through ``torch.compile`` (inference only; each new batch shape compiles once, 10-20 s on a CPU).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

HEAD_DIM = 32


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of flow times ``t`` (B, 1) in [0, 1] -> (B, dim) (frequencies 2π ... 2π/1000)."""
    half = dim // 2
    freqs = torch.exp(-math.log(1000.0) * torch.arange(half, device=t.device, dtype=t.dtype) / half)
    angles = 2 * math.pi * t * freqs
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


class FlowExpert(nn.Module):
    """v(prefix, state, x_t, t) -> velocity.

    Args:
        width: token width W (a multiple of 32: W // 32 heads of 32 dims).
        layers: decoder layers.
        horizon, action_dim: the chunk (h, d).
        state_dim: S of the normalised proprio vector (0: no state token).
        prefix_dim: width of the VLM hidden states, projected to W.

    Attributes:
        compile_sampling: run :meth:`velocity_field`'s flow step through ``torch.compile`` (set from
            ``policy.vla.compile``); compiled on first use.
    """

    compile_sampling: bool = False
    _compiled_step: Callable | None = None

    def __init__(
        self, width: int, layers: int, horizon: int, action_dim: int, state_dim: int, prefix_dim: int
    ):
        super().__init__()
        if width % HEAD_DIM or width < HEAD_DIM:
            raise ValueError(f"policy.vla.expert_width={width}: must be a positive multiple of {HEAD_DIM}")
        self.width, self.horizon, self.action_dim = width, horizon, action_dim
        self.prefix_proj = nn.Sequential(nn.LayerNorm(prefix_dim), nn.Linear(prefix_dim, width))
        self.state_proj = nn.Linear(state_dim, width) if state_dim else None  # the state token
        self.action_in = nn.Linear(action_dim, width)
        self.time_mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.position = nn.Parameter(torch.zeros(horizon, width))
        layer = nn.TransformerDecoderLayer(
            width,
            width // HEAD_DIM,
            4 * width,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.decoder = nn.TransformerDecoder(layer, layers, norm=nn.LayerNorm(width))
        self.action_out = nn.Linear(width, action_dim)

    def prefix(self, hidden: torch.Tensor, mask: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        """VLM hidden states (B, L, prefix_dim) any float dtype, their attention mask (B, L) (1 = real
        token), state (B, S) float32 or None -> prefix (B, L (+1 state token), W + 1) float32."""
        tokens = self.prefix_proj(hidden.float())
        valid = mask.to(tokens.dtype).unsqueeze(-1)
        if self.state_proj is not None:
            tokens = torch.cat([self.state_proj(state).unsqueeze(1), tokens], dim=1)
            valid = torch.cat([torch.ones_like(valid[:, :1]), valid], dim=1)
        return torch.cat([tokens, valid], dim=-1)

    def _action_tokens(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        tokens = self.action_in(x.reshape(x.shape[0], self.horizon, self.action_dim))
        return tokens + self.position + self.time_mlp(time_embedding(t, self.width)).unsqueeze(1)

    def forward(self, prefix: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """prefix (B, L, W + 1) from :meth:`prefix`, x (B, h*d) noisy chunk, t (B, 1) -> velocity (B, h*d)
        float32."""
        memory, pad = prefix[..., :-1], prefix[..., -1] < 0.5
        out = self.decoder(self._action_tokens(x, t), memory, memory_key_padding_mask=pad)
        return self.action_out(out).reshape(x.shape[0], -1)

    def velocity_field(self, prefix: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """:meth:`forward` with ``prefix`` fixed, its cross-attention keys and values projected once here:
        returns ``v(x (B, h*d), t (B, 1)) -> (B, h*d)`` float32. For sampling (no dropout: the expert has
        none)."""
        memory, pad = prefix[..., :-1], prefix[..., -1] < 0.5
        keep = (~pad)[:, None, None, :]  # (B, 1, 1, L): attend to real tokens
        w = self.width
        cache = []
        for layer in self.decoder.layers:
            attn = layer.multihead_attn
            k = F.linear(memory, attn.in_proj_weight[w : 2 * w], attn.in_proj_bias[w : 2 * w])
            v = F.linear(memory, attn.in_proj_weight[2 * w :], attn.in_proj_bias[2 * w :])
            cache.append((self._heads(k), self._heads(v)))
        step = self._cached_step
        if self.compile_sampling:
            if self._compiled_step is None:
                self._compiled_step = torch.compile(self._cached_step)
            step = self._compiled_step
        return lambda x, t: step(x, t, cache, keep)

    def _cached_step(self, x: torch.Tensor, t: torch.Tensor, cache: list, keep: torch.Tensor) -> torch.Tensor:
        """One velocity evaluation with the prefix's cross-attention K/V ``cache`` (per layer (B, heads, L,
        32) each) and its ``keep`` mask (B, 1, 1, L)."""
        w = self.width
        tokens = self._action_tokens(x, t)
        for layer, (k, v) in zip(self.decoder.layers, cache, strict=True):
            h = layer.norm1(tokens)
            tokens = tokens + layer.self_attn(h, h, h, need_weights=False)[0]
            attn = layer.multihead_attn
            q = self._heads(F.linear(layer.norm2(tokens), attn.in_proj_weight[:w], attn.in_proj_bias[:w]))
            mixed = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            tokens = tokens + attn.out_proj(mixed.transpose(1, 2).reshape(tokens.shape))
            tokens = tokens + layer.linear2(layer.activation(layer.linear1(layer.norm3(tokens))))
        return self.action_out(self.decoder.norm(tokens)).reshape(x.shape[0], -1)

    def _heads(self, z: torch.Tensor) -> torch.Tensor:
        """(B, n, W) -> (B, W // 32 heads, n, 32)."""
        return z.reshape(z.shape[0], z.shape[1], self.width // HEAD_DIM, HEAD_DIM).transpose(1, 2)
