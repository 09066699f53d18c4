"""Durable per-episode records of the learner beside its replay: episodes it rejected and episodes it
quarantined (issue 39).

A :class:`EpisodeLedger` is an append-only JSON-lines file, one line per episode:
``{"actor": int, "episode": int, "reason": str}`` (``episode``: the actor's own episode number). A line
is flushed and fsynced before :meth:`EpisodeLedger.add` returns, so what the learner answered an actor
survives a crash. The learner keeps two (:class:`robot_rl.runtime.replay.OnlineReplay`):

- ``rejected.jsonl``: pushed episodes refused by :mod:`robot_rl.runtime.episode_guard`; never stored,
  but acknowledged, so the actor moves on (its own episode log keeps the data);
- ``quarantine.jsonl``: stored episodes excluded from sampling after training diverged on them (kept on
  disk in the replay).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from robot_rl.data.errors import DatasetError


class EpisodeLedger:
    """The records of one ledger file (module doc), read on construction.

    Args:
        path: the JSON-lines file (created on the first :meth:`add`).

    Raises:
        DatasetError: a line is not a record (names the file and line). A torn last line (a crash while
            it was written, so never answered) is cut off the file.
        OSError: the file cannot be read or cut (names it).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.reasons: dict[tuple[int, int], str] = {}  # (actor, episode) -> reason, in file order
        text = self.path.read_bytes() if self.path.is_file() else b""
        complete = text[: text.rfind(b"\n") + 1]
        if complete != text:
            os.truncate(self.path, len(complete))
        for number, line in enumerate(complete.decode(errors="replace").splitlines(), 1):
            try:
                record = json.loads(line)
                self.reasons[int(record["actor"]), int(record["episode"])] = str(record["reason"])
            except (ValueError, KeyError, TypeError) as err:
                raise DatasetError(f"{self.path}: line {number} is not an episode record: {err}") from err

    def add(self, actor: int, episode: int, reason: str) -> None:
        """Record ``actor``'s episode ``episode`` with a one-line ``reason``; durable on return.

        Raises:
            OSError: the file cannot be written (names it).
        """
        line = json.dumps({"actor": actor, "episode": episode, "reason": reason}) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(self.path)) from err
        self.reasons[actor, episode] = reason

    def reason(self, actor: int, episode: int) -> str | None:
        """The recorded reason for ``actor``'s episode ``episode``, or None."""
        return self.reasons.get((actor, episode))

    def per_actor(self) -> dict[int, list[str]]:
        """actor -> the reasons of its records, oldest first."""
        out: dict[int, list[str]] = {}
        for (actor, _), reason in self.reasons.items():
            out.setdefault(actor, []).append(reason)
        return out
