"""How many CPU threads torch uses in each process (``threads`` config key).

Torch's default takes every core in every process. When several processes share the CPU (the online
learner and its actors, or two jobs on one machine) they thrash: QC training measured 4.5 s/step with the
default and 1.1 s/step with one thread each under the same load. ``threads: 0`` (the default) gives each
process an equal share of the cores: ``max(1, cores // processes)``, where ``processes`` is what the
runtime starts on this machine (1 for train/eval/pipeline; the learner plus ``online.num_actors``
actors for ``online``). Set ``threads`` to a positive number to fix it, e.g. 1 when you run several jobs
at once. With ``threads: 0``, an ``OMP_NUM_THREADS`` that the user set (not one this module wrote for child
processes, which inherit it) is the per-process count, as torch and OpenMP read it.
"""

from __future__ import annotations

import os

_OMP = "OMP_NUM_THREADS"
_WRITTEN = "ROBOT_RL_WRITTEN_OMP_NUM_THREADS"  # what set_threads wrote, so it is not read back as the user's


def thread_count(threads: int, processes: int = 1) -> int:
    """Threads for one process: ``threads`` when > 0; else a user-set ``OMP_NUM_THREADS`` (a positive
    integer that :func:`set_threads` did not write, here or in a parent process); else
    ``max(1, cores // processes)``.

    Raises:
        ValueError: ``threads`` < 0, ``processes`` < 1, or a user-set ``OMP_NUM_THREADS`` that is not a
            positive integer.
    """
    if threads < 0:
        raise ValueError(f"threads must be >= 0 (0 = automatic), got {threads}")
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    if threads:
        return threads
    user = os.environ.get(_OMP, "")
    if user and user != os.environ.get(_WRITTEN):
        if not user.isdigit() or int(user) < 1:
            raise ValueError(f"{_OMP}={user!r} must be a positive integer (or unset, for an equal share)")
        return int(user)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // processes)


def set_threads(threads: int, processes: int = 1) -> int:
    """Apply :func:`thread_count` to torch in this process and to the BLAS/OpenMP variables that child
    processes inherit. Returns the count."""
    import torch

    n = thread_count(threads, processes)
    torch.set_num_threads(n)
    for var in (_OMP, "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)
    os.environ[_WRITTEN] = str(n)
    return n
