"""Progress bars that do not flood logs: a tqdm bar on a terminal, periodic plain lines otherwise.

When the bar's stream (stderr) is not a terminal (a log file, a pipe, CI), every tqdm refresh would
become a line of the log; :class:`PlainProgress` instead writes one line when it starts, then at most one
every ``ROBOT_RL_PROGRESS_EVERY_S`` seconds (default 30), and one when it finishes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

DEFAULT_EVERY_S = 30.0


def _every_s() -> float:
    raw = os.environ.get("ROBOT_RL_PROGRESS_EVERY_S", "")
    try:
        return float(raw) if raw else DEFAULT_EVERY_S
    except ValueError:
        return DEFAULT_EVERY_S


class PlainProgress:
    """The subset of tqdm's interface the stages use (``update``, ``n``, ``set_postfix``, ``close``,
    iteration, context manager), writing plain lines ``"<desc>: <n>/<total> <unit> (<pct>%), <rate>
    <unit>/s, <elapsed> s"`` to ``file``: at the start, then at most every ``every_s`` seconds, and at
    the end."""

    def __init__(
        self,
        iterable: Iterable | None = None,
        desc: str = "",
        total: int | None = None,
        initial: int = 0,
        unit: str = "it",
        disable: bool = False,
        file: TextIO | None = None,
        every_s: float | None = None,
    ) -> None:
        self.iterable, self.desc, self.unit, self.disable = iterable, desc, unit, disable
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = initial + len(iterable)
        self.total, self.n, self.initial = total, initial, initial
        self.file = file if file is not None else sys.stderr
        self.every_s = _every_s() if every_s is None else every_s
        self.postfix = ""
        self.start = self.last = time.monotonic()
        self.last_n = initial
        self.closed = False
        self._write()

    def _write(self) -> None:
        if self.disable:
            return
        elapsed = time.monotonic() - self.start
        done = f"{self.n}/{self.total}" if self.total else f"{self.n}"
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        rate = (self.n - self.initial) / elapsed if elapsed > 0 else 0.0
        extra = f", {self.postfix}" if self.postfix else ""
        print(
            f"{self.desc}: {done} {self.unit}{pct}, {rate:.3g} {self.unit}/s, {elapsed:.0f} s{extra}",
            file=self.file,
            flush=True,
        )
        self.last, self.last_n = time.monotonic(), self.n

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self.last >= self.every_s:
            self._write()

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.n != self.last_n:
                self._write()

    def __iter__(self) -> Iterator:
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress(iterable: Iterable | None = None, **kwargs: Any):
    """``tqdm(iterable, **kwargs)`` when stderr is a terminal, else :class:`PlainProgress` with the same
    arguments (``desc``, ``total``, ``initial``, ``unit``, ``disable``)."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(iterable, **kwargs)
    return PlainProgress(iterable, **kwargs)
