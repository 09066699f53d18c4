"""Observation encoder: LeRobot observation dict (raw env units) -> flat features (B, F) float32.

Vector keys (``observation.state``, ``observation.environment_state``, ...) are normalised with mean/std
from the dataset statistics (stored as buffers) and concatenated; each image key
``observation.images.<cam>`` (B, H, W, 3) uint8 goes through its own small CNN (HWC uint8 -> CHW float in
[0, 1] inside) to ``image_features`` dims. With a task vocabulary (a multi-task dataset's language
instructions), ``obs["task"]`` (B,) strings select a learned embedding of ``task_features`` dims per task.
"""

from __future__ import annotations

import torch
from torch import nn

from robot_rl.algos.cnn import SmallCNN
from robot_rl.data.normalize import FeatureStats
from robot_rl.keys import TASK, is_image_key


class UnknownTaskError(ValueError):
    """A task-conditioned policy was given an instruction it never saw in training (names it and the
    known ones); the CLI prints it as one line."""


def _buffer_name(key: str) -> str:
    return key.replace(".", "__")


class ObservationEncoder(nn.Module):
    """Encode an observation dict to (B, out_dim) float32.

    Args:
        obs_shapes: key -> per-sample shape, e.g. ``{"observation.state": (22,),
            "observation.images.front": (64, 64, 3)}``. Keys are used in sorted order.
        stats: key -> FeatureStats; needed for every vector key (mean/std normalisation).
        image_features: CNN output dims per camera.
        hidden: CNN channel width.
        tasks: instruction vocabulary; when non-empty ``obs["task"]`` (a sequence of B strings) is required
            and each task gets a learned ``task_features``-dim embedding.

    Raises (forward):
        ValueError: a key is missing, has the wrong shape (message names the key, expected and got
            shapes), an image is not uint8, a vector observation holds NaN/inf, or a task is not in the
            vocabulary (the message lists the known tasks).
    """

    def __init__(
        self,
        obs_shapes: dict[str, tuple[int, ...]],
        stats: dict[str, FeatureStats],
        image_features: int = 64,
        hidden: int = 32,
        tasks: list[str] | None = None,
        task_features: int = 16,
    ):
        super().__init__()
        if not obs_shapes:
            raise ValueError("obs_shapes is empty: the encoder needs at least one observation key")
        self.obs_shapes = {k: tuple(int(s) for s in v) for k, v in sorted(obs_shapes.items())}
        self.vector_keys = [k for k in self.obs_shapes if not is_image_key(k)]
        self.image_keys = [k for k in self.obs_shapes if is_image_key(k)]
        self.cnns = nn.ModuleDict()
        out_dim = 0
        for key in self.vector_keys:
            shape = self.obs_shapes[key]
            if len(shape) != 1:
                raise ValueError(f"vector observation {key!r} must be 1-D, got shape {shape}")
            if key not in stats:
                raise ValueError(f"no normalization statistics for observation {key!r}")
            mean, std = stats[key].affine("mean_std")
            mean = torch.as_tensor(mean, dtype=torch.float32).reshape(-1)
            std = torch.as_tensor(std, dtype=torch.float32).reshape(-1)
            if mean.shape != (shape[0],):
                raise ValueError(f"statistics for {key!r} have shape {tuple(mean.shape)}, expected {shape}")
            self.register_buffer(f"mean__{_buffer_name(key)}", mean)
            self.register_buffer(f"std__{_buffer_name(key)}", std)
            out_dim += shape[0]
        for key in self.image_keys:
            shape = self.obs_shapes[key]
            if len(shape) != 3 or shape[-1] != 3:
                raise ValueError(f"image observation {key!r} must be (H, W, 3), got shape {shape}")
            self.cnns[_buffer_name(key)] = SmallCNN(image_features, hidden)
            out_dim += image_features
        self.tasks = list(tasks or [])
        self.task_embedding = nn.Embedding(len(self.tasks), task_features) if self.tasks else None
        out_dim += task_features if self.tasks else 0
        self.out_dim = out_dim

    def _get(self, obs: dict[str, torch.Tensor], key: str) -> torch.Tensor:
        if key not in obs:
            raise ValueError(
                f"observation key {key!r} missing; expected shape (B, *{self.obs_shapes[key]}), "
                f"got keys {sorted(obs)}"
            )
        x = obs[key]
        expected = self.obs_shapes[key]
        if x.dim() != len(expected) + 1 or tuple(x.shape[1:]) != expected:
            raise ValueError(
                f"observation {key!r} has shape {tuple(x.shape)}; "
                f"expected (B, {', '.join(map(str, expected))})"
            )
        return x

    def _task_indices(self, obs: dict) -> torch.Tensor:
        if TASK not in obs:
            raise ValueError(f"this policy is conditioned on the task: obs needs {TASK!r} (B strings)")
        index = {t: i for i, t in enumerate(self.tasks)}
        unknown = [t for t in obs[TASK] if t not in index]
        if unknown:
            raise UnknownTaskError(
                f"task {unknown[0]!r} was not in the training data; known tasks: {self.tasks} (record"
                " demos of it, or evaluate on seeds whose instructions the policy was trained on)"
            )
        device = self.task_embedding.weight.device
        return torch.tensor([index[t] for t in obs[TASK]], dtype=torch.long, device=device)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """obs: vector keys (B, S) float, image keys (B, H, W, 3) uint8 -> (B, out_dim) float32."""
        parts = []
        for key in self.vector_keys:
            x = self._get(obs, key).to(torch.float32)
            if not torch.isfinite(x).all():
                raise ValueError(f"observation {key!r} contains NaN or inf")
            name = _buffer_name(key)
            parts.append((x - getattr(self, f"mean__{name}")) / getattr(self, f"std__{name}"))
        for key in self.image_keys:
            x = self._get(obs, key)
            if x.dtype != torch.uint8:
                raise ValueError(f"image observation {key!r} must be uint8 (B, H, W, 3), got {x.dtype}")
            img = x.permute(0, 3, 1, 2).to(torch.float32) / 255.0
            parts.append(self.cnns[_buffer_name(key)](img))
        if self.task_embedding is not None:
            parts.append(self.task_embedding(self._task_indices(obs)))
        batch = {p.shape[0] for p in parts}
        if len(batch) != 1:
            raise ValueError(f"observation keys disagree on batch size: {sorted(batch)}")
        return torch.cat(parts, dim=-1)
