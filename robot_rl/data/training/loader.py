"""Training batches from worker processes: a torch DataLoader over step numbers.

Item ``step`` is the whole batch of that step (:meth:`TrainingSet.sample`), so workers decode or read the
frames of different steps in parallel while the learner trains, and a batch depends only on (seed, step).
Workers are started with ``spawn``: forking a process that runs decoder or zarr threads can deadlock.
Spawned workers re-import the user's script, so starting them from its unguarded top level is refused
with a clear error instead of hanging (:func:`robot_rl.data.training.main_guard.check_main_guard`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from robot_rl.data.training.main_guard import check_main_guard
from robot_rl.data.training.training_set import TrainingSet


class _StepBatches(torch.utils.data.Dataset):
    def __init__(self, data: TrainingSet, batch_size: int, seed: int) -> None:
        self.data, self.batch_size, self.seed = data, batch_size, seed

    def __len__(self) -> int:
        return 2**62

    def __getitem__(self, step: int) -> dict:
        return self.data.sample(self.batch_size, self.seed, int(step))


def batches(
    data: TrainingSet, batch_size: int, seed: int, start: int, stop: int, num_workers: int, repeat: int = 1
) -> Iterator[dict]:
    """The batches of steps ``start .. stop - 1`` in order: numpy arrays converted to tensors (images
    (B, H, W, 3) uint8, the rest as in :meth:`ChunkSampler.get`). With ``repeat`` = k > 1 (an agent's
    ``batch_reuse``) step s gets the batch drawn for block s // k, read once and yielded for each of its
    steps, so a batch still depends only on (seed, step) and a resumed run gets the same ones.

    ``num_workers`` processes prepare batches ahead (2 each); with an in-memory dataset the batches are
    built in this process, since workers would only add copying.

    Raises :class:`robot_rl.data.training.main_guard.MainGuardError` (naming the script and line) when
    workers would start from the top level of a ``__main__`` script outside ``if __name__ == "__main__":``.
    """
    if repeat < 1:
        raise ValueError(f"batch repeat must be >= 1, got {repeat}")
    workers = 0 if data.in_memory else num_workers
    if workers:
        check_main_guard(f"{workers} DataLoader workers")
    loader = torch.utils.data.DataLoader(
        _StepBatches(data, batch_size, seed),
        batch_size=None,
        sampler=range(start // repeat, -(-stop // repeat)),
        num_workers=workers,
        multiprocessing_context="spawn" if workers else None,
        prefetch_factor=2 if workers else None,
    )
    return _repeated(iter(loader), repeat, start, stop)


def _repeated(blocks: Iterator[dict], repeat: int, start: int, stop: int) -> Iterator[dict]:
    """The batch of step s (s in ``start .. stop - 1``): block s // ``repeat``'s, each block read once."""
    batch = None
    for step in range(start, stop):
        if batch is None or step % repeat == 0:
            batch = next(blocks)
        yield batch
