"""Chunked critic ensemble Q_k(s, A) (Li, Zhou & Levine 2025, Q-chunking; docs/algorithms.md §3).

A LayerNorm MLP ensemble on concat(encoder(s), flattened normalised chunk). The critic owns its own
observation encoder (passed in). The parameters of the K members are stacked per layer and run as one
batched matmul per layer; when several chunks share a state (best-of-N's N samples) the pass runs member by
member instead, with the state's part of the first layer, ``W [f; a] = W_f f + W_a a``, computed once per
state and each LayerNorm fused with its affine (issue 38 item 3, benchmarks/README.md's learner section).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import get_args

import torch
import torch.nn.functional as F
from torch import nn

from robot_rl.algos.protocols import Obs
from robot_rl.config import CriticAgg

AGGREGATIONS: tuple[str, ...] = get_args(CriticAgg)


class EnsembleLinear(nn.Module):
    """K independent linear layers: (K, B, in) -> (K, B, out); weight (K, in, out), bias (K, 1, out)."""

    def __init__(self, num_members: int, in_dim: int, out_dim: int):
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)
        self.weight = nn.Parameter(torch.empty(num_members, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)

    def members(self, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per member k, ``(weight (in, out), bias (out,))`` in ``dtype``: one cast of the stacked
        parameters per call (not one per member), then views, whose gradients flow back as one stack."""
        return list(
            zip(self.weight.to(dtype).unbind(0), self.bias.to(dtype).squeeze(1).unbind(0), strict=True)
        )


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the last dim with per-member affine parameters: (K, B, D) -> (K, B, D)."""

    def __init__(self, num_members: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(num_members, 1, dim))
        self.bias = nn.Parameter(torch.zeros(num_members, 1, dim))
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one fused pass for the affine; parameters follow x's dtype, so a bfloat16 autocast pass stays in
        # bfloat16 instead of promoting every activation back to float32
        y = F.layer_norm(x, (self.dim,))
        return torch.addcmul(self.bias.to(y.dtype), y, self.weight.to(y.dtype))

    def members(self, dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per member k, ``(weight (D,), bias (D,))`` in ``dtype`` (see :meth:`EnsembleLinear.members`)."""
        return list(
            zip(
                self.weight.to(dtype).squeeze(1).unbind(0),
                self.bias.to(dtype).squeeze(1).unbind(0),
                strict=True,
            )
        )


def split_first_layer(
    feat: torch.Tensor, actions: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor
) -> torch.Tensor:
    """One member's first layer on ``[f; a]`` with the state's part computed once per state:
    ``W^T [f; a] + b = (W_f^T f + b) + W_a^T a`` (W's first F rows are W_f).

    Args:
        feat: (B, F) state features.
        actions: (B·n, in − F) flattened chunks, n per state, grouped by state (the order of
            ``feat.repeat_interleave(n, 0)``).
        weight: (in, out); bias: (out,).
    Returns:
        (B·n, out), equal to ``torch.addmm(bias, torch.cat([feat.repeat_interleave(n, 0), actions], -1),
        weight)`` up to rounding (one more rounding of the sum in a reduced-precision autocast).
    """
    b, f = feat.shape
    state_part = torch.addmm(bias, feat, weight[:f])  # (B, out)
    out = torch.mm(actions, weight[f:])
    return out.view(b, -1, out.shape[-1]).add_(state_part.unsqueeze(1)).view_as(out)


def aggregate_q(qs: torch.Tensor, mode: str, generator: torch.Generator | None = None) -> torch.Tensor:
    """Aggregate ensemble values (K, B) -> (B,).

    ``mean`` (QC), ``min`` (HIL-SERL), ``min_random2`` (RLPD, Ball et al. 2023: min over a random pair of
    members, one pair per call; falls back to ``min`` when K < 2).
    """
    if mode == "mean":
        return qs.mean(0)
    if mode == "min":
        return qs.min(0).values
    if mode == "min_random2":
        if qs.shape[0] <= 2:
            return qs.min(0).values
        idx = torch.randperm(qs.shape[0], generator=generator)[:2].to(qs.device)
        return qs.index_select(0, idx).min(0).values
    raise ValueError(f"unknown critic aggregation {mode!r}; expected one of {AGGREGATIONS}")


