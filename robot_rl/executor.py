"""Executing action chunks step by step: open loop (QC default, docs/algorithms.md §3) or ACT-style temporal
ensembling (Zhao et al. 2023, "Learning Fine-Grained Bimanual Manipulation ...": every step a new chunk is
predicted and the actions that target the current step are averaged with weights ``exp(-m * i)``, i = 0
for the oldest prediction) in :class:`ChunkExecutor`; open loop with the next chunk inferred while the
current one runs (real-time control loops) in :class:`AsyncChunkExecutor`. Given the action box, both
check every chunk (:func:`check_chunk`): its action dimension, NaN/inf and the box, before any of it runs."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import get_args

import numpy as np

from robot_rl.algos.base import NonFiniteChunkError
from robot_rl.config import Execution

EXECUTIONS: tuple[str, ...] = get_args(Execution)
BOX_TOLERANCE = 1e-6  # as the envs' check_action: float32 rounding of an action on the box's edge


class ChunkError(ValueError):
    """A chunk that cannot be executed: the wrong shape (another action dimension) or an action outside the
    action box. Nothing of it is executed."""


def _as_numpy(chunk) -> np.ndarray:
    if hasattr(chunk, "detach"):
        chunk = chunk.detach().cpu().numpy()
    return np.asarray(chunk, dtype=np.float32)


def check_chunk(
    chunk, horizon: int, low: np.ndarray | None = None, high: np.ndarray | None = None, batched: bool = True
) -> np.ndarray:
    """``chunk`` (h, d), or (B, h, d) when ``batched``, as float32 after checking that nothing of it is unsafe
    to execute. ``low``, ``high``: the action box (d,) in robot units; without them the action dimension and
    the box are not checked.

    Raises:
        ChunkError: another shape (names the expected and the given one), or an action outside
            [low, high] by more than :data:`BOX_TOLERANCE` (names the step, the entry, its value and bounds).
        robot_rl.algos.base.NonFiniteChunkError: NaN or inf (the online actor stops the episode safely).
    """
    c = _as_numpy(chunk)
    d = "d" if low is None else f"d={len(low)}"
    shape_ok = c.ndim in ((2, 3) if batched else (2,)) and c.shape[-2] == horizon
    if not shape_ok or (low is not None and c.shape[-1] != len(low)):
        expected = f"(h={horizon}, {d})" + (f" or (B, h={horizon}, {d})" if batched else "")
        raise ChunkError(f"chunk must be {expected}, got {c.shape}")
    if not np.isfinite(c).all():
        raise NonFiniteChunkError("chunk contains NaN or inf; nothing of it is executed")
    if low is not None and high is not None:
        bad = np.argwhere((c < low - BOX_TOLERANCE) | (c > high + BOX_TOLERANCE))
        if len(bad):
            *rows, i = (int(v) for v in bad[0])
            raise ChunkError(
                f"chunk step {rows[-1]}: action[{i}] = {c[tuple(bad[0])]:.6g} is outside the action box "
                f"[{low[i]:.6g}, {high[i]:.6g}]; nothing of the chunk is executed (clip it to the box "
                "first if that is intended)"
            )
    return c


class ChunkExecutor:
    """Turn chunks (h, d) or (B, h, d) into one action (d,) or (B, d) per control step.

    Use: ``action = ex.step(lambda: agent.act(obs))`` -- the callable is only invoked when a new chunk is
    needed (every h steps open loop; every step with temporal ensembling). Call :meth:`reset` at episode
    start (all batch rows share one schedule). ``low``, ``high``: the action box (d,); given, every chunk
    is checked against it and its dimension (:func:`check_chunk`).
    """

    def __init__(
        self,
        horizon: int,
        mode: str = "open_loop",
        decay: float = 0.1,
        low: np.ndarray | None = None,
        high: np.ndarray | None = None,
    ):
        if mode not in EXECUTIONS:
            raise ValueError(f"unknown execution mode {mode!r}; expected one of {EXECUTIONS}")
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.horizon, self.mode, self.decay = int(horizon), mode, float(decay)
        self.low, self.high = low, high
        self.reset()

    @classmethod
    def from_config(cls, policy_cfg) -> ChunkExecutor:
        """From a PolicyConfig: ``horizon``, ``execution`` and ``ensemble_decay``."""
        return cls(policy_cfg.horizon, policy_cfg.execution, policy_cfg.ensemble_decay)

    def reset(self) -> None:
        self._queue: deque[np.ndarray] = deque()
        self._chunks: list[tuple[int, np.ndarray]] = []  # (start step, chunk) oldest first
        self._t = 0

    def needs_chunk(self) -> bool:
        return self.mode == "temporal_ensemble" or not self._queue

    def push(self, chunk) -> None:
        """Add a chunk (h, d) or (B, h, d). Open loop: replaces what is left of the current chunk.

        Raises:
            ChunkError, NonFiniteChunkError: as :func:`check_chunk`; nothing of the chunk is kept."""
        c = check_chunk(chunk, self.horizon, self.low, self.high)
        if self.mode == "open_loop":
            self._queue = deque(np.moveaxis(c, -2, 0))
        else:
            self._chunks.append((self._t, c))

    def pop(self) -> np.ndarray:
        """The action for the current step, (d,) or (B, d) float32; advances one step."""
        if self.mode == "open_loop":
            if not self._queue:
                raise RuntimeError("no action left: push a new chunk first")
            self._t += 1
            return self._queue.popleft()
        self._chunks = [(s, c) for s, c in self._chunks if self._t - s < self.horizon]
        if not self._chunks:
            raise RuntimeError("no chunk covers this step: push a new chunk first")
        preds = np.stack([c[..., self._t - s, :] for s, c in self._chunks])  # (n, [B,] d), oldest first
        w = np.exp(-self.decay * np.arange(len(preds), dtype=np.float64))
        w = (w / w.sum()).reshape((-1,) + (1,) * (preds.ndim - 1))
        self._t += 1
        return (preds * w).sum(0).astype(np.float32)

    def step(self, get_chunk: Callable[[], object]) -> np.ndarray:
        """Fetch a new chunk via ``get_chunk()`` when needed, then :meth:`pop`."""
        if self.needs_chunk():
            self.push(get_chunk())
        return self.pop()


def align_chunk(remaining: np.ndarray, chunk: np.ndarray, elapsed: int, blend: int) -> np.ndarray:
    """Step 3 of :class:`AsyncChunkExecutor`: the actions to execute from now on.

    Args:
        remaining: (r, d) actions of the current chunk not executed yet (r may be 0).
        chunk: (h, d) the new chunk, predicted for the step ``elapsed`` control steps ago.
        elapsed: steps executed since its observation (0 <= elapsed < h); ``chunk[:elapsed]`` is dropped.
        blend: cross-fade length b: the first ``n = min(b, r, h - elapsed)`` steps are
            ``(1 - w_j) remaining[j] + w_j chunk[elapsed + j]``, ``w_j = (j + 1) / (n + 1)``.
    Returns: (h - elapsed, d) float32.
    Raises:
        ValueError: ``elapsed`` outside [0, h).
    """
    if not 0 <= elapsed < len(chunk):
        raise ValueError(f"elapsed must be in [0, {len(chunk)}), got {elapsed}")
    new = np.array(chunk[elapsed:], dtype=np.float32)
    n = min(blend, len(remaining), len(new))
    if n:
        w = (np.arange(1, n + 1, dtype=np.float32) / (n + 1))[:, None]
        new[:n] = (1 - w) * remaining[:n] + w * new[:n]
    return new


class AsyncChunkExecutor:
    """Open-loop chunk execution whose next chunk is inferred while the current one runs, so a real-time
    control loop does not wait for inference (deployment: :class:`robot_rl.deploy.remote_policy.
    RemotePolicy` or an in-process policy behind a ``RobotEnv``).

    Scheme (``deploy.async_lead`` = k, ``deploy.async_blend`` = b):

    1. The episode's first chunk is fetched synchronously (nothing to execute yet).
    2. At the control step s where k actions of the current chunk remain, ``get_chunk()`` (bound to the
       observation of step s) starts in a worker thread; the loop keeps executing the current chunk.
    3. The new chunk c (h, d) predicts steps s, s+1, ...; when it arrives at step t >= s, its elapsed prefix
       ``c[:t - s]`` is dropped and ``c[t - s:]`` replaces what is left of the current chunk, with a linear
       cross-fade over the first ``n = min(b, overlap)`` steps: ``a_j = (1 - w_j) old_j + w_j new_j``,
       ``w_j = (j + 1) / (n + 1)`` (b = 0: switch at once).
    4. If the current chunk runs out before the next one arrives, the loop waits for it: ``stalls`` counts
       those steps and ``wait_s`` their time. With a round trip of d control steps (latency * control_hz,
       rounded up) nothing ever waits when ``d <= k`` and ``2 d <= h`` (one inference at a time: each new
       chunk must cover the next round trip after its own); take d from the round trip's p99
       (benchmarks/bench_policy_server.py measures it).

    This is the simple form of real-time chunking. Full RTC (Black, Galliker & Levine 2025, "Real-Time
    Execution of Action Chunking Flow Policies", Physical Intelligence) also freezes the d actions that run
    during inference, but then *inpaints* the rest of the new chunk during flow sampling, guiding it
    towards the old chunk's overlap with soft, decaying weights, so both chunks agree by construction. Here
    the new chunk is sampled independently and blended afterwards, in the style of ACT's temporal
    ensembling (Zhao et al. 2023): it needs no change to the policy or the server, but a blend of two
    chunks from different modes of a multimodal policy can fall between them; keep b small (or 0) then.

    Use: ``action = ex.step(functools.partial(policy.infer, obs))`` once per control step -- bind the
    observation now (a ``lambda: policy.infer(obs)`` would read the variable later, in the worker).
    ``get_chunk`` must return (h, d); its exceptions are raised by the ``step`` that collects the chunk.
    ``low``, ``high``: the action box (d,); given, every chunk is checked against it and its dimension
    (:func:`check_chunk`).
    """

    def __init__(
        self,
        horizon: int,
        lead: int,
        blend: int = 0,
        timeout_s: float | None = None,
        low: np.ndarray | None = None,
        high: np.ndarray | None = None,
    ):
        if horizon < 2 or not 1 <= lead < horizon:
            raise ValueError(f"need horizon >= 2 and 1 <= lead < horizon, got horizon {horizon}, lead {lead}")
        if not 0 <= blend <= lead:
            raise ValueError(f"blend must be in [0, lead={lead}], got {blend}")
        self.horizon, self.lead, self.blend, self.timeout_s = int(horizon), int(lead), int(blend), timeout_s
        self.low, self.high = low, high
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chunk-inference")
        self.stalls, self.wait_s = 0, 0.0
        self.reset()

    def reset(self) -> None:
        """Start an episode: forget the queue; an inference still running is ignored when it finishes."""
        self._queue: deque[np.ndarray] = deque()
        self._pending: tuple[int, Future] | None = None  # (step it was started at, its result)
        self._t = 0

    def _check(self, chunk) -> np.ndarray:
        return check_chunk(chunk, self.horizon, self.low, self.high, batched=False)

    def step(self, get_chunk: Callable[[], object]) -> np.ndarray:
        """The action (d,) float32 for this control step; starts or collects inference as described above.

        Raises:
            ChunkError, NonFiniteChunkError: as :func:`check_chunk` (both are ValueErrors).
            TimeoutError: waited longer than ``timeout_s`` for a chunk (None: as long as ``get_chunk``).
            Whatever ``get_chunk`` raised (e.g. the policy server is down).
        """
        if self._pending is not None and (self._pending[1].done() or not self._queue):
            start, future = self._pending
            if not future.done():
                self.stalls += 1
                began = time.perf_counter()
                try:
                    future.result(timeout=self.timeout_s)
                except TimeoutError as err:
                    raise TimeoutError(
                        f"no chunk within {self.timeout_s} s of the current one running out"
                    ) from err
                finally:
                    self.wait_s += time.perf_counter() - began
            self._pending = None
            self._queue = deque(
                align_chunk(np.array(self._queue), self._check(future.result()), self._t - start, self.blend)
            )
        if not self._queue:
            self._queue = deque(self._check(get_chunk()))
        if self._pending is None and len(self._queue) <= self.lead:
            self._pending = (self._t, self._worker.submit(get_chunk))
        self._t += 1
        return self._queue.popleft()

    def close(self) -> None:
        """Stop the worker thread (after the inference it runs, if any)."""
        self._worker.shutdown(wait=False, cancel_futures=True)