class ChunkCritic(nn.Module):
    """Ensemble of K LayerNorm MLPs Q_k(feat(s), flat(A)) -> (K, B).

    Args:
        encoder: module mapping the observation dict to (B, encoder.out_dim) features (owned by the critic).
        action_dim: d.
        horizon: h.
        hidden_dims: e.g. OfflineRLConfig.critic_hidden_dims ([512]*4 in the paper).
        num_critics: ensemble size K.
        agg: default aggregation used by :meth:`q_agg`.
    """

    def __init__(
        self,
        encoder: nn.Module,
        action_dim: int,
        horizon: int,
        hidden_dims: Sequence[int],
        num_critics: int = 2,
        agg: str = "mean",
    ):
        super().__init__()
        if agg not in AGGREGATIONS:
            raise ValueError(f"unknown critic aggregation {agg!r}; expected one of {AGGREGATIONS}")
        if num_critics < 1:
            raise ValueError(f"num_critics must be >= 1, got {num_critics}")
        self.encoder = encoder
        self.action_dim, self.horizon, self.num_critics, self.agg = action_dim, horizon, num_critics, agg
        layers: list[nn.Module] = []
        prev = int(encoder.out_dim) + horizon * action_dim
        for width in hidden_dims:
            layers += [
                EnsembleLinear(num_critics, prev, int(width)),
                EnsembleLayerNorm(num_critics, int(width)),
            ]
            layers.append(nn.GELU())
            prev = int(width)
        layers.append(EnsembleLinear(num_critics, prev, 1))
        self.net = nn.Sequential(*layers)

    def features(self, obs: Obs) -> torch.Tensor:
        """Observation dict -> (B, F) critic features."""
        return self.encoder(obs)

    def q_from_features(self, feat: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """feat (B, F), actions (B·n, h, d) or (B·n, h*d) normalised, n >= 1 chunks per state grouped by
        state (``feat.repeat_interleave(n, 0)``'s order) -> (K, B·n) float32.

        n = 1 (a training step): the K members in one batched matmul per layer on ``[feat; chunk]``.
        n > 1 (best-of-N's N samples): member by member, the state's part of the first
        layer once per state (:func:`split_first_layer`) and each LayerNorm with its affine in one fused
        kernel; the same Q up to rounding, and cheaper there (at n = 1 the per-member casts and
        small products cost more than they save; benchmarks/README.md, learner section). Under a
        reduced-precision autocast (:mod:`robot_rl.algos.precision`) the hidden layers run in its dtype and
        the output layer in float32, so Q keeps float32 resolution for the loss and for best-of-N's argmax.

        Raises:
            ValueError: ``actions``' rows are not a multiple of ``feat``'s.
        """
        rows = actions.shape[0]
        if feat.dim() != 2 or rows % max(feat.shape[0], 1):
            raise ValueError(
                f"critic inputs: feat must be (B, F) and actions (B*n, ...), got {tuple(feat.shape)} and "
                f"{tuple(actions.shape)}"
            )
        flat = actions.reshape(rows, -1)
        if rows == feat.shape[0]:
            x = torch.cat([feat, flat], dim=-1).unsqueeze(0).expand(self.num_critics, -1, -1)
            *hidden, head = self.net
            for layer in hidden:
                x = layer(x)
            with torch.autocast(x.device.type, enabled=False):
                return head(x.float()).squeeze(-1)
        return self._q_per_member(feat, flat)

    def _q_per_member(self, feat: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
        """:meth:`q_from_features`'s n > 1 path: feat (B, F), flat (B·n, h*d) -> (K, B·n) float32."""
        device = flat.device.type
        low = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else torch.float32
        first, *hidden, head = self.net
        first_params = first.members(low)
        ensemble = (EnsembleLinear, EnsembleLayerNorm)  # per-member parameters; the rest (GELU) are shared
        hidden_params = [layer.members(low) if isinstance(layer, ensemble) else None for layer in hidden]
        head_params = head.members(torch.float32)
        qs = []
        for k in range(self.num_critics):
            x = split_first_layer(feat, flat, *first_params[k])
            for layer, params in zip(hidden, hidden_params, strict=True):
                if params is None:
                    x = layer(x)
                elif isinstance(layer, EnsembleLinear):
                    x = torch.addmm(params[k][1], x, params[k][0])
                else:
                    x = F.layer_norm(x, (layer.dim,), *params[k])  # normalisation and affine: one kernel
            with torch.autocast(device, enabled=False):
                qs.append(torch.addmm(head_params[k][1], x.float(), head_params[k][0]).squeeze(-1))
        return torch.stack(qs)

    def forward(self, obs: Obs, actions: torch.Tensor) -> torch.Tensor:
        """obs dict (batch B), actions (B, h, d) normalised -> (K, B)."""
        return self.q_from_features(self.features(obs), actions)

    def q_agg(self, qs: torch.Tensor, mode: str | None = None) -> torch.Tensor:
        """(K, B) -> (B,) with ``mode`` or the critic's default aggregation."""
        return aggregate_q(qs, mode or self.agg)


def make_target(module: nn.Module) -> nn.Module:
    """A frozen deep copy used as the Polyak-averaged target network Qbar."""
    import copy

    target = copy.deepcopy(module)
    for p in target.parameters():
        p.requires_grad_(False)
    return target


def actor_step(optimizers: dict[str, torch.optim.Optimizer], loss: torch.Tensor) -> None:
    """One step of ``optimizers["actor"]`` on ``loss``, then the gradients the loss left on the critic (its
    Q(s, pi(s)) term backpropagates through it) are dropped, so the next critic step starts clean."""
    opt = optimizers["actor"]
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    optimizers["critic"].zero_grad(set_to_none=True)


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """theta_bar <- (1 - tau) theta_bar + tau theta for parameters; buffers are copied."""
    for tp, sp in zip(target.parameters(), source.parameters(), strict=True):
        tp.lerp_(sp, tau)
    for tb, sb in zip(target.buffers(), source.buffers(), strict=True):
        tb.copy_(sb)
